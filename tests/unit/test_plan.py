"""`anyjev plan` counts what a run sends: checked against a real prepared and scored cell (real SmolLM2 through the
transformers backend), its hub estimates against the same tasks built from a cache, and config/paper.yaml offline."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from anyjev import cli
from anyjev.data.hub import declaration
from anyjev.plan import plan_config
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.settings import Settings
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO
from tests.unit.test_datasets_hub import BANKING_NAMES, write_cache

QWEN3_TOKENIZER = QWEN3_TOKENIZER_DIR


def plan_of(config) -> dict:
    """`anyjev plan` of CONFIG, with the workflow's folders."""
    return plan_config(config, models_dir="resources/models", hub_cache="resources/hub")


def score_as_configured(config: Path, backend, tokenizer, task, out: str, chunk_items: int) -> dict:
    """Score TASK as CONFIG's score job would: its scoring options, prompts prepared under them."""
    options = Settings.load(config).scoring
    return score_cell(backend, tokenizer, prepare_items(tokenizer, task.items, task.prior_groups(), options.prompt), out,
                      {"t": 1}, options=options, chunk_items=chunk_items)


def write_config(path: Path, models: dict, tasks: dict) -> Path:
    path.write_text(yaml.safe_dump({"models": models, "tasks": tasks, "published": None}))
    return path


def mixed_task_rows() -> list[dict]:
    rows = [{"id": f"c3-{i}", "state": f"case {i}", "question": "Which colour?", "kind": "choice",
             "options": ["red", "green", "blue"], "gold": i % 3} for i in range(3)]
    # K = 2: fwd/r1 shows the same order as rev/r0, so 4 layouts are 2 distinct prompts (as for Yes/No)
    rows += [{"id": f"c2-{i}", "state": f"pair {i}", "question": "Which one?", "kind": "choice", "options": ["up", "down"],
              "gold": 0} for i in range(2)]
    rows += [{"id": f"yn-{i}", "state": f"message {i}", "question": "Is it spam?", "kind": "noul", "gold": "Yes"} for i in range(3)]
    rows += [{"id": f"s-{i}", "state": f"pain {i}", "question": "How severe?", "kind": "score",
              "options": ["mild", "moderate", "severe"], "gold": 1} for i in range(2)]
    return rows


def test_plan_counts_equal_a_real_scored_cell(smollm2_dir, tmp_path: Path, monkeypatch) -> None:
    from anyjev.backends.hf import HFBackend
    from anyjev.data.prepare import prepare_task
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.settings import Settings

    monkeypatch.chdir(tmp_path)
    Path("mix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed_task_rows()))
    config = write_config(tmp_path / "c.yaml", {"smol": {"source": "local", "path": str(smollm2_dir)}},
                          {"mix": {"source": "file", "path": "mix.jsonl", "n_test": 6, "n_calib": 3}})
    plan = plan_of(config)
    [cell] = plan["cells"]
    assert cell["estimate"] is None and cell["prompt_tokens"] is not None

    task = prepare_task(Settings.load(config).prepare_job("mix", hub_cache="resources/hub"), "mix-split.jsonl")
    tokenizer = load_tokenizer(smollm2_dir)
    backend = HFBackend(str(smollm2_dir))
    sent: list[list[list[int]]] = []
    real = backend.label_logprobs
    backend.label_logprobs = lambda prompts, ids: (sent.append([list(p) for p in prompts]), real(prompts, ids))[1]
    # One item per chunk: each request holds exactly one item's distinct prompts, as the plan counts them.
    counts = score_as_configured(config, backend, tokenizer, task, "scores.jsonl", chunk_items=1)
    records = [json.loads(line) for line in Path("scores.jsonl").read_text().splitlines()]
    records = [r for r in records if r.get("type") == "item"]

    assert cell["items"] == counts["items"] == len(records) == 9
    assert (cell["n_test"], cell["n_calib"]) == (sum(r["split"] == "test" for r in records), sum(r["split"] == "calib" for r in records))
    per_item = [len(r["layouts"]) for r in records]
    assert cell["layouts"] == sum(per_item) and cell["layouts_per_item"] == [min(per_item), max(per_item)] == [1, 6]
    assert cell["prompts"] == counts["prompts"] == sum(len(req) for req in sent[1:])  # sent[0]: the canary
    assert cell["prompts"] < cell["layouts"]  # K = 2 and Yes/No items repeat prompts; scoring sends them once
    assert cell["prompt_tokens"] == sum(len(p) for req in sent[1:] for p in req)
    assert plan["server_starts"] == {"local": {"smol": 1}, "slurm": {"smol": 1}}


def test_hub_estimate_equals_the_built_task(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "c.yaml", {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER)}},
                          {"banking20": {"source": "hub", "n_test": 4, "n_calib": 2, "allow_fewer": False},
                           "injection": {"source": "hub", "n_test": 3, "n_calib": 2, "allow_fewer": False}})
    estimate = plan_of(config)
    assert all(c["estimate"] and "not fetched" in c["estimate"] for c in estimate["cells"])
    assert all(c["prompt_tokens"] is None and c["tokens_note"] == "task data not fetched" for c in estimate["cells"])
    write_cache(tmp_path / "resources" / "hub", "banking20",
                {"train": [{"text": "x", "label": i, "label_text": BANKING_NAMES[i]} for i in range(25) for _ in range(25 - i)],
                 "test": [{"text": f"request {j}", "label": j % 20, "label_text": BANKING_NAMES[j % 20]} for j in range(8)]},
                revision=declaration("banking20").revision)
    write_cache(tmp_path / "resources" / "hub", "injection",
                {"train": [{"text": f"msg {j}", "label": j % 2} for j in range(4)], "test": [{"text": "t", "label": 1}]},
                revision=declaration("injection").revision)
    exact = plan_of(config)
    for e, x in zip(estimate["cells"], exact["cells"], strict=True):
        assert x["estimate"] is None and x["prompt_tokens"] > 0, x
        for key in ("items", "n_test", "n_calib", "layouts", "layouts_per_item", "prompts"):
            assert e[key] == x[key], (x["task"], key, e[key], x[key])
    assert [c["layouts_per_item"] for c in exact["cells"]] == [[40, 40], [4, 4]]
    assert [c["prompts"] for c in exact["cells"]] == [6 * 40, 5 * 2]


def test_plan_of_the_paper_config_offline(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # no resources/ here: no hub data, no prepared model
    plan = plan_of(REPO / "config" / "paper.yaml")
    assert len(plan["cells"]) == 9
    assert plan["total"] == {"items": 4500, "n_test": 2700, "n_calib": 1800, "layouts": 3 * (500 * 40 * 2 + 500 * 4),
                             "prompts": 3 * (500 * 40 * 2 + 500 * 2), "prompt_tokens": 0, "cells_without_tokens": 9,
                             "cells_without_prompts": 0,
                             # the batch audit: scoring.audit's 4 test items a cell, each prompt of theirs read again
                             "audit_prompts": 3 * (4 * 40 * 2 + 4 * 2)}
    assert {c["task"]: c["layouts_per_item"][0] for c in plan["cells"]} == {"banking20": 40, "newsgroups": 40, "injection": 4}
    assert all(c["tokens_note"] == "task data not fetched, tokenizer not prepared" for c in plan["cells"])
    assert plan["server_starts"]["local"] == dict.fromkeys(["Qwen3-8B", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct-2507"], 1)
    assert plan["server_starts"]["slurm"] == plan["server_starts"]["local"]  # score_jobs auto: one job per model
    per_cell = tmp_path / "per-cell.yaml"  # the same grid cut into one job per cell: each job starts its server
    per_cell.write_text((REPO / "config" / "paper.yaml").read_text() + "\nscore_jobs: cell\n")
    assert plan_of(per_cell)["server_starts"]["slurm"] == dict.fromkeys(
        ["Qwen3-8B", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct-2507"], 3)
    assert cli.main(["plan", "--config", str(REPO / "config" / "paper.yaml")]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "123,000" in out and "n/a (task data not fetched, tokenizer not prepared)" in out
    assert "K = 20 (choice) from the declaration (keep_most_frequent)" in out and "server starts, local run (one per model): 3" in out
    assert ("GPUs per scoring job: Qwen3-8B 1 (one server: 1 engine x 1 GPU), Qwen2.5-7B-Instruct 1 (one server: 1 engine "
            "x 1 GPU), Qwen3-30B-A3B-Instruct-2507 2 (one server: 1 engine x 2 GPUs)\n") in out  # docs/cluster.md shows it
    # before the server environment exists (docs/cluster.md plans at step 4, sets it up at step 5): said, not refused
    [missing] = plan["missing_for_a_run"]
    assert missing.startswith("config key server.python: '.venv-server/bin/python' is not an executable interpreter")
    assert "not here yet (this plan does not need it; a run that starts a server does):\n  " + missing in out


def test_plan_says_when_the_tokenizer_is_not_prepared(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed_task_rows()))
    config = write_config(tmp_path / "c.yaml", {"h": {"source": "hub", "repo": "org/m", "revision": "main"}},
                          {"t": {"source": "file", "path": "t.jsonl", "n_test": 5, "n_calib": 5}})
    [cell] = plan_of(config)["cells"]
    assert cell["estimate"] is None and cell["items"] == 10 and cell["prompt_tokens"] is None
    assert cell["tokens_note"] == "tokenizer not prepared"


def test_plan_says_when_a_cell_holds_fewer_items_than_asked_and_l1_would_be_refused(tmp_path: Path, monkeypatch) -> None:
    """A 30-item file task under `n_test: 500, n_calib: 10`: allow_fewer splits it 29 + 1, which the plan says (the
    counts and the keys), with L1 refused on one calibration item; under allow_fewer: false the prepare step's one
    line names the file and the keys."""
    from anyjev.data.prepare import prepare_task
    from anyjev.errors import TaskDataError
    from anyjev.plan import plan_text

    monkeypatch.chdir(tmp_path)
    rows = [{"id": f"q{i}", "state": f"case {i}", "question": "Which colour?", "kind": "choice",
             "options": ["red", "green", "blue"], "gold": i % 3} for i in range(30)]
    Path("t_bigs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {"source": "file", "path": "t_bigs.jsonl", "n_test": 500, "n_calib": 10}
    config = write_config(tmp_path / "c.yaml", {"h": {"source": "hub", "repo": "org/m", "revision": "main"}},
                          {"t_bigs": task})
    plan = plan_of(config)
    [cell] = plan["cells"]
    assert (cell["n_test"], cell["n_calib"]) == (29, 1)
    assert cell["notes"] == ["29 test and 1 calibration items, fewer than the 500 and 10 the config asks "
                             "(tasks.t_bigs.n_test and n_calib; tasks.t_bigs.allow_fewer kept what there is)",
                             "no L1: 1 calibration item, fewer than evaluation.min_calib_items = 8"]
    text = plan_text(plan)
    assert "! fewer items than the config asks, or too few for L1" in text and "  t_bigs: no L1: 1 calibration" in text
    strict = Settings.load(write_config(tmp_path / "strict.yaml", {"h": {"source": "hub", "repo": "org/m", "revision": "main"}},
                                        {"t_bigs": task | {"allow_fewer": False}}))
    try:
        prepare_task(strict.prepare_job("t_bigs", hub_cache="resources/hub"), "out.jsonl")
    except TaskDataError as exc:
        assert str(exc) == ("t_bigs.jsonl:split: 30 items, fewer than tasks.t_bigs.n_test + n_calib = 500 + 10 "
                            "(tasks.t_bigs.allow_fewer: true keeps them all, in that proportion)")
    else:
        raise AssertionError("allow_fewer: false took 30 items for 510")
    full = write_config(tmp_path / "full.yaml", {"h": {"source": "hub", "repo": "org/m", "revision": "main"}},
                        {"t_bigs": task | {"n_test": 20, "n_calib": 10}})
    assert "notes" not in plan_of(full)["cells"][0]


def _mixed_task_plan(tmp_path: Path, monkeypatch) -> tuple[dict, dict, dict]:
    """A url model on the Qwen3 tokenizer and the mixed task file in TMP_PATH, and the plan of its plain cell."""
    monkeypatch.chdir(tmp_path)
    Path("mix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed_task_rows()))
    models = {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER)}}
    tasks = {"mix": {"source": "file", "path": "mix.jsonl", "n_test": 6, "n_calib": 3}}
    return models, tasks, plan_of(write_config(tmp_path / "plain.yaml", models, tasks))["cells"][0]


class _Recorder:
    """A backend that records every prompt it is handed and answers uniform label log-probs."""

    name = "recorder"

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def label_logprobs(self, prompts, label_ids):
        import numpy as np

        self.sent.extend(list(p) for p in prompts)
        return np.log(np.full((len(prompts), len(label_ids)), 1 / len(label_ids)))

    def vocab_logprobs(self, prompts, label_ids):
        import numpy as np

        self.sent.extend(list(p) for p in prompts)
        return np.full((len(prompts), len(label_ids)), -3.0)

    def exclusive(self):
        import contextlib

        return contextlib.nullcontext()

    def describe(self) -> dict:
        return {"backend": self.name}


def test_plan_counts_the_cells_prompt_profile_and_answer_mass(tmp_path: Path, monkeypatch) -> None:
    """Under paper.yaml's `published` prompts and with answer mass on, the plan counts what score_cell hands the
    backend (the published wording is 3 tokens longer per prompt on Qwen3; answer mass adds one prompt per item)."""
    from anyjev.data.prepare import prepare_task
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.settings import Settings

    models, tasks, plain = _mixed_task_plan(tmp_path, monkeypatch)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": models, "tasks": tasks, "published": None,
                                      "scoring": {"prompt_profile": "published", "answer_mass": True}}))
    [cell] = plan_of(config)["cells"]

    task = prepare_task(Settings.load(config).prepare_job("mix", hub_cache="resources/hub"), "mix-split.jsonl")
    backend = _Recorder()
    counts = score_as_configured(config, backend, load_tokenizer(QWEN3_TOKENIZER), task, "s.jsonl", chunk_items=1)
    work = backend.sent[2:]  # the canary: one label prompt and its answer-mass prompt
    assert cell["prompts"] == counts["prompts"] == len(work) == plain["prompts"] + cell["items"]
    assert cell["prompt_tokens"] == counts["prompt_tokens"] == sum(map(len, work))
    assert cell["prompt_tokens"] > plain["prompt_tokens"]


def test_plan_counts_the_content_free_probes_and_marks_adaptive_cells(tmp_path: Path, monkeypatch, capsys) -> None:
    """With the content-free prior the plan adds the probes score_cell reads (one set per distinct question);
    under adaptive rotations it says its counts are an upper bound."""
    from anyjev.data.prepare import prepare_task
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.settings import Settings

    models, tasks, plain = _mixed_task_plan(tmp_path, monkeypatch)
    config = tmp_path / "cf.yaml"
    config.write_text(yaml.safe_dump({"models": models, "tasks": tasks, "published": None,
                                      "evaluation": {"prior_mode": "content_free"}}))
    [cell] = plan_of(config)["cells"]
    task = prepare_task(Settings.load(config).prepare_job("mix", hub_cache="resources/hub"), "mix-split.jsonl")
    backend = _Recorder()
    counts = score_as_configured(config, backend, load_tokenizer(QWEN3_TOKENIZER), task, "s.jsonl", chunk_items=2)
    work = backend.sent[1:]  # the canary
    assert cell["content_free_prompts"] > 0 and "at_most" not in cell
    assert cell["prompts"] == counts["prompts"] == len(work) == plain["prompts"] + cell["content_free_prompts"]
    assert cell["prompt_tokens"] == counts["prompt_tokens"] == sum(map(len, work))

    adaptive = tmp_path / "adaptive.yaml"
    adaptive.write_text(yaml.safe_dump({"models": models, "tasks": tasks, "published": None,
                                        "scoring": {"rotations": "adaptive", "target_disagreement": 0.5,
                                                    "confidence": 0.5}}))  # 3 calibration items can certify that
    [upper] = plan_of(adaptive)["cells"]
    assert upper["prompts"] == plain["prompts"] and "adaptive" in upper["at_most"]
    from anyjev.plan import plan_text

    text = plan_text(plan_of(adaptive))
    assert f"<= {upper['prompts']:,}" in text and "<= at most: scoring.rotations is adaptive" in text


def test_plan_flags_prompts_longer_than_the_context(smollm2_dir, tmp_path: Path, monkeypatch, fault_seen) -> None:
    from anyjev.data.taskfile import load_task_file
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.errors import TaskDataError
    from anyjev.plan import plan_text
    from anyjev.run.context import check_prompt_lengths

    monkeypatch.chdir(tmp_path)
    rows = mixed_task_rows()
    rows[1]["state"] = "a long case " * 200  # ~600 tokens: past a context of 256; every row is in the split
    Path("mix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = {"source": "local", "path": str(smollm2_dir), "max_model_len": 256}
    config = write_config(tmp_path / "c.yaml", {"smol": model}, {"mix": {"source": "file", "path": "mix.jsonl",
                                                                         "n_test": 7, "n_calib": 3}})
    [cell] = plan_of(config)["cells"]
    assert cell["context"] == 256 and cell["too_long"] == 1 and cell["longest_prompt"] + 1 > 256
    text = plan_text(plan_of(config))
    assert "! prompts longer than the context" in text and "smol / mix: 1 item(s)" in text
    fault_seen(" ".join(line.strip() for line in text[text.index("! prompts longer"):].splitlines()[:3]))
    assert f"the longest prompt is {cell['longest_prompt']:,} tokens" in text and "models.smol.max_model_len" in text
    # What the plan flags is what scoring refuses: the same longest prompt, the same context
    from anyjev.data.prepare import prepare_task
    from anyjev.run.prepared import prepare_items

    task = prepare_task(Settings.load(config).prepare_job("mix", hub_cache="resources/hub"), "mix-split.jsonl")
    tokenizer = load_tokenizer(smollm2_dir)
    prepared = prepare_items(tokenizer, task.items, task.prior_groups(), Settings.load(config).scoring.prompt)
    try:
        check_prompt_lengths(prepared, 256, source="mix-split.jsonl", model="smol")
    except TaskDataError as exc:
        assert f"is {cell['longest_prompt']} tokens" in str(exc)
    else:
        raise AssertionError("scoring accepted what the plan flags")
    assert load_task_file("mix-split.jsonl").items  # the prepared file the check read

    model["max_model_len"] = 4096
    config = write_config(tmp_path / "c.yaml", {"smol": model}, {"mix": {"source": "file", "path": "mix.jsonl",
                                                                         "n_test": 7, "n_calib": 3}})
    [cell] = plan_of(config)["cells"]
    assert cell["too_long"] == 0 and "! prompts longer" not in plan_text(plan_of(config))
    # a max_model_len above the model's own (SmolLM2: max_position_embeddings 8192) is named, as scoring refuses it
    own = json.loads((smollm2_dir / "config.json").read_text())["max_position_embeddings"]
    model["max_model_len"] = own * 2
    config = write_config(tmp_path / "c.yaml", {"smol": model}, {"mix": {"source": "file", "path": "mix.jsonl",
                                                                         "n_test": 7, "n_calib": 3}})
    text = plan_text(plan_of(config))
    assert "! a context the server would refuse:" in text and f"{own * 2} is more than the model's own context" in text


def test_plan_without_a_tokenizer_renders_through_the_cells_prompt_options(tmp_path: Path, monkeypatch) -> None:
    """With no tokenizer prepared, the distinct prompts are still rendered under the cell's prompt profile (not the
    default wording)."""
    from anyjev.decision.options import PromptOptions

    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed_task_rows()))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"h": {"source": "hub", "repo": "org/m", "revision": "main"}},
                                      "tasks": {"t": {"source": "file", "path": "t.jsonl", "n_test": 5, "n_calib": 5}},
                                      "published": None, "scoring": {"prompt_profile": "published"}}))
    rendered = []
    render = PromptOptions.render

    def recording(self, tokenizer, question, state, layout, labels):
        text = render(self, tokenizer, question, state, layout, labels)
        rendered.append((self.prompt_profile, tokenizer, text))
        return text

    monkeypatch.setattr(PromptOptions, "render", recording)
    [cell] = plan_of(config)["cells"]
    assert cell["tokens_note"] == "tokenizer not prepared" and cell["prompts"] > 0
    assert rendered and {(profile, tok) for profile, tok, _ in rendered} == {("published", None)}
