"""Drawing a figure, without pandas: matplotlib without a display, the house style, the PNG + PDF pair written
atomically, and a cell's reliability diagram from arrays. The evaluate step draws its cell's diagram from the
evaluation it holds (:func:`evaluation_reliability`); :mod:`anyjev.reports.plots` draws the run's figures from its
tables, and a cell's diagram from its files, with the same functions."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anyjev.files import replaced_atomically
from anyjev.numbers.metrics import ECE_BINS, ece, reliability_bins, top_choice

if TYPE_CHECKING:
    from anyjev.numbers.evaluation import Evaluation

DPI = 300
STYLE = {"font.size": 7, "axes.titlesize": 7.5, "axes.labelsize": 7, "xtick.labelsize": 6.5, "ytick.labelsize": 6.5,
         "legend.fontsize": 6.5, "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6,
         "pdf.fonttype": 42, "ps.fonttype": 42, "savefig.dpi": DPI, "axes.spines.top": False, "axes.spines.right": False}
LEVEL_COLORS = {"raw": "#D55E00", "L0-perm": "#E69F00", "L0-bc": "#CC79A7", "L0": "#0072B2", "L1": "#009E73",
                "L0-cf": "#56B4E9"}


def pyplot():
    """matplotlib's pyplot without a display (Agg), imported when a figure is drawn rather than with this module: the
    workflow's parse and the jobs that only need a figure's job or bin count import none of it (0.7 s a process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reliability_bin_count(n: int) -> int:
    """Bins for a reliability diagram of n items: about 15 items a bin, between 3 and 15 bins (15 is
    what ECE uses; fewer bins for small n keep each bin's accuracy from being mostly noise)."""
    return min(ECE_BINS, max(3, n // 15))


def wilson_interval(hits: np.ndarray, n: np.ndarray, z: float = 1.959964) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score 95% interval of a binomial proportion (sensible at 0 and 1, unlike the Wald one)."""
    hits, n = np.asarray(hits, dtype=float), np.asarray(n, dtype=float)
    p = hits / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return centre - half, centre + half


def figure_paths(png: str | os.PathLike, pdf: str | os.PathLike | None = None) -> tuple[Path, Path]:
    png = Path(png)
    return png, Path(pdf) if pdf is not None else png.with_suffix(".pdf")


def save_figure(fig, png: str | os.PathLike, pdf: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write the figure as PNG and PDF (same content), each whole or not at all; returns both paths."""
    png, pdf = figure_paths(png, pdf)
    with replaced_atomically(png) as tmp:
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight", pad_inches=0.02, format="png")
    with replaced_atomically(pdf) as tmp:
        fig.savefig(tmp, bbox_inches="tight", pad_inches=0.02, format="pdf")
    pyplot().close(fig)
    return png, pdf


def interval(ax, x, v, lo, hi, *, color, marker="o", ms=3.2, lw=0.9) -> None:
    """Point estimates with their intervals drawn from lo to hi exactly (never clipped to the point)."""
    x, v, lo, hi = (np.asarray(a, dtype=float) for a in (x, v, lo, hi))
    ax.vlines(x, lo, hi, color=color, lw=lw, clip_on=False, zorder=2)
    ax.plot(x, v, ls="none", marker=marker, ms=ms, color=color, mec="white", mew=0.4, clip_on=False, zorder=3)


def draw_reliability(points: Mapping[str, tuple[np.ndarray, np.ndarray]], png: str | os.PathLike,
                     pdf: str | os.PathLike | None = None, *, lowest: float = 0.0, title: str = "",
                     ece_intervals: Mapping[str, Mapping] | None = None) -> tuple[Path, Path]:
    """A cell's reliability diagram, one level per panel: POINTS[level] holds its test items' top-1 confidences and
    whether each top-1 answer is right (forward group), sorted by confidence and cut into
    :func:`reliability_bin_count` equal-mass bins; each bin's accuracy with its Wilson 95% interval against its mean
    confidence; a rug of the items' confidences; the confidence axis from LOWEST (1/K: the lowest possible top-1
    probability) to 1. The panel's ECE is the table's (15 bins): ECE_INTERVALS[level], else computed here."""
    present = list(points)
    ncols = min(3, len(present))
    nrows = math.ceil(len(present) / ncols)
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 2.2 * nrows + 0.2), squeeze=False,
                                 sharex=True, sharey=True, layout="constrained")
        for ax, level in zip(axes.flat, present, strict=False):
            conf, correct = points[level]
            n_bins = reliability_bin_count(len(conf))
            x, y, size = reliability_bins(conf, correct, n_bins)
            lo, hi = wilson_interval(np.round(y * size), size)
            col = LEVEL_COLORS.get(level, "0.2")
            ax.plot([lowest, 1], [lowest, 1], color="0.5", ls="--", lw=0.7, zorder=1)
            interval(ax, x, y, lo, hi, color=col, ms=3.5)
            ax.plot(conf, np.full_like(conf, 0.015), ls="none", marker="|", ms=4, mew=0.4, color=col, alpha=0.45)
            e = (ece_intervals or {}).get(level) or {}
            value = e.get("value", ece(conf, correct))
            ece_text = f"ECE {value:.3f}" + (f" [{e['lo']:.3f}, {e['hi']:.3f}]" if "lo" in e and "hi" in e else "")
            sizes = f"{size.min()}" if size.min() == size.max() else f"{size.min()}–{size.max()}"
            ax.text(0.03, 0.97, f"{ece_text}\nacc {correct.mean():.2f}, n={len(conf)}\n{n_bins} bins × {sizes} items",
                    transform=ax.transAxes, va="top", ha="left", fontsize=6)
            ax.set_title(level, pad=2, color=col)
            ax.set_xlim(lowest - 0.02, 1.0)
            ax.set_ylim(0, 1.0)
            ax.set_aspect("auto")
            ax.grid(lw=0.3, alpha=0.5)
        for ax in list(axes.flat)[len(present):]:
            ax.axis("off")
        for ax in axes[-1]:
            ax.set_xlabel("confidence (top-1 probability)")
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy in bin")
        if title:
            fig.suptitle(title, fontsize=8)
        return save_figure(fig, png, pdf)


def evaluation_reliability(evaluation: Evaluation, levels: Sequence[str], png: str | os.PathLike,
                           pdf: str | os.PathLike | None = None, *, title: str = "") -> tuple[Path, Path]:
    """A cell's reliability diagram from its evaluation, the figure that :func:`anyjev.reports.plots.reliability_plot`
    draws from the predictions.csv and metrics.json the evaluation is written to."""
    points, widths = {}, []
    for level in levels:
        lp = evaluation.point[level].get("fwd") if level in evaluation.point else None
        if lp is not None:
            pred, conf, _, _ = top_choice(lp, evaluation.gold)
            points[level] = (conf, (pred == evaluation.gold).astype(float))
            widths.append(lp.shape[1])  # Kmax: options padded to the largest K
    if not points:
        raise ValueError(f"no forward-group levels among {list(levels)} (title {title!r})")
    return draw_reliability(points, png, pdf, lowest=1 / max(widths), title=title,
                            ece_intervals={lv: (evaluation.metrics.get(lv) or {}).get("ece") for lv in points})
