"""Snakemake script: a cell's reliability diagram, one level per panel (PNG + PDF)."""

import json
import logging

import pandas as pd

from anyjev.outputs.plots import plot_reliability

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO)  # noqa: F821
preds = pd.read_csv(snakemake.input.predictions)  # noqa: F821
metrics = json.loads(open(snakemake.input.metrics).read())  # noqa: F821
levels = snakemake.params.levels  # noqa: F821
ece = {lv: (metrics["metrics"].get(lv) or {}).get("ece") for lv in levels}
plot_reliability(preds, levels, snakemake.output.png, snakemake.output.pdf, k=metrics.get("k"),  # noqa: F821
                 title=f"{snakemake.wildcards.model} / {snakemake.wildcards.task}", ece_intervals=ece)  # noqa: F821
logging.info("reliability diagram: %d predictions, levels %s", len(preds), levels)
