"""A model's job records (``results/allocations/<model>/<job>.json``: what one scoring job recorded for each cell,
written by :mod:`anyjev.run.allocation`, read by :mod:`anyjev.rundata.allocations`) put to use: which cells an earlier
job finished, and one cell published (the ``score_cell`` step under ``score_jobs: model``), or failed with its own
error. It imports nothing the scoring needs (no HTTP client, tokenizer or array library): a cell's publishing is a
process of its own, and the workflow reads the records when it parses."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyjev.errors import (
    AnyjevError,
    BackendError,
    BatchCollisionError,
    ConfigError,
    InputError,
    LabelTokenError,
    ServerError,
    TaskDataError,
)
from anyjev.files import file_sha256, file_stat, write_text_atomic
from anyjev.jobs import Job
from anyjev.rundata.allocations import read_allocation
from anyjev.rundata.checked import read_text

if TYPE_CHECKING:
    from anyjev.run.allocation import ModelCell

log = logging.getLogger(__name__)

# The recorded errors publish-cell raises again as themselves (the others as AnyjevError, their type in the message).
ERROR_TYPES = {cls.__name__: cls for cls in (LabelTokenError, BackendError, ConfigError, TaskDataError,
                                             BatchCollisionError, ServerError)}


@dataclass(frozen=True)
class PublishJob(Job):
    """What publishing one cell of a model's job needs (the ``score_cell`` step under ``score_jobs: model``): the
    cell's task, and the model job's log, named in a failed cell's message."""

    task: str
    model_log: str | None = None


def finished_cells(folder: str | os.PathLike[str], cells: dict[str, ModelCell],
                   task_inputs: dict[str, list[str]]) -> dict[str, str]:
    """The CELLS of a model that an earlier job finished, each with the record it is published from (in FOLDER, the
    model's records): one that holds the cell as scored under the same definition, from a task file with the same
    content that is newer than the files it is built from (TASK_INPUTS: a file task's source, a hub task's fetched
    data; one newer means the task is built again), and whose staged scores are still the ones it wrote. The newest
    such record; a cell with none is scored by this run's job."""
    records = []
    for path in Path(folder).glob("*.json"):
        try:
            records.append((path, read_allocation(path)))
        except (OSError, ValueError, AnyjevError):
            continue
    records.sort(key=lambda pr: (str(pr[1].get("finished", "")), str(pr[0])), reverse=True)
    found: dict[str, str] = {}
    for task, cell in cells.items():
        task_stat = file_stat(cell.task_file)
        if task_stat is None or any((file_stat(p) or [0, 0])[1] > task_stat[1] for p in task_inputs.get(task, ())):
            continue
        sha = None
        for path, record in records:
            outcome = record.get("cells", {}).get(task)
            if not outcome or outcome.get("status") != "ok" or outcome.get("definition") != cell.definition:
                continue
            if outcome.get("staged") is None or outcome["staged"] != file_stat(outcome["scores"]):
                continue
            sha = sha or file_sha256(cell.task_file)
            if outcome.get("task_sha256") == sha:
                found[task] = str(path)
                break
    return found


def publish_cell(job: PublishJob, allocation: str | os.PathLike[str], out: str | os.PathLike[str],
                 provenance_path: str | os.PathLike[str], task_file: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Publish JOB's cell of a model's allocation into OUT (and its provenance), or raise its own error, naming the
    model job's log when the job gives it. With TASK_FILE, the staged scores must have been scored from that file as
    it is now (a task built again since, with other items, is scored again by the next run)."""
    task, model_log = job.task, job.model_log
    record = read_allocation(allocation)
    model = record["model"]
    outcome = record["cells"].get(task)
    where = f"the scoring job of model {model!r}" + (f" (SLURM job {record['slurm_job_id']})" if record.get("slurm_job_id") else "")
    if outcome is None:
        raise TaskDataError(str(allocation), "cells", f"{where} did not score task {task!r}")
    if outcome["status"] != "ok":
        cls = ERROR_TYPES.get(outcome["error"], AnyjevError)
        raised = cls if issubclass(cls, (LabelTokenError, BackendError, ServerError)) else (
            InputError if issubclass(cls, InputError) else AnyjevError)
        # ConfigError / TaskDataError are raised as InputError, bad input (their message already names the key or
        # file:line): the recorded type is kept in the message, so the user sees what went wrong.
        kind = "" if raised.__name__ == outcome["error"] else f"{outcome['error']}: "
        log_part = f", log {model_log}" if model_log else ""
        message = f"cell {model}/{task} failed in {where}{log_part}: {kind}{outcome['message']}"
        if issubclass(raised, LabelTokenError):
            raise raised(message, missing_ids=outcome.get("missing_ids", ()),
                         returned_ids=outcome.get("returned_ids", ()))
        raise raised(message)
    if task_file is not None and outcome.get("task_sha256") not in (None, file_sha256(task_file)):
        raise AnyjevError(f"cell {model}/{task}: {task_file} was built again with other content after {where} scored "
                          f"the cell ({allocation}); the next run scores the cell again")
    for src, dst in ((outcome["scores"], out), (outcome["provenance"], provenance_path)):
        write_text_atomic(dst, read_text(src))
    log.info("published %s/%s from %s: %s", model, task, where, outcome["counts"])
    return outcome


def failed_cells(allocation: str | os.PathLike[str]) -> list[str]:
    """Tasks whose cell failed in an allocation record (none when there is no readable record)."""
    try:
        record = read_allocation(allocation)
    except (OSError, ValueError, AnyjevError):
        return []
    return [t for t, c in record["cells"].items() if c["status"] != "ok"]


def retry_failed(allocation: str | os.PathLike[str]) -> list[str]:
    """After a run: the tasks whose cell failed in a job's record, and the record removed when no cell of it finished,
    so that the next run does that job again. A record with a finished cell stays (the cell is published from it); the
    next run's job scores the failed cells only, a job of another name."""
    failed = failed_cells(allocation)
    if failed and len(failed) == len(read_allocation(allocation)["cells"]):
        os.remove(allocation)
    return failed
