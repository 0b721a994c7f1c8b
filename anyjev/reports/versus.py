"""Run against run (``anyjev compare RUN_A RUN_B``): the same cells scored twice (before and after a vLLM upgrade,
fp32 against bf16, one prompt profile against another), compared item by item. For every cell both runs finished, every
metric of every level both have, B's value minus A's with the BCa interval of the paired difference, exactly as one
model minus another (:func:`anyjev.run.evaluate.compare_many`: both cells resampled on the same items, their kept
bootstrap replicates paired where they were made from their scores), and the smallest difference its items could have
detected (:func:`anyjev.reports.differences.with_power`).

A cell is refused, with the reason, when its two runs did not read the same items (the first item that differs is
named: id, split, gold or K) or were evaluated under other settings (their intervals would not be paired); the other
cells are compared.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from anyjev.errors import ArgumentError, TaskDataError
from anyjev.files import write_text_atomic
from anyjev.numbers.levels import ALL_LEVELS
from anyjev.paths import CELL_DIR, REPLICATES, SCORES
from anyjev.reports.differences import INTERVALS_NOTE, markdown_table, with_power
from anyjev.run.evaluate import compare_many
from anyjev.rundata import Cell, Run, read_run
from anyjev.rundata.frames import flatten
from anyjev.rundata.summary import TABLE_METRICS

log = logging.getLogger(__name__)

COLUMNS = ["model", "task", "level", "metric", "value", "lo", "hi", "widened", "detectable", "underpowered"]


@dataclass
class RunComparison:
    """B minus A: ``differences`` (one row per shared cell, level and metric: COLUMNS), the cells ``refused`` (by
    (model, task): why), and the finished cells only one run has."""

    differences: pd.DataFrame
    refused: dict[tuple[str, str], str] = field(default_factory=dict)
    only_a: list[tuple[str, str]] = field(default_factory=list)
    only_b: list[tuple[str, str]] = field(default_factory=list)


def _settings_differ(a: Cell, b: Cell) -> list[str]:
    """The evaluation settings cells A and B were evaluated under that differ, as ``name A -> B``."""
    mine, theirs = dataclasses.asdict(a.evaluation_options), dataclasses.asdict(b.evaluation_options)
    return [f"{k} {mine[k]!r} -> {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]


def compare_runs(run_a: Run, run_b: Run, *, metrics: tuple[str, ...] = TABLE_METRICS) -> RunComparison:
    """RUN_B minus RUN_A on every cell both finished (RUN_A's order), every level both cells have and METRICS."""
    a_cells = {(c.model, c.task): c for c in run_a.finished}
    b_cells = {(c.model, c.task): c for c in run_b.finished}
    out = RunComparison(pd.DataFrame(columns=COLUMNS), only_a=[k for k in a_cells if k not in b_cells],
                        only_b=[k for k in b_cells if k not in a_cells])
    rows = []
    for key in (k for k in a_cells if k in b_cells):
        a, b = a_cells[key], b_cells[key]
        differ = _settings_differ(a, b)
        if differ:
            out.refused[key] = f"evaluated under other settings ({'; '.join(differ)}): their intervals are not paired"
            continue
        try:
            pair = compare_many([str(b.file(SCORES)), str(a.file(SCORES))], a.evaluation_options,
                                replicates=[str(b.file(REPLICATES)), str(a.file(REPLICATES))])[(0, 1)]
        except TaskDataError as exc:  # the first item that differs, named
            out.refused[key] = str(exc)
            continue
        compared = pair["model_minus_model"]
        for level in (lv for lv in ALL_LEVELS if lv in compared):
            for metric in (m for m in metrics if m in compared[level]):
                rows.append({"model": key[0], "task": key[1], "level": level, "metric": metric}
                            | flatten(compared[level][metric]))
    for (model, task), why in out.refused.items():
        log.warning("%s/%s is not compared: %s", model, task, why)
    if rows:
        out.differences = with_power(pd.DataFrame(rows)).reindex(columns=COLUMNS)
    return out


def comparison_markdown(comparison: RunComparison, a: str, b: str) -> str:
    """The comparison as Markdown: a row per (model, task, level), a column per metric (B minus A), then the cells
    refused and the cells only one run finished."""
    lines = [f"# {b} minus {a}", "",
             f"Each value is the same cell's metric in {b} minus its value in {a}, on the same items, with the BCa 95% "
             "interval of the paired difference (both resampled on the same items, priors and L1's temperature refit in "
             "each resample). " + INTERVALS_NOTE, ""]
    lines += markdown_table("Each shared cell and level", comparison.differences, ["model", "task", "level"])
    if comparison.differences.empty:
        lines += ["No cell to compare: the two runs finished no cell in common that could be compared.", ""]
    if comparison.refused:
        lines += ["## Refused", "", "| model | task | why |", "|---|---|---|"] + [
            f"| {m} | {t} | {why.replace('|', chr(92) + '|')} |" for (m, t), why in comparison.refused.items()] + [""]
    for name, cells in ((a, comparison.only_a), (b, comparison.only_b)):
        if cells:
            lines += [f"Only in {name}: {', '.join(f'{m}/{t}' for m, t in cells)}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def run_folders(path: str | os.PathLike) -> tuple[Path, Path]:
    """(results, logs) of the run at PATH: a results folder (holding ``cells/``, its logs beside it in ``logs/``), or
    a run's working directory (holding ``results/cells/`` and ``logs/``)."""
    path = Path(path)
    cells = CELL_DIR.split("/")[0]
    if (path / cells).is_dir():
        return path, path.parent / "logs"
    if (path / "results" / cells).is_dir():
        return path / "results", path / "logs"
    raise ArgumentError(str(path), f"no run here (neither {path / cells} nor {path / 'results' / cells} is a folder)")


def compare_run_folders(a: str | os.PathLike, b: str | os.PathLike, *, csv_out: str | None = None,
                        md_out: str | None = None) -> tuple[RunComparison, str]:
    """The runs at A and B (:func:`run_folders`) compared, B minus A; the comparison as CSV (CSV_OUT) and Markdown
    (MD_OUT) where given. Returns the comparison and its Markdown."""
    comparison = compare_runs(read_run(*run_folders(a)), read_run(*run_folders(b)))
    if comparison.differences.empty:
        why = next((f"; {m}/{t} is refused: {w}" for (m, t), w in comparison.refused.items()), "")
        raise ArgumentError(f"{a} and {b}", f"no finished cell in common that can be compared (model and task){why}")
    md = comparison_markdown(comparison, str(a), str(b))
    if csv_out:
        write_text_atomic(csv_out, comparison.differences.to_csv(index=False, float_format="%.6f"))
    if md_out:
        write_text_atomic(md_out, md)
    return comparison, md
