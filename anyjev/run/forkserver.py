"""The run's per-cell commands, each forked from one process that has already imported what they need.

A run of 300 cells starts 900 per-cell commands (publish, evaluate, draw its reliability diagram); as its own
interpreter, each would import numpy, pandas, matplotlib and anyjev again, about 1 CPU second apiece. The workflow's
rules instead run::

    python -m anyjev.run.forkserver --owner-pid $PPID -- evaluate --job FILE ...

This client imports nothing but the standard library. It connects to the run's fork server (a Unix socket; one server
per Snakemake process and Python interpreter, started by the first client that finds none, under a lock) and hands it
the command's arguments, working directory, environment and standard streams. The server forks a child, which runs
``python -m anyjev``'s :func:`anyjev.cli.main` with them and reports its exit status; the client exits with that
status. So a rule's command, its log, its exit code and its outputs are what they would be without the server.

The server stops when its owner (the Snakemake process, ``$PPID`` in a rule's shell) exits. A child already running
finishes its command. Set ``ANYJEV_FORKSERVER=off`` to run each command in the client instead; where the server
cannot be started, the client says why on standard error (the rule's log) and does the same.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = "anyjev.run.forkserver"
ENV_SWITCH = "ANYJEV_FORKSERVER"  # "off": run each command in the client's own process
RECORD_ENV = "ANYJEV_FORKSERVER_RECORD"  # a file: each finished child, client and server appends its resource use
# What the per-cell commands import: loaded once, in the server, before it listens.
PRELOAD = ("anyjev.cli", "anyjev.run.allocation", "anyjev.run.evaluate", "anyjev.outputs.plots")
_LENGTH = struct.Struct("!I")
_STREAMS = 3  # stdin, stdout, stderr


class ForkServerError(OSError):
    """The fork server could not be started or reached; the message says why."""


# ------------------------------------------------------------------------------------------------ where
def socket_path(owner_pid: int, python: str | None = None) -> Path:
    """The socket of OWNER_PID's fork server for PYTHON (default: this interpreter): in a folder of the user's own
    under the temporary directory, short enough for a Unix socket's 108-byte limit. One per interpreter, because a
    rule may run in its own environment (``--sdm conda``)."""
    python = python or sys.executable
    tag = hashlib.sha256(f"{python}\0{Path(__file__).resolve().parent.parent}".encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"anyjev-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise ForkServerError(f"{folder} belongs to another user; set TMPDIR to a folder of your own")
    return folder / f"fork-{owner_pid}-{tag}.sock"


def server_pids(owner_pid: int | None = None) -> list[int]:
    """The fork servers running on this machine, from /proc: OWNER_PID's only, when given (a run's, to wait for
    them or to find one left behind)."""
    from anyjev.serving.proc import proc_cmdline

    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        argv = proc_cmdline(int(entry))
        if MODULE in argv and "--serve" in argv and "--owner-pid" in argv[:-1]:
            if owner_pid is None or argv[argv.index("--owner-pid") + 1] == str(owner_pid):
                found.append(int(entry))
    return found


# ------------------------------------------------------------------------------------------------ client
def run_command(argv: list[str], owner_pid: int) -> int:
    """Run ``python -m anyjev ARGV`` in a child of OWNER_PID's fork server (started if there is none) with this
    process's working directory, environment and standard streams; its exit status. Signals this process receives
    (SIGINT, SIGTERM, SIGHUP) are passed on to the child."""
    if os.environ.get(ENV_SWITCH, "").lower() == "off":
        return _in_this_process(argv)
    try:
        conn = connect(owner_pid)
    except OSError as exc:
        print(f"anyjev: no fork server ({exc}); running the command in this process", file=sys.stderr, flush=True)
        return _in_this_process(argv)
    with conn, _recorded("fork-client"):
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": _umask()}).encode()
        streams = _streams()
        try:
            socket.send_fds(conn, [_LENGTH.pack(len(request))], streams)
        finally:
            for given, fd in enumerate(streams):
                if fd != given:
                    os.close(fd)
        conn.sendall(request)
        return _wait_for_child(conn)


@contextlib.contextmanager
def _recorded(what: str):
    """With ``ANYJEV_FORKSERVER_RECORD`` set, append this process's own resource use to the record when the block
    ends (the client's, or the server's)."""
    start = time.monotonic()
    try:
        yield
    finally:
        record = os.environ.get(RECORD_ENV)
        if record:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            _append(record, {"pid": os.getpid(), "command": what, "start": start, "end": time.monotonic(),
                             "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kb": usage.ru_maxrss, "rc": None})


def _append(record: str, row: dict) -> None:
    with open(record, "a", encoding="utf-8") as fh:  # one short write per row: rows of concurrent writers stay whole
        fh.write(json.dumps(row) + "\n")


def _streams() -> list[int]:
    """This process's stdin, stdout and stderr, each replaced by the null device where it is closed."""
    fds = []
    for fd in range(_STREAMS):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def connect(owner_pid: int) -> socket.socket:
    """A connection to OWNER_PID's fork server; the first client to find none starts it (clients queue on a lock,
    so one server starts) and waits until it listens or fails."""
    path = socket_path(owner_pid)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        return _connected(conn, path, owner_pid)
    except BaseException:
        conn.close()
        raise


def _connected(conn: socket.socket, path: Path, owner_pid: int) -> socket.socket:
    try:
        conn.connect(str(path))
        return conn
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            conn.connect(str(path))  # another client started it while this one waited
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            path.unlink(missing_ok=True)  # a server that died leaves its socket
        _start_server(path, owner_pid)
        conn.connect(str(path))
        return conn


def _start_server(path: Path, owner_pid: int) -> None:
    """Start the server detached (its own session: a rule's process group being stopped does not stop it), and block
    until it writes that it listens; its log is beside its socket."""
    log_path = path.with_suffix(".log")
    ready_r, ready_w = os.pipe()
    with open(log_path, "ab") as log:
        subprocess.Popen([sys.executable, "-m", MODULE, "--serve", str(path), "--owner-pid", str(owner_pid),
                          "--ready-fd", str(ready_w)], pass_fds=(ready_w,), start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        if ready.read(1) != b"1":  # end of file: the server exited before it listened
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise ForkServerError(f"the fork server did not start (log {log_path}: {' | '.join(tail) or 'empty'})")


def _wait_for_child(conn: socket.socket) -> int:
    """The child's exit status, read from the connection; signals are forwarded to the child meanwhile."""
    child: list[int] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if child:
            with contextlib.suppress(ProcessLookupError):  # it has just ended: its status is on its way
                os.kill(child[0], signum)
        else:
            pending.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    for line in conn.makefile("rb"):
        message = json.loads(line)
        if "pid" in message:
            child.append(message["pid"])
            for signum in pending:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child[0], signum)
        elif "rc" in message:
            return message["rc"]
    print(f"anyjev: the forked command (pid {child[0] if child else '?'}) ended without an exit status",
          file=sys.stderr, flush=True)
    return 1


def _in_this_process(argv: list[str]) -> int:
    from anyjev.cli import main

    return main(argv)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------------------------ server
def serve(path: Path, owner_pid: int, ready_fd: int) -> None:
    """Import PRELOAD, listen on PATH, write "1" to READY_FD, then fork one child per connection until OWNER_PID
    exits. With ``ANYJEV_FORKSERVER_RECORD`` set to a file, each finished child is appended to it as a JSON line: its
    command, start and end (monotonic seconds), CPU seconds and peak memory (what a benchmark accounts a job by)."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    _warm_up_figures()
    record = os.environ.get(RECORD_ENV)
    owner = os.pidfd_open(owner_pid)  # readable once the owner exits: no polling
    ended_r, ended_w = os.pipe()  # a byte per SIGCHLD: the loop reaps the children that ended
    os.set_blocking(ended_w, False)
    signal.set_wakeup_fd(ended_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    running: dict[int, tuple[str, float]] = {}  # pid -> (command, start)
    try:
        while True:
            readable, _, _ = select.select([listener, owner, ended_r], [], [])
            if ended_r in readable:
                os.read(ended_r, 4096)
                _reap(running, record)
            if owner in readable:
                return
            if listener not in readable:
                continue
            conn, _ = listener.accept()
            try:
                request, fds = _read_request(conn)
            except (OSError, ValueError) as exc:
                print(f"fork server: a request could not be read ({exc})", file=sys.stderr, flush=True)
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                for fd in (listener.detach(), owner, ended_r, ended_w):
                    os.close(fd)
                _child(conn, request, fds)  # never returns
            running[pid] = ((request.get("argv") or ["?"])[0], start)
            conn.close()
            for fd in fds:
                os.close(fd)
    finally:
        path.unlink(missing_ok=True)
        path.with_suffix(".lock").unlink(missing_ok=True)
        log = path.with_suffix(".log")
        if log.is_file() and log.stat().st_size == 0:
            log.unlink()


def _reap(running: dict[int, tuple[str, float]], record: str | None) -> None:
    """Collect every child that has ended (no zombies), appending each to RECORD when one is kept."""
    while running:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        command, start = running.pop(pid, ("?", math.nan))
        if record:
            _append(record, {"pid": pid, "command": command, "start": start, "end": time.monotonic(),
                             "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kb": usage.ru_maxrss,
                             "rc": os.waitstatus_to_exitcode(status)})


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, _LENGTH.size, _STREAMS)
    if len(head) != _LENGTH.size or len(fds) != _STREAMS:
        for fd in fds:
            os.close(fd)
        raise ValueError(f"a request carries {len(head)} header bytes and {len(fds)} streams")
    (length,) = _LENGTH.unpack(head)
    body = bytearray()
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            break
        body += chunk
    return json.loads(body), fds


def _child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: take the client's streams, folder, environment and umask, run the command, send its exit
    status, exit."""
    rc = 1
    try:
        for signum, handler in ((signal.SIGCHLD, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler),
                                (signal.SIGTERM, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL)):
            signal.signal(signum, handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(request["umask"])
        tempfile.tempdir = None  # read TMPDIR again, from the client's environment
        argv = request["argv"]
        sys.argv = ["anyjev", *argv]
        _name_process(argv[0] if argv else "anyjev")
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        rc = _run_cli(argv)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the status is sent whatever happened to the streams
                pass
        try:
            conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
        finally:
            os._exit(rc)


def _run_cli(argv: list[str]) -> int:
    """``python -m anyjev ARGV``'s exit status, with what Python itself prints for an uncaught exception."""
    import traceback

    from anyjev.cli import main

    try:
        return main(argv)
    except KeyboardInterrupt:  # a SIGINT passed on before the command's own handler was reached
        print(f"anyjev {argv[0] if argv else ''}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse's errors and --help
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, exit status 1
        traceback.print_exc()
        return 1


def _name_process(command: str) -> None:
    """Name the child after its command in ps and top (the kernel's 15-byte process name), where the server's command
    line would otherwise name every child alike."""
    import ctypes

    pr_set_name = 15
    try:
        ctypes.CDLL(None).prctl(pr_set_name, command.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _warm_up_figures() -> None:
    """Draw one small figure as PNG and PDF, so that the children inherit matplotlib's loaded fonts and caches."""
    import io

    from anyjev.outputs.plots import STYLE, pyplot

    plt = pyplot()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(1, 1))
        ax.plot([0, 1], [0, 1])
        ax.set_title("warm-up")
        for fmt in ("png", "pdf"):
            fig.savefig(io.BytesIO(), format=fmt)
        plt.close(fig)


# ------------------------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--owner-pid", type=int, required=True, help="the Snakemake process the server belongs to")
    parser.add_argument("--serve", type=Path, help="run the server on this socket (the first client starts it)")
    parser.add_argument("--ready-fd", type=int, help="with --serve: the pipe the server writes to once it listens")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the anyjev command and its arguments")
    args = parser.parse_args(argv)
    if args.serve is not None:
        with _recorded("fork-server"):
            serve(args.serve, args.owner_pid, args.ready_fd)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (-- COMMAND ARGS...)")
    return run_command(command, args.owner_pid)


if __name__ == "__main__":
    sys.exit(main())
