"""Snakemake script: our summary beside the published numbers (only the cells both have)."""

import logging

import pandas as pd

from anyjev.outputs.plots import plot_vs_published
from anyjev.outputs.tables import vs_published_frame, vs_published_markdown

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
summary = pd.read_csv(snakemake.input.summary)  # noqa: F821
published = pd.read_csv(snakemake.input.published, comment="#")  # noqa: F821
df = vs_published_frame(summary, published)
df.to_csv(snakemake.output.csv, index=False, float_format="%.6f")  # noqa: F821
with open(snakemake.output.md, "w") as fh:  # noqa: F821
    fh.write(vs_published_markdown(df))
plot_vs_published(df, snakemake.output.plot)  # noqa: F821
logging.info("vs published: %d matching rows", len(df))
