"""Snakemake script: our summary beside the published numbers (only the cells both have). With no
overlap the Markdown says so; the comparison figure is a separate rule, requested only when there is one."""

import logging

from anyjev.files import write_text_atomic
from anyjev.outputs.tables import read_published, read_summary, vs_published_frame, vs_published_markdown

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
df = vs_published_frame(read_summary(snakemake.input.summary), read_published(snakemake.input.published))  # noqa: F821
write_text_atomic(snakemake.output.csv, df.to_csv(index=False, float_format="%.6f"))  # noqa: F821
write_text_atomic(snakemake.output.md, vs_published_markdown(df))  # noqa: F821
logging.info("vs published: %d matching rows", len(df))
