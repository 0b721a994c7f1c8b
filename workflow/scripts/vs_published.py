"""Snakemake script: our summary beside the published numbers (only the cells both have). With no
overlap the Markdown says so; the comparison figure is a separate rule, requested only when there is one."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from anyjev.files import write_text_atomic  # noqa: E402
from anyjev.outputs.tables import read_published, read_summary, vs_published_frame, vs_published_markdown  # noqa: E402

df = vs_published_frame(read_summary(snakemake.input.summary), read_published(snakemake.input.published))  # noqa: F821
write_text_atomic(snakemake.output.csv, df.to_csv(index=False, float_format="%.6f"))  # noqa: F821
write_text_atomic(snakemake.output.md, vs_published_markdown(df))  # noqa: F821
logging.info("vs published: %d matching rows", len(df))
