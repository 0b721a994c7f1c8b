"""A model's allocation record (``results/allocations/<model>.json``: what its one scoring job recorded for each cell,
written by :mod:`anyjev.run.allocation`) read back, and one cell of it published: the ``score_cell`` step under
``score_jobs: model``. It imports nothing the scoring needs (no HTTP client, tokenizer or array library): a cell's
publishing is a process of its own."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.errors import (
    AnyjevError,
    BackendError,
    BatchCollisionError,
    ConfigError,
    LabelTokenError,
    ServerError,
    TaskDataError,
)
from anyjev.files import write_text_atomic
from anyjev.jobs import Job

log = logging.getLogger(__name__)

FORMAT = "anyjev.allocation/1"
# The recorded errors publish-cell raises again as themselves (the others as AnyjevError, their type in the message).
ERROR_TYPES = {cls.__name__: cls for cls in (LabelTokenError, BackendError, ConfigError, TaskDataError,
                                             BatchCollisionError, ServerError)}


@dataclass(frozen=True)
class PublishJob(Job):
    """What publishing one cell of a model's job needs (the ``score_cell`` step under ``score_jobs: model``): the
    cell's task, and the model job's log, named in a failed cell's message."""

    task: str
    model_log: str | None = None


def read_allocation(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The allocation record at PATH (a TaskDataError when it is not one)."""
    record = json.loads(Path(path).read_text())
    if record.get("format") != FORMAT:
        raise TaskDataError(str(path), "line 1", f"not an {FORMAT} record")
    return record


def publish_cell(job: PublishJob, allocation: str | os.PathLike[str], out: str | os.PathLike[str],
                 provenance_path: str | os.PathLike[str]) -> dict[str, Any]:
    """Publish JOB's cell of a model's allocation into OUT (and its provenance), or raise its own error, naming the
    model job's log when the job gives it."""
    task, model_log = job.task, job.model_log
    record = read_allocation(allocation)
    model = record["model"]
    outcome = record["cells"].get(task)
    where = f"model {model!r}'s scoring job" + (f" (SLURM job {record['slurm_job_id']})" if record.get("slurm_job_id") else "")
    if outcome is None:
        raise TaskDataError(str(allocation), "cells", f"{where} did not score task {task!r}")
    if outcome["status"] != "ok":
        cls = ERROR_TYPES.get(outcome["error"], AnyjevError)
        raised = cls if issubclass(cls, (LabelTokenError, BackendError, ServerError)) else AnyjevError
        # ConfigError / TaskDataError are raised as AnyjevError (their message already names the key or file:line):
        # the recorded type is kept in the message, so the user sees what went wrong.
        kind = "" if raised.__name__ == outcome["error"] else f"{outcome['error']}: "
        log_part = f", log {model_log}" if model_log else ""
        message = f"cell {model}/{task} failed in {where}{log_part}: {kind}{outcome['message']}"
        if issubclass(raised, LabelTokenError):
            raise raised(message, missing_ids=outcome.get("missing_ids", ()),
                         returned_ids=outcome.get("returned_ids", ()))
        raise raised(message)
    for src, dst in ((outcome["scores"], out), (outcome["provenance"], provenance_path)):
        write_text_atomic(dst, Path(src).read_text(encoding="utf-8"))
    log.info("published %s/%s from %s: %s", model, task, where, outcome["counts"])
    return outcome


def failed_cells(allocation: str | os.PathLike[str]) -> list[str]:
    """Tasks whose cell failed in an allocation record (none when there is no readable record)."""
    try:
        record = read_allocation(allocation)
    except (OSError, ValueError, AnyjevError):
        return []
    return [t for t, c in record["cells"].items() if c["status"] != "ok"]
