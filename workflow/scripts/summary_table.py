"""Snakemake script: per-cell metrics -> results/tables/summary.{csv,md,tex}."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import os  # noqa: E402

from anyjev.outputs.tables import write_summary  # noqa: E402
from anyjev.results import read_cells  # noqa: E402

run = read_cells(os.path.dirname(p) for p in snakemake.input).require_finished()  # noqa: F821
df = write_summary(run, snakemake.params.levels, snakemake.output.csv, snakemake.output.md,  # noqa: F821
                   snakemake.output.tex)  # noqa: F821
logging.info("summary: %d rows", len(df))
