"""Snakemake script: each metric by level across cells, and the flip rate of every level (PNG + PDF)."""

import logging

from anyjev.outputs.plots import plot_flip, plot_metrics_by_level
from anyjev.outputs.tables import read_summary

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
summary = read_summary(snakemake.input[0])  # noqa: F821
plot_metrics_by_level(summary, snakemake.output.by_level, snakemake.output.by_level_pdf)  # noqa: F821
plot_flip(summary, snakemake.output.flip, snakemake.output.flip_pdf)  # noqa: F821
logging.info("summary plots: %d rows", len(summary))
