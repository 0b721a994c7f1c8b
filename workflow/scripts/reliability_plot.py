"""Snakemake script: a cell's reliability diagram with the levels overlaid."""

import pandas as pd

from anyjev.outputs.plots import plot_reliability

preds = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_reliability(preds, snakemake.params.levels, snakemake.output[0],  # noqa: F821
                 title=f"{snakemake.wildcards.model} / {snakemake.wildcards.task}")  # noqa: F821
