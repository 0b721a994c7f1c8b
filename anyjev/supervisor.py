"""Tiny stdlib-only supervisor that ties a vLLM server's life to an owner process.

Run as ``python -m anyjev.supervisor --state FILE --token T --owner-pid PID --grace S --log FILE -- ARGV...``.

Why it exists: a scoring job starts the server but must not own it (the server is shared by every cell of the
model and must survive a killed cell), while the run that owns it (the Snakemake process) cannot be trusted to
clean up (Ctrl-C, SIGKILL, a crash). So this process, started in its own session, spawns ARGV in its own process
group and stops that whole group as soon as the owner is gone (dead, zombie, or its pid reused), when it is told
to stop (SIGTERM/SIGINT/SIGHUP), and it records the server's exit code when the server dies by itself.

It also holds the state-file helpers shared with :mod:`anyjev.server` (atomic JSON writes, /proc readers), so
that it never imports anything outside the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

POLL_SECONDS = 0.5
TOKEN_ENV = "ANYJEV_SERVER_TOKEN"
NAME_ENV = "ANYJEV_SERVER_NAME"
# The server interpreter must see the PYTHONPATH its spec asked for, not the one used to import this module.
CHILD_PYTHONPATH_ENV = "ANYJEV_CHILD_PYTHONPATH"
UNSET = "<anyjev:unset>"  # marks "no PYTHONPATH" (environment values cannot hold NUL)


# --------------------------------------------------------------------------- /proc readers (Linux)


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on, or None if the process does not exist.

    The command name (field 2) may hold spaces and parentheses, so split after the last ')'.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    return raw[raw.rfind(")") + 2 :].split()


def pid_alive(pid: int | None) -> bool:
    """True if PID exists and is not a zombie (a zombie's exit is final; PID 1 may reap it late)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def proc_start_time(pid: int) -> int | None:
    """Start time of PID in clock ticks since boot (stat field 22): with the pid it identifies a process."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields is not None else None


def owner_alive(pid: int, start_time: int | None) -> bool:
    """True while the owner process runs: not gone, not a zombie, and not a new process reusing its pid."""
    if not pid_alive(pid):
        return False
    return start_time is None or proc_start_time(pid) == start_time


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is PGID."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.append(int(entry))
    return found


def proc_environ(pid: int) -> dict[str, str]:
    """The initial environment of PID ({} if unreadable): carries the token that marks our servers."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def proc_cmdline(pid: int) -> list[str]:
    """argv of PID ([] if gone or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def group_carries_token(pgid: int, token: str) -> bool:
    """True if a live member of PGID was started by us with TOKEN: never signal a reused process group."""
    return any(proc_environ(pid).get(TOKEN_ENV) == token for pid in group_pids(pgid))


def is_our_supervisor(pid: int, token: str) -> bool:
    """True if PID is the live supervisor started with TOKEN (guards against pid reuse)."""
    if not pid_alive(pid):
        return False
    cmd = proc_cmdline(pid)
    return "anyjev.supervisor" in cmd and token in cmd


# --------------------------------------------------------------------------- state file


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _rw_lock(state_file: Path) -> Iterator[None]:
    """Serialise read-modify-write of a state file between the supervisor and its clients.

    A separate lock file, because the state file itself is replaced (new inode) on every write.
    """
    lock = state_file.with_name(state_file.name + ".wlock")
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_state(state_file: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON record in STATE_FILE, or None if it is missing or unreadable."""
    try:
        data = json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_state(state_file: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Replace the record in STATE_FILE atomically (tmp + os.replace)."""
    path = Path(state_file)
    with _rw_lock(path):
        _write_json_atomic(path, record)


def update_state(state_file: str | os.PathLike[str], token: str, **fields: Any) -> bool:
    """Merge FIELDS into the record, only if it still belongs to TOKEN's server.

    Returns False (and writes nothing) when the record was replaced by another server's, so that a late
    supervisor never overwrites the record of the server that succeeded it.
    """
    path = Path(state_file)
    with _rw_lock(path):
        record = read_state(path)
        if record is None or record.get("token") != token:
            return False
        record.update(fields)
        _write_json_atomic(path, record)
        return True


# --------------------------------------------------------------------------- stopping a process group


def stop_group(pgid: int, grace: float, child: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the process group, wait up to GRACE seconds for it to empty, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap our own child so that it does not linger as a zombie
        if not group_pids(pgid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and group_pids(pgid):
        if child is not None:
            child.poll()
        time.sleep(0.05)


# --------------------------------------------------------------------------- main


def _set_parent_death_signal() -> None:
    """In the child before exec: get SIGTERM if the supervisor dies (even by SIGKILL), so no server outlives it."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _child_env(name: str, token: str) -> dict[str, str]:
    env = dict(os.environ)
    wanted = env.pop(CHILD_PYTHONPATH_ENV, None)
    if wanted is not None:
        if wanted == UNSET:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = wanted
    env[NAME_ENV] = name
    env[TOKEN_ENV] = token
    return env


def main(argv: list[str] | None = None) -> int:
    """Spawn the server, record it, and watch the owner; returns the exit status of this supervisor."""
    parser = argparse.ArgumentParser(prog="python -m anyjev.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="JSON state file shared with anyjev.server")
    parser.add_argument("--token", required=True, help="identifies this server's record and processes")
    parser.add_argument("--name", default="server", help="model name, for logs and process matching")
    parser.add_argument("--owner-pid", type=int, required=True)
    parser.add_argument("--owner-start", type=int, default=None, help="owner start time (/proc stat field 22)")
    parser.add_argument("--grace", type=float, default=15.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--log", required=True, help="server log, appended")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- ARGV of the server")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no server command after --")

    owner_start = args.owner_start if args.owner_start is not None else proc_start_time(args.owner_pid)
    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop_reason.append(f"supervisor received {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    def log_line(text: str) -> None:
        with open(args.log, "a") as fh:
            fh.write(f"[anyjev.supervisor {now_iso()} pid {os.getpid()}] {text}\n")

    if not owner_alive(args.owner_pid, owner_start):
        reason = f"owner {args.owner_pid} exited"
        log_line(f"not starting {args.name}: {reason}")
        update_state(args.state, args.token, supervisor_pid=os.getpid(), stopped=reason, state="stopped")
        return 1

    with open(args.log, "ab") as log:
        child = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(args.name, args.token),
            start_new_session=True,
            preexec_fn=_set_parent_death_signal,
        )
    pgid = child.pid  # start_new_session: the child leads its own session and process group
    update_state(args.state, args.token, supervisor_pid=os.getpid(), pid=child.pid, pgid=pgid)
    log_line(f"started {args.name}: pid {child.pid}, owner {args.owner_pid}")

    while True:
        if not stop_reason and not owner_alive(args.owner_pid, owner_start):
            stop_reason.append(f"owner {args.owner_pid} exited")
        if stop_reason:
            log_line(f"stopping {args.name}: {stop_reason[0]}")
            stop_group(pgid, args.grace, child)
            rc = child.poll()
            log_line(f"{args.name} stopped (exit code {rc})")
            update_state(args.state, args.token, stopped=stop_reason[0], exit_code=rc, state="stopped")
            return 0
        rc = child.poll()
        if rc is not None:
            # Anything the server left in its group (engine processes) goes too.
            stop_group(pgid, args.grace, child)
            log_line(f"{args.name} exited by itself with code {rc}")
            update_state(args.state, args.token, exit_code=rc, state="exited", exited_at=now_iso())
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
