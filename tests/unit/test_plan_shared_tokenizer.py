"""`anyjev plan` on a grid whose models share a tokenizer (models of one family, each in its own folder): each tokenizer
is loaded once and each task's prompts are rendered once for all the models that share it, with the same counts as a
plan of each model alone; a model whose chat template differs is rendered on its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from anyjev import plan as plan_module
from anyjev.decision import tokenizer as tokenizer_module
from anyjev.plan import plan_config
from tests.conftest import QWEN3_TOKENIZER_DIR
from tests.unit.test_plan import mixed_task_rows

TASKS = {"a": {"source": "file", "path": "a.jsonl", "n_test": 6, "n_calib": 3},
         "b": {"source": "file", "path": "b.jsonl", "n_test": 4, "n_calib": 2}}


def tokenizer_copy(folder: Path, template_suffix: str = "") -> Path:
    """A model folder holding the Qwen3 tokenizer's files (its chat template changed by TEMPLATE_SUFFIX)."""
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN3_TOKENIZER_DIR / name, folder / name)
    if template_suffix:
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config["chat_template"] += template_suffix
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def url_model(folder: Path) -> dict:
    return {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(folder)}


def write_plan(path: Path, models: dict) -> dict:
    path.write_text(yaml.safe_dump({"models": models, "tasks": TASKS, "published": None}))
    return plan_config(path, models_dir="resources/models", hub_cache="resources/hub")


def test_models_sharing_a_tokenizer_render_each_task_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rows = mixed_task_rows()
    Path("a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    Path("b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    family = {f"m{i}": url_model(tokenizer_copy(tmp_path / f"m{i}")) for i in range(3)}
    other = {"other": url_model(tokenizer_copy(tmp_path / "other", template_suffix="{# another template #}"))}

    loads: list[str] = []
    renders: list[str] = []
    load, prepare = tokenizer_module.load_tokenizer, plan_module.prepare_items
    monkeypatch.setattr(tokenizer_module, "load_tokenizer", lambda d: (loads.append(str(d)), load(d))[1])
    monkeypatch.setattr(plan_module, "prepare_items",
                        lambda tok, items, *a, **kw: (renders.extend(it.id for it in items), prepare(tok, items, *a, **kw))[1])
    grid = write_plan(tmp_path / "grid.yaml", family | other)

    items = 9 + 6  # tasks a and b
    assert len(loads) == 2  # the family's tokenizer and the other one
    assert len(renders) == 2 * items  # each task once per distinct tokenizer, not once per model
    monkeypatch.setattr(tokenizer_module, "load_tokenizer", load)
    monkeypatch.setattr(plan_module, "prepare_items", prepare)
    for model in (*family, *other):  # the same counts as a plan of the model alone
        alone = write_plan(tmp_path / f"{model}.yaml", {model: (family | other)[model]})
        for cell in alone["cells"]:
            [same] = [c for c in grid["cells"] if (c["model"], c["task"]) == (model, cell["task"])]
            assert {k: same[k] for k in ("prompts", "prompt_tokens", "layouts", "longest_prompt")} == \
                   {k: cell[k] for k in ("prompts", "prompt_tokens", "layouts", "longest_prompt")}
    by_model = {c["model"]: c["prompt_tokens"] for c in grid["cells"] if c["task"] == "a"}
    assert by_model["m0"] == by_model["m1"] == by_model["m2"]
