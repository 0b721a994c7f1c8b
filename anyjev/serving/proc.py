"""Process control shared by the server code, its supervisor and the workflow's steps: /proc readers, the one
termination routine (SIGTERM, a grace period, SIGKILL), and a process's life tied to its parent's. Linux and the
standard library only."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

# Environment markers of the processes we start: the token identifies one server start, so a reused pid or
# process group is never signalled; the name lets tests and the census find a model's processes.
TOKEN_ENV = "ANYJEV_SERVER_TOKEN"
NAME_ENV = "ANYJEV_SERVER_NAME"
SUPERVISOR_MODULE = "anyjev.serving.supervisor"
KILL_WAIT_SECONDS = 5.0
STOP_GRACE = 15.0  # seconds a server's group gets between SIGTERM and SIGKILL
PR_SET_PDEATHSIG = 1  # prctl(2)


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on, or None if the process does not exist.

    The command name (field 2) may hold spaces and parentheses, so split after the last ')'.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
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


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) processes descending from PID: its children, theirs, and so on, parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        if fields is not None and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in sorted(children.get(queue.pop(0), [])):
            found.append(child)
            queue.append(child)
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
    return SUPERVISOR_MODULE in cmd and token in cmd


def signal_quietly(send: Callable[[int, int], None], target: int | None, sig: int) -> None:
    """os.kill / os.killpg that ignores a target already gone (or not ours to signal)."""
    if target:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            send(int(target), sig)


def _wait_until_gone(alive: Callable[[], bool], seconds: float, reap: Callable[[], None], step: float) -> bool:
    """Poll ``alive()`` for up to SECONDS; True once it turned false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reap()
        if not alive():
            return True
        time.sleep(step)
    return False


def terminate(alive: Callable[[], bool], term: Callable[[], None], kill: Callable[[], None], grace: float,
              reap: Callable[[], None] = lambda: None) -> None:
    """The one termination routine: TERM, wait up to GRACE seconds for ``alive()`` to turn false, then KILL
    and wait a few seconds more. REAP runs while waiting (poll a child so it does not linger as a zombie)."""
    term()
    if not _wait_until_gone(alive, grace, reap, 0.1):
        kill()
        _wait_until_gone(alive, KILL_WAIT_SECONDS, reap, 0.05)


def stop_group(pgid: int, grace: float, reap: Callable[[], None] = lambda: None) -> None:
    """SIGTERM the process group PGID, SIGKILL what is left after GRACE seconds."""
    terminate(lambda: bool(group_pids(pgid)), lambda: signal_quietly(os.killpg, pgid, signal.SIGTERM),
              lambda: signal_quietly(os.killpg, pgid, signal.SIGKILL), grace, reap)


def set_parent_death_signal(signum: int) -> str | None:
    """Have the kernel send SIGNUM to this process when its parent exits, however it exits (SIGKILL too):
    ``prctl(PR_SET_PDEATHSIG)``, Linux only. None once it is set, else why it could not be (no libc, no prctl)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0:
            return None
        return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:  # no libc, or no prctl (not Linux)
        return f"{type(exc).__name__}: {exc}"
