"""Bad input refused at validation with one line that names it (issue 32, items 3 and 5): a task file that leaves no
test item, a `url` model's tokenizer folder that holds no tokenizer, a value in one of several config files (named by
the file it came from), a task file saved as UTF-16."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from anyjev.config import check_config_file, validate_config
from anyjev.data.prepare import PrepareJob, prepare_task
from anyjev.data.taskfile import load_task_file
from anyjev.errors import ConfigError, TaskDataError
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO

ITEMS = [{"id": f"q{i}", "state": f"State {i}.", "question": "Which colour?", "options": ["red", "green", "blue"],
          "gold": i % 3} for i in range(6)]


def write_items(path: Path, split: str | None) -> Path:
    path.write_text("".join(json.dumps(it | ({"split": split} if split else {})) + "\n" for it in ITEMS))
    return path


def config(tmp_path: Path, task_path: Path, **extra) -> dict:
    return {"models": {"m": {"source": "smollm2"}}, "server": {"python": sys.executable}, "published": None,
            "tasks": {"colours": {"source": "file", "path": str(task_path), "n_test": 4, "n_calib": 2,
                                  "allow_fewer": True}}} | extra


def test_a_task_file_whose_every_item_is_calib_is_refused_at_validation(tmp_path, fault_seen) -> None:
    path = write_items(tmp_path / "calib-only.jsonl", "calib")
    with pytest.raises(ConfigError) as info:
        validate_config(config(tmp_path, path))
    fault_seen(info.value)
    assert info.value.key_path == "tasks.colours.path" and str(path) in str(info.value)
    assert 'every item says "split": "calib": no test item to score' in str(info.value)


def test_with_l1_a_task_file_whose_every_item_is_test_is_refused_at_validation(tmp_path) -> None:
    path = write_items(tmp_path / "test-only.jsonl", "test")
    with pytest.raises(ConfigError, match=r'every item says "split": "test", but levels lists L1'):
        validate_config(config(tmp_path, path, levels=["raw", "L0", "L1"]))
    validate_config(config(tmp_path, path, levels=["raw", "L0"]))  # without L1 it is fine
    validate_config(config(tmp_path, write_items(tmp_path / "none.jsonl", None)))  # the seeded split draws both


def test_the_prepare_step_refuses_a_split_that_leaves_no_test_item(tmp_path) -> None:
    path = write_items(tmp_path / "calib-only.jsonl", "calib")
    job = PrepareJob(name="colours", source="file", dataset="colours", path=str(path), hub=None, n_test=4, n_calib=2,
                     allow_fewer=True, split_seed=0, hub_cache="resources/hub", fits_temperature=False)
    with pytest.raises(TaskDataError, match=r"no test items after the split \(2 calibration items; every item says"):
        prepare_task(job, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(("files", "missing"), [
    ({}, "none of tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt"),
    ({"config.json": '{"model_type": "llama"}'}, "none of tokenizer.json"),
    ({"vocab.txt": ""}, "it holds vocab.txt, which transformers cannot load"),
    ({"tokenizer.json": '{"model": {"type": "BPE", "vocab": {'}, "it holds tokenizer.json, which cannot be read"),
    ({"tokenizer.json": '{"version": "1.0", "model": {"type": "NoSuchModel"}}'}, "it holds tokenizer.json, which cannot"),
])
def test_a_url_models_tokenizer_folder_is_loaded_at_validation(files, missing, tmp_path, fault_seen) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    cfg = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(folder)}},
           "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    fault_seen(info.value)
    message = str(info.value)
    assert info.value.key_path == "models.m.tokenizer" and str(folder) in message and missing in message, message
    assert "\n" not in message


def test_a_url_models_tokenizer_is_checked_without_torch(smollm2_dir, tmp_path) -> None:
    """Every parse of the workflow validates the config: a url model's tokenizer folder is read there without importing
    transformers or torch (seconds of every `snakemake` call), and refused when broken."""
    import subprocess
    import sys

    import yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {f"m{i}": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(smollm2_dir)} for i in range(3)},
        "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}))
    code = ("import sys; from anyjev.settings import Settings; Settings.load(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, check=True)
    assert run.stdout.split("\n")[-2] == "[]", run.stdout + run.stderr


def test_a_url_models_readable_tokenizer_is_read_once_for_the_users_later_parses(smollm2_dir, tmp_path) -> None:
    """Every parse of the workflow validates the config: once a url model's tokenizer files were read, a later process
    of the same user does not read them again (nor import the tokenizers library) while they stay as they are; a file
    that changed is read again, and refused when it cannot be read."""
    import os
    import shutil
    import subprocess

    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(smollm2_dir / name, folder / name)
    code = ("import sys; from anyjev.decision.tokenizer import check_tokenizer; check_tokenizer(sys.argv[1]); "
            "print('tokenizers' in sys.modules)")

    def parse() -> subprocess.CompletedProcess:
        env = os.environ | {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, env=env)

    assert parse().stdout.split() == ["True"]  # read: the tokenizers library parsed tokenizer.json
    assert parse().stdout.split() == ["False"]  # the same files: not read again
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {')  # changed, and broken
    broken = parse()
    assert broken.returncode != 0 and "it holds tokenizer.json, which cannot be read" in broken.stderr, broken.stderr
    assert parse().returncode != 0  # a file that cannot be read is never remembered as readable


def test_a_url_models_tokenizer_folder_that_does_not_exist_is_named(tmp_path) -> None:
    cfg = {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": "tokenizers/nope"}},
           "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    with pytest.raises(ConfigError, match=r"models.m.tokenizer: 'tokenizers/nope': no such folder"):
        validate_config(cfg, workdir=tmp_path)


@pytest.mark.parametrize("second", ["http://127.0.0.1:8000", "http://localhost:8000/", "http://LocalHost:8000"])
def test_two_url_models_on_one_server_are_refused_naming_both(second) -> None:
    """Two url models that reach one server and served model would differ by +0.000 on every metric: refused at the
    config check, naming both keys; the same server under another served name, or another port, is two models."""
    tok = str(QWEN3_TOKENIZER_DIR)
    first = {"source": "url", "url": "http://localhost:8000", "served_name": "qwen", "tokenizer": tok}
    cfg = {"models": {"a": first, "b": first | {"url": second}},
           "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert info.value.key_path == "models.b.url" and "models.a" in str(info.value) and "'qwen'" in str(info.value)
    validate_config(cfg | {"models": {"a": first, "b": first | {"url": second, "served_name": "other"}}})
    validate_config(cfg | {"models": {"a": first, "b": first | {"url": "http://localhost:8001"}}})
    unnamed = {"source": "url", "url": "http://localhost:8000", "tokenizer": tok}  # served names: the models' names
    validate_config(cfg | {"models": {"a": unnamed, "b": unnamed}})


def test_an_error_names_the_config_file_the_value_came_from(tmp_path, fault_seen) -> None:
    from anyjev.config import value_source

    base = {"models": {"qwen2.5-7b": {"source": "smollm2"}}, "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}}
    user = {"limit": 0, "models": {"qwen2.5-7b": {"dtype": "float64"}}}
    sources = [("config/config.yaml", base), ("user.yaml", user), ("--config", {"split_seed": 1})]
    assert value_source("limit", sources) == "user.yaml"
    assert value_source("models.qwen2.5-7b.dtype", sources) == "user.yaml"  # a dot in a name is not a step
    assert value_source("models.qwen2.5-7b.source", sources) == "config/config.yaml"
    assert value_source("tasks.t.path", sources) == "config/config.yaml"  # missing: the file that declares its task
    assert value_source("split_seed", sources) == "--config"
    assert value_source("grid[0].model", sources) is None
    path = tmp_path / "user.yaml"
    path.write_text("models:\n  m: {source: smollm2}\ntasks:\n  t: {source: builtin, builtin: mmlu}\nlimit: 0\n")
    with pytest.raises(ConfigError) as info:
        check_config_file(path)
    fault_seen(info.value)
    assert str(info.value).startswith(f"{path}: config key limit: 0 is less than the minimum of 1")


@pytest.mark.parametrize(("encoding", "said"), [
    ("utf-16", "UTF-16 (it begins with the byte order mark FF FE)"),
    ("utf-16-be", "UTF-16BE (a zero byte beside every character, no byte order mark)"),
    ("utf-32", "UTF-32 (it begins with the byte order mark FF FE 00 00)"),
])
def test_a_task_file_saved_as_utf16_is_refused_saying_so(encoding, said, tmp_path, fault_seen) -> None:
    path = tmp_path / "items.jsonl"
    text = "".join(json.dumps(it) + "\n" for it in ITEMS)
    path.write_bytes(text.encode(encoding))
    with pytest.raises(TaskDataError) as info:
        load_task_file(path)
    fault_seen(info.value)
    assert str(info.value).startswith(f"{path}:line 1: the file is {said}, not UTF-8: save it as UTF-8")
