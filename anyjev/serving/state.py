"""The server state record: one JSON file per model (``<state_dir>/<model>.json``) shared by the job that starts
the server, the jobs that reuse it, and the supervisor that watches it; and beside it the server's API key
(``<state_dir>/<model>.key``, readable by its owner only), which the record names but never holds, so that nothing that
reads, prints or copies a record can give the key away. Standard library only."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.files import flock, write_json_atomic, write_text_atomic
from anyjev.serving.proc import STOP_GRACE


@dataclass
class ServerRecord:
    """What is known about one server start. ``token`` identifies the start; every update checks it, so a late
    writer never overwrites the record of the server that succeeded its own."""

    name: str
    token: str
    state: str = "starting"  # starting -> ready -> stopped | exited
    url: str = ""
    port: int | None = None
    served_name: str = ""
    argv: list[str] = dataclasses.field(default_factory=list)
    log_path: str = ""
    state_file: str = ""
    api_key_file: str = ""  # the file holding the key every request to the server's /v1 routes carries ("" none)
    host: str = ""
    owner_pid: int | None = None
    owner_start: int | None = None
    spec_hash: str = ""
    stop_grace: float = STOP_GRACE
    started_at: str | None = None
    ready_at: str | None = None
    start_seconds: float | None = None
    vllm_version: str | None = None
    pid: int | None = None
    pgid: int | None = None
    supervisor_pid: int | None = None
    exit_code: int | None = None
    exited_at: str | None = None
    stopped: str | None = None  # why it was stopped, when it was

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def ended(self) -> bool:
        """The server exited or was stopped (its exit is final)."""
        return self.exit_code is not None or bool(self.stopped)


def _write_lock(state_file: Path) -> Path:
    # A separate lock file, because the state file itself is replaced (new inode) on every write.
    return state_file.with_name(state_file.name + ".wlock")


def read_record(state_file: str | os.PathLike[str]) -> ServerRecord | None:
    """The record in STATE_FILE, or None if it is missing or unreadable."""
    try:
        data = json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "name" not in data or "token" not in data:
        return None
    return ServerRecord.from_json(data)


def write_record(state_file: str | os.PathLike[str], record: ServerRecord) -> None:
    """Replace the record in STATE_FILE atomically."""
    path = Path(state_file)
    with flock(_write_lock(path)):
        write_json_atomic(path, record.to_json(), indent=2)


def update_record(state_file: str | os.PathLike[str], token: str, **fields: Any) -> bool:
    """Set FIELDS on the record, only if it still belongs to TOKEN's server; False (nothing written) otherwise."""
    path = Path(state_file)
    with flock(_write_lock(path)):
        record = read_record(path)
        if record is None or record.token != token:
            return False
        for key, value in fields.items():
            if not hasattr(record, key):
                raise AttributeError(f"ServerRecord has no field {key!r}")
            setattr(record, key, value)
        write_json_atomic(path, record.to_json(), indent=2)
        return True


def api_key_file(state_file: str | os.PathLike[str]) -> Path:
    """Where the key of the server recorded in STATE_FILE is kept: ``<model>.key`` beside ``<model>.json``."""
    return Path(state_file).with_suffix(".key")


def new_api_key(state_file: str | os.PathLike[str]) -> tuple[str, Path]:
    """A fresh random key for the server recorded in STATE_FILE, written (mode 0600 from the moment it exists) to
    :func:`api_key_file`; the key and that file. Each start makes its own, so a key never outlives its server's run."""
    key = secrets.token_urlsafe(32)
    return key, write_text_atomic(api_key_file(state_file), key, private=True)


def read_api_key(path: str | os.PathLike[str]) -> str | None:
    """The key in PATH (:func:`new_api_key`), or None when it is missing or unreadable."""
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None
