"""Figures for a paper, each written as PNG (300 dpi) and PDF (embedded TrueType fonts), sized for a
single column (3.5 in) or the text width (7 in) at 7-8 pt type; matplotlib without a display (the style and the
drawing of a cell's reliability diagram: :mod:`anyjev.reports.draw`).

Levels are alternatives, not a sequence: they are categories on the x axis, shown as points with their
interval (a vertical segment from lo to hi: BCa, widened to include the point where the bootstrap
distribution lies on one side), never joined by lines.

The workflow's figure steps: :func:`summary_plots` (a :class:`SummaryPlotsJob`) and :func:`vs_published_plot` (a
:class:`VsPublishedPlotJob`); a cell's reliability diagram is drawn by its evaluate step, and by :func:`reliability_plot`
(a :class:`ReliabilityJob`) from the cell's files at the end of a run with failed cells.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anyjev.jobs import Job
from anyjev.reports.draw import LEVEL_COLORS, STYLE, draw_reliability, interval, pyplot, save_figure
from anyjev.reports.tables import HIGHER_IS_BETTER, METRIC_TITLES, arrow, k_range
from anyjev.rundata import CellLayout, Run, read_layout
from anyjev.rundata.summary import TABLE_METRICS, read_summary, read_vs_published

if TYPE_CHECKING:
    import pandas as pd

# Okabe-Ito (colour-blind safe); tasks get colours, models get markers.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
Y_LABELS = {"acc": "accuracy", "macro_f1": "macro-F1", "nll": "NLL (nats)", "brier": "Brier (multi-class)",
            "ece": "ECE (15 equal-mass bins)", "flip": "flip rate", "cov@5": "coverage at 5% risk", "aurc": "AURC"}
# Best attainable value of each metric (drawn dotted).
IDEAL = {"acc": 1.0, "macro_f1": 1.0, "nll": 0.0, "brier": 0.0, "ece": 0.0, "flip": 0.0, "cov@5": 1.0, "aurc": 0.0}
UNIT_RANGE = {"acc", "macro_f1", "ece", "flip", "cov@5", "aurc"}
assert set(IDEAL) == set(TABLE_METRICS) == set(HIGHER_IS_BETTER)


def _legend_line(**style):
    """A legend handle: a line or marker drawn with STYLE and no data."""
    from matplotlib.lines import Line2D

    return Line2D([], [], **style)


def chance(metric: str, k: int) -> float | None:
    """The score of the uniform prediction (1/K on every option) where it is a natural baseline."""
    if k < 2:
        return None
    return {"acc": 1 / k, "nll": math.log(k), "brier": 1 - 1 / k}.get(metric)


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
                interval(ax, x0 + off, d[metric], d[f"{metric}_lo"], d[f"{metric}_hi"], color=colour[task],
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
    """A cell's reliability diagram from its predictions (predictions.csv's rows): :func:`anyjev.reports.draw.draw_reliability`
    of its test items' forward-group confidences, the confidence axis from 1/K (the largest K; 0 when K is not given)."""
    kr = k_range(k) if k is not None else None
    points = {}
    for level in levels:
        d = preds[(preds["level"] == level) & (preds["group"] == "fwd")]
        if not d.empty:
            points[level] = (d["conf"].to_numpy(float), (d["pred"] == d["gold"]).to_numpy(float))
    if not points:
        raise ValueError(f"no forward-group predictions for levels {list(levels)} (title {title!r})")
    return draw_reliability(points, png, pdf, lowest=1 / kr[1] if kr else 0.0, title=title, ece_intervals=ece_intervals)


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
                interval(ax, [r["published"]], [r["ours"]], [r["lo"]], [r["hi"]], color=colour[r["task"]],
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
