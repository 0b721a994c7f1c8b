"""Figures for a paper, each written as PNG (300 dpi) and PDF (embedded TrueType fonts), sized for a
single column (3.5 in) or the text width (7 in) at 7-8 pt type; matplotlib without a display.

Levels are alternatives, not a sequence: they are categories on the x axis, shown as points with their
interval (a vertical segment from lo to hi: BCa, widened to include the point where the bootstrap
distribution lies on one side), never joined by lines.

The workflow's figure steps: :func:`reliability_plot` (a :class:`ReliabilityJob`), :func:`summary_plots` (a
:class:`SummaryPlotsJob`) and :func:`vs_published_plot` (a :class:`VsPublishedPlotJob`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anyjev.files import replaced_atomically
from anyjev.jobs import Job
from anyjev.numbers.metrics import ECE_BINS, ece, reliability_bins
from anyjev.outputs.tables import (
    HIGHER_IS_BETTER,
    METRIC_TITLES,
    TABLE_METRICS,
    arrow,
    k_range,
    read_summary,
    read_vs_published,
)
from anyjev.results import CellLayout, Run, read_layout

if TYPE_CHECKING:
    import pandas as pd

DPI = 300
STYLE = {"font.size": 7, "axes.titlesize": 7.5, "axes.labelsize": 7, "xtick.labelsize": 6.5, "ytick.labelsize": 6.5,
         "legend.fontsize": 6.5, "axes.linewidth": 0.6, "xtick.major.width": 0.6, "ytick.major.width": 0.6,
         "pdf.fonttype": 42, "ps.fonttype": 42, "savefig.dpi": DPI, "axes.spines.top": False, "axes.spines.right": False}
# Okabe-Ito (colour-blind safe); tasks get colours, models get markers.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LEVEL_COLORS = {"raw": "#D55E00", "L0-perm": "#E69F00", "L0-bc": "#CC79A7", "L0": "#0072B2", "L1": "#009E73",
                "L0-cf": "#56B4E9"}
Y_LABELS = {"acc": "accuracy", "macro_f1": "macro-F1", "nll": "NLL (nats)", "brier": "Brier (multi-class)",
            "ece": "ECE (15 equal-mass bins)", "flip": "flip rate", "cov@5": "coverage at 5% risk", "aurc": "AURC"}
# Best attainable value of each metric (drawn dotted).
IDEAL = {"acc": 1.0, "macro_f1": 1.0, "nll": 0.0, "brier": 0.0, "ece": 0.0, "flip": 0.0, "cov@5": 1.0, "aurc": 0.0}
UNIT_RANGE = {"acc", "macro_f1", "ece", "flip", "cov@5", "aurc"}
assert set(IDEAL) == set(TABLE_METRICS) == set(HIGHER_IS_BETTER)


def pyplot():
    """matplotlib's pyplot without a display (Agg), imported when a figure is drawn rather than with this module: the
    workflow's parse and the jobs that only need a figure's job or bin count import none of it (0.7 s a process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend_line(**style):
    """A legend handle: a line or marker drawn with STYLE and no data."""
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def chance(metric: str, k: int) -> float | None:
    """The score of the uniform prediction (1/K on every option) where it is a natural baseline."""
    if k < 2:
        return None
    return {"acc": 1 / k, "nll": math.log(k), "brier": 1 - 1 / k}.get(metric)


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


def _interval(ax, x, v, lo, hi, *, color, marker="o", ms=3.2, lw=0.9) -> None:
    """Point estimates with their intervals drawn from lo to hi exactly (never clipped to the point)."""
    x, v, lo, hi = (np.asarray(a, dtype=float) for a in (x, v, lo, hi))
    ax.vlines(x, lo, hi, color=color, lw=lw, clip_on=False, zorder=2)
    ax.plot(x, v, ls="none", marker=marker, ms=ms, color=color, mec="white", mew=0.4, clip_on=False, zorder=3)


def _cells(summary: pd.DataFrame) -> list[tuple[str, str]]:
    return list(dict.fromkeys(zip(summary["model"], summary["task"], strict=True)))


def _cell_label(model: str, task: str, several_models: bool) -> str:
    return f"{model} / {task}" if several_models else task


# ------------------------------------------------------------------------------------------ metrics by level
def plot_metrics_by_level(summary: pd.DataFrame, png: str | os.PathLike, pdf: str | os.PathLike | None = None,
                          metrics: Sequence[str] = TABLE_METRICS) -> tuple[Path, Path]:
    """One panel per metric (direction in the title), levels as categories, one point per cell (colour:
    task, marker: model) with its interval; dashed lines at the uniform prediction's score per task
    (acc 1/K, NLL ln K, Brier 1-1/K, in the task's colour) and a dotted line at the ideal value."""
    levels = list(dict.fromkeys(summary["level"]))
    cells = _cells(summary)
    tasks = list(dict.fromkeys(summary["task"]))
    models = list(dict.fromkeys(summary["model"]))
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tasks)}
    marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)}
    k_of = {t: k_range(summary.loc[summary["task"] == t, "K"].iloc[0]) for t in tasks}
    ncols = 2
    nrows = math.ceil(len(metrics) / ncols)
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(3.5, 1.35 * nrows + 0.35 * (1 + len(cells) // 2)),
                                 squeeze=False, layout="constrained")
        x0 = np.arange(len(levels))
        step = min(0.7 / max(len(cells), 1), 0.16)
        for ax, metric in zip(axes.flat, metrics, strict=False):
            for i, (model, task) in enumerate(cells):
                d = summary[(summary["model"] == model) & (summary["task"] == task)].set_index("level").reindex(levels)
                off = (i - (len(cells) - 1) / 2) * step
                _interval(ax, x0 + off, d[metric], d[f"{metric}_lo"], d[f"{metric}_hi"], color=colour[task],
                          marker=marker[model])
            for task in tasks:
                k = k_of[task]
                c = chance(metric, k[0]) if k and k[0] == k[1] else None
                if c is not None:
                    ax.axhline(c, color=colour[task], ls="--", lw=0.7, alpha=0.8, zorder=1)
            ax.axhline(IDEAL[metric], color="0.35", ls=":", lw=0.8, zorder=1)
            ax.set_title(f"{METRIC_TITLES[metric]} {arrow(metric)}", pad=2)
            ax.set_ylabel(Y_LABELS[metric])
            ax.set_xticks(x0, levels, rotation=35, ha="right", rotation_mode="anchor")
            ax.set_xlim(-0.5, len(levels) - 0.5)
            if metric in UNIT_RANGE:
                ax.set_ylim(-0.04, 1.04)
            else:
                ax.set_ylim(bottom=0)
            ax.grid(axis="y", lw=0.3, alpha=0.5)
        for ax in list(axes.flat)[len(metrics):]:
            ax.axis("off")
        several = len(models) > 1
        handles = [_legend_line(ls="none", marker=marker[m], color=colour[t], ms=4, label=_cell_label(m, t, several))
                   for m, t in cells]
        handles += [_legend_line(color="0.3", ls="--", lw=0.7, label="uniform guess (task colour)"),
                    _legend_line(color="0.35", ls=":", lw=0.8, label="ideal")]
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False, handlelength=1.6,
                   columnspacing=1.0)
        return save_figure(fig, png, pdf)


# --------------------------------------------------------------------------------------------- reliability
@dataclass(frozen=True)
class ReliabilityJob(Job):
    """What a cell's reliability diagram is made from (built by ``Settings.reliability_job``): the cell, where its
    files and logs are, and the levels it shows."""

    model: str
    task: str
    levels: list[str]
    layout: CellLayout


def reliability_plot(job: ReliabilityJob, png: str, pdf: str, *, run: Run | None = None) -> tuple[Path, Path]:
    """The workflow's figure of JOB's cell (RUN: the run already read by JOB's layout): its reliability diagram, or,
    for a cell that failed, a figure naming its error and log."""
    run = run or read_layout(job.layout, [(job.model, job.task)])
    title = f"{job.model} / {job.task}"
    failure = run.failures.get((job.model, job.task))
    if failure is not None:
        return plot_failed_cell(title, failure["error"], failure["log"], png, pdf)
    cell = run.cell(job.model, job.task)
    ece_intervals = {lv: (cell.metrics["metrics"].get(lv) or {}).get("ece") for lv in job.levels}
    return plot_reliability(cell.predictions, job.levels, png, pdf, k=cell.metrics["k"], title=title,
                            ece_intervals=ece_intervals)


def plot_reliability(preds: pd.DataFrame, levels: Sequence[str], png: str | os.PathLike, pdf: str | os.PathLike | None = None,
                     *, k: object = None, title: str = "", ece_intervals: Mapping[str, Mapping] | None = None) -> tuple[Path, Path]:
    """A cell's reliability diagram, one level per panel: test items (forward group) sorted by top-1
    confidence and cut into :func:`reliability_bin_count` equal-mass bins; each bin's accuracy with its
    Wilson 95% interval against its mean confidence; a rug of the items' confidences; the confidence axis
    from 1/K (the lowest possible top-1 probability) to 1. The panel's ECE is the table's (15 bins)."""
    kr = k_range(k) if k is not None else None
    x_min = 1 / kr[1] if kr else 0.0
    present = [lv for lv in levels if not preds[(preds["level"] == lv) & (preds["group"] == "fwd")].empty]
    if not present:
        raise ValueError(f"no forward-group predictions for levels {list(levels)} (title {title!r})")
    ncols = min(3, len(present))
    nrows = math.ceil(len(present) / ncols)
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 2.2 * nrows + 0.2), squeeze=False,
                                 sharex=True, sharey=True, layout="constrained")
        for ax, level in zip(axes.flat, present, strict=False):
            d = preds[(preds["level"] == level) & (preds["group"] == "fwd")]
            conf = d["conf"].to_numpy(float)
            correct = (d["pred"] == d["gold"]).to_numpy(float)
            n_bins = reliability_bin_count(len(conf))
            x, y, size = reliability_bins(conf, correct, n_bins)
            lo, hi = wilson_interval(np.round(y * size), size)
            col = LEVEL_COLORS.get(level, "0.2")
            ax.plot([x_min, 1], [x_min, 1], color="0.5", ls="--", lw=0.7, zorder=1)
            _interval(ax, x, y, lo, hi, color=col, ms=3.5)
            ax.plot(conf, np.full_like(conf, 0.015), ls="none", marker="|", ms=4, mew=0.4, color=col, alpha=0.45)
            e = (ece_intervals or {}).get(level) or {}
            value = e.get("value", ece(conf, correct))
            ece_text = f"ECE {value:.3f}" + (f" [{e['lo']:.3f}, {e['hi']:.3f}]" if "lo" in e and "hi" in e else "")
            sizes = f"{size.min()}" if size.min() == size.max() else f"{size.min()}–{size.max()}"
            ax.text(0.03, 0.97, f"{ece_text}\nacc {correct.mean():.2f}, n={len(conf)}\n{n_bins} bins × {sizes} items",
                    transform=ax.transAxes, va="top", ha="left", fontsize=6)
            ax.set_title(level, pad=2, color=col)
            ax.set_xlim(x_min - 0.02, 1.0)
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


def plot_failed_cell(title: str, error: str, log: str, png: str | os.PathLike, pdf: str | os.PathLike | None = None
                     ) -> tuple[Path, Path]:
    """The place of a failed cell's figure: its name, the first line of its error and its log, so that a report or a
    paper draft of a partly failed run says what is missing and why."""
    import textwrap

    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.6, 1.6), layout="constrained")
        ax.axis("off")
        ax.text(0.0, 1.0, f"{title}: this cell failed", fontsize=8, weight="bold", va="top", transform=ax.transAxes)
        ax.text(0.0, 0.78, "\n".join(textwrap.wrap(error, 90)[:5]) + f"\n\nlog: {log}", fontsize=6, va="top",
                family="monospace", transform=ax.transAxes)
        return save_figure(fig, png, pdf)


# --------------------------------------------------------------------------------- the summary table's figures
@dataclass(frozen=True)
class SummaryPlotsJob(Job):
    """What the summary table's figures are drawn from: the summary table."""

    summary: str


def summary_plots(job: SummaryPlotsJob, by_level_png: str, by_level_pdf: str, flip_png: str, flip_pdf: str) -> pd.DataFrame:
    """The workflow's figures of JOB's summary table: each metric by level, and the flip rate of every level."""
    summary = read_summary(job.summary)
    plot_metrics_by_level(summary, by_level_png, by_level_pdf)
    plot_flip(summary, flip_png, flip_pdf)
    return summary


# -------------------------------------------------------------------------------------------------- flip
def plot_flip(summary: pd.DataFrame, png: str | os.PathLike, pdf: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Order-flip rate per cell for raw and every other level (horizontal dot plot): each point with its
    interval and its value printed beside it, so a zero is as visible as any other value."""
    levels = list(dict.fromkeys(summary["level"]))
    cells = _cells(summary)
    several = summary["model"].nunique() > 1
    band = 0.16 * len(levels) + 0.12
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(3.5, band * len(cells) + 0.75), layout="constrained")
        yticks = []
        for i, (model, task) in enumerate(cells):
            d = summary[(summary["model"] == model) & (summary["task"] == task)].set_index("level").reindex(levels)
            base = -i * (len(levels) + 1)
            yticks.append(base - (len(levels) - 1) / 2)
            for j, level in enumerate(levels):
                v, lo, hi = (float(d.loc[level, c]) for c in ("flip", "flip_lo", "flip_hi"))
                if math.isnan(v):
                    continue
                y = base - j
                col = LEVEL_COLORS.get(level, "0.2")
                ax.hlines(y, lo, hi, color=col, lw=1.0, clip_on=False)
                ax.plot(v, y, ls="none", marker="o", ms=3.4, color=col, mec="white", mew=0.4, clip_on=False, zorder=3)
                ax.text(max(hi, v) + 0.02, y, f"{v:.2f}", va="center", ha="left", fontsize=5.5, color=col)
            if i:
                ax.axhline(base + 1, color="0.85", lw=0.5)
        ax.set_yticks(yticks, [_cell_label(m, t, several) for m, t in cells])
        ax.tick_params(axis="y", length=0)
        ax.set_xlim(-0.02, 1.12)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.axvline(0, color="0.35", ls=":", lw=0.8, zorder=1)
        ax.set_xlabel(f"flip rate {arrow('flip')}: share of items whose answer changes\nwhen the option order is reversed")
        ax.grid(axis="x", lw=0.3, alpha=0.5)
        handles = [_legend_line(ls="-", marker="o", ms=3.4, lw=1.0, color=LEVEL_COLORS.get(lv, "0.2"), label=lv)
                   for lv in levels]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(levels), 5), frameon=False,
                   handlelength=1.2, columnspacing=0.9)
        return save_figure(fig, png, pdf)


# ------------------------------------------------------------------------------------------- vs published
@dataclass(frozen=True)
class VsPublishedPlotJob(Job):
    """What the comparison figure is drawn from: the comparison table (vs_published.csv)."""

    table: str


def vs_published_plot(job: VsPublishedPlotJob, png: str, pdf: str) -> pd.DataFrame:
    """The workflow's comparison figure of JOB's table (refused when the table is empty: nothing overlaps)."""
    table = read_vs_published(job.table)
    plot_vs_published(table, png, pdf)
    return table


def plot_vs_published(df: pd.DataFrame, png: str | os.PathLike, pdf: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Our value (with its interval) against the published one, one panel per metric, on the diagonal
    where they agree. Refuses an empty comparison rather than drawing a blank figure."""
    if df.empty:
        raise ValueError("no cell of this run has a published counterpart: nothing to plot (see vs_published.md)")
    metrics = list(dict.fromkeys(df["metric"]))
    tasks = list(dict.fromkeys(df["task"]))
    models = list(dict.fromkeys(df["model"]))
    colour = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tasks)}
    marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)}
    ncols = min(2, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(1.9 * ncols + 0.3, 1.9 * nrows + 0.5), squeeze=False,
                                 layout="constrained")
        for ax, metric in zip(axes.flat, metrics, strict=False):
            d = df[df["metric"] == metric]
            for _, r in d.iterrows():
                _interval(ax, [r["published"]], [r["ours"]], [r["lo"]], [r["hi"]], color=colour[r["task"]],
                          marker=marker[r["model"]])
            top = float(max(d["published"].max(), d["hi"].max(), d["ours"].max()))
            lim = (0, max(1e-3, top * 1.1))
            ax.plot(lim, lim, color="0.5", ls="--", lw=0.7, zorder=1)
            ax.set(xlim=lim, ylim=lim, xlabel="published", ylabel="ours (95% interval)")
            ax.set_title(f"{METRIC_TITLES.get(metric, metric)} {arrow(metric)}", pad=2)
            ax.grid(lw=0.3, alpha=0.5)
        for ax in list(axes.flat)[len(metrics):]:
            ax.axis("off")
        handles = [_legend_line(ls="none", marker=marker[m], color=colour[t], label=f"{m} / {t}")
                   for m, t in dict.fromkeys(zip(df["model"], df["task"], strict=True))]
        fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
        return save_figure(fig, png, pdf)
