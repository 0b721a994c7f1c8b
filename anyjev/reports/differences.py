"""The differences a paper claims, each with the interval of the difference itself (two overlapping intervals do not
say whether a paired difference is real): every level minus raw in each cell, and one model minus another on the same
task, as ``differences.{csv,md}``.

Level minus raw comes from each cell's ``metrics.json`` (the evaluation computes it on the same resamples, priors and
temperature refit in each: :mod:`anyjev.numbers.evaluation`). Model minus model is computed here from the two cells'
scores (:func:`anyjev.run.evaluate.compare_many`: the same items drawn for both; the bootstrap replicates each cell's
evaluation kept in ``replicates.npz`` are paired where they were made from that cell's scores and the run's evaluation
settings, so no cell is resampled twice), for every pair of models that finished the task, in the run's order (the
first minus the later one).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from anyjev.files import write_text_atomic
from anyjev.jobs import Job
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.power import detectable_from_interval
from anyjev.paths import REPLICATES, SCORES
from anyjev.reports.tables import METRIC_TITLES, arrow
from anyjev.run.evaluate import compare_many
from anyjev.rundata import CellLayout, Run, read_layout
from anyjev.rundata.frames import flatten
from anyjev.rundata.summary import TABLE_METRICS


@dataclass(frozen=True)
class DifferencesJob(Job):
    """What the differences table is made from (built by ``Settings.differences_job``): the run's cells, where their
    files are, the levels, and the evaluation's settings (model minus model is resampled as the levels are)."""

    cells: list[tuple[str, str]]
    levels: list[str]
    layout: CellLayout
    evaluation: EvaluationOptions


COLUMNS = ["task", "model", "versus_model", "level", "versus_level", "metric", "value", "lo", "hi", "widened",
           "detectable", "underpowered"]
UNDERPOWERED = "†"


def with_power(frame: pd.DataFrame) -> pd.DataFrame:
    """FRAME's differences with ``detectable``, the smallest difference each row's items could have detected at 80%
    power (:func:`anyjev.numbers.power.detectable_from_interval`, from the row's own paired interval), and
    ``underpowered``: the interval covers 0 and the difference is smaller than that (not evidence that there is none)."""
    if frame.empty:
        return frame.assign(detectable=pd.Series(dtype=float), underpowered=pd.Series(dtype=bool))
    detectable = [detectable_from_interval(lo, hi) for lo, hi in zip(frame["lo"], frame["hi"], strict=True)]
    covers = (frame["lo"] <= 0) & (frame["hi"] >= 0)
    return frame.assign(detectable=detectable, underpowered=covers & (frame["value"].abs() < detectable))


def level_minus_raw(run: Run, levels: Sequence[str]) -> pd.DataFrame:
    """Each finished cell's LEVELS minus its raw level (the table's metrics), in the differences' columns. A cell's
    metrics.json holds every level the evaluation computes; the table shows the run's."""
    frame = run.level_differences
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = frame[frame["metric"].isin(TABLE_METRICS) & frame["level"].isin(levels)]
    out = frame.assign(versus_model=frame["model"], versus_level=frame["versus"])
    return out.reindex(columns=COLUMNS)


def model_minus_model(run: Run, options: EvaluationOptions, levels: Sequence[str]) -> pd.DataFrame:
    """For every task two or more models finished, each earlier model minus each later one (run order), per level of
    LEVELS and metric of the table, on the same items."""
    rows = []
    by_task: dict[str, list] = {}
    for cell in run.finished:
        by_task.setdefault(cell.task, []).append(cell)
    for task, cells in by_task.items():
        if len(cells) < 2:
            continue
        # each cell's own replicates, or each resampled once
        pairs = compare_many([str(c.file(SCORES)) for c in cells], options,
                             replicates=[str(c.file(REPLICATES)) for c in cells])
        for i, j in itertools.combinations(range(len(cells)), 2):
            a, b, compared = cells[i], cells[j], pairs[(i, j)]["model_minus_model"]
            for level in (lv for lv in levels if lv in compared):
                for metric in (m for m in TABLE_METRICS if m in compared[level]):
                    rows.append({"task": task, "model": a.model, "versus_model": b.model, "level": level,
                                 "versus_level": level, "metric": metric} | flatten(compared[level][metric]))
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def differences_frame(run: Run, options: EvaluationOptions, levels: Sequence[str]) -> pd.DataFrame:
    """Level minus raw, then model minus model: one row per difference, with the smallest difference its items could
    have detected and whether it is underpowered (:func:`with_power`)."""
    parts = [f for f in (level_minus_raw(run, levels), model_minus_model(run, options, levels)) if not f.empty]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
    return with_power(frame.drop(columns=["detectable", "underpowered"])).reindex(columns=COLUMNS)


INTERVALS_NOTE = (f"Bold: the interval excludes 0. {UNDERPOWERED}: underpowered, the interval covers 0 and the difference "
                  "is smaller than the smallest its items could have detected at 80% power (the CSV's detectable; "
                  "docs/metrics.md, \"Power\"): not evidence that there is none. detectable Δacc: that smallest "
                  "difference for accuracy.")


def differences_markdown(frame: pd.DataFrame) -> str:
    """The differences as Markdown: one table per kind, a row per (task, model or pair, level), a column per metric,
    each cell ``+0.031 [-0.010, +0.070]`` (bold where the interval excludes 0, † where it is underpowered)."""
    lines = ["# Differences with their intervals", "",
             "Each value is a paired difference on the same items with the BCa 95% interval of the difference itself "
             "(resampled as the levels' own intervals, priors and L1's temperature refit in each resample). "
             + INTERVALS_NOTE, ""]
    kinds = (("Each level minus raw", frame[frame["model"] == frame["versus_model"]], ["task", "model", "level"]),
             ("One model minus another, same task and level", frame[frame["model"] != frame["versus_model"]],
              ["task", "model", "versus_model", "level"]))
    tables = [markdown_table(title, part, keys, {"versus_model": "minus"}) for title, part, keys in kinds]
    lines += [line for table in tables for line in table]
    if not any(tables):
        lines.append("No difference to show: no cell has a level besides raw, and no task was scored by two models.")
    return "\n".join(lines).rstrip() + "\n"


def markdown_table(title: str, part: pd.DataFrame, keys: list[str], headers: dict[str, str] | None = None) -> list[str]:
    """One table of differences (rows of PART: a metric each, with value, lo, hi, detectable and underpowered) under
    the heading TITLE: a row per KEYS (shown under HEADERS' names), a column per metric of the table, then the
    accuracy's detectable difference; no lines when PART is empty."""
    if part.empty:
        return []
    metrics = [m for m in TABLE_METRICS if m in set(part["metric"])]
    head = [(headers or {}).get(k, k) for k in keys] + [f"{METRIC_TITLES[m]} {arrow(m)}" for m in metrics]
    head += ["detectable Δacc"] if "acc" in metrics else []
    lines = [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, rows in part.groupby(keys, sort=False):
        by_metric = {r.metric: r for r in rows.itertuples()}
        shown = [_entry(by_metric[m]) if m in by_metric else "" for m in metrics]
        if "acc" in metrics:
            detectable = getattr(by_metric.get("acc"), "detectable", float("nan"))
            shown.append("" if pd.isna(detectable) else f"{detectable:.3f}")
        lines.append("| " + " | ".join([*map(str, key), *shown]) + " |")
    return [*lines, ""]


def _entry(row) -> str:
    text = f"{row.value:+.3f} [{row.lo:+.3f}, {row.hi:+.3f}]"
    if row.lo > 0 or row.hi < 0:
        return f"**{text}**"
    underpowered = getattr(row, "underpowered", False)  # a frame made elsewhere may not say
    return f"{text} {UNDERPOWERED}" if not pd.isna(underpowered) and bool(underpowered) else text


def write_differences(run: Run, options: EvaluationOptions, levels: Sequence[str], csv_out: str, md_out: str
                      ) -> pd.DataFrame:
    """``differences.csv`` (long form, one row per difference) and ``differences.md``."""
    frame = differences_frame(run, options, levels)
    write_text_atomic(csv_out, frame.to_csv(index=False, float_format="%.6f"))
    write_text_atomic(md_out, differences_markdown(frame))
    return frame


def differences_table(job: DifferencesJob, csv_out: str, md_out: str, *, run: Run | None = None) -> pd.DataFrame:
    """The workflow's differences table of JOB's run (RUN: the run already read by JOB's layout), from its finished
    cells."""
    return write_differences(run or read_layout(job.layout, job.cells), job.evaluation, job.levels, csv_out, md_out)
