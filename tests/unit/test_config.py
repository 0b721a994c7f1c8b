"""Workflow config validation: every bad config is refused before any job, naming the key path."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from anyjev.config import cells, check_runnable, load_strict, validate_config, with_shipped_paths
from anyjev.errors import ConfigError
from tests.conftest import REPO

BASE = {
    "models": {"m1": {"source": "smollm2"}, "m2": {"source": "smollm2", "dtype": "bfloat16"}},
    "tasks": {"mmlu": {"source": "builtin"}, "rt": {"source": "builtin", "builtin": "rotten_tomatoes"}},
}


def check(config: dict, key_path: str, words: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate_config(config, workdir=REPO)
    assert info.value.key_path == key_path, str(info.value)
    assert key_path in str(info.value)
    assert words in str(info.value)
    return info.value


def edit(**changes) -> dict:
    config = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = config
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return config


def test_defaults_are_filled_and_cells_are_every_model_by_task():
    config = validate_config(BASE, workdir=REPO)
    assert config["models"]["m1"]["dtype"] == "auto" and config["models"]["m1"]["server_flags"] == []
    assert config["tasks"]["mmlu"]["n_test"] == 300 and config["evaluation"]["n_boot"] == 1000
    assert config["levels"] == ["raw", "L0-perm", "L0-bc", "L0", "L1"]
    assert cells(config) == [("m1", "mmlu"), ("m1", "rt"), ("m2", "mmlu"), ("m2", "rt")]
    assert BASE["models"]["m1"] == {"source": "smollm2"}, "the caller's config is not modified"


def test_the_shipped_configs_are_valid(tmp_path):
    validate_config(load_strict(REPO / "config" / "config.yaml"), workdir=REPO)
    # paper.yaml's server environment is the one `bash scripts/setup_env.sh --gpu` creates (docs/cluster.md, step 5),
    # so it runs after the documented setup without an edit; a run refuses it (naming server.python) before then.
    raw = load_strict(REPO / "config" / "paper.yaml")
    paper = validate_config(raw, workdir=REPO)
    assert "python" not in (raw.get("server") or {}) and paper["server"]["python"] == ".venv-server/bin/python"
    assert '"$PY" -m venv .venv-server' in (REPO / "scripts" / "setup_env.sh").read_text()
    with pytest.raises(ConfigError, match="server.python.*not an executable interpreter.*setup_env.sh.*--gpu"):
        check_runnable(paper, workdir=tmp_path)
    gpu_python = tmp_path / paper["server"]["python"]
    gpu_python.parent.mkdir(parents=True)
    gpu_python.symlink_to(sys.executable)
    check_runnable(paper, workdir=tmp_path)


def test_unknown_keys_are_named_with_their_path(fault_seen):
    fault_seen(check(edit(models__m1__dtyp="bfloat16"), "models.m1.dtyp", "unknown key"))
    check(edit(colour="blue"), "colour", "unknown key")
    check(edit(tasks__mmlu__n_tset=5), "tasks.mmlu.n_tset")


def test_wrong_types_and_values():
    check(edit(models__m1__dtype="fp8"), "models.m1.dtype")
    check(edit(tasks__mmlu__n_test="ten"), "tasks.mmlu.n_test")
    check(edit(models__m1__server_flags="--enforce-eager"), "models.m1.server_flags")
    check(edit(evaluation={"n_boot": 100}), "evaluation.n_boot")
    check(edit(levels=["raw", "L9"]), "levels.1")


def test_missing_fields():
    check(edit(models__m1={"dtype": "auto"}), "models.m1.source", "required")
    check(edit(models__m1={"source": "hub", "repo": "org/model"}), "models.m1.revision", "required")
    check({"tasks": BASE["tasks"]}, "models", "required")


def test_pinned_server_flag_cannot_be_overridden():
    check(edit(models__m1__server_flags=["--enforce-eager", "--logprobs-mode", "raw_logprobs"]), "models.m1.server_flags",
          "--logprobs-mode")
    check(edit(models__m2__server_flags=["--seed=3"]), "models.m2.server_flags", "--seed")


def test_a_managed_servers_key_is_the_runs_own():
    """Each run starts its managed servers with a fresh key in their environment: a key on the command line (readable
    by every local user), one in server_env, or api_key_env on a managed model is refused naming the key."""
    check(edit(models__m1__server_flags=["--api-key", "secret"]), "models.m1.server_flags", "--api-key")
    check(edit(models__m1__server_env={"VLLM_API_KEY": "secret"}), "models.m1.server_env.VLLM_API_KEY", "fresh")
    check(edit(models__m2__api_key_env="MY_KEY"), "models.m2.api_key_env", "source url only")
    check(edit(models__m1={"source": "url", "url": "http://h:8000", "tokenizer": "t", "api_key_env": "MY-KEY"}),
          "models.m1.api_key_env", "does not match")


def test_grid_names_defined_models_and_tasks():
    check(edit(grid=[{"model": "m3", "tasks": ["mmlu"]}]), "grid[0].model", "not defined")
    check(edit(grid=[{"model": "m1", "tasks": ["mmlu", "nope"]}]), "grid[0].tasks[1]", "not defined")
    check(edit(grid=[]), "grid", "empty")
    check(edit(grid=[{"model": "m1", "tasks": ["mmlu"]}, {"model": "m1", "tasks": ["rt"]}]), "grid[1].model", "twice")
    config = validate_config(edit(grid=[{"model": "m2", "tasks": ["rt"]}]), workdir=REPO)
    assert cells(config) == [("m2", "rt")]


def test_missing_local_paths():
    check(edit(models__m1={"source": "local", "path": "no/such/model"}), "models.m1.path", "does not exist")
    check(edit(tasks__mmlu={"source": "file", "path": "no/such.jsonl"}), "tasks.mmlu.path", "does not exist")


def test_duplicate_names_in_yaml_are_refused(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("models:\n  m1: {source: smollm2}\n  m1: {source: smollm2, dtype: float32}\ntasks: {}\n")
    with pytest.raises(ConfigError) as info:
        load_strict(f)
    assert "m1" in str(info.value) and "defined twice" in str(info.value) and "lines 2 and 3" in str(info.value)


def test_adaptive_rotations_need_enough_calibration_items_to_certify():
    config = edit(scoring={"rotations": "adaptive"})
    config["tasks"]["mmlu"]["n_calib"] = 298  # 0 disagreements in 298 items bound the rate at 1.0003% > 1%
    config["tasks"]["rt"]["n_calib"] = 299
    check(copy.deepcopy(config), "tasks.mmlu.n_calib", "needs at least 299 of them")
    config["tasks"]["mmlu"]["n_calib"] = 299
    validate_config(copy.deepcopy(config), workdir=REPO)
    config["scoring"] |= {"target_disagreement": 0.05, "confidence": 0.9}  # a looser target needs 45
    config["tasks"]["mmlu"]["n_calib"] = 45
    validate_config(copy.deepcopy(config), workdir=REPO)
    config["tasks"]["mmlu"]["n_calib"] = 44
    check(copy.deepcopy(config), "tasks.mmlu.n_calib", "needs at least 45 of them")
    validate_config(config | {"limit": 5}, workdir=REPO)  # a smoke run reads every rotation, with a warning


def _options_file(tmp_path, k: int):
    path = tmp_path / f"k{k}.jsonl"
    item = {"id": "q1", "state": "", "question": "Which?", "options": [f"option {i}" for i in range(k)], "gold": 0}
    path.write_text(json.dumps(item) + "\n")
    return path


def test_more_options_than_letters_says_the_real_limit_not_max_logprobs(tmp_path, fault_seen):
    """27 options: no server.max_logprobs would help (a choice has labels A-Z), so the task is named first."""
    config = edit(tasks={"big": {"source": "file", "path": str(_options_file(tmp_path, 27))}})
    config["server"] = {"max_logprobs": 26}
    with pytest.raises(ConfigError) as info:
        validate_config(config, workdir=REPO)
    fault_seen(info.value)
    assert info.value.key_path == "tasks.big" and "at most 26 (labels A-Z)" in str(info.value)
    assert "max_logprobs" not in str(info.value)


def test_more_options_than_max_logprobs_names_the_setting(tmp_path):
    config = edit(tasks={"three": {"source": "file", "path": str(_options_file(tmp_path, 3))}})
    config["server"] = {"max_logprobs": 2}
    check(config, "server.max_logprobs", "has items with 3 options: a request reads every label's log-prob at once; "
                                         "set it >= 3")


def test_a_task_path_that_is_a_folder_is_called_a_folder(tmp_path, fault_seen):
    fault_seen(check(edit(tasks__mmlu={"source": "file", "path": str(tmp_path)}), "tasks.mmlu.path", "is a folder"))


@pytest.mark.parametrize(("path", "limit", "folder"), [("resources/tasks/x.jsonl", None, "resources/tasks/"),
                                                        ("./resources/tasks/sub/../x.jsonl", None, "resources/tasks/"),
                                                        ("smoke/limit-5/resources/tasks/x.jsonl", 5, "smoke/limit-5/resources/tasks/")])
def test_a_task_file_where_the_prepared_tasks_are_written_is_refused(path, limit, folder, tmp_path, fault_seen):
    """The task would be made from the file it makes (Snakemake's CyclicGraphException in rule prepare_task): the
    config check names the key (issue 46, 6)."""
    config = edit(tasks__x={"source": "file", "path": path}) | ({"limit": limit} if limit else {})
    with pytest.raises(ConfigError) as info:
        validate_config(config, workdir=tmp_path)
    assert info.value.key_path == "tasks.x.path" and f"is inside {folder}, where the workflow writes" in str(info.value)
    assert "e.g. tasks/x.jsonl" in str(info.value)
    fault_seen(info.value)


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_server_flag_item_is_refused(empty, fault_seen):
    fault_seen(check(edit(models__m1__server_flags=["--enforce-eager", empty]), "models.m1.server_flags", "item 1 is"))


def test_a_local_model_folder_without_weights_is_refused_before_any_server(tmp_path, fault_seen):
    """vLLM finds out about missing weights only minutes into a server start; the config check names the key."""
    folder = tmp_path / "noweights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    config = {"models": {"m": {"source": "local", "path": str(folder)}}, "tasks": {"mmlu": {"source": "builtin"}}}
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    fault_seen(info.value)
    assert info.value.key_path == "models.m.path" and "holds no weights (*.safetensors" in str(info.value)
    (folder / "model.safetensors").write_bytes(b"")
    assert validate_config(config)["models"]["m"]["path"] == str(folder)


def test_what_ships_with_the_workflow_is_found_beside_it(tmp_path: Path) -> None:
    """A run in a folder of its own (--directory, a module) reads the published numbers and the vLLM environment from
    the workflow's folder, unless its own folder has them; other values are left as they are."""
    home, work = tmp_path / "home", tmp_path / "work"
    for path in ("results/published/p.csv", ".venv-server/bin/python"):
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text("")
    work.mkdir()
    config = {"published": "results/published/p.csv", "server": {"python": ".venv-server/bin/python"}}
    shipped = with_shipped_paths(config, home, work)
    assert shipped == {"published": str(home.resolve() / "results/published/p.csv"),
                       "server": {"python": str(home.resolve() / ".venv-server/bin/python")}}
    assert config["published"] == "results/published/p.csv", "the config given is not changed"
    (work / "results/published").mkdir(parents=True)
    (work / "results/published/p.csv").write_text("")
    assert with_shipped_paths(config, home, work)["published"] == "results/published/p.csv", "the run's own file first"
    for other in ({"published": None, "server": {"python": "python3"}},
                  {"published": "elsewhere/p.csv", "server": {"python": str(tmp_path / "abs/python")}}):
        assert with_shipped_paths(other, home, work) == other
