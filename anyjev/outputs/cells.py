"""Which cells of a run finished, which failed and why: one small helper for every output that is built from
the cells that exist (the viewer today) rather than from all of them.

A cell is *finished* when its ``metrics.json`` exists. A cell without one has *failed before* when the log
of the step that should have made its next file exists (``logs/score/<model>/<task>.log`` while it has no
``scores.jsonl``, else ``logs/evaluate/<model>/<task>.log``): that step ran and left nothing. A rule that
takes :func:`cells_to_wait_for` as its cells waits for every cell that has not run yet, so a first run builds
it once from all cells, and a run after a failure (Snakemake does not run a rule whose inputs are missing,
even with ``--keep-going``) builds it from the finished cells and shows the failed ones with
:func:`failure`. A failed cell retried by that run is picked up by the next one, whose new ``metrics.json`` is
then an input newer than the output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

CELL_FILES = ("metrics.json", "predictions.csv", "scores.jsonl", "provenance.json")  # what a finished cell holds
ERROR_LINE = 300  # characters of an error line kept
_CLI_ERROR = re.compile(r"^anyjev [\w-]+: \w+")  # anyjev.cli's last word: "anyjev score: ServerError: ..."
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")  # a traceback's last line


def cell_dir(model: str, task: str, results: str | os.PathLike = "results") -> Path:
    """``results/cells/<model>/<task>``."""
    return Path(results) / "cells" / model / task


def cell_paths(cells: Iterable[tuple[str, str]], names: Iterable[str] = CELL_FILES, results: str = "results") -> list[str]:
    """The files NAMES of each cell, as paths for a rule's input."""
    names = list(names)
    return [str(cell_dir(m, t, results) / name) for m, t in cells for name in names]


def is_finished(model: str, task: str, results: str | os.PathLike = "results") -> bool:
    """Whether the cell's ``metrics.json`` exists."""
    return (cell_dir(model, task, results) / "metrics.json").is_file()


def step_log(model: str, task: str, results: str | os.PathLike = "results", logs: str | os.PathLike = "logs") -> Path:
    """The log of the step that should have made the cell's next file: scoring until ``scores.jsonl``
    exists, then evaluation."""
    step = "evaluate" if (cell_dir(model, task, results) / "scores.jsonl").is_file() else "score"
    return Path(logs) / step / model / f"{task}.log"


def failed_before(model: str, task: str, results: str | os.PathLike = "results", logs: str | os.PathLike = "logs") -> bool:
    """Not finished, and the step that should have finished it has run (its log exists)."""
    return not is_finished(model, task, results) and step_log(model, task, results, logs).is_file()


def cells_to_wait_for(cells: Iterable[tuple[str, str]], results: str | os.PathLike = "results",
                      logs: str | os.PathLike = "logs") -> list[tuple[str, str]]:
    """The cells a rule built from finished cells should take as inputs: all but those that failed before."""
    return [(m, t) for m, t in cells if not failed_before(m, t, results, logs)]


def error_line(text: str) -> str | None:
    """The first line of the error a log ends with: anyjev's own ``anyjev <command>: <Error>: ...`` line, else
    the last exception line of a traceback, else the last non-empty line; None for an empty log."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    found = next((line for line in lines if _CLI_ERROR.match(line)), None)
    found = found or next((line for line in reversed(lines) if _EXCEPTION.match(line)), None) or lines[-1]
    return found if len(found) <= ERROR_LINE else found[: ERROR_LINE - 3] + "..."


def failure(model: str, task: str, results: str | os.PathLike = "results", logs: str | os.PathLike = "logs") -> dict:
    """Why a cell has no ``metrics.json``: ``{"error": first line of its error, "log": the log's path}``."""
    log = step_log(model, task, results, logs)
    if not log.is_file():
        return {"error": f"no metrics.json and no log ({log}): the cell has not run", "log": str(log)}
    line = error_line(log.read_text(errors="replace"))
    return {"error": line or "the log is empty", "log": str(log)}
