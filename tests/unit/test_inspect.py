"""Looking inside a run: `anyjev show` prints the token ids that were scored (checked against the prompt
hashes a real score_cell run stored, with the real SmolLM2 tokenizer and a stub backend), the export
pairs every score with its prompt text and refuses a prompt that is not the scored one, and `anyjev ls`
lists the configured tasks."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
import yaml

from anyjev.cli import main
from anyjev.data.taskfile import load_task_file, write_task_file
from anyjev.data.tasks import Item, Task
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import encode, prompt_hash
from anyjev.decision.questions import choice, score
from anyjev.errors import TaskDataError
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.identity import ScoringOptions
from anyjev.run.inspect import export_scores_with_prompts, list_tasks, show_prompt, tasks_table
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.run.store import write_scores
from anyjev.rundata.scores import read_scores

COLOUR = choice("Which colour is the object?", ["red", "green", "blue"])
SEVERITY = score("How severe is it?", ["low", "medium", "high"])


class StubBackend:
    """Deterministic label log-probs per prompt (stands in for a server; the ids are what matter here)."""

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        rows = []
        for p in prompts:
            logits = [int.from_bytes(hashlib.sha256(f"{list(p)}|{lab}".encode()).digest()[:4], "big") / 2**32 * 6
                      for lab in label_ids]
            rows.append(log_softmax(np.array(logits)))
        return np.array(rows)

    def describe(self) -> dict:
        return {"backend": "stub"}


@pytest.fixture(scope="module")
def scored(smollm2_tokenizer, tmp_path_factory) -> dict:
    """A task file and the scores a real score_cell run wrote for it."""
    root = tmp_path_factory.mktemp("cell")
    items = [Item("c1", "a red apple", COLOUR, 0, "test"), Item("c2", "the sky at noon", COLOUR, 2, "calib"),
             Item("s1", "server down", SEVERITY, 2, "test"), Item("c3", "ünïcode — “quoted”", COLOUR, 1, "test")]
    task_file = write_task_file(Task("mini", items), root / "tasks" / "mini.jsonl")
    task = load_task_file(task_file)
    identity = {"task": "mini", "task_sha256": task.source["sha256"], "model": {"backend": "stub"},
                "prompt_version": "test", "layouts": {"permute": True, "flip": True}}
    scores = root / "cells" / "m" / "mini" / "scores.jsonl"
    options = ScoringOptions()
    prepared = prepare_items(smollm2_tokenizer, task.items, task.prior_groups(), options.prompt)
    score_cell(StubBackend(), smollm2_tokenizer, prepared, str(scores), identity, options=options, chunk_items=2)
    return {"task_file": task_file, "scores": scores, "records": read_scores(scores).items}


def _ids(out: str) -> list[list[int]]:
    return [json.loads(m) for m in re.findall(r"^# token ids: (\[.*\])$", out, re.M)]


def test_show_prints_the_scored_token_ids(scored, smollm2_tokenizer) -> None:
    n_layouts = 0
    for rec in scored["records"]:
        out = show_prompt(scored["task_file"], rec["id"], smollm2_tokenizer, PromptOptions(), "all", show_ids=True)
        shown = _ids(out)
        heads = re.findall(r"^# task mini item \S+ layout (\S+): .* (\d+) tokens, prompt_sha (\w+)$", out, re.M)
        assert [h[0] for h in heads] == list(rec["layouts"])
        for (name, n_tok, sha), ids in zip(heads, shown, strict=True):
            assert prompt_hash(ids) == rec["layouts"][name]["prompt_sha"] == sha
            assert int(n_tok) == len(ids)
            n_layouts += 1
    assert n_layouts == 3 * 6 + 1  # three choice items (3 rotations x 2 orders), one ordered score item


def test_show_text_encodes_to_the_scored_ids(scored, smollm2_tokenizer) -> None:
    rec = next(r for r in scored["records"] if r["id"] == "c3")
    out = show_prompt(scored["task_file"], "c3", smollm2_tokenizer, PromptOptions(), "rev/r1")
    text = out.split("----\n", 1)[1].rsplit("\n# ---- end of prompt text", 1)[0]
    assert "ünïcode — “quoted”" in text and "Options:" in text
    assert prompt_hash(encode(smollm2_tokenizer, text)) == rec["layouts"]["rev/r1"]["prompt_sha"]


def test_cli_show(scored, smollm2_dir, capsys) -> None:
    """`anyjev show` with the cell's scores file renders under the options the cell was scored with."""
    rec = scored["records"][0]
    cell = ["--task-file", str(scored["task_file"]), "--scores", str(scored["scores"]), "--tokenizer", str(smollm2_dir)]
    assert main(["show", *cell, "--item", rec["id"], "--layout", "fwd/r1", "--ids"]) == 0
    (ids,) = _ids(capsys.readouterr().out)
    assert prompt_hash(ids) == rec["layouts"]["fwd/r1"]["prompt_sha"]
    assert main(["show", *cell, "--item", "nope"]) == 2
    assert "no such item id" in capsys.readouterr().err
    assert main(["show", *cell, "--item", "s1", "--layout", "rev/r0"]) == 2
    assert "this item has: fwd/r0" in capsys.readouterr().err


def test_export_pairs_scores_with_their_prompt_text(scored, smollm2_tokenizer) -> None:
    out = export_scores_with_prompts(scored["scores"], scored["task_file"], smollm2_tokenizer)
    assert out == scored["scores"].with_name("scores_with_prompts.jsonl")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "anyjev.scores_with_prompts/1"
    recs = [json.loads(line) for line in lines[1:]]
    assert [r["id"] for r in recs] == [r["id"] for r in scored["records"]]
    for rec, orig in zip(recs, scored["records"], strict=True):
        for name, lay in rec["layouts"].items():
            assert lay["lp"] == orig["layouts"][name]["lp"]
            ids = encode(smollm2_tokenizer, lay["text"])
            assert prompt_hash(ids) == lay["prompt_sha"] and lay["n_tokens"] == len(ids)


def test_export_refuses_a_prompt_that_was_not_scored(scored, smollm2_tokenizer, tmp_path) -> None:
    read = read_scores(scored["scores"])
    identity, records = read.identity, read.items
    records[2]["layouts"]["fwd/r0"]["prompt_sha"] = "0123456789abcdef"
    bad = tmp_path / "scores.jsonl"
    write_scores(bad, identity, records)
    with pytest.raises(TaskDataError, match=r"line 4.*item 's1' layout fwd/r0.*0123456789abcdef.*refusing"):
        export_scores_with_prompts(bad, scored["task_file"], smollm2_tokenizer)
    assert not (tmp_path / "scores_with_prompts.jsonl").exists()


def test_export_refuses_another_tokenizer(scored, tmp_path, qwen3_tokenizer) -> None:
    with pytest.raises(TaskDataError, match="not the prompt that was scored"):
        export_scores_with_prompts(scored["scores"], scored["task_file"], qwen3_tokenizer, out=tmp_path / "x.jsonl")


def test_ls_lists_prepared_and_configured_tasks(scored, tmp_path, capsys) -> None:
    config = {"tasks": {"mini": {"source": "file", "n_test": 3, "n_calib": 1},
                        "later": {"source": "builtin", "n_test": 100, "n_calib": 60}}}
    rows = list_tasks(config, scored["task_file"].parent)
    assert rows[0] | {"file": ""} == {"task": "mini", "source": "file", "prepared": True, "file": "", "kind": "choice,score",
                                      "K": "3", "n_test": 3, "n_calib": 1, "n_items": 4, "questions": 2}
    assert rows[1]["prepared"] is False and rows[1]["K"] == "?" and rows[1]["n_test"] == 100
    table = tasks_table(rows)
    assert re.search(r"^mini\s+file\s+choice,score\s+3\s+3\s+1\s+2\s+yes$", table, re.M)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["ls", "--config", str(cfg), "--tasks-dir", str(scored["task_file"].parent)]) == 0
    assert capsys.readouterr().out == table
