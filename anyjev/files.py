"""File helpers shared by the whole package: atomic writes, content hashes, timestamps.

Standard library only, because the server supervisor imports it. Every result file is written through
:func:`write_text_atomic` (temp file in the same folder, fsync, ``os.replace``), so a kill never leaves half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def now_iso() -> str:
    """Current UTC time, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes, recorded so a result can be tied to its exact input."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write TEXT (UTF-8) to PATH atomically, creating the parent folder."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 1) -> Path:
    """Write OBJ as sorted-key JSON (NaN allowed, as Python's json writes it) atomically."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n")
