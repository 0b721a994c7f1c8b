"""Snakemake script: a cell's reliability diagram, one level per panel (PNG + PDF)."""

import logging
import sys

# Everything this job prints (logging, warnings, a traceback, import errors included) goes to its log.
sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821
logging.basicConfig(stream=sys.stderr, level=logging.INFO)

from anyjev.outputs.plots import plot_reliability  # noqa: E402
from anyjev.results.files import load_metrics, load_predictions  # noqa: E402

preds = load_predictions(snakemake.input.predictions)  # noqa: F821
metrics = load_metrics(snakemake.input.metrics)  # noqa: F821
levels = snakemake.params.levels  # noqa: F821
ece = {lv: (metrics["metrics"].get(lv) or {}).get("ece") for lv in levels}
plot_reliability(preds, levels, snakemake.output.png, snakemake.output.pdf, k=metrics.get("k"),  # noqa: F821
                 title=f"{snakemake.wildcards.model} / {snakemake.wildcards.task}", ece_intervals=ece)  # noqa: F821
logging.info("reliability diagram: %d predictions, levels %s", len(preds), levels)
