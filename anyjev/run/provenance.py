"""What every result records about how it was made: the settings it ran with, the model's and the data's
hashes, the server's argv, version and fingerprints, package versions, the git commit, host and times."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyjev
from anyjev.files import now_iso
from anyjev.serving.models import PROVENANCE_FILE, describe_local

REPO = Path(__file__).resolve().parents[2]
# What a result is made from, in the checkout: the package, the workflow, the configs, and what installs them. A run
# rewrites the committed reference run (results/), and docs or tests may be edited: neither makes its code dirty.
CODE = ("anyjev", "workflow", "config", "pyproject.toml", "requirements", "scripts", "environment.yml")


def git_commit(repo: str | Path = REPO) -> dict[str, Any]:
    """HEAD commit of the working tree, and whether the code results are made from (:data:`CODE`) had uncommitted
    changes."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", *CODE],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def versions(*packages: str) -> dict[str, str | None]:
    """Python's, anyjev's and each of PACKAGES' installed version (None: not installed)."""
    return {"python": platform.python_version(), "anyjev": anyjev.__version__} | {name: installed_version(name)
                                                                                  for name in packages}


@functools.cache
def installed_version(package: str) -> str | None:
    """PACKAGE's installed version (None: not installed), looked up once a process: importlib.metadata scans every
    folder of sys.path for it, about 2 ms a package, and a job records it with each of its cells."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def model_source(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Where the weights came from: the record the prepare step wrote, or a hash of a user's local folder."""
    record = Path(model_dir) / PROVENANCE_FILE
    if record.is_file():
        return json.loads(record.read_text())
    return describe_local(model_dir)


def cell_record(*, job: dict[str, Any], task, task_path: Path, identity: dict[str, Any], server: dict[str, Any],
                backend: dict[str, Any], started: str, seconds: float, counts: dict[str, int]) -> dict[str, Any]:
    """The provenance.json of one scored cell."""
    split = task.source.get("split") or task.source.get("origin", {}).get("split") or {}
    return {
        "cell": {"task": task.name, "model": job["model"]},
        "settings": job,
        "settings_sha256": hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest(),
        "identity": identity,
        "task_source": task.source,
        "task_file": {"path": str(task_path), "sha256": identity["task_sha256"]},
        "model_source": identity["model_source"],
        "server": server,
        "backend": backend,
        "seeds": {"split": split.get("seed"), "server": server.get("spec", {}).get("seed")},
        "git": git_commit(),
        "versions": versions("transformers", "urllib3", "numpy", "torch"),
        "vllm_version": server.get("vllm_version"),
        "host": socket.gethostname(),
        "started": started,
        "finished": now_iso(),
        "seconds": round(seconds, 1),
        "counts": counts,
    }
