"""Snakemake script: each metric by level across cells, and the flip rate of every level (PNG + PDF)."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from anyjev.outputs.plots import plot_flip, plot_metrics_by_level  # noqa: E402
from anyjev.outputs.tables import read_summary  # noqa: E402

summary = read_summary(snakemake.input[0])  # noqa: F821
plot_metrics_by_level(summary, snakemake.output.by_level, snakemake.output.by_level_pdf)  # noqa: F821
plot_flip(summary, snakemake.output.flip, snakemake.output.flip_pdf)  # noqa: F821
logging.info("summary plots: %d rows", len(summary))
