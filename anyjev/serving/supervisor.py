"""Tiny stdlib-only supervisor that ties a vLLM server's life to an owner process.

Run as ``python -m anyjev.serving.supervisor --state FILE --token T --owner-pid PID --grace S --log FILE -- ARGV...``.

Why it exists: a scoring job starts the server but must not own it (the server is shared by every cell of the
model and must survive a killed cell), while the run that owns it (the Snakemake process) cannot be trusted to
clean up (Ctrl-C, SIGKILL, a crash). So this process, started in its own session, spawns ARGV in its own process
group and stops that whole group as soon as the owner is gone (dead, zombie, or its pid reused), when it is told
to stop (SIGTERM/SIGINT/SIGHUP), and it records the server's exit code when the server dies by itself.
It imports nothing outside the standard library and anyjev's stdlib-only helpers (files, proc, state).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from anyjev.files import now_iso
from anyjev.serving.proc import (
    NAME_ENV,
    TOKEN_ENV,
    owner_alive,
    proc_start_time,
    set_parent_death_signal,
    stop_group,
)
from anyjev.serving.state import update_record

POLL_SECONDS = 0.5
# The server interpreter must see the PYTHONPATH its spec asked for, not the one used to import this module.
CHILD_PYTHONPATH_ENV = "ANYJEV_CHILD_PYTHONPATH"


def _set_parent_death_signal() -> None:
    """In the child before exec: get SIGTERM if the supervisor dies (even by SIGKILL), so no server outlives it."""
    why = set_parent_death_signal(signal.SIGTERM)
    if why is not None:
        # stderr is the server log here (set up before this runs): say what protection is missing
        os.write(2, (f"anyjev supervisor: prctl(PR_SET_PDEATHSIG) failed ({why}): the kernel will not stop this server "
                     "if its supervisor is killed with SIGKILL; the supervisor's own stop on owner death still applies\n"
                     ).encode())


def _child_env(name: str, token: str) -> dict[str, str]:
    env = dict(os.environ)
    wanted = env.pop(CHILD_PYTHONPATH_ENV, None)
    if wanted is not None:
        env["PYTHONPATH"] = wanted
    env[NAME_ENV] = name
    env[TOKEN_ENV] = token
    return env


def main(argv: list[str] | None = None) -> int:
    """Spawn the server, record it, and watch the owner; returns the exit status of this supervisor."""
    parser = argparse.ArgumentParser(prog="python -m anyjev.serving.supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="JSON state file shared with anyjev.serving.launch and .lease")
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
            fh.write(f"[anyjev.serving.supervisor {now_iso()} pid {os.getpid()}] {text}\n")

    if not owner_alive(args.owner_pid, owner_start):
        reason = f"owner {args.owner_pid} exited"
        log_line(f"not starting {args.name}: {reason}")
        update_record(args.state, args.token, supervisor_pid=os.getpid(), stopped=reason, state="stopped")
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
    update_record(args.state, args.token, supervisor_pid=os.getpid(), pid=child.pid, pgid=pgid)
    log_line(f"started {args.name}: pid {child.pid}, owner {args.owner_pid}")

    while True:
        if not stop_reason and not owner_alive(args.owner_pid, owner_start):
            stop_reason.append(f"owner {args.owner_pid} exited")
        if stop_reason:
            log_line(f"stopping {args.name}: {stop_reason[0]}")
            stop_group(pgid, args.grace, reap=child.poll)
            rc = child.poll()
            log_line(f"{args.name} stopped (exit code {rc})")
            update_record(args.state, args.token, stopped=stop_reason[0], exit_code=rc, state="stopped")
            return 0
        rc = child.poll()
        if rc is not None:
            # Anything the server left in its group (engine processes) goes too.
            stop_group(pgid, args.grace, reap=child.poll)
            log_line(f"{args.name} exited by itself with code {rc}")
            update_record(args.state, args.token, exit_code=rc, state="exited", exited_at=now_iso())
            return 0
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
