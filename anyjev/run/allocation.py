"""One job for all the cells of a model (``score_jobs: model``, the cluster default; docs/servers.md).

On a cluster, Snakemake's job groups cannot share one GPU allocation among a model's cells without tying their
fates together (one failed job fails the group and deletes its members' outputs). So one job per model,
``score_model``, holds the allocation: it starts the model's server once and scores every cell into the cell's
staging folder (``results/cells/<model>/<task>/staged/``), recording each cell's outcome in
``results/allocations/<model>/<job>.json`` instead of stopping at the first failure. A local ``score_cell`` job per
cell then publishes the staged scores, or fails with the cell's own error (the missing label ids), so a failed
cell fails alone and every other cell keeps its outputs.

The staged scores live outside Snakemake's outputs: an allocation that is killed or hits its time limit keeps
every checkpointed item (``scores.jsonl.partial``), and the next run's job resumes them; a rerun skips cells
already staged under the same identity without starting a server for them.

A model's job scores only the cells no earlier job finished under the same definition (:func:`finished_cells`), and
its record is named by the job (``results/allocations/<model>/<job>.json``): a cell finished by one job is published
from that job's record, which no later job has as its output. So a job of another config that adds a cell to the
model (or of this config, edited), failed or not, neither replaces the record nor republishes the finished cells.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from anyjev.decision.tokenizer import Tokenizers
from anyjev.errors import (
    AnyjevError,
    BackendError,
    ConfigError,
    LabelTokenError,
    NotWritableError,
    ServerChangedError,
    ServerError,
    TaskDataError,
)
from anyjev.files import file_sha256, file_stat, now_iso, write_json_atomic
from anyjev.jobs import Job
from anyjev.run.cell import ScoreJob, score_job
from anyjev.run.rendered import RenderedPrompts
from anyjev.rundata.allocations import FORMAT
from anyjev.schema import check_setting
from anyjev.serving.lease import release_server

log = logging.getLogger(__name__)

# A cell's own failures: recorded, and the job goes on with the model's next cell (a checkpoint made on another
# server is the cell's own). Anything else (the server will not start or died: ServerError) ends the job, as it would
# end every later cell of the model too.
CELL_ERRORS = (LabelTokenError, BackendError, ConfigError, TaskDataError, ServerChangedError, NotWritableError)


def score_jobs_mode(setting: str) -> str:
    """How scoring is cut into jobs (the config's ``score_jobs``, one of the schema's values): ``model`` (one job per
    model: one server start, its cells scored one after the other, each published or failed by its own
    ``score_cell`` job) or ``cell`` (one job per cell). The workflow and ``anyjev plan`` both ask this function."""
    return check_setting(setting, "score_jobs")


@dataclass(frozen=True)
class ModelCell:
    """One cell of a model's job: its score job, its task file, where it is staged until published, and its
    definition (a digest of what the cell is made from: its score job and the jobs that make its task file and model
    folder), recorded with its outcome so that a later job knows the cell is finished (:func:`finished_cells`)."""

    job: ScoreJob
    task_file: str
    staged_scores: str
    staged_provenance: str
    definition: str


@dataclass(frozen=True)
class ScoreModelJob(Job):
    """What one job scoring every cell of a model needs (``score_jobs: model``; built by ``Settings.score_model_job``
    with the rule's paths): each cell, in config order."""

    model: str
    cells: dict[str, ModelCell]


def _outcome(task: str, status: str, **fields: Any) -> dict[str, Any]:
    return {"task": task, "status": status, "finished": now_iso(), **fields}


def _failure(task: str, exc: AnyjevError) -> dict[str, Any]:
    fields: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, LabelTokenError):
        fields |= {"missing_ids": exc.missing_ids, "returned_ids": exc.returned_ids}
    return _outcome(task, "failed", **fields)


def score_model_job(job: ScoreModelJob, out: str | os.PathLike[str], owner_pid: int, *,
                    prompts: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Score every cell of one model into its staging folder; write OUT. PROMPTS: the file ``anyjev render-prompts``
    wrote for this job (``render_prompts: ahead``), whose cells are read instead of rendered
    (:class:`~anyjev.run.rendered.RenderedPrompts`).

    Returns the record written to OUT. A cell error is recorded and the next cell goes on; a ServerError is
    recorded for the cell it hit, OUT is not written, and the error is raised (the job fails and the next run
    resumes every checkpointed item).
    """
    model, cells = job.model, job.cells
    record: dict[str, Any] = {"format": FORMAT, "model": model, "host": socket.gethostname(),
                              "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "started": now_iso(), "cells": {}}
    t0 = time.monotonic()
    tokenizers = Tokenizers()  # each tokenizer loaded once for the model's cells (if any is rendered here)
    rendered = RenderedPrompts(prompts) if prompts is not None else None
    for n, (task, cell) in enumerate(cells.items(), start=1):
        paths = {"scores": cell.staged_scores, "provenance": cell.staged_provenance}
        log.info("cell %d/%d: %s/%s -> %s", n, len(cells), model, task, cell.staged_scores)
        try:
            ahead = (rendered.cell(task, cell.definition, cell.task_file, cell.job.tokenizer)
                     if rendered is not None else None)
            counts = score_job(cell.job, cell.task_file, cell.staged_scores, cell.staged_provenance, owner_pid=owner_pid,
                               tokenizers=tokenizers, rendered=ahead)
        except CELL_ERRORS as exc:
            log.error("cell %s/%s failed: %s: %s (the model's other cells go on)", model, task, type(exc).__name__, exc)
            record["cells"][task] = _failure(task, exc) | {"definition": cell.definition}
            continue
        except ServerError as exc:
            record["cells"][task] = _failure(task, exc)
            log.error("the server of %s failed in cell %s; the job stops (checkpointed items resume next run): %s",
                      model, task, exc)
            raise
        # What tells a later run that this cell is finished: its definition, the task file it was scored from, and the
        # staged scores as written (a later job that stages the cell again under another definition changes them).
        record["cells"][task] = _outcome(task, "ok", counts=counts, **paths, definition=cell.definition,
                                         task_sha256=file_sha256(cell.task_file), staged=file_stat(cell.staged_scores))
    record |= {"finished": now_iso(), "seconds": round(time.monotonic() - t0, 1)}
    failed = [t for t, c in record["cells"].items() if c["status"] != "ok"]
    log.info("%s: %d cell(s) scored, %d failed%s", model, len(cells) - len(failed), len(failed),
             f" ({', '.join(failed)}: each fails its own score_cell job)" if failed else "")
    write_json_atomic(out, record)
    _release_server(job, owner_pid)
    return record


def _release_server(job: ScoreModelJob, owner_pid: int) -> None:
    """Stop the model's managed server now that its outcomes are written: no later job of the run uses it, and on one
    machine the run would keep it (weights, KV cache, a busy idle worker) until every other model is scored too. A
    ``url`` model's server is the user's."""
    managed = next((c.job.managed for c in job.cells.values() if c.job.managed is not None), None)
    if managed is not None and release_server(managed.spec.name, state_dir=managed.state_dir, owner_pid=owner_pid):
        log.info("%s: stopped its server (no later job of this run uses it)", job.model)
