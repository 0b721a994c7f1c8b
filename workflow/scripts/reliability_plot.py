"""Snakemake script: a cell's reliability diagram with the levels overlaid."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

import pandas as pd  # noqa: E402

from anyjev.outputs.plots import plot_reliability  # noqa: E402

preds = pd.read_csv(snakemake.input[0])  # noqa: F821
plot_reliability(preds, snakemake.params.levels, snakemake.output[0],  # noqa: F821
                 title=f"{snakemake.wildcards.model} / {snakemake.wildcards.task}")  # noqa: F821
logging.info("reliability: %d prediction rows -> %s", len(preds), snakemake.output[0])  # noqa: F821
