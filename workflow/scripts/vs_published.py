"""Snakemake script: our summary beside the published numbers (only the cells both have)."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import pandas as pd  # noqa: E402

from anyjev.outputs.plots import plot_vs_published  # noqa: E402
from anyjev.outputs.tables import vs_published_frame, vs_published_markdown  # noqa: E402

summary = pd.read_csv(snakemake.input.summary)  # noqa: F821
published = pd.read_csv(snakemake.input.published, comment="#")  # noqa: F821
df = vs_published_frame(summary, published)
df.to_csv(snakemake.output.csv, index=False, float_format="%.6f")  # noqa: F821
with open(snakemake.output.md, "w") as fh:  # noqa: F821
    fh.write(vs_published_markdown(df))
plot_vs_published(df, snakemake.output.plot)  # noqa: F821
logging.info("vs published: %d matching rows", len(df))
