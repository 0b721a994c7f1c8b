"""The lease: a scoring job's entry point to its model's server.

Under an exclusive flock on ``state_dir/<name>.lock`` it reuses the server recorded in ``state_dir/<name>.json``
when that server belongs to the same owner (the Snakemake process of the run), host and spec and answers
``/health`` and ``/v1/models`` with the expected served name; otherwise it starts one and waits until it is
ready, still holding the lock, so concurrent cells of one model wait and then reuse it: one server per model
per run per machine (docs/servers.md). Its counterpart, :func:`release_server`, stops the run's server of a model
once no later job of the run needs it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from anyjev.errors import ServerError
from anyjev.files import flock
from anyjev.serving.argv import build_argv
from anyjev.serving.build import resolve_server
from anyjev.serving.health import ServerHandle, health, http_client, served_names
from anyjev.serving.launch import start_server
from anyjev.serving.proc import is_our_supervisor, owner_alive, pid_alive, proc_start_time
from anyjev.serving.spec import ServerSpec
from anyjev.serving.state import ServerRecord, read_api_key, read_record
from anyjev.serving.stop import stop_record


def _reuse_problem(record: ServerRecord, spec: ServerSpec, owner_pid: int, owner_start: int | None,
                   host: str) -> tuple[str | None, bool]:
    """Why the recorded server may not be reused (None: reuse it), and whether it is ours to stop.

    A server that answers for another served name is another model's: refuse it, never stop it.
    """
    if record.name != spec.name:
        return f"the record is for {record.name!r}, not {spec.name!r}", False
    if record.state != "ready":
        return f"its state is {record.state!r}", True
    if record.ended:
        return f"it exited (code {record.exit_code}, {record.stopped})", True
    if record.host != host:
        return f"it runs on host {record.host!r}, not {host!r}", True
    if record.owner_pid != owner_pid or record.owner_start != owner_start:
        return f"it belongs to owner {record.owner_pid}, not {owner_pid}", True
    if record.spec_hash != spec.spec_hash():
        return "its spec differs", True
    if spec.port is not None and record.port != spec.port:
        return f"it listens on port {record.port}, not {spec.port}", True
    if record.served_name != spec.served_name:
        return f"it serves {record.served_name!r}, not {spec.served_name!r}", True
    if not pid_alive(record.pid) or not is_our_supervisor(record.supervisor_pid or 0, record.token):
        return "its processes are gone", True
    api_key = read_api_key(record.api_key_file) if record.api_key_file else None
    if record.api_key_file and api_key is None:
        return f"its API key file {record.api_key_file} is gone", True
    with http_client(api_key=api_key) as client:
        if health(client, record.url) != 200:
            return "/health is not 200", True
        names = served_names(client, record.url)
    if names is None or spec.served_name not in names:
        return f"/v1/models lists {names}, not {spec.served_name!r}", names is None
    return None, False


def acquire_server(spec: ServerSpec, *, state_dir: str | os.PathLike[str], owner_pid: int,
                   log_path: str | os.PathLike[str]) -> ServerHandle:
    """Reuse this run's live server for the model, or start one, for SPEC as resolved on this machine
    (:func:`~anyjev.serving.build.resolve_server`). The server dies with OWNER_PID (the run), not with the calling job."""
    spec = resolve_server(spec)
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
    with flock(state_dir / f"{spec.name}.lock"):
        record = read_record(state_file)
        if record is not None:
            problem, stoppable = _reuse_problem(record, spec, owner_pid, owner_start, host)
            if problem is None:
                return ServerHandle.from_record(record, reused=True)
            # Ours but unusable (unhealthy, other spec, left half-started by a killed job), or its owner is
            # gone: stop it. A live server of another live owner (another run) is left alone; it dies with it.
            rec_owner = int(record.owner_pid or 0)
            if stoppable and record.host == host and (
                (rec_owner == owner_pid and record.owner_start == owner_start)
                or not owner_alive(rec_owner, record.owner_start)
            ):
                stop_record(record, grace=record.stop_grace)
        return start_server(spec, log_path, owner_pid, state_file)


def release_server(name: str, *, state_dir: str | os.PathLike[str], owner_pid: int) -> bool:
    """Stop OWNER_PID's server of model NAME on this host, under the model's lease lock; True if it was running.

    For the last job of a model (``score_jobs: model``): otherwise the server would keep its memory and its cores until
    the whole run ends. A record of another owner (another run) or another host is left alone.
    """
    state_dir = Path(state_dir)
    state_file = state_dir / f"{name}.json"
    with flock(state_dir / f"{name}.lock"):
        record = read_record(state_file)
        if (record is None or record.host != socket.gethostname() or record.owner_pid != owner_pid
                or record.owner_start != proc_start_time(owner_pid)):
            return False
        record.state_file = record.state_file or str(state_file)
        return stop_record(record, grace=record.stop_grace)
