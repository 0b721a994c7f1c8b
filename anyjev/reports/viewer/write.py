"""Writing a run's viewer: the run read through :mod:`anyjev.rundata`, each finished cell's levels computed and
checked, its prompts rebuilt and verified, its two data files written, then ``index.html``; all into a temporary
folder that replaces the output folder as a whole."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from anyjev.data.taskfile import load_task_file
from anyjev.data.tasks import Task
from anyjev.decision.labels import LabelChecker
from anyjev.decision.tokenizer import Tokenizers
from anyjev.files import current_umask, write_text_atomic
from anyjev.jobs import Job
from anyjev.reports.tables import summary_frame
from anyjev.reports.viewer.cell_page import CellFrames, cell_page
from anyjev.reports.viewer.encoding import js_data
from anyjev.reports.viewer.items_page import items_page
from anyjev.reports.viewer.levels import cell_levels, check_predictions
from anyjev.reports.viewer.page import index_html
from anyjev.reports.viewer.run_page import run_page
from anyjev.run.rebuild import scored_prompts
from anyjev.rundata import Cell, CellLayout, Run, read_layout
from anyjev.rundata.scores import is_test

# The viewer's files in its folder: the page, and each finished cell's two data files under CELLS/<model>/.
INDEX, CELLS = "index.html", "cells"


@dataclass(frozen=True)
class ViewerJob(Job):
    """What the viewer is built from (built by ``Settings.viewer_job`` with the rule's paths): the configured cells,
    the levels to show, each model's tokenizer folder, each task's prepared file, and where the cells and logs are."""

    cells: list[tuple[str, str]]
    levels: list[str]
    tokenizers: dict[str, str]
    tasks: dict[str, str]
    layout: CellLayout


class _Prompts:
    """Each cell's scored prompts, rebuilt once per task file, distinct tokenizer and prompt options: models whose
    tokenizers render alike (:class:`~anyjev.decision.tokenizer.Tokenizers`) share each task's rebuilt prompts, and
    every cell's stored prompt hashes are checked against them."""

    def __init__(self, job: ViewerJob, given: dict) -> None:
        self.job, self.given = job, given
        self.tokenizers = Tokenizers()
        self.checkers: dict[int, LabelChecker] = {}
        self.tasks: dict[str, Task] = {}
        self.rebuilt: dict[tuple, dict] = {}

    def task(self, name: str) -> Task:
        if name not in self.tasks:
            self.tasks[name] = load_task_file(self.job.tasks[name])
        return self.tasks[name]

    def of(self, cell: Cell) -> dict:
        if cell.model in self.given:  # handed over loaded: shared only with models handed the same object
            tokenizer = self.given[cell.model]
            key: object = id(tokenizer)
            checker = self.checkers.setdefault(id(tokenizer), LabelChecker(tokenizer))
        else:
            folder = self.job.tokenizers[cell.model]
            key = self.tokenizers.key(folder)
            tokenizer, checker = self.tokenizers.get(folder)
        task_file = self.job.tasks[cell.task]
        rebuilt = self.rebuilt.setdefault((key, task_file, cell.prompt_options), {})
        return scored_prompts(cell.scores.path, cell.scores.items, self.task(cell.task), task_file, tokenizer,
                              cell.prompt_options, keep=is_test, rebuilt=rebuilt, checker=checker)


def write_cell(run: Run, cell: Cell, job: ViewerJob, out: Path, prompts: _Prompts) -> None:
    """CELL's data files: its levels (checked against its predictions.csv first, before its task is read), its task's
    items and its scored prompts (checked against the hashes stored when they were scored)."""
    levels = cell_levels(cell)
    check_predictions(cell, levels)
    task, scored = prompts.task(cell.task), prompts.of(cell)
    data = CellFrames.of(run, cell)
    write_text_atomic(out / CELLS / cell.model / f"{cell.task}.js", js_data("cell", cell.key, cell_page(data, levels, job.levels)))
    write_text_atomic(out / CELLS / cell.model / f"{cell.task}.items.js",
                      js_data("items", cell.key, items_page(data, levels, task, scored)))


def write_viewer(job: ViewerJob, out: str | os.PathLike, *, tokenizers: dict | None = None, run: Run | None = None) -> Path:
    """Write the viewer of JOB's run into OUT (replaced as a whole): ``index.html`` and the data of every finished
    cell; returns the path of ``index.html``. TOKENIZERS may hand over loaded tokenizers by model, RUN the run already
    read (by :func:`anyjev.rundata.read_layout` with JOB's layout and cells)."""
    run = run or read_layout(job.layout, job.cells)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    prompts = _Prompts(job, dict(tokenizers or {}))
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for cell in run.finished:
            write_cell(run, cell, job, tmp, prompts)
        write_text_atomic(tmp / INDEX, index_html(run_page(run, job.levels, summary_frame(run, job.levels))))
        _readable(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out / INDEX


def _readable(root: Path) -> None:
    """The modes a plain ``mkdir``/``open`` would give under the umask (the temporary folder is created private)."""
    mask = current_umask()
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)
