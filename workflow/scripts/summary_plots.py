"""Snakemake script: each metric by level across cells, and flip rate raw vs L0."""

import pandas as pd

from anyjev.outputs.plots import plot_flip, plot_metrics_by_level

summary = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_metrics_by_level(summary, snakemake.output.by_level)  # noqa: F821
plot_flip(summary, snakemake.output.flip)  # noqa: F821
