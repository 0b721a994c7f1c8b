"""Plots (PNG) from per-item predictions and summary tables; matplotlib without a display."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from anyjev.numbers.metrics import reliability_bins  # noqa: E402
from anyjev.outputs.tables import METRIC_TITLES, TABLE_METRICS  # noqa: E402

LEVEL_COLORS = {"raw": "#d62728", "L0-perm": "#ff7f0e", "L0-bc": "#bcbd22", "L0": "#1f77b4", "L1": "#2ca02c"}


def _yerr(v, lo, hi) -> list:
    """Error-bar lengths; a percentile bootstrap interval need not contain the point estimate (ECE is
    biased upward under resampling), so a side that would be negative is drawn as zero."""
    v, lo, hi = (np.asarray(x, dtype=float) for x in (v, lo, hi))
    return [np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]


def _save(fig, out: str) -> None:
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_reliability(preds: pd.DataFrame, levels: Sequence[str], out: str, title: str = "") -> None:
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect calibration")
    for level in levels:
        d = preds[(preds["level"] == level) & (preds["group"] == "fwd")]
        if d.empty:
            continue
        conf = d["conf"].to_numpy(float)
        correct = (d["pred"] == d["gold"]).to_numpy(float)
        x, y, size = reliability_bins(conf, correct)
        ece = float(np.sum(size / size.sum() * np.abs(x - y)))
        ax.plot(x, y, marker="o", ms=4, color=LEVEL_COLORS.get(level), label=f"{level} (ECE {ece:.3f})")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence (top-1 probability)", ylabel="accuracy", title=title or "reliability")
    ax.legend(fontsize=8, loc="upper left")
    _save(fig, out)


def _cell_labels(summary: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(summary["model"] + " / " + summary["task"]))


def plot_metrics_by_level(summary: pd.DataFrame, out: str) -> None:
    summary = summary.assign(cell=summary["model"] + " / " + summary["task"])
    levels = list(dict.fromkeys(summary["level"]))
    cols = 4
    rows = math.ceil(len(TABLE_METRICS) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    x = np.arange(len(levels))
    for ax, metric in zip(axes.flat, TABLE_METRICS, strict=False):
        for i, cell in enumerate(_cell_labels(summary)):
            d = summary[summary["cell"] == cell].set_index("level").reindex(levels)
            v, lo, hi = d[metric].to_numpy(float), d[f"{metric}_lo"].to_numpy(float), d[f"{metric}_hi"].to_numpy(float)
            off = (i - (len(_cell_labels(summary)) - 1) / 2) * 0.08
            ax.errorbar(x + off, v, yerr=_yerr(v, lo, hi), marker="o", ms=3, capsize=2, lw=1, label=cell)
        ax.set_xticks(x, levels, fontsize=8)
        ax.set_title(METRIC_TITLES[metric])
    for ax in list(axes.flat)[len(TABLE_METRICS):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Metrics by level (95% bootstrap intervals)")
    _save(fig, out)


def plot_flip(summary: pd.DataFrame, out: str) -> None:
    cells = _cell_labels(summary)
    summary = summary.assign(cell=summary["model"] + " / " + summary["task"])
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(cells)), 4))
    x = np.arange(len(cells))
    for j, level in enumerate(["raw", "L0"]):
        d = summary[summary["level"] == level].set_index("cell").reindex(cells)
        v, lo, hi = d["flip"].to_numpy(float), d["flip_lo"].to_numpy(float), d["flip_hi"].to_numpy(float)
        ax.bar(x + (j - 0.5) * 0.38, v, width=0.38, yerr=_yerr(v, lo, hi), capsize=3, color=LEVEL_COLORS[level], label=level)
    ax.set_xticks(x, cells, rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="flip rate (order reversed)", ylim=(0, 1), title="Order-flip rate: raw vs L0")
    ax.legend()
    _save(fig, out)


def plot_vs_published(df: pd.DataFrame, out: str) -> None:
    metrics = list(dict.fromkeys(df["metric"])) if not df.empty else []
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(4 * max(1, len(metrics)), 4), squeeze=False)
    if df.empty:
        axes[0, 0].text(0.5, 0.5, "no cell with a published counterpart", ha="center", va="center")
        axes[0, 0].axis("off")
    for ax, metric in zip(axes.flat, metrics, strict=False):
        d = df[df["metric"] == metric]
        ax.errorbar(d["published"], d["ours"], yerr=_yerr(d["ours"], d["lo"], d["hi"]), fmt="o", capsize=3)
        lim = (0, max(1e-3, float(max(d["published"].max(), d["hi"].max())) * 1.1))
        ax.plot(lim, lim, color="grey", ls="--", lw=1)
        ax.set(xlim=lim, ylim=lim, xlabel="published", ylabel="ours (95% CI)", title=METRIC_TITLES.get(metric, metric))
    fig.suptitle("Ours vs published")
    _save(fig, out)
