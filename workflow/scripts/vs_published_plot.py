"""Snakemake script: ours vs published, one panel per metric (PNG + PDF); fails rather than drawing an
empty figure when nothing overlaps (the rule is only requested when something does)."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import pandas as pd  # noqa: E402

from anyjev.outputs.plots import plot_vs_published  # noqa: E402

df = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_vs_published(df, snakemake.output.png, snakemake.output.pdf)  # noqa: F821
logging.info("vs published plot: %d rows", len(df))
