"""Every path that renders a prompt renders the one that was scored, under every prompt profile, option order and
chat template.

A config sets ``scoring.prompt_profile``, ``scoring.option_order`` and the model's ``chat_template`` (the tokenizer's,
none, or a Jinja file); the cell is scored from the score job's own options (the prompts it sends are recorded), then
the same prompts are asked of every other path: the context check, ``anyjev plan`` (from the config), ``anyjev show``
(from the config, and from the scores file) and ``anyjev export-prompts``. The combinations render different prompts
for the same item, so a path that dropped an option would be caught."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from anyjev.cli import main
from anyjev.data.taskfile import load_task_file
from anyjev.decision.prompts import encode, prompt_hash
from anyjev.numbers.logprobs import log_softmax
from anyjev.plan import plan_config
from anyjev.run.cell import ScoreJob, cell_identity
from anyjev.run.context import check_prompt_lengths
from anyjev.run.inspect import export_scores_with_prompts
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.settings import Settings
from tests.published import require_published

# (profile, option order, chat template): every profile and order under the tokenizer's template, each profile under
# none, and a file's template (the published library's renderer reads it as both profiles do: through the tokenizer).
COMBINATIONS = [*itertools.product(["anyjev", "published"], ["as_given", "canonical"], ["auto"]),
                ("anyjev", "as_given", "none"), ("published", "canonical", "none"), ("published", "as_given", "file")]
# A base-model style template of our own: each turn under a heading, the answer under its own.
TEMPLATE = ("{%- for m in messages %}### {{ m.role | capitalize }}\n{{ m.content }}\n\n{% endfor -%}"
            "{% if add_generation_prompt %}### Answer\n{% endif %}")
ROWS = [
    {"task": "paths"},
    {"id": "c1", "state": "A red apple on the table.", "question": "Which colour is the fruit?",
     "options": ["red", "Blue", "green", "amber"], "gold": "red", "split": "test"},
    {"id": "c2", "state": "The sky at noon.", "question": "Which colour is the sky?",
     "options": ["Blue", "red", "green", "amber"], "gold": "Blue", "split": "calib"},
    {"id": "n1", "state": "WIN A FREE PHONE", "question": "Is this message spam?", "kind": "noul", "gold": "Yes",
     "split": "test"},
    {"id": "s1", "state": "disk 95% full", "question": "How severe is it?", "kind": "score",
     "options": ["low", "medium", "high"], "gold": "high", "split": "calib"},
]


class RecordingBackend:
    """Every prompt sent, uniform values (only the prompts matter here)."""

    name = "recording"

    def __init__(self) -> None:
        self.sent: set[tuple[int, ...]] = set()

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        self.sent |= {tuple(p) for p in prompts}
        return log_softmax(np.zeros((len(prompts), len(label_ids))))

    def describe(self) -> dict:
        return {"backend": self.name}


def _scored_cell(root: Path, smollm2_dir: Path, profile: str, order: str, template: str) -> dict:
    """Config, task file, score job, recorded prompts and scores of one cell scored under (PROFILE, ORDER, TEMPLATE)."""
    root.mkdir(parents=True, exist_ok=True)
    task_file = root / "paths.jsonl"
    task_file.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    if template == "file":
        template = str(root / "template.jinja")
        Path(template).write_text(TEMPLATE)
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {"m": {"source": "local", "path": str(smollm2_dir), "chat_template": template}},
        "tasks": {"paths": {"source": "file", "path": str(task_file), "n_test": 2, "n_calib": 2}},
        "scoring": {"prompt_profile": profile, "option_order": order}, "published": None}))
    settings = Settings.load(config)
    job = ScoreJob.from_json(settings.score_job("m", "paths", models_dir="unused", server_log="s.log", state_dir="s").to_json())
    task = load_task_file(task_file)
    from anyjev.decision.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(job.tokenizer)
    prepared = prepare_items(tokenizer, task.items, task.prior_groups(), job.scoring.prompt)
    backend = RecordingBackend()
    scores = root / "scores.jsonl"
    score_cell(backend, tokenizer, prepared, str(scores), cell_identity(job, task, task_file), options=job.scoring,
               chunk_items=job.client.chunk_items)
    by_sha = {prompt_hash(p): list(p) for p in backend.sent}
    records = [json.loads(line) for line in scores.read_text().splitlines()[1:]]
    scored = {(r["id"], name): by_sha[lay["prompt_sha"]] for r in records for name, lay in r["layouts"].items()}
    return {"config": config, "task_file": task_file, "tokenizer": tokenizer, "scores": scores, "scored": scored,
            "prepared": prepared, "sent": backend.sent}


@pytest.fixture(scope="module")
def cells(smollm2_dir, tmp_path_factory) -> dict[tuple[str, str], dict]:
    require_published()
    root = tmp_path_factory.mktemp("paths")
    return {combo: _scored_cell(root / "-".join(combo), smollm2_dir, *combo) for combo in COMBINATIONS}


def test_the_combinations_render_different_prompts(cells) -> None:
    """Each option changes what c1 is shown (c1's options are not in sorted order), so every path below is put to
    the test by each of them."""
    first = {combo: tuple(cell["scored"][("c1", "fwd/r0")]) for combo, cell in cells.items()}
    assert len(set(first.values())) == len(COMBINATIONS)
    texts = {combo: cell["tokenizer"].decode(first[combo]) for combo, cell in cells.items()}
    assert all(t.startswith("<|im_start|>system\n") for combo, t in texts.items() if combo[2] == "auto")
    assert all(t.startswith("You are a decision function.") and t.endswith("\nAnswer:")
               for combo, t in texts.items() if combo[2] == "none")
    assert all(t.startswith("### System\nYou are") and t.endswith("### Answer\n")
               for combo, t in texts.items() if combo[2] == "file")


@pytest.mark.parametrize("combo", COMBINATIONS, ids="-".join)
def test_every_path_renders_the_scored_prompts(combo, cells, capsys, monkeypatch) -> None:
    cell = cells[combo]
    scored = cell["scored"]
    assert len(scored) == 4 * 2 * 2 + 2 * 2 + 1, "every layout of every item was sent"

    # the context check measures the prompts scoring sends
    assert check_prompt_lengths(cell["prepared"], 10**6, source="x") == max(map(len, cell["sent"]))

    # anyjev plan, from the config: the prompt tokens scoring sends (distinct prompts per item)
    [planned] = plan_config(cell["config"], models_dir="unused", hub_cache="unused")["cells"]
    distinct = {}
    for (item, _), ids in scored.items():
        distinct.setdefault(item, set()).add(tuple(ids))
    assert planned["prompt_tokens"] == sum(len(p) for ps in distinct.values() for p in ps)

    # anyjev show, from the config and from the cell's scores file: the token ids of every layout
    tok_dir = str(Path(cell["tokenizer"].name_or_path))
    for source in (["--config", str(cell["config"])], ["--scores", str(cell["scores"])]):
        for item in ("c1", "c2", "n1", "s1"):
            assert main(["show", "--task-file", str(cell["task_file"]), "--item", item, "--tokenizer", tok_dir,
                         "--layout", "all", "--ids", *source]) == 0
            out = capsys.readouterr().out
            names = re.findall(r"^# task paths item \S+ layout (\S+):", out, re.M)
            ids = [json.loads(m) for m in re.findall(r"^# token ids: (\[.*\])$", out, re.M)]
            assert {(item, n): i for n, i in zip(names, ids, strict=True)} == {k: v for k, v in scored.items() if k[0] == item}

    # anyjev export-prompts: the text of every layout encodes to the ids scored (and passes its stored hash)
    exported = export_scores_with_prompts(cell["scores"], cell["task_file"], cell["tokenizer"])
    for line in exported.read_text().splitlines()[1:]:
        rec = json.loads(line)
        for name, lay in rec["layouts"].items():
            assert encode(cell["tokenizer"], lay["text"]) == scored[(rec["id"], name)]


def test_show_from_a_config_whose_models_render_differently_needs_the_model(cells, capsys, tmp_path) -> None:
    """Two models of one config under different chat templates: `anyjev show --config` refuses to guess (exit 2,
    naming --model), and with --model shows the prompt that model's cell scored."""
    plain, chat = cells["anyjev", "as_given", "none"], cells["anyjev", "as_given", "auto"]
    config = yaml.safe_load(plain["config"].read_text())
    config["models"]["chat"] = config["models"]["m"] | {"chat_template": "auto"}
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(config))
    show = ["show", "--task-file", str(plain["task_file"]), "--item", "c1", "--tokenizer",
            str(Path(plain["tokenizer"].name_or_path)), "--ids", "--config", str(two)]
    assert main(show) == 2
    assert "--model: the models of" in capsys.readouterr().err
    for model, cell in (("m", plain), ("chat", chat)):
        assert main([*show, "--model", model]) == 0
        ids = json.loads(re.search(r"^# token ids: (\[.*\])$", capsys.readouterr().out, re.M)[1])
        assert ids == cell["scored"][("c1", "fwd/r0")]
