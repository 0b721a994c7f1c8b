"""Snakemake script: each metric by level across cells, and flip rate raw vs L0."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import pandas as pd  # noqa: E402

from anyjev.outputs.plots import plot_flip, plot_metrics_by_level  # noqa: E402

summary = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_metrics_by_level(summary, snakemake.output.by_level)  # noqa: F821
plot_flip(summary, snakemake.output.flip)  # noqa: F821
logging.info("summary plots: %d summary rows -> %s, %s", len(summary), snakemake.output.by_level, snakemake.output.flip)  # noqa: F821
