"""Prompt lengths against the context, with the real SmolLM2 tokenizer: the count checked is the count the
scorer sends, the error names the item, its task-file line, its token count and the limit, and a prompt
of exactly the limit less the answer token passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anyjev.data.taskfile import find_item_line, load_task_file
from anyjev.data.tasks import Item
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import TaskDataError
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.context import check_prompt_lengths
from anyjev.run.identity import ScoringOptions
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell

LONG_STATE = "The quick brown fox jumps over the lazy dog. " * 1112  # 50,040 characters
ITEMS = [
    {"task": "ctx"},
    {"id": "short", "state": "a red apple", "question": "Which colour?", "options": ["red", "green", "blue"], "gold": 0},
    {"id": "long", "state": LONG_STATE[:50_000], "question": "Which colour?", "options": ["red", "green", "blue"],
     "gold": 1},
    {"id": "mid", "state": "a ripe tomato " * 40, "question": "Which colour?", "options": ["red", "green", "blue"],
     "gold": 0},
]


class RecordingBackend:
    """Records every prompt sent; the values are uniform (only lengths matter here)."""

    name = "recording"

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        self.sent += [list(p) for p in prompts]
        return log_softmax(np.zeros((len(prompts), len(label_ids))))

    def describe(self) -> dict:
        return {"backend": self.name}


def prep(tokenizer, items):
    """The items as a cell prepares them (the schema's prompt options)."""
    return prepare_items(tokenizer, items, ["g"] * len(items), PromptOptions())


def scored(tokenizer, items, tmp_path: Path) -> RecordingBackend:
    """Score the items against a recording backend: every prompt sent."""
    backend = RecordingBackend()
    score_cell(backend, tokenizer, prep(tokenizer, items), str(tmp_path / "s.jsonl"), {"t": 1}, options=ScoringOptions(),
               chunk_items=16)
    return backend


def task_file(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "my tasks" / "ctx.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return p


def test_a_50000_character_state_is_refused_naming_item_line_tokens_and_key(tmp_path, smollm2_tokenizer, fault_seen) -> None:
    path = task_file(tmp_path, ITEMS)
    items = load_task_file(path).items
    assert len(items[1].state) == 50_000
    with pytest.raises(TaskDataError) as exc:
        check_prompt_lengths(prep(smollm2_tokenizer, items), 2048, source=path, model="smol")
    msg = str(exc.value)
    fault_seen(exc.value)
    # the token count named is the longest prompt the scorer would send for that item
    longest = max(len(p) for p in scored(smollm2_tokenizer, [items[1]], tmp_path).sent)
    assert longest > 10_000
    assert msg.startswith(f"{path}:line 3: item 'long': ")
    assert f"is {longest} tokens" in msg and f"{longest + 1} > 2048" in msg
    assert "models.smol.max_model_len" in msg and "shorten the item's state (50000 characters)" in msg
    assert "other item" not in msg  # 'short' and 'mid' fit


def test_checked_length_is_what_the_scorer_sends_and_the_answer_token_counts(tmp_path, smollm2_tokenizer) -> None:
    """Mixed kinds (choice, noul, score) and every layout: the longest prompt sent equals the one checked;
    a context of exactly longest + 1 passes, one token less fails."""
    items = [
        Item("c", "a red apple " * 30, choice("Which colour?", ["red", "green", "dark blue"]), 0),
        Item("n", "WIN A FREE PHONE " * 50, noul("Is this spam?"), 0),
        Item("s", "disk 95% full", score("How severe?", ["low", "medium", "high"], scale=(0, 10)), 2),
    ]
    longest = max(len(p) for p in scored(smollm2_tokenizer, items, tmp_path).sent)
    prepared = prep(smollm2_tokenizer, items)
    assert check_prompt_lengths(prepared, 10**6, source="<code>") == longest
    assert check_prompt_lengths(prepared, longest + 1, source="<code>") == longest
    with pytest.raises(TaskDataError, match=rf"<code>:file: item 'n': .* is {longest} tokens.* {longest + 1} > {longest}"):
        check_prompt_lengths(prepared, longest, source="<code>")


def test_every_item_too_long_is_counted(tmp_path, smollm2_tokenizer) -> None:
    path = task_file(tmp_path, ITEMS)
    with pytest.raises(TaskDataError) as exc:
        check_prompt_lengths(prep(smollm2_tokenizer, load_task_file(path).items), 60, source=path)
    msg = str(exc.value)
    assert ":line 3: item 'long'" in msg and "2 other item(s) are too long as well: 'short', 'mid'." in msg
    assert "models.<name>.max_model_len" in msg


def test_bad_limit_is_refused(smollm2_tokenizer) -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        check_prompt_lengths([], 0, source="x")


def test_find_item_line(tmp_path) -> None:
    path = task_file(tmp_path, ITEMS + [{"id": 7, "state": "", "question": "Q", "options": ["a", "b", "c"], "gold": 0}])
    assert [find_item_line(path, i) for i in ("short", "long", "mid", "7", "none")] == [2, 3, 4, 5, None]
    assert find_item_line(tmp_path / "missing.jsonl", "short") is None


def test_a_max_model_len_above_the_models_own_context_is_refused_before_a_server_starts(tmp_path, fault_seen) -> None:
    from anyjev.errors import ConfigError
    from anyjev.run.cell import check_max_model_len

    def model_dir(**config) -> Path:
        d = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config))
        return d

    plain = model_dir(max_position_embeddings=2048)
    with pytest.raises(ConfigError) as info:
        check_max_model_len(4096, plain, "smol")
    fault_seen(info.value)
    assert info.value.key_path == "models.smol.max_model_len"
    assert "4096 is more than the model's own context, 2048 tokens" in str(info.value) and str(plain) in str(info.value)
    check_max_model_len(2048, plain, "smol")  # equal: vLLM accepts it
    check_max_model_len(None, plain, "smol")  # unset: the model's own
    check_max_model_len(4096, plain, "smol", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})  # vLLM lets it through
    # RoPE scaling stretches the context, a larger model_max_length allows more: not judged here, vLLM decides
    check_max_model_len(4096, model_dir(max_position_embeddings=2048, rope_scaling={"type": "linear", "factor": 4.0}), "smol")
    check_max_model_len(4096, model_dir(max_position_embeddings=2048, rope_parameters={"rope_type": "yarn", "factor": 4}), "smol")
    check_max_model_len(4096, model_dir(max_position_embeddings=2048, model_max_length=8192), "smol")
    with pytest.raises(ConfigError):  # a default RoPE without a factor stretches nothing (SmolLM2's config.json)
        check_max_model_len(4096, model_dir(max_position_embeddings=2048, rope_parameters={"rope_type": "default"}), "smol")
    check_max_model_len(4096, tmp_path / "no-config", "smol")


def test_a_prepared_file_task_cites_the_line_of_the_users_file(tmp_path, smollm2_tokenizer, monkeypatch,
                                                               fault_seen) -> None:
    """The prepare step records the user's task file (as the config names it, and its hash) in the prepared file's
    origin; the check at scoring cites the item's line there, then the prepared file's. An edited user file is not
    cited (its lines may have moved)."""
    from anyjev.data.prepare import PrepareJob, prepare_task

    monkeypatch.chdir(tmp_path)
    rows = ITEMS[1:]  # no header: the item 'long' is on line 2 of the user's file
    user = task_file(tmp_path, [rows[0], {"id": "pad", "state": "", "question": "Q", "options": ["a", "b"], "gold": 0},
                                rows[1], rows[2]])
    rel = str(user.relative_to(tmp_path))
    job = PrepareJob(name="ctx", source="file", dataset="ctx", path=rel, hub=None, n_test=2, n_calib=2, allow_fewer=False,
                     split_seed=0, hub_cache="hub", fits_temperature=False)
    prepared_path = tmp_path / "resources" / "tasks" / "ctx.jsonl"
    prepare_task(job, prepared_path)
    task = load_task_file(prepared_path)
    assert task.source["origin"]["file"] == rel and task.source["origin"]["split"]["n_test"] == 2
    prepared = prep(smollm2_tokenizer, [it for it in task.items if it.id == "long"])
    in_prepared = find_item_line(prepared_path, "long")
    with pytest.raises(TaskDataError) as exc:
        check_prompt_lengths(prepared, 2048, source=prepared_path, model="smol", origin=task.source["origin"])
    fault_seen(exc.value)
    assert str(exc.value).startswith(f"{rel}:line 3 (prepared as {prepared_path}:line {in_prepared}): item 'long': ")
    user.write_text(user.read_text() + "\n")  # edited since: its lines are no longer the prepared ones'
    with pytest.raises(TaskDataError) as exc:
        check_prompt_lengths(prepared, 2048, source=prepared_path, model="smol", origin=task.source["origin"])
    assert str(exc.value).startswith(f"{prepared_path}:line {in_prepared}: item 'long': ")
