"""Start, lease and stop vLLM OpenAI-compatible servers.

Design (see docs/architecture.md): every scoring job calls :func:`acquire_server`. Under an exclusive flock on
``state_dir/<name>.lock`` it reuses the server recorded in ``state_dir/<name>.json`` when that server belongs to
the same owner (the Snakemake process of the run), host and argv-defining spec and answers ``/health`` and
``/v1/models`` with the expected served name; otherwise it starts one and waits until it is ready, still holding
the lock, so concurrent cells of one model wait and then reuse it: one server per model per run per machine.

The server is spawned through :mod:`anyjev.supervisor` in a new session, which stops the server's whole process
group when the owner dies. So a killed scoring job leaves the server to the other cells, and the end of the run,
however it ends (success, failure, Ctrl-C, SIGTERM, SIGKILL), leaves no server behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from anyjev.errors import ConfigError, ServerError
from anyjev.supervisor import (
    CHILD_PYTHONPATH_ENV,
    NAME_ENV,
    TOKEN_ENV,
    UNSET,
    group_carries_token,
    group_pids,
    is_our_supervisor,
    now_iso,
    owner_alive,
    pid_alive,
    proc_cmdline,
    proc_environ,
    proc_start_time,
    proc_stat,
    read_state,
    update_state,
    write_state,
)

API_MODULE = "vllm.entrypoints.openai.api_server"
POLL_SECONDS = 0.5
LOG_TAIL_LINES = 30
# The last line of a Python exception ("RuntimeError: ..."), also behind vLLM's "(Worker pid=1) ERROR ... [f.py:9] "
# prefix. A worker's root cause is often further up than the tail (the API server's own traceback follows it).
EXCEPTION_LINE = re.compile(r"(?:^|\] )(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)\b: ")
EARLIER_EXCEPTIONS = 5
START_MARK = "=== anyjev "  # begins the line written to the (appended) log before each start
PORT_RETRIES = 3
ADDRESS_IN_USE = "address already in use"

# Flags the project pins and a config may never override, with the reason given in the error message.
PINNED_FLAGS: dict[str, str] = {
    "--logprobs-mode": "processed_logprobs makes the top-K logprobs exactly the allowed label ids; "
    "the default raw_logprobs silently drops labels outside the vocabulary top-K",
    "--generation-config": "'vllm' ignores the model's generation_config.json sampling defaults "
    "(a non-greedy temperature changes processed logprobs)",
    "--seed": "a fixed seed is part of a reproducible run",
    "--host": "anyjev only talks to a server on 127.0.0.1",
    "--port": "anyjev picks the port (distinct per model) and records it in the lease",
    "--served-model-name": "the lease checks /v1/models for this name so a job never reads another model's server",
    "--max-logprobs": "must be at least the largest label count; set models.<name>.max_logprobs instead",
    "--dtype": "set models.<name>.dtype instead, so it is recorded with the scores",
    "--max-model-len": "set models.<name>.max_model_len instead, so it is recorded with the scores",
    "--tensor-parallel-size": "set models.<name>.tensor_parallel_size instead",
    "--enable-prefix-caching": "prefix-cache hits move logprobs by up to ~0.06 nat; set models.<name>.prefix_caching",
    "--model": "set models.<name>.model instead",
}
# Flags that are not pinned themselves but would override pinned ones behind our back.
REFUSED_FLAGS: dict[str, str] = {
    "--config": "a vLLM config file can set pinned flags; put the flags in server_flags instead",
    "--override-generation-config": "it overrides the pinned --generation-config vllm sampling defaults",
}
# vLLM's short aliases of pinned flags.
FLAG_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size"}


@dataclass(frozen=True)
class ServerSpec:
    """Everything that defines one model's server; all fields but the timeouts define its argv and env."""

    name: str
    model: str
    served_name: str
    python: str
    dtype: str = "auto"
    max_model_len: int | None = None
    max_logprobs: int = 26
    tensor_parallel_size: int = 1
    seed: int = 0
    prefix_caching: bool = False
    extra_flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    start_timeout: float = 600
    port: int | None = None
    host: str = "127.0.0.1"
    stop_grace: float = 15.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSpec:
        """From JSON (the workflow's resources/servers/<model>.json): lists become the tuples the spec holds."""
        fields = dict(data)
        fields["extra_flags"] = tuple(fields.get("extra_flags", ()))
        fields["env"] = tuple(tuple(kv) for kv in fields.get("env", ()))
        return cls(**fields)

    def spec_hash(self) -> str:
        """Hash of what defines the server (not the timeouts): a lease is reused only for an identical spec."""
        data = {
            "name": self.name,
            "model": self.model,
            "served_name": self.served_name,
            "python": self.python,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_logprobs": self.max_logprobs,
            "tensor_parallel_size": self.tensor_parallel_size,
            "seed": self.seed,
            "prefix_caching": self.prefix_caching,
            "extra_flags": list(self.extra_flags),
            "env": [list(kv) for kv in self.env],
            "port": self.port,
            "host": self.host,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _flag_name(token: str) -> str | None:
    """Canonical long name of a command-line flag token ('--no-x_y=1' -> '--x-y'), or None for a value."""
    for alias, name in FLAG_ALIASES.items():
        if token == alias or token.startswith(alias + "=") or (token.startswith(alias) and token[len(alias):].isdigit()):
            return name
    if not token.startswith("--") or token == "--":
        return None
    name = token[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-").lower()
    name = name.removeprefix("no-")
    return "--" + name


def _check_extra_flags(spec: ServerSpec) -> None:
    key = f"models.{spec.name}.server_flags"
    for token in spec.extra_flags:
        if not isinstance(token, str):
            raise ConfigError(key, f"server flag {token!r} is not a string")
        name = _flag_name(token)
        if name is None:
            continue
        if name in PINNED_FLAGS:
            raise ConfigError(key, f"{token!r} would override the pinned flag {name}: {PINNED_FLAGS[name]}")
        if name in REFUSED_FLAGS:
            raise ConfigError(key, f"{token!r} is not allowed: {REFUSED_FLAGS[name]}")
        # vLLM's argparse accepts unambiguous abbreviations, so '--max-log 5' would set --max-logprobs.
        for guarded, why in {**PINNED_FLAGS, **REFUSED_FLAGS}.items():
            if len(name) > 3 and guarded.startswith(name):
                raise ConfigError(
                    key, f"{token!r} abbreviates the pinned flag {guarded} (vLLM's argparse accepts "
                    f"abbreviations): {why}"
                )


def build_argv(spec: ServerSpec, port: int) -> list[str]:
    """The server command line: pinned flags from the spec, then the config's extra flags.

    Raises ConfigError (key ``models.<name>.server_flags``) when an extra flag would override a pinned one,
    because a silently different server mode (raw logprobs, sampling defaults, prefix caching) changes scores.
    """
    _check_extra_flags(spec)
    if spec.max_logprobs < 1:
        raise ConfigError(f"models.{spec.name}.max_logprobs", f"must be >= 1 (the largest label count), got "
                          f"{spec.max_logprobs}")
    argv = [
        spec.python, "-m", API_MODULE,
        "--model", spec.model,
        "--served-model-name", spec.served_name,
        "--host", spec.host,
        "--port", str(port),
        "--logprobs-mode", "processed_logprobs",
        "--generation-config", "vllm",
        "--seed", str(spec.seed),
        "--max-logprobs", str(spec.max_logprobs),
        "--dtype", spec.dtype,
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching",
    ]  # fmt: skip
    if spec.max_model_len is not None:
        argv += ["--max-model-len", str(spec.max_model_len)]
    return argv + list(spec.extra_flags)


# --------------------------------------------------------------------------- handle


def _http_client() -> httpx.Client:
    # trust_env=False: an HTTP(S)_PROXY in the environment must never route 127.0.0.1 elsewhere.
    return httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0), trust_env=False)


def _served_names(client: httpx.Client, url: str) -> list[str] | None:
    """Model ids listed by /v1/models, or None if the server does not answer."""
    try:
        resp = client.get(f"{url}/v1/models")
        if resp.status_code != 200:
            return None
        return [str(m.get("id")) for m in resp.json().get("data", []) if isinstance(m, dict)]
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def _health(client: httpx.Client, url: str) -> int | None:
    """Status code of /health, or None when nothing answers."""
    try:
        return client.get(f"{url}/health").status_code
    except httpx.HTTPError:
        return None


def log_tail(log_path: str | os.PathLike[str], lines: int = LOG_TAIL_LINES, offset: int = 0) -> str:
    """The last LINES lines of the log from byte OFFSET on (this start's part of an appended log), preceded by the
    last exception lines above them (a worker's root cause), if any."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError as exc:
        return f"(log {log_path} unreadable: {exc})"
    text = data.decode(errors="replace").splitlines()
    if not text:
        return "    (log is empty)"
    tail, earlier = text[-lines:], text[:-lines]
    # "See root cause above": quote the exceptions above the tail too, or the cause is not in the message.
    # only this server's: the log is appended to by every start of the model's server
    start = max((i for i, line in enumerate(earlier) if line.startswith(START_MARK)), default=0)
    causes = [line for line in earlier[start:] if EXCEPTION_LINE.search(line)][-EARLIER_EXCEPTIONS:]
    if causes:
        tail = ["(exceptions further up:)", *causes, f"(last {lines} lines:)", *tail]
    return "\n".join("    " + line for line in tail)


@dataclass
class ServerHandle:
    """A running server as recorded in its state file; what a scoring job needs to talk to it and check it."""

    name: str
    url: str
    served_name: str
    port: int
    pid: int
    pgid: int
    supervisor_pid: int
    argv: list[str]
    log_path: str
    owner_pid: int
    host: str
    started_at: str
    start_seconds: float
    vllm_version: str | None
    state_file: str
    token: str = ""
    reused: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready), e.g. to record the server next to the scores."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any], *, reused: bool = False) -> ServerHandle:
        """Handle from a state-file record."""
        names = [f.name for f in cls.__dataclass_fields__.values() if f.name != "reused"]
        return cls(**{k: record.get(k) for k in names}, reused=reused)

    def _fail(self, why: str) -> ServerError:
        record = read_state(self.state_file) or {}
        code = record.get("exit_code")
        stopped = record.get("stopped")
        extra = f"; exit code {code}" if code is not None else "; exit code unknown"
        if stopped:
            extra += f"; stopped: {stopped}"
        return ServerError(
            f"vLLM server for model {self.name!r} ({self.url}, pid {self.pid}) is not usable: {why}{extra}. "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def check_alive(self) -> None:
        """Raise ServerError if the server process is gone, /health is not 200 or it serves another model.

        Scoring calls it after a transport error, to turn "connection refused" into the server's own story.
        """
        if not pid_alive(self.pid):
            # Give the supervisor a moment to record the exit code.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and (read_state(self.state_file) or {}).get("exit_code") is None:
                time.sleep(0.1)
            raise self._fail("the server process is gone")
        with _http_client() as client:
            status = _health(client, self.url)
            if status != 200:
                raise self._fail(f"GET /health answered {status if status is not None else 'nothing'}")
            names = _served_names(client, self.url)
        if names is None or self.served_name not in names:
            raise self._fail(f"/v1/models lists {names}, not {self.served_name!r}")


# --------------------------------------------------------------------------- start


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


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class _PortInUse(Exception):
    """The server failed to bind its port (a race with another process): retry with another port."""


def _supervisor_env(spec: ServerSpec) -> dict[str, str]:
    """Environment for the supervisor: ours plus spec.env, with anyjev importable by the supervisor.

    The server's own PYTHONPATH (spec.env's, else ours) travels in CHILD_PYTHONPATH_ENV and is restored by the
    supervisor, so the project directory never leaks onto the server's import path.
    """
    env = dict(os.environ)
    env.update(dict(spec.env))
    env.pop(TOKEN_ENV, None)
    env.pop(NAME_ENV, None)
    child_pp = env.get("PYTHONPATH")
    env[CHILD_PYTHONPATH_ENV] = child_pp if child_pp is not None else UNSET
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = package_root + (os.pathsep + child_pp if child_pp else "")
    return env


def _start_once(spec: ServerSpec, port: int, log_path: Path, owner_pid: int, state_file: Path) -> ServerHandle:
    argv = build_argv(spec, port)
    url = f"http://{spec.host}:{port}"
    token = uuid.uuid4().hex
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        offset = log.tell()
        log.write(f"{START_MARK}{now_iso()} starting server {spec.name!r} on port {port}: {shlex.join(argv)}\n")
    record: dict[str, Any] = {
        "name": spec.name,
        "token": token,
        "state": "starting",
        "url": url,
        "port": port,
        "served_name": spec.served_name,
        "argv": argv,
        "log_path": str(log_path),
        "owner_pid": owner_pid,
        "owner_start": proc_start_time(owner_pid),
        "host": socket.gethostname(),
        "spec_hash": spec.spec_hash(),
        "started_at": now_iso(),
        "start_seconds": None,
        "vllm_version": None,
        "state_file": str(state_file),
        "pid": None,
        "pgid": None,
        "supervisor_pid": None,
        "stop_grace": spec.stop_grace,
    }
    write_state(state_file, record)
    cmd = [
        sys.executable, "-m", "anyjev.supervisor",
        "--state", str(state_file), "--token", token, "--name", spec.name,
        "--owner-pid", str(owner_pid), "--grace", str(spec.stop_grace), "--log", str(log_path),
    ]  # fmt: skip
    if record["owner_start"] is not None:
        cmd += ["--owner-start", str(record["owner_start"])]
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(
            [*cmd, "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_supervisor_env(spec),
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
        with _http_client() as client:
            while True:
                supervisor.poll()
                rec = read_state(state_file) or {}
                if rec.get("token") != token:
                    raise fail(f"its state file {state_file} was taken over by another server")
                if rec.get("exit_code") is not None or rec.get("stopped"):
                    tail = log_tail(log_path, offset=offset)
                    if ADDRESS_IN_USE in tail.lower():
                        raise _PortInUse(port)
                    why = f"the server process exited with code {rec.get('exit_code')}"
                    if rec.get("stopped"):
                        why += f" ({rec['stopped']})"
                    raise fail(why)
                if not pid_alive(supervisor.pid):
                    time.sleep(0.2)  # it may just have recorded an exit code
                    rec = read_state(state_file) or {}
                    if rec.get("exit_code") is None and not rec.get("stopped"):
                        raise fail(f"its supervisor (pid {supervisor.pid}) died with code {supervisor.poll()}")
                    continue
                if rec.get("pid") and _health(client, url) == 200:
                    names = _served_names(client, url)
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
            with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
                resp = client.get(f"{url}/version")
                if resp.status_code == 200:
                    version = str(resp.json().get("version"))
    except BaseException:
        current = read_state(state_file)
        _stop_record(current if current and current.get("token") == token else record, grace=spec.stop_grace,
                     supervisor=supervisor)
        raise
    update_state(
        state_file, token, state="ready", start_seconds=round(start_seconds, 3), vllm_version=version,
        ready_at=now_iso(),
    )  # fmt: skip
    rec = read_state(state_file) or {}
    return ServerHandle.from_record(rec)


def start_server(spec: ServerSpec, log_path: str | os.PathLike[str], owner_pid: int,
                 state_file: str | os.PathLike[str]) -> ServerHandle:
    """Start the server through the supervisor and wait until /health is 200 and /v1/models lists its name.

    Raises ServerError naming the model, the exit code and the log's last lines when the server exits during
    start-up or is not ready within spec.start_timeout (then its whole process group is stopped), and naming
    the port when a fixed port is taken. With spec.port None a free port is picked, and a bind race retried.
    """
    log_path, state_file = Path(log_path), Path(state_file)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    if spec.port is not None:
        if _port_taken(spec.host, spec.port):
            raise ServerError(
                f"cannot start vLLM server for model {spec.name!r}: port {spec.port} on {spec.host} is already "
                "in use (models.<name>.port is fixed; free it or leave the port unset)"
            )
        try:
            return _start_once(spec, spec.port, log_path, owner_pid, state_file)
        except _PortInUse:
            raise ServerError(
                f"vLLM server for model {spec.name!r} could not bind port {spec.port}: address already in use. "
                f"Last lines of {log_path}:\n{log_tail(log_path)}"
            ) from None
    tried = []
    for _ in range(PORT_RETRIES):
        port = _free_port(spec.host)
        tried.append(port)
        try:
            return _start_once(spec, port, log_path, owner_pid, state_file)
        except _PortInUse:
            continue
    raise ServerError(
        f"vLLM server for model {spec.name!r} could not bind a port: address already in use on ports {tried} "
        f"({PORT_RETRIES} attempts). Last lines of {log_path}:\n{log_tail(log_path)}"
    )


# --------------------------------------------------------------------------- lease


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _reuse_problem(record: dict[str, Any], spec: ServerSpec, owner_pid: int, owner_start: int | None,
                   host: str) -> tuple[str | None, bool]:
    """Why the recorded server may not be reused (None: reuse it), and whether it is ours to stop.

    A server that answers for another served name is another model's: refuse it, never stop it.
    """
    if record.get("name") != spec.name:
        return f"the record is for {record.get('name')!r}, not {spec.name!r}", False
    if record.get("state") != "ready":
        return f"its state is {record.get('state')!r}", True
    if record.get("exit_code") is not None or record.get("stopped"):
        return f"it exited (code {record.get('exit_code')}, {record.get('stopped')})", True
    if record.get("host") != host:
        return f"it runs on host {record.get('host')!r}, not {host!r}", True
    if record.get("owner_pid") != owner_pid or record.get("owner_start") != owner_start:
        return f"it belongs to owner {record.get('owner_pid')}, not {owner_pid}", True
    if record.get("spec_hash") != spec.spec_hash():
        return "its spec differs", True
    if spec.port is not None and record.get("port") != spec.port:
        return f"it listens on port {record.get('port')}, not {spec.port}", True
    if record.get("served_name") != spec.served_name:
        return f"it serves {record.get('served_name')!r}, not {spec.served_name!r}", True
    if not pid_alive(record.get("pid")) or not is_our_supervisor(record.get("supervisor_pid") or 0,
                                                                   str(record.get("token"))):
        return "its processes are gone", True
    with _http_client() as client:
        if _health(client, str(record.get("url"))) != 200:
            return "/health is not 200", True
        names = _served_names(client, str(record.get("url")))
    if names is None or spec.served_name not in names:
        return f"/v1/models lists {names}, not {spec.served_name!r}", names is None
    return None, False


def acquire_server(spec: ServerSpec, *, state_dir: str | os.PathLike[str], owner_pid: int,
                   log_path: str | os.PathLike[str]) -> ServerHandle:
    """The scoring job's entry point: reuse this run's live server for the model, or start one.

    Holding an exclusive flock on ``state_dir/<name>.lock`` for the whole check-and-start makes concurrent
    cells of one model wait for the first start and then reuse it (one server per model per run and machine).
    The server dies with OWNER_PID (the run), not with the calling job.
    """
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    owner_start = proc_start_time(owner_pid)
    if not pid_alive(owner_pid) or owner_start is None:
        raise ServerError(
            f"cannot lease a server for model {spec.name!r}: owner pid {owner_pid} is not a live process on "
            f"host {socket.gethostname()} (the owner must run on the machine that runs the server)"
        )
    build_argv(spec, spec.port or 0)  # config errors first, before any lock or process
    state_file = state_dir / f"{spec.name}.json"
    host = socket.gethostname()
    with _flock(state_dir / f"{spec.name}.lock"):
        record = read_state(state_file)
        if record is not None:
            problem, stoppable = _reuse_problem(record, spec, owner_pid, owner_start, host)
            if problem is None:
                return ServerHandle.from_record(record, reused=True)
            # Ours but unusable (unhealthy, other spec, left half-started by a killed job), or its owner is
            # gone: stop it. A live server of another live owner (another run) is left alone; it dies with it.
            rec_owner = int(record.get("owner_pid") or 0)
            if stoppable and record.get("host") == host and (
                (rec_owner == owner_pid and record.get("owner_start") == owner_start)
                or not owner_alive(rec_owner, record.get("owner_start"))
            ):
                _stop_record(record, grace=float(record.get("stop_grace") or 15.0))
        return start_server(spec, log_path, owner_pid, state_file)


# --------------------------------------------------------------------------- stop


def _stop_record(record: dict[str, Any], grace: float = 15.0,
                 supervisor: subprocess.Popen[bytes] | None = None) -> bool:
    """Stop the server group and the supervisor of RECORD; True if anything of it was still alive.

    Only processes carrying the record's token are signalled, so a stale record never kills a process that
    reused a recorded pid.
    """
    token = str(record.get("token") or "")
    pgid = record.get("pgid")
    sup_pid = record.get("supervisor_pid") or (supervisor.pid if supervisor is not None else None)
    if sup_pid is None and record.get("state_file"):
        # The supervisor may have recorded its pid since we read the record.
        sup_pid = (read_state(record["state_file"]) or {}).get("supervisor_pid")
        pgid = pgid or (read_state(record["state_file"]) or {}).get("pgid")

    def group_alive() -> bool:
        return bool(pgid) and group_carries_token(int(pgid), token)

    def sup_alive() -> bool:
        if supervisor is not None:
            supervisor.poll()
            return pid_alive(supervisor.pid)
        return bool(sup_pid) and is_our_supervisor(int(sup_pid), token)

    had_group, had_sup = group_alive(), sup_alive()
    if not (had_group or had_sup):
        return False
    if had_sup:
        # The supervisor stops the group itself (SIGTERM, its grace, SIGKILL) and records why.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(sup_pid), signal.SIGTERM)
        deadline = time.monotonic() + grace + 2.0
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pgid), signal.SIGTERM)
        deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (group_alive() or sup_alive()):
        time.sleep(0.1)
    if group_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pgid), signal.SIGKILL)
    if sup_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(sup_pid), signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and (group_alive() or sup_alive()):
        time.sleep(0.05)
    if record.get("state_file") and token:
        update_state(record["state_file"], token, state="stopped",
                     stopped=(read_state(record["state_file"]) or {}).get("stopped") or "stopped by anyjev")
    return True


def stop_server(handle_or_state_file: ServerHandle | str | os.PathLike[str], grace: float = 15.0) -> bool:
    """SIGTERM the server's process group and its supervisor, SIGKILL after GRACE seconds.

    Returns True if something was still running. Zombies count as gone (PID 1 may reap them late).
    """
    if isinstance(handle_or_state_file, ServerHandle):
        record = read_state(handle_or_state_file.state_file) or {}
        if record.get("token") != handle_or_state_file.token:
            record = handle_or_state_file.to_dict()
    else:
        record = read_state(handle_or_state_file) or {}
        record.setdefault("state_file", str(handle_or_state_file))
    return _stop_record(record, grace=grace)


def stop_servers(state_dir: str | os.PathLike[str], owner_pid: int | None = None, grace: float = 15.0) -> list[str]:
    """Stop every server recorded in STATE_DIR (only OWNER_PID's if given); names of those that were running.

    The workflow's onsuccess/onerror call it, so a run tears its servers down at once instead of waiting for
    the supervisors to notice that the owner exited.
    """
    state_dir = Path(state_dir)
    stopped = []
    if not state_dir.is_dir():
        return stopped
    for state_file in sorted(state_dir.glob("*.json")):
        record = read_state(state_file)
        if record is None or (owner_pid is not None and record.get("owner_pid") != owner_pid):
            continue
        record.setdefault("state_file", str(state_file))
        if _stop_record(record, grace=grace):
            stopped.append(str(record.get("name") or state_file.stem))
    return stopped


# --------------------------------------------------------------------------- process census


def vllm_process_pids(match: str | None = None, *, include_supervisors: bool = True) -> list[int]:
    """Live (non-zombie) vLLM server processes on this machine (tests use it to count orphans).

    Counted: command lines containing the api_server module (our supervisors too, unless excluded), vLLM
    processes renamed by setproctitle ("VLLM::EngineCore", "VLLM::Worker"), and any process started by
    anyjev.supervisor (marked in its environment). MATCH filters on the command line and the anyjev name/token
    markers; since setproctitle overwrites /proc/PID/environ, a process also matches when it shares the process
    group of a matching one (vLLM's engine processes stay in the server's group).
    """
    me = os.getpid()
    candidates: list[tuple[int, int, bool]] = []  # pid, process group, matches MATCH by itself
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        fields = proc_stat(pid)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        cmd = proc_cmdline(pid)
        line = " ".join(cmd)
        if "anyjev.supervisor" in cmd and not include_supervisors:
            continue
        env: dict[str, str] | None = None
        hit = API_MODULE in line or line.startswith("VLLM::")
        if not hit:
            env = proc_environ(pid)
            hit = TOKEN_ENV in env
        if not hit:
            continue
        matched = True
        if match is not None:
            env = proc_environ(pid) if env is None else env
            matched = match in line or match in env.get(NAME_ENV, "") or match in env.get(TOKEN_ENV, "")
        candidates.append((pid, int(fields[2]), matched))
    groups = {pgrp for _, pgrp, matched in candidates if matched}
    return sorted(pid for pid, pgrp, matched in candidates if matched or pgrp in groups)


__all__ = [
    "PINNED_FLAGS",
    "ServerHandle",
    "ServerSpec",
    "acquire_server",
    "build_argv",
    "log_tail",
    "start_server",
    "stop_server",
    "stop_servers",
    "vllm_process_pids",
    "group_pids",
]
