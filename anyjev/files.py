"""File helpers shared by the whole package: atomic writes, content hashes, timestamps, an exclusive file lock.

Standard library only, because the server supervisor imports it. Every result file is written through
:func:`write_text_atomic` (temp file in the same folder, fsync, ``os.replace``), so a kill never leaves half a file,
with the permissions the process's umask gives a new file (colleagues on a shared filesystem can read results).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from anyjev.errors import NotWritableError

_UMASK = re.compile(r"^Umask:\s*([0-7]+)$", re.M)


def user_cache(kind: str) -> Path:
    """Where the runs of this machine and user share what they make once (``models``, ``tokenizers``):
    ``$XDG_CACHE_HOME/anyjev/KIND`` (``~/.cache/anyjev/KIND`` when XDG_CACHE_HOME is unset), the XDG base directory
    for caches."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "anyjev" / kind


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


def file_stat(path: str | os.PathLike[str]) -> list[int] | None:
    """A file's size and modification time (ns), or None when it is not there: what tells a later run that a file is
    still the one a record names."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def current_umask() -> int:
    """The process's umask, read without changing it (Linux: /proc/self/status; elsewhere set and restored)."""
    with contextlib.suppress(OSError):
        found = _UMASK.search(Path("/proc/self/status").read_text())
        if found:
            return int(found.group(1), 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def writable_folder(path: str | os.PathLike[str]) -> Path:
    """The folder PATH is written into, made if missing; :class:`~anyjev.errors.NotWritableError` names it when it
    cannot be made or written (checked before work that would be lost when its file cannot be written)."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NotWritableError(str(exc.filename or folder), exc.strerror or type(exc).__name__) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NotWritableError(str(folder), "Permission denied")
    return folder


def _temporary(folder: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """mkstemp in FOLDER; a folder that cannot be written is named in one line (NotWritableError)."""
    try:
        return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    except (PermissionError, OSError) as exc:
        if isinstance(exc, PermissionError) or exc.errno == errno.EROFS:
            raise NotWritableError(str(folder), exc.strerror or type(exc).__name__) from None
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, *, private: bool = False) -> Path:
    """Write TEXT (UTF-8) to PATH atomically, creating the parent folder. The file gets the mode a plain
    ``open(path, "w")`` would give it (0666 less the umask): mkstemp's private 0600 would hide results from a group.
    PRIVATE keeps mkstemp's 0600 (a secret: readable by this user only, from the moment it exists)."""
    p = Path(path)
    writable_folder(p)
    fd, tmp = _temporary(p.parent, f".{p.name}.", ".tmp")
    try:
        if not private:
            os.fchmod(fd, 0o666 & ~current_umask())
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


@contextlib.contextmanager
def replaced_atomically(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside PATH for a writer that wants a file name (a figure's savefig); on leaving the block
    it replaces PATH at once (the mode a plain ``open`` would give), so PATH is whole or untouched, never half."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(p.parent, f".{p.stem}.", p.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, indent: int = 1) -> Path:
    """Write OBJ as sorted-key JSON (NaN allowed, as Python's json writes it) atomically."""
    return write_text_atomic(path, json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def flock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive flock on PATH for the duration of the block: a file (created if missing) or a folder."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY) if p.is_dir() else os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
