"""Snakemake script: per-cell metrics -> results/tables/summary.{csv,md,tex}."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from anyjev.outputs.tables import write_summary  # noqa: E402

df = write_summary(snakemake.input, snakemake.params.levels, snakemake.output.csv, snakemake.output.md,  # noqa: F821
                   snakemake.output.tex)  # noqa: F821
logging.info("summary: %d rows", len(df))
