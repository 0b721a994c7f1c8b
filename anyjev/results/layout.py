"""Where a run keeps a cell's files and the logs of the steps that make them, and so which cells finished, which
failed and why: what the run reader (:mod:`anyjev.results`) reads a run by.

A cell is *finished* when its ``metrics.json`` exists. A cell without one has *failed* when the log of the step
that should have made its next file exists (the score log while it has no ``scores.jsonl``, else the evaluate log):
that step ran and left nothing. Where the files and logs are is the workflow's (:class:`CellLayout`, built from the
paths in ``workflow/rules/common.smk``).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CELL_FILES = ("metrics.json", "predictions.csv", "scores.jsonl", "provenance.json")  # what a finished cell holds
ERROR_LINE = 300  # characters of an error line kept
_CLI_ERROR = re.compile(r"^anyjev [\w-]+: \w+")  # anyjev.cli's last word: "anyjev score: ServerError: ..."
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")  # a traceback's last line


@dataclass(frozen=True)
class CellLayout:
    """Where the workflow keeps a cell's files and the logs of the steps that make them: patterns with ``{model}``
    and ``{task}``."""

    cell_dir: str
    score_log: str
    evaluate_log: str

    @classmethod
    def of_run(cls, results: str | os.PathLike, logs: str | os.PathLike) -> CellLayout:
        """The workflow's layout of a run whose results folder is RESULTS and whose logs folder is LOGS."""
        return cls(f"{results}/cells/{{model}}/{{task}}", f"{logs}/score/{{model}}/{{task}}.log",
                   f"{logs}/evaluate/{{model}}/{{task}}.log")

    def found(self) -> list[tuple[str, str]]:
        """Every cell that has a folder or a step log here, sorted: the cells of a run read without its config."""
        cells = set()
        for pattern, is_dir in ((self.cell_dir, True), (self.score_log, False), (self.evaluate_log, False)):
            parts = re.split(r"(\{model\}|\{task\})", pattern)
            where = re.compile("".join({"{model}": "(?P<model>[^/]+)", "{task}": "(?P<task>[^/]+)"}.get(p, re.escape(p))
                                       for p in parts) + "$")
            for path in glob.glob(glob.escape(pattern).replace("{model}", "*").replace("{task}", "*")):
                m = where.match(path)
                if m and Path(path).is_dir() == is_dir:
                    cells.add((m["model"], m["task"]))
        return sorted(cells)

    def dir(self, model: str, task: str) -> Path:
        return Path(self.cell_dir.format(model=model, task=task))

    def paths(self, cells: Iterable[tuple[str, str]], names: Iterable[str] = CELL_FILES) -> list[str]:
        """The files NAMES of each cell, as paths for a rule's input."""
        names = list(names)
        return [str(self.dir(m, t) / name) for m, t in cells for name in names]

    def is_finished(self, model: str, task: str) -> bool:
        """Whether the cell's ``metrics.json`` exists."""
        return (self.dir(model, task) / "metrics.json").is_file()

    def step_log(self, model: str, task: str) -> Path:
        """The log of the step that should have made the cell's next file: scoring until ``scores.jsonl`` exists,
        then evaluation."""
        scored = (self.dir(model, task) / "scores.jsonl").is_file()
        return Path((self.evaluate_log if scored else self.score_log).format(model=model, task=task))

    def failed(self, model: str, task: str) -> bool:
        """Not finished, and the step that should have finished it has run (its log exists)."""
        return not self.is_finished(model, task) and self.step_log(model, task).is_file()

    def finished(self, cells: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The CELLS whose ``metrics.json`` exists."""
        return [(m, t) for m, t in cells if self.is_finished(m, t)]

    def failure(self, model: str, task: str) -> dict[str, str]:
        """Why a cell has no ``metrics.json``: ``{"error": first line of its error, "log": the log's path}``."""
        log = self.step_log(model, task)
        if not log.is_file():
            return {"error": f"no metrics.json and no log ({log}): the cell has not run", "log": str(log)}
        line = error_line(log.read_text(errors="replace"))
        return {"error": line or "the log is empty", "log": str(log)}


def error_line(text: str) -> str | None:
    """The first line of the error a log ends with: anyjev's own ``anyjev <command>: <Error>: ...`` line, else
    the last exception line of a traceback, else the last non-empty line; None for an empty log."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    found = next((line for line in lines if _CLI_ERROR.match(line)), None)
    found = found or next((line for line in reversed(lines) if _EXCEPTION.match(line)), None) or lines[-1]
    return found if len(found) <= ERROR_LINE else found[: ERROR_LINE - 3] + "..."
