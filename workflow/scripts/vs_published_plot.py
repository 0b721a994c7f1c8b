"""Snakemake script: ours vs published, one panel per metric (PNG + PDF); fails rather than drawing an
empty figure when nothing overlaps (the rule is only requested when something does)."""

import logging

import pandas as pd

from anyjev.outputs.plots import plot_vs_published

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
df = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_vs_published(df, snakemake.output.png, snakemake.output.pdf)  # noqa: F821
logging.info("vs published plot: %d rows", len(df))
