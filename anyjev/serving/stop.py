"""Stopping servers: one server from its record, every server of a run, and the census of vLLM processes
that tests use to prove none is left."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from anyjev.files import flock
from anyjev.serving.health import ServerHandle
from anyjev.serving.proc import (
    STOP_GRACE,
    group_carries_token,
    is_our_supervisor,
    owner_alive,
    pid_alive,
    signal_quietly,
    terminate,
)
from anyjev.serving.state import ServerRecord, api_key_file, read_record, update_record

SUPERVISOR_EXTRA_GRACE = 2.0  # the supervisor stops the group itself within its grace, then records why


def stop_record(record: ServerRecord, grace: float = STOP_GRACE, supervisor: subprocess.Popen[bytes] | None = None) -> bool:
    """Stop the server group and the supervisor of RECORD; True if anything of it was still alive.

    Only processes carrying the record's token are signalled, so a stale record never kills a process that
    reused a recorded pid. The supervisor is asked first (it stops the group and records why).
    """
    token = record.token
    pgid, sup_pid = record.pgid, record.supervisor_pid or (supervisor.pid if supervisor is not None else None)
    if (sup_pid is None or pgid is None) and record.state_file:
        # The supervisor may have recorded its pid and group since the record was read.
        current = read_record(record.state_file)
        if current is not None and current.token == token:
            sup_pid, pgid = sup_pid or current.supervisor_pid, pgid or current.pgid

    def group_alive() -> bool:
        return bool(pgid) and group_carries_token(int(pgid), token)

    def sup_alive() -> bool:
        if supervisor is not None:
            supervisor.poll()
            return pid_alive(supervisor.pid)
        return bool(sup_pid) and is_our_supervisor(int(sup_pid), token)

    had_sup = sup_alive()
    if not (had_sup or group_alive()):
        return False

    def term() -> None:
        if had_sup:
            signal_quietly(os.kill, sup_pid, signal.SIGTERM)
        else:
            signal_quietly(os.killpg, pgid, signal.SIGTERM)

    def kill() -> None:
        if group_alive():
            signal_quietly(os.killpg, pgid, signal.SIGKILL)
        if sup_alive():
            signal_quietly(os.kill, sup_pid, signal.SIGKILL)

    terminate(lambda: group_alive() or sup_alive(), term, kill, grace + (SUPERVISOR_EXTRA_GRACE if had_sup else 0.0))
    if record.state_file and token:
        current = read_record(record.state_file)
        update_record(record.state_file, token, state="stopped",
                      stopped=(current.stopped if current else None) or "stopped by anyjev")
    return True


def stop_server(handle_or_state_file: ServerHandle | str | os.PathLike[str], grace: float = STOP_GRACE) -> bool:
    """SIGTERM the server's process group and its supervisor, SIGKILL after GRACE seconds.

    Returns True if something was still running. Zombies count as gone (PID 1 may reap them late).
    """
    if isinstance(handle_or_state_file, ServerHandle):
        handle = handle_or_state_file
        record = read_record(handle.state_file)
        if record is None or record.token != handle.token:
            record = ServerRecord(name=handle.name, token=handle.token, state_file=handle.state_file,
                                  pid=handle.pid, pgid=handle.pgid, supervisor_pid=handle.supervisor_pid)
    else:
        record = read_record(handle_or_state_file)
        if record is None:
            return False
        record.state_file = record.state_file or str(handle_or_state_file)
    return stop_record(record, grace=grace)


def stop_servers(state_dir: str | os.PathLike[str], owner_pid: int | None = None, grace: float = STOP_GRACE) -> list[str]:
    """Stop every server recorded in STATE_DIR (only OWNER_PID's if given); names of those that were running. Then
    the records of the servers that are no longer running are removed (:func:`forget_ended`).

    The workflow's onsuccess/onerror call it, so a run tears its servers down at once instead of waiting for
    the supervisors to notice that the owner exited, and leaves no lease behind.
    """
    state_dir = Path(state_dir)
    stopped: list[str] = []
    if not state_dir.is_dir():
        return stopped
    for state_file in sorted(state_dir.glob("*.json")):
        record = read_record(state_file)
        if record is None or (owner_pid is not None and record.owner_pid != owner_pid):
            continue
        record.state_file = record.state_file or str(state_file)
        if stop_record(record, grace=grace):
            stopped.append(record.name or state_file.stem)
    forget_ended(state_dir)
    return stopped


def forget_ended(state_dir: str | os.PathLike[str]) -> list[str]:
    """Remove the records in STATE_DIR of servers that are no longer running, and their API keys: stopped or exited (as
    a stop or the supervisor recorded), or, on this host, with their owner, supervisor and process group all gone. A
    record is a lease on a running server; what a server did stays in its log. Each is removed under the model's lease
    lock, so an acquire never reads half of it. The lock files stay (a process may be waiting on one). Names removed."""
    state_dir = Path(state_dir)
    host = socket.gethostname()
    forgotten: list[str] = []
    for state_file in sorted(state_dir.glob("*.json")):
        with flock(state_dir / f"{state_file.stem}.lock"):
            record = read_record(state_file)
            if record is None or not (record.ended or (record.host == host and not _running(record))):
                continue
            state_file.unlink(missing_ok=True)
            state_file.with_name(state_file.name + ".wlock").unlink(missing_ok=True)
            api_key_file(state_file).unlink(missing_ok=True)  # the key of a server that is gone opens nothing
            forgotten.append(record.name or state_file.stem)
    return forgotten


def _running(record: ServerRecord) -> bool:
    """Something of RECORD's server still runs here: its owner, its supervisor or a process of its group."""
    return (owner_alive(int(record.owner_pid or 0), record.owner_start)
            or bool(record.supervisor_pid and is_our_supervisor(int(record.supervisor_pid), record.token))
            or bool(record.pgid and group_carries_token(int(record.pgid), record.token)))
