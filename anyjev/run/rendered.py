"""Prompts rendered ahead (``render_prompts: ahead``): every cell of a model's scoring job made ready to score by a job
of its own (``anyjev render-prompts``) before the scoring job starts, and read by the scoring job in place of
rendering them itself. The scoring job then loads no tokenizer (neither transformers' import nor the tokenizer's
files), renders no chat template and tokenises nothing: on a GPU, CPU time the engine would wait for, spent instead
before the job that holds the GPU (on a cluster, in the main Snakemake process, as the other CPU steps).

A cell's entry holds what :func:`anyjev.run.prepared.prepare_items` and
:func:`anyjev.run.scoring.cell_probes` give for it, and what it was rendered from (:func:`render_identity`).
A scoring job takes an entry only under its own identity, and renders the cell itself otherwise, saying why: an
entry never stands for prompts other than the ones the job would render. A cell that cannot be rendered (a label
that is not one token) has no entry: its scoring job renders it and fails it with the cell's own error, as it would
without this step.

The file is a pickle: the scoring job reads the objects the render job made, by the same code, from the run's own
folder (never a file from elsewhere), in a fraction of the time a text format of millions of token ids would take.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyjev
from anyjev import collector
from anyjev.data.taskfile import load_task_file
from anyjev.decision.tokenizer import Tokenizers
from anyjev.errors import AnyjevError, FileFormatError
from anyjev.files import file_sha256, replaced_atomically
from anyjev.run.prepared import PreparedItem, prepare_items
from anyjev.run.provenance import installed_version
from anyjev.run.scoring import cell_probes

log = logging.getLogger(__name__)

FORMAT = "anyjev-rendered-prompts/1"
# The packages a prompt's rendering and token ids depend on, besides anyjev: the template engine and the tokenizer.
RENDERING_PACKAGES = ("transformers", "tokenizers", "jinja2")


@dataclass(frozen=True)
class RenderedCell:
    """One cell's prompts as its scoring job sends them: its items prepared, and its content-free probes (each with
    the question keys it serves; empty when the cell reads none)."""

    prepared: list[PreparedItem]
    probes: list[tuple[list[str], PreparedItem]]


def render_identity(definition: str, task_file: str | os.PathLike[str], rendering: str) -> dict[str, Any]:
    """What a cell's prompts are rendered from: the cell's definition (its score job, with its prompt options and chat
    template, and the jobs that make its task file and model folder), its task file's bytes, its tokenizer folder's
    RENDERING key (:func:`~anyjev.decision.tokenizer.rendering_key`), and the versions of the code that renders."""
    return {"definition": definition, "task_sha256": file_sha256(task_file), "rendering": rendering,
            "versions": {"anyjev": anyjev.__version__} | {p: installed_version(p) for p in RENDERING_PACKAGES}}


def render_cells(cells: Mapping[str, Any], out: str | os.PathLike[str]) -> dict[str, str]:
    """Render every cell of CELLS (task -> :class:`~anyjev.run.allocation.ModelCell`) as its scoring job would, and
    write them to OUT; returns each cell's outcome (``rendered``, or why it was left to its scoring job)."""
    tokenizers = Tokenizers()  # each tokenizer loaded once for the model's cells
    entries: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, str] = {}
    for n, (task, cell) in enumerate(cells.items(), start=1):
        job = cell.job
        try:
            loaded = load_task_file(cell.task_file)
            tokenizer, checker = tokenizers.get(job.tokenizer)
            prepared = prepare_items(tokenizer, loaded.items, loaded.prior_groups(), job.scoring.prompt, checker=checker)
            probes = cell_probes(tokenizer, prepared, job.scoring, None)
        except AnyjevError as exc:  # the cell's scoring job meets it again, and fails the cell with it
            log.warning("cell %d/%d %s: not rendered (%s: %s); its scoring job renders it", n, len(cells), task,
                        type(exc).__name__, exc)
            outcomes[task] = f"left to the scoring job: {type(exc).__name__}"
            continue
        entries[task] = {"identity": render_identity(cell.definition, cell.task_file, tokenizers.key(job.tokenizer)),
                         "cell": RenderedCell(prepared, probes)}
        outcomes[task] = "rendered"
        log.info("cell %d/%d %s: %d items, %d prompts, %d content-free probes", n, len(cells), task, len(prepared),
                 sum(len(p.layouts) for p in prepared), len(probes))
    with replaced_atomically(out) as tmp, open(tmp, "wb") as fh:
        pickle.dump({"format": FORMAT, "cells": entries}, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return outcomes


class RenderedPrompts:
    """A render job's file, as a scoring job reads it: each cell's entry, given only under the cell's own identity."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            with open(path, "rb") as fh, collector.collector_paused():  # millions of ids in lists, none in a cycle
                data = pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise FileFormatError(self.path, "file", f"not a file of rendered prompts ({type(exc).__name__}: {exc}); "
                                  "render them again (delete it, and rerun)") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise FileFormatError(self.path, "format", f"rendered prompts of format {found!r:.60}, not {FORMAT!r}; "
                                  "render them again (delete it, and rerun)")
        self._cells: dict[str, dict[str, Any]] = data["cells"]
        self._keys = Tokenizers()  # each tokenizer folder's rendering key, read once (the tokenizer is never loaded)

    def cell(self, task: str, definition: str, task_file: str | os.PathLike[str], tokenizer_dir: str) -> RenderedCell | None:
        """TASK's rendered cell when it was rendered from what the scoring job has (:func:`render_identity`); None,
        and a warning naming what differs, when it was not (the job renders the cell itself)."""
        entry = self._cells.get(task)
        if entry is None:
            log.warning("%s holds no prompts of cell %s: its scoring job renders them", self.path, task)
            return None
        try:
            ours = render_identity(definition, task_file, self._keys.key(tokenizer_dir))
        except OSError as exc:  # the job's own reading of the task file (or tokenizer folder) says what is wrong
            log.warning("%s: the prompts of cell %s are not read (%s): its scoring job renders them", self.path, task, exc)
            return None
        differs = sorted(k for k in ours.keys() | entry["identity"].keys() if ours.get(k) != entry["identity"].get(k))
        if differs:
            log.warning("%s: the prompts of cell %s were rendered from another %s than this job's: its scoring job "
                        "renders them", self.path, task, ", ".join(differs))
            return None
        return entry["cell"]
