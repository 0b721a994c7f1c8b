"""`anyjev serve` holds a managed server until Ctrl-C (or a kill), then stops it and removes its record: a record is a
lease on a running server, and none is left for a server that is gone (issue 32, item 5).

The server is the stand-in of testbed/vllm_server.py, installed as ``vllm.entrypoints.openai.api_server`` in a
temporary folder, so the command starts it with the real argv through the real supervisor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from anyjev.backends.vllm import ClientOptions
from anyjev.run.cell import ManagedServer, ScoreJob
from anyjev.run.identity import ScoringOptions
from anyjev.serving.spec import ServerSpec
from anyjev.serving.stop import stop_servers
from testbed import vllm_server
from tests.conftest import REPO
from tests.vllm_processes import vllm_process_pids


def sigint_ignored() -> None:
    """A Popen preexec_fn: the command starts with SIGINT ignored, as a script's background job (or nohup) starts it;
    Ctrl-C must end it all the same."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def stub_root(tmp_path: Path) -> Path:
    return vllm_server.install(tmp_path / "stub", version="stub-0.0")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_serve_stopped_leaves_no_record_and_no_process(stop, stub_root: Path, tmp_path: Path, fault_seen) -> None:
    name = f"serve-{uuid.uuid4().hex[:8]}"
    spec = ServerSpec(name=name, model=f"/nonexistent/{name}", served_name=name, python=sys.executable, dtype="float32",
                      block_size=128, server_env=(("PYTHONPATH", vllm_server.server_path(stub_root)), ("STUB_CHILD", "1")),
                      start_timeout=60.0, stop_grace=3.0)
    state = tmp_path / "state"
    job = ScoreJob(model=name, task="t", tokenizer="tok", client=ClientOptions(), scoring=ScoringOptions(),
                   managed=ManagedServer(spec, str(tmp_path / "server.log"), str(state)), external=None)
    proc = subprocess.Popen([sys.executable, "-m", "anyjev", "serve", "--job", job.to_json()], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONPATH": str(REPO)}, preexec_fn=sigint_ignored)
    try:
        printed = ""
        for line in proc.stdout:  # the handle, printed once the server is ready
            printed += line
            if line.startswith("}"):
                break
        handle = json.loads(printed)
        assert handle["served_name"] == name and [p.name for p in state.glob("*.json")] == [f"{name}.json"]
        key_file = Path(handle["api_key_file"])  # where the key is (readable by this user only), never the key
        key = key_file.read_text()
        assert key and key not in printed and "api_key" not in handle
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=120)
        records, processes = sorted(p.name for p in state.glob("*.json")), vllm_process_pids(name)
    finally:  # after what the command left was seen: whatever it left goes, so a failure does not cascade
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_servers(state, grace=1.0)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert not records, f"records left: {records}"
    assert key not in err and f"Bearer $(cat {key_file})" in err, err
    assert not key_file.exists(), sorted(p.name for p in state.iterdir())
    assert not processes, "server processes left"
    fault_seen(f"(no message) `anyjev serve` stopped by {stop.name}: server stopped, record removed, 0 processes left")
