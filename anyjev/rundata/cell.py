"""One cell of a run (a model x task): where its files are and what they hold, each file read and checked
(:mod:`anyjev.rundata.cellfiles`, :mod:`anyjev.rundata.scores`) the first time it is asked for, so that a table that
needs only ``metrics.json`` never reads a cell's scores."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyjev.decision.options import PromptOptions
from anyjev.numbers.options import EvaluationOptions
from anyjev.paths import METRICS, PREDICTIONS, PROVENANCE, SCORES
from anyjev.rundata.cellfiles import evaluation_options, read_metrics, read_predictions, read_provenance
from anyjev.rundata.scores import Scores, read_scores

if TYPE_CHECKING:
    import pandas as pd


class Cell:
    """A finished cell: ``metrics``, ``predictions``, ``scores`` and ``provenance`` are its files as read."""

    def __init__(self, model: str, task: str, folder: str | Path) -> None:
        self.model = model
        self.task = task
        self.folder = Path(folder)

    def __repr__(self) -> str:
        return f"Cell({self.model!r}, {self.task!r}, {str(self.folder)!r})"

    @property
    def key(self) -> str:
        """``model/task``, how the viewer and the logs name a cell."""
        return f"{self.model}/{self.task}"

    def file(self, name: str) -> Path:
        return self.folder / name

    @cached_property
    def metrics(self) -> dict[str, Any]:
        """``metrics.json``."""
        return read_metrics(self.file(METRICS))

    @cached_property
    def predictions(self) -> pd.DataFrame:
        """``predictions.csv``: item_id, level, group, gold, pred, conf, p_gold, n_top."""
        return read_predictions(self.file(PREDICTIONS))

    @cached_property
    def scores(self) -> Scores:
        """``scores.jsonl``: the identity, the item records and the other records."""
        return read_scores(self.file(SCORES))

    @cached_property
    def provenance(self) -> dict[str, Any]:
        """``provenance.json`` (empty for a cell scored outside the workflow)."""
        return read_provenance(self.file(PROVENANCE))

    @property
    def evaluation_options(self) -> EvaluationOptions:
        """The evaluation options its ``metrics.json`` was made with."""
        return evaluation_options(self.metrics, self.file(METRICS))

    @property
    def prompt_options(self) -> PromptOptions:
        """The prompt options it was scored with (from the identity in ``scores.jsonl``)."""
        return PromptOptions.from_identity(self.scores.identity)
