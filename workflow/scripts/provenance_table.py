"""Snakemake script: the config as run and every cell's provenance -> results/tables/provenance.{md,html}."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import os  # noqa: E402

from anyjev.outputs.provenance import write_provenance  # noqa: E402
from anyjev.results import read_cells  # noqa: E402

run = read_cells(os.path.dirname(p) for p in snakemake.input.metrics).require_finished()  # noqa: F821
sections = write_provenance(snakemake.params.config, run, snakemake.output.md, snakemake.output.html)  # noqa: F821
logging.info("provenance: %d sections", len(sections))
