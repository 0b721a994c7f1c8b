"""How a test waits: on an event or a state (a file, a log line, a record's field, a process's exit, a lock's waiter),
never on the clock.

A test asserts on what it finds once the event has happened, never on how long it took; where a duration is itself
the point (a timeout fired, a retry waited), it is compared with what the same test measured or configured. Every wait
still ends: at once when what it waits for can no longer happen (``unless``: the process it depends on exited), and
at the latest after HANG_GUARD, so that a broken build fails instead of hanging CI. The guard is no bound on the
behaviour under test: it is far above the longest wait of a working build on a busy machine (a whole SLURM run of
the paper rehearsal, minutes), and its expiry is reported as a hang.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

HANG_GUARD = 3600.0  # seconds: see above; every wait and every subprocess timeout of the heavy tests uses it
POLL = 0.05  # seconds between two looks at a state

T = TypeVar("T")


def wait_for(ready: Callable[[], T], what: str, *, unless: Callable[[], str | None] | None = None) -> T:
    """Look at READY until it returns a true value, and return that. Fail when UNLESS returns a reason (what READY
    waits for can no longer happen), or as a hang after HANG_GUARD."""
    deadline = time.monotonic() + HANG_GUARD
    while True:
        value = ready()
        if value:
            return value
        if unless is not None and (why := unless()):
            pytest.fail(f"{why} before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"hang: no {what} after {HANG_GUARD:.0f} s (tests/waiting.py HANG_GUARD)")
        time.sleep(POLL)


def settle(census: Callable[[], list[int]]) -> list[int]:
    """Wait until CENSUS (processes that must end) is empty; returns what is left when the hang guard ends the wait
    ([] once every process has exited)."""
    deadline = time.monotonic() + HANG_GUARD
    while (left := census()) and time.monotonic() <= deadline:
        time.sleep(POLL)
    return left


def wait_exit(pid: int) -> None:
    """Wait until process PID (any process, not only a child) has exited, through a pidfd; a hang after HANG_GUARD."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if not select.select([fd], [], [], HANG_GUARD)[0]:
            pytest.fail(f"hang: process {pid} still running after {HANG_GUARD:.0f} s (tests/waiting.py HANG_GUARD)")
    finally:
        os.close(fd)


def lock_waiters(path: str | os.PathLike[str]) -> list[int]:
    """Pids of the processes blocked on an flock of PATH (/proc/locks lists a waiter as "-> FLOCK ... PID DEV:INODE")."""
    inode = os.stat(path).st_ino
    waiters = []
    with open("/proc/locks") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) >= 7 and fields[1] == "->" and fields[2] == "FLOCK" and int(fields[6].split(":")[-1]) == inode:
                waiters.append(int(fields[5]))
    return waiters


def has_mapped(pid: int, part: str) -> bool:
    """Whether process PID has mapped a file whose path holds PART (/proc/PID/maps: a shared library it imported, say);
    False once it is gone."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return any(part in line for line in fh)
    except OSError:
        return False
