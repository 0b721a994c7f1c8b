"""Where a run keeps a cell's files and the logs of the steps that make them, and so which cells finished, which
failed and why: what the run reader (:mod:`anyjev.rundata`) reads a run by.

A cell is *finished* when its ``metrics.json`` exists. A cell without one has *failed* when the log of the step
that should have made its next file exists (the score log while it has no ``scores.jsonl``, else the evaluate log):
that step ran and left nothing. Why it failed is the first line of the error that log ends with; when that step never
ran, the error of the earlier step that stopped it (its model's scoring job, its task's preparation or fetch, its
model's preparation). Where the files and logs are is the workflow's (:class:`CellLayout`, built from the run's paths,
:mod:`anyjev.paths`).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from anyjev.errors import one_line
from anyjev.paths import CELL_DIR, CELL_FILES, EVALUATE_LOG, METRICS, SCORE_LOG, SCORES, RunPaths

_CLI_ERROR = re.compile(r"^anyjev [\w-]+: \w+")  # anyjev.cli's last word: "anyjev score: ServerError: ..."
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")  # a traceback's last line


@dataclass(frozen=True)
class CellLayout:
    """Where the workflow keeps a cell's files and the logs of the steps that make them: patterns with ``{model}``
    and ``{task}``."""

    cell_dir: str
    score_log: str
    evaluate_log: str
    # The logs of the steps before scoring, nearest first (the model's scoring job, the task's preparation and fetch,
    # the model's preparation): patterns with {model}, {task} and {dataset}, a hub task's cache folder (DATASETS).
    earlier_logs: tuple[str, ...] = ()
    datasets: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_run(cls, results: str | os.PathLike, logs: str | os.PathLike) -> CellLayout:
        """The workflow's layout of a run whose results folder is RESULTS and whose logs folder is LOGS."""
        return cls(f"{results}/{CELL_DIR}", f"{logs}/{SCORE_LOG}", f"{logs}/{EVALUATE_LOG}")

    @classmethod
    def of_paths(cls, paths: RunPaths, datasets: dict[str, str] | None = None) -> CellLayout:
        """The workflow's layout of the run at PATHS, the earlier steps' logs included (DATASETS: each hub task's cache
        folder, which names its fetch log)."""
        return cls(paths.cell_dir, paths.score_log, paths.evaluate_log, paths.earlier_logs, dict(datasets or {}))

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
        return (self.dir(model, task) / METRICS).is_file()

    def step_log(self, model: str, task: str) -> Path:
        """The log of the step that should have made the cell's next file: scoring until ``scores.jsonl`` exists,
        then evaluation."""
        scored = (self.dir(model, task) / SCORES).is_file()
        return Path((self.evaluate_log if scored else self.score_log).format(model=model, task=task))

    def failed(self, model: str, task: str) -> bool:
        """Not finished, and the step that should have finished it has run (its log exists)."""
        return not self.is_finished(model, task) and self.step_log(model, task).is_file()

    def finished(self, cells: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The CELLS whose ``metrics.json`` exists."""
        return [(m, t) for m, t in cells if self.is_finished(m, t)]

    def earlier_logs_of(self, model: str, task: str) -> list[Path]:
        """The logs of the steps before the cell's scoring, nearest first (a fetch log only for a hub task; the logs of
        every scoring job of the model, ``{job}``, newest first)."""
        names = {"model": model, "task": task, "dataset": self.datasets.get(task)}
        found: list[Path] = []
        for pattern in self.earlier_logs:
            if "{dataset}" in pattern and not names["dataset"]:
                continue
            if "{job}" in pattern:
                head, tail = pattern.format(**names, job="\0").split("\0")
                jobs = [Path(p) for p in glob.glob(glob.escape(head) + "*" + glob.escape(tail))]
                found += sorted(jobs, key=lambda p: p.stat().st_mtime, reverse=True)
            else:
                found.append(Path(pattern.format(**names)))
        return found

    def failure(self, model: str, task: str) -> dict[str, str]:
        """Why a cell has no ``metrics.json``: ``{"error": first line of its error, "log": the log's path}``. The newest
        of the logs that say something: the log of the step that should have made the cell's next file (its error, or
        that it stopped without one), and the logs of the earlier steps that hold an error (the step that stopped it
        from running). A log left by an earlier run is older than what this run's steps wrote."""
        log = self.step_log(model, task)
        said: list[tuple[float, str, Path]] = []
        if log.is_file():
            text = log.read_text(errors="replace")
            line = error_line(text, last_line=False)
            if line is None:
                last = text.strip().splitlines()[-1] if text.strip() else None
                line = ("the log is empty: the step stopped before it wrote anything" if last is None else
                        f"the step stopped without an error (interrupted or killed); its log ends: {one_line(last)}")
            said.append((log.stat().st_mtime, line, log))
        for earlier in self.earlier_logs_of(model, task):
            line = error_line(earlier.read_text(errors="replace"), last_line=False) if earlier.is_file() else None
            if line is not None:
                said.append((earlier.stat().st_mtime, line, earlier))
        if not said:
            return {"error": f"no metrics.json, and neither {log} nor the log of an earlier step holds an error: the "
                             "cell has not run", "log": str(log)}
        _, line, where = max(said, key=lambda s: s[0])
        return {"error": line, "log": str(where)}


def error_line(text: str, *, last_line: bool = True) -> str | None:
    """The first line of the error a log ends with, whole and on one line (an HTML page reduced to its text):
    anyjev's own ``anyjev <command>: <Error>: ...`` line, else the last exception line of a traceback, else (with
    LAST_LINE) the last non-empty line; None for a log without one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = next((line for line in lines if _CLI_ERROR.match(line)), None)
    found = found or next((line for line in reversed(lines) if _EXCEPTION.match(line)), None)
    found = found or (lines[-1] if lines and last_line else None)
    return None if found is None else one_line(found)
