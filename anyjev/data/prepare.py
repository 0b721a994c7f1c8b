"""The prepare step: build a configured task from its source (built-in, hub cache, or JSONL file), split it with the
seeded split, and write it as one JSONL task file that scoring reads."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from anyjev.data import builtin, hub
from anyjev.data.declared import HubTaskDeclaration
from anyjev.data.split import missing_split, split_items
from anyjev.data.taskfile import load_task_file, write_task_file
from anyjev.data.tasks import Task
from anyjev.errors import ConfigError, TaskDataError
from anyjev.jobs import Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrepareJob(Job):
    """What the prepare step needs to build and split one task (built by ``Settings.prepare_job``): ``dataset`` is the
    built-in task it loads, or the folder under ``hub_cache`` a hub task's data was fetched into (a published task's
    name, or the name of the task that declares its dataset); ``hub`` a hub task's declaration (the config's, or the
    published task's at the configured revision); ``path`` a file task's file."""

    name: str
    source: str
    dataset: str
    path: str | None
    hub: HubTaskDeclaration | None
    n_test: int
    n_calib: int
    allow_fewer: bool
    split_seed: int
    hub_cache: str
    fits_temperature: bool  # levels lists L1, whose temperature is fitted on the calibration items


def build_task(job: PrepareJob) -> Task:
    """The configured task's items before the split."""
    if job.source == "file":
        if job.path is None:
            raise ConfigError(f"tasks.{job.name}.path", "required for source 'file'")
        task = load_task_file(job.path, name=job.name)
        task.source.setdefault("file", str(job.path))
        return task
    if job.source == "builtin":
        if job.dataset not in builtin.BUILTIN:
            raise ConfigError(f"tasks.{job.name}.builtin", f"unknown built-in task {job.dataset!r}; known: {sorted(builtin.BUILTIN)}")
        return builtin.BUILTIN[job.dataset]()
    if job.hub is None:
        raise ConfigError(f"tasks.{job.name}.hub", "source hub needs a declaration: a published task's or the config's")
    # The declared revision reaches the build, which refuses a cache fetched at another one.
    return hub.build(job.dataset, Path(job.hub_cache) / job.dataset, revision=job.hub.revision, declared=job.hub)


def items_source(job: PrepareJob) -> str:
    """Where JOB's items come from, as a message names it: the task file, the hub dataset (or local folder), or the
    built-in task."""
    if job.source == "file":
        return str(job.path)
    return job.hub.dataset if job.hub is not None else f"<built-in task {job.dataset}>"


def split_task(job: PrepareJob, task: Task) -> Task:
    """TASK split as JOB says (seeded), with the split recorded in its source."""
    items = split_items(task.items, job.n_test, job.n_calib, seed=job.split_seed, allow_fewer=job.allow_fewer,
                        label=items_source(job), task=job.name)
    source = dict(task.source) | {"split": {"n_test": job.n_test, "n_calib": job.n_calib, "seed": job.split_seed}}
    return Task(name=job.name, items=items, prior_group=task.prior_group, source=source)


def prepare_task(job: PrepareJob, out: str | os.PathLike[str]) -> Task:
    """Build, split (seeded) and write the task file OUT; returns the written task."""
    written = split_task(job, build_task(job))
    n_test = sum(it.split == "test" for it in written.items)
    n_calib = len(written.items) - n_test
    missing = missing_split([it.split for it in written.items], fits_temperature=job.fits_temperature)
    # The config-time check sees a task file's own splits; this one what the split left (a built task, a smoke run).
    where = job.path if job.source == "file" else f"<task {job.name}>"
    if missing == "test":
        why = '; every item says "split": "calib"' if job.source == "file" else ""
        raise TaskDataError(str(where), "split", f"no test items after the split ({n_calib} calibration items{why}): "
                            f'nothing to score: mark the items to score "split": "test" (tasks.{job.name}.n_test of them)')
    if missing == "calib":
        why = '; every item says "split": "test"' if job.source == "file" else ""
        raise TaskDataError(str(where), "split", f"no calibration items after the split ({n_test} test items{why}), but "
                            "levels lists L1, whose temperature is fitted on them: "
                            f'mark some items "split": "calib" (tasks.{job.name}.n_calib of them), or remove L1 from '
                            "levels")
    write_task_file(written, out)
    log.info("task %s: %d test + %d calibration items (K=%s) -> %s", job.name, n_test, n_calib, written.k, out)
    return written
