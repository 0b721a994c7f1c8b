"""What every result records about how it was made."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import socket
import subprocess
from pathlib import Path

import anyjev


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def git_commit(repo: str | Path = ".") -> dict:
    """HEAD commit of the working tree and whether it had uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def versions(*packages: str) -> dict:
    out = {"python": platform.python_version(), "anyjev": anyjev.__version__}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def host() -> str:
    return socket.gethostname()
