"""A `url` model's prompts against the context its server reports: the run refuses an over-long prompt before its first
request, naming the item and the server, and `anyjev plan` counts it (the stub of tests/stub_http.py reports a
max_model_len like vLLM's /v1/models)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anyjev.errors import TaskDataError
from anyjev.plan import plan_config, plan_text
from anyjev.run.cell import score_job
from tests.stub_http import StubCompletions
from tests.unit.test_server_check import MODEL, url_job


@pytest.fixture
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]
        yield s


def test_a_prompt_longer_than_the_url_servers_context_is_refused_before_any_request(tmp_path, stub, qwen3_tokenizer,
                                                                                     fault_seen):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    stub.max_model_len = 30
    with pytest.raises(TaskDataError) as exc:
        score_job(job, task_file, tmp_path / "scores.jsonl", None, owner_pid=0)
    fault_seen(exc.value)
    message = str(exc.value)
    assert f"the context of the server at {stub.url} (its --max-model-len)" in message and "> 30" in message, message
    assert "item 'i" in message and f"{task_file}:line" in message, message
    assert stub.requests == [], "no request was sent"


def test_plan_counts_the_prompts_too_long_for_a_url_servers_context(tmp_path, stub, qwen3_tokenizer):
    url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    stub.max_model_len = 30
    plan = plan_config(tmp_path / "config.yaml", models_dir="unused", hub_cache="unused")
    [cell] = plan["cells"]
    assert cell["context"] == 30 and cell["too_long"] == cell["items"] > 0
    text = plan_text(plan)
    assert f"the max_model_len the server at {stub.url} reports" in text, text

    stub.stop()  # a server that does not answer: the plan says the lengths are not checked, and why
    plan = plan_config(tmp_path / "config.yaml", models_dir="unused", hub_cache="unused")
    assert plan["cells"][0]["context"] is None and "prompt lengths not checked" in plan_text(plan)
