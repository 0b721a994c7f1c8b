"""Snakemake script: per-cell metrics -> results/tables/summary.{csv,md,tex}."""

import logging

from anyjev.outputs.tables import write_summary

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
df = write_summary(snakemake.input, snakemake.params.levels, snakemake.output.csv, snakemake.output.md,  # noqa: F821
                   snakemake.output.tex)  # noqa: F821
logging.info("summary: %d rows", len(df))
