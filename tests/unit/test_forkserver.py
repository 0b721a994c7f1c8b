"""The per-cell commands' fork server (anyjev/run/forkserver.py): a command run through it writes the same files, exit
code and messages as in its own process; one server per run, started once however many clients race, stopped with
its owner; no server, and the command still runs; Ctrl-C reaches the forked command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from anyjev.run.forkserver import ENV_SWITCH, MODULE, RECORD_ENV, server_pids, socket_path
from tests.conftest import REPO
from tests.waiting import HANG_GUARD, wait_exit, wait_for

CELL = REPO / "results" / "cells" / "smollm2-135m" / "rotten_tomatoes" / "scores.jsonl"


@pytest.fixture
def short_tmp():
    """A temporary folder with a short path: the server's socket lives under it (a Unix socket path is 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="fs-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def owner():
    """A process standing in for the Snakemake process that owns the server."""
    proc = subprocess.Popen(["sleep", str(int(HANG_GUARD))])
    yield proc
    proc.kill()
    proc.wait()


def client_env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), RECORD_ENV: str(tmp / "record.jsonl"), **extra}


def client(owner_pid: int, argv: list[str], tmp: Path, cwd: Path | None = None, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", MODULE, "--owner-pid", str(owner_pid), "--", *argv],
                            cwd=cwd or tmp, env=client_env(tmp, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=HANG_GUARD)
    return proc.returncode, out, err


def record(tmp: Path) -> list[dict]:
    path = tmp / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def the_socket(tmp: Path, owner_pid: int) -> Path:
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        return socket_path(owner_pid)
    finally:
        tempfile.tempdir = saved


def evaluate_argv(job: Path) -> list[str]:
    return ["evaluate", "--job", str(job), "--scores", str(CELL), "--out", "metrics.json", "--predictions", "p.csv"]


@pytest.fixture
def evaluate_job(tmp_path) -> Path:
    from anyjev.settings import Settings

    job = tmp_path / "evaluate.json"
    job.write_text(Settings.load(REPO / "config" / "config.yaml", workdir=REPO).evaluate_job().to_json())
    return job


def test_a_forked_command_writes_what_it_writes_in_its_own_process(short_tmp, owner, evaluate_job) -> None:
    forked, alone = short_tmp / "forked", short_tmp / "alone"
    forked.mkdir()
    alone.mkdir()
    rc, _, err = finished(client(owner.pid, evaluate_argv(evaluate_job), short_tmp, cwd=forked))
    assert rc == 0, err
    assert "no fork server" not in err and "evaluated" in err  # its log, from the forked child
    rc, _, err = finished(client(owner.pid, evaluate_argv(evaluate_job), short_tmp, cwd=alone, **{ENV_SWITCH: "off"}))
    assert rc == 0, err
    for name in ("metrics.json", "p.csv"):  # relative paths: the child works in the client's folder
        assert (forked / name).read_bytes() == (alone / name).read_bytes(), name
    rows = record(short_tmp)
    assert [r["command"] for r in rows if r["command"] == "evaluate"] == ["evaluate"]  # off: no child
    assert next(r for r in rows if r["command"] == "evaluate")["rc"] == 0


def test_bad_input_keeps_its_exit_code_and_message(short_tmp, owner) -> None:
    argv = ["evaluate", "--job", "{}", "--scores", "missing.jsonl", "--out", "m.json"]
    forked = finished(client(owner.pid, argv, short_tmp))
    alone = finished(client(owner.pid, argv, short_tmp, **{ENV_SWITCH: "off"}))
    assert forked[0] == alone[0] == 2
    assert forked[2] == alone[2] and "missing.jsonl" in forked[2]
    assert [r["rc"] for r in record(short_tmp) if r["command"] == "evaluate"] == [2]


def test_clients_of_one_owner_share_one_server_that_stops_with_its_owner(short_tmp, owner) -> None:
    argv = ["evaluate", "--job", "{}", "--scores", "missing.jsonl", "--out", "m.json"]
    racing = [client(owner.pid, argv, short_tmp) for _ in range(4)]  # none finds a server: they race to start one
    assert [finished(p)[0] for p in racing] == [2] * 4
    [server] = server_pids(owner.pid)
    assert the_socket(short_tmp, owner.pid).exists()
    owner.kill()
    owner.wait()
    wait_exit(server)
    rows = record(short_tmp)
    assert sum(r["command"] == "fork-server" for r in rows) == 1
    assert sum(r["command"] == "evaluate" for r in rows) == sum(r["command"] == "fork-client" for r in rows) == 4
    sock = the_socket(short_tmp, owner.pid)
    assert not sock.exists() and not sock.with_suffix(".lock").exists()


def test_a_socket_left_by_a_dead_server_is_replaced(short_tmp, owner) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(the_socket(short_tmp, owner.pid)))
    stale.close()  # the file stays; nobody listens
    rc, _, err = finished(client(owner.pid, ["evaluate", "--job", "{}", "--scores", "x", "--out", "m"], short_tmp))
    assert rc == 2 and "no fork server" not in err, err
    assert len(server_pids(owner.pid)) == 1


def test_without_a_server_the_command_runs_in_the_client(short_tmp) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # an owner that has exited: the server refuses to start
    rc, _, err = finished(client(gone.pid, ["evaluate", "--job", "{}", "--scores", "x", "--out", "m"], short_tmp))
    assert rc == 2
    assert "no fork server (the fork server did not start" in err and "anyjev evaluate: argument --scores" in err
    assert not server_pids(gone.pid)


def test_ctrl_c_reaches_the_forked_command(short_tmp, owner, evaluate_job) -> None:
    proc = client(owner.pid, evaluate_argv(evaluate_job), short_tmp)

    def child() -> int | None:  # the server's child, named after its command
        for server in server_pids(owner.pid):
            for entry in Path(f"/proc/{server}/task/{server}/children").read_text().split():
                if Path(f"/proc/{entry}/comm").read_text().strip() == "evaluate":
                    return int(entry)
        return None

    wait_for(child, "the forked evaluate", unless=lambda: proc.poll() is not None and "the client exited")
    proc.send_signal(signal.SIGINT)
    rc, _, err = finished(proc)
    assert rc == 130 and "anyjev evaluate: interrupted" in err, err
    assert not (short_tmp / "metrics.json").exists()
