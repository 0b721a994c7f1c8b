"""The prepare step: build a configured task from its source (built-in, hub cache, or JSONL file), split it
with the seeded split, and write it as one JSONL task file that scoring reads."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from anyjev.data import builtin, hub
from anyjev.data.tasks import Task, load_task_file, split_items, write_task_file
from anyjev.errors import ConfigError

log = logging.getLogger(__name__)


def build_task(job: dict[str, Any]) -> Task:
    """The configured task's items before the split (JOB: ``Settings.prepare_job``)."""
    name, source = job["name"], job["source"]
    dataset = job.get("builtin") or name
    if source == "file":
        task = load_task_file(job["path"], name=name)
        task.source.setdefault("file", str(job["path"]))
        return task
    if source == "builtin":
        if dataset not in builtin.BUILTIN:
            raise ConfigError(f"tasks.{name}.builtin", f"unknown built-in task {dataset!r}; known: {sorted(builtin.BUILTIN)}")
        return builtin.BUILTIN[dataset]()
    if dataset not in hub.HUB_TASKS:
        raise ConfigError(f"tasks.{name}.builtin", f"unknown hub task {dataset!r}; known: {sorted(hub.HUB_TASKS)}")
    # The configured revision reaches the build, which refuses a cache fetched at another one.
    return hub.build(dataset, Path(job["hub_cache"]) / dataset, revision=job.get("revision"))


def prepare_task(job: dict[str, Any], out: str | os.PathLike[str]) -> Task:
    """Build, split (seeded) and write the task file OUT; returns the written task."""
    task = build_task(job)
    items = split_items(task.items, job["n_test"], job["n_calib"], seed=job["split_seed"], allow_fewer=job["allow_fewer"],
                        label=job["name"])
    source = dict(task.source) | {"split": {"n_test": job["n_test"], "n_calib": job["n_calib"], "seed": job["split_seed"]}}
    written = Task(name=job["name"], items=items, prior_group=task.prior_group, source=source)
    write_task_file(written, out)
    n_test = sum(it.split == "test" for it in items)
    log.info("task %s: %d test + %d calibration items (K=%s) -> %s", job["name"], n_test, len(items) - n_test, written.k, out)
    return written
