"""A run read back: which of its cells finished (:class:`~anyjev.rundata.cell.Cell`) and which failed, and the tidy
frames of what they hold (:mod:`anyjev.rundata.frames`), each built the first time it is asked for."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import pandas as pd

from anyjev.errors import FileFormatError
from anyjev.rundata import frames
from anyjev.rundata.cell import METRICS, Cell
from anyjev.rundata.layout import CellLayout

Failure = dict[str, str | None]  # {"error": the first line of its error, "log": its log (None: unknown)}


class Run:
    """The cells of a run in their order: ``finished`` (each a :class:`Cell`) and ``failures`` (by (model, task): the
    first line of the error and the log). The frames: ``cells``, ``metrics``, ``level_differences``, ``predictions``,
    ``items``, ``probabilities``, ``failed``."""

    def __init__(self, order: Sequence[tuple[str, str]], finished: Iterable[Cell], failures: dict[tuple[str, str], Failure]):
        self.order = list(order)
        self._finished = {(c.model, c.task): c for c in finished}
        self.failures = failures

    def __repr__(self) -> str:
        return f"Run({len(self.order)} cells, {len(self.failures)} failed)"

    @property
    def finished(self) -> list[Cell]:
        """The finished cells, in the run's order."""
        return [self._finished[key] for key in self.order if key in self._finished]

    def require_finished(self) -> Run:
        """This run, when every cell finished; else the first failed cell's error (one line naming it)."""
        for (model, task), why in self.failures.items():
            raise FileFormatError(f"{model}/{task}", "cell", f"not finished: {why['error']}")
        return self

    def cell(self, model: str, task: str) -> Cell:
        """The finished cell MODEL x TASK."""
        if (model, task) not in self._finished:
            why = self.failures.get((model, task), {}).get("error") or "not a cell of this run"
            raise KeyError(f"{model}/{task}: no finished cell ({why})")
        return self._finished[(model, task)]

    @cached_property
    def cells(self) -> pd.DataFrame:
        """One row per cell, finished or failed."""
        return frames.cells_frame(self.order, self._finished, self.failures)

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """One row per (cell, level, metric): value, lo, hi and the entry's other fields."""
        return frames.metrics_frame(self.finished)

    @cached_property
    def level_differences(self) -> pd.DataFrame:
        """One row per (cell, level, metric): the level minus raw on the same items, with its paired interval."""
        return frames.level_differences_frame(self.finished)

    @cached_property
    def predictions(self) -> pd.DataFrame:
        """One row per (cell, test item, level, layout group): the item's decision."""
        return frames.predictions_frame(self.finished)

    @cached_property
    def items(self) -> pd.DataFrame:
        """One row per scored item (test and calibration)."""
        return frames.items_frame(self.finished)

    @cached_property
    def probabilities(self) -> pd.DataFrame:
        """One row per (cell, item, layout, position): the label probabilities each layout read."""
        return frames.probabilities_frame(self.finished)

    @cached_property
    def failed(self) -> pd.DataFrame:
        """One row per failed cell: its error line and log."""
        return frames.failed_frame(self.failures)


def read_layout(layout: CellLayout, cells: Iterable[tuple[str, str]] | None = None) -> Run:
    """The run whose cells LAYOUT places (CELLS, in that order; by default every cell with a folder or a log there)."""
    order = list(cells) if cells is not None else layout.found()
    finished = [Cell(m, t, layout.dir(m, t)) for m, t in layout.finished(order)]
    done = {(c.model, c.task) for c in finished}
    return Run(order, finished, {(m, t): dict(layout.failure(m, t)) for m, t in order if (m, t) not in done})


def read_run(results: str | os.PathLike = "results", logs: str | os.PathLike = "logs", *,
             cells: Iterable[tuple[str, str]] | None = None) -> Run:
    """The run the workflow wrote into RESULTS (cells under ``RESULTS/cells/<model>/<task>/``) with its LOGS: CELLS
    (model, task) in that order, or every cell found there."""
    return read_layout(CellLayout.of_run(results, logs), cells)


def read_cells(folders: Iterable[str | os.PathLike]) -> Run:
    """The run of these cell FOLDERS (``.../<model>/<task>/``, in this order); one without ``metrics.json`` is
    failed (its logs are not known here)."""
    paths = [Path(f) for f in folders]
    order = [(p.parent.name, p.name) for p in paths]
    finished = [Cell(m, t, p) for (m, t), p in zip(order, paths, strict=True) if (p / METRICS).is_file()]
    done = {(c.model, c.task) for c in finished}
    failures: dict[tuple[str, str], Failure] = {
        key: {"error": f"{p / METRICS} is missing", "log": None} for key, p in zip(order, paths, strict=True) if key not in done}
    return Run(order, finished, failures)
