"""A declared dataset in a local folder (``tasks.<name>.hub.dataset: ./folder``): no revision asked for, pinned by
the content of its files (in the cache's meta.json, the task's provenance and the lock file), read again when a file
changes, refused by a pinned lock when its content differs, and listed file by file as the fetch step's inputs (so
Snakemake reruns the fetch after an edit: tests/e2e/test_hub_local_rerun.py runs that through the workflow).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

import datasets
import pytest
import yaml

import anyjev.data.hub as hub
from anyjev.config import validate_config
from anyjev.data.prepare import build_task, prepare_task
from anyjev.data.taskfile import load_task_file
from anyjev.errors import ConfigError
from anyjev.lock import Lock
from anyjev.settings import Settings
from tests.conftest import QWEN3_TOKENIZER_DIR
from tests.multiple_choice_repos import HELLASWAG, as_fixture_task, hellaswag_repo, worked_examples

HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, and nobody asks the hub for a commit (a local folder has none)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")

    def resolve(kind, repo, revision):
        raise AssertionError(f"asked the hub for {kind} {repo}@{revision}")

    monkeypatch.setattr(hub, "resolve_commit", resolve)
    monkeypatch.chdir(tmp_path)


def config(tasks: dict, workdir: Path, **extra) -> dict:
    return validate_config({"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                            "tasks": tasks, "published": None, "server": {"python": sys.executable}} | extra, workdir=workdir)


def hellaswag_task(tmp_path: Path) -> dict:
    [task] = [t for t in worked_examples().values() if t["hub"]["dataset"] == "Rowan/hellaswag"]
    return as_fixture_task(task, tmp_path, local=True)


def fetch(settings: Settings, task: str):
    folder = settings.hub_folders()[task]
    job = settings.fetch_job(folder, lock_record="resources/lock.yaml")
    return hub.fetch_job(job, f"resources/hub/{folder}")


def test_a_local_folder_takes_no_revision(tmp_path: Path) -> None:
    (tmp_path / "data" / "quiz").mkdir(parents=True)
    hub_keys = {"splits": ["train"], "question_field": "q", "options_field": "opts", "label_field": "a", "kind": "choice"}

    def task(**keys) -> dict:
        return {"t": {"source": "hub", "hub": {k: v for k, v in (hub_keys | keys).items() if v is not None}}}

    for dataset in ("./data/quiz", str(tmp_path / "data" / "quiz"), "./data/../data/quiz"):
        settings = Settings.from_config(config(task(dataset=dataset), tmp_path))
        assert settings.tasks["t"].hub.revision is None and settings.hub_datasets()["t"].local

    def refused(keys: dict, key_path: str, words: str) -> None:
        with pytest.raises(ConfigError) as info:
            config(task(**keys), tmp_path)
        assert info.value.key_path == key_path and words in str(info.value), str(info.value)

    refused({"dataset": "./data/quiz", "revision": "main"}, "tasks.t.hub.revision", "a local folder has no revision")
    refused({"dataset": "./data/quizz"}, "tasks.t.hub.dataset", "local folder './data/quizz' does not exist")
    refused({"dataset": "org/quiz"}, "tasks.t.hub.revision", "required for a hub dataset")
    # a hub id that names a folder here: datasets.load_dataset would read the folder, not the hub
    refused({"dataset": "data/quiz", "revision": "main"}, "tasks.t.hub.dataset", "'./data/quiz'")


def test_a_local_folder_is_pinned_by_its_content(offline, tmp_path: Path, caplog) -> None:
    settings = Settings.from_config(config({"hs": hellaswag_task(tmp_path)}, tmp_path))
    with caplog.at_level(logging.WARNING):
        folder = fetch(settings, "hs")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text  # no "could not resolve"
    meta = json.loads((folder / "meta.json").read_text())
    local = meta["local"]
    assert meta["resolved_sha"] is None and meta["revision"] is None and HEX64.fullmatch(local["content_sha256"])
    assert sorted(local["files"]) == ["data/test-00000-of-00001.parquet", "data/validation-00000-of-00001.parquet"]
    assert all(HEX64.fullmatch(h) for h in local["files"].values())
    dataset = settings.tasks["hs"].hub.dataset
    entry = yaml.safe_load(Path("resources/lock.yaml").read_text())["datasets"][dataset]
    assert entry["content_sha256"] == local["content_sha256"] and "commit" not in entry and "revision" not in entry
    built = build_task(settings.prepare_job("hs", hub_cache="resources/hub"))
    assert built.source["local"] == local and built.source["resolved_sha"] is None
    prepare_task(settings.prepare_job("hs", hub_cache="resources/hub"), "resources/tasks/hs.jsonl")
    assert load_task_file("resources/tasks/hs.jsonl").source["origin"]["local"] == local  # a cell's provenance: task_source


def test_a_changed_file_is_read_again_and_an_unchanged_one_is_not(offline, tmp_path: Path) -> None:
    task = hellaswag_task(tmp_path)
    settings = Settings.from_config(config({"hs": task}, tmp_path))
    folder = fetch(settings, "hs")
    first = json.loads((folder / "meta.json").read_text())["local"]
    # unchanged: the cache is kept, and its meta.json is made newer than the folder's files (what Snakemake compares)
    os.utime(folder / "meta.json", (1_000_000, 1_000_000))
    cached = (folder / "validation.jsonl").stat().st_mtime_ns
    fetch(settings, "hs")
    assert (folder / "meta.json").stat().st_mtime > 1_000_000 and (folder / "validation.jsonl").stat().st_mtime_ns == cached
    # an edit: another context in a validation row (the test split holds the first three rows only)
    changed = [*HELLASWAG[:5], ("Raking leaves", "A man gathers leaves by the fence.", "he", *HELLASWAG[5][3:]), *HELLASWAG[6:]]
    hellaswag_repo(Path(task["hub"]["dataset"]), changed)
    fetch(settings, "hs")
    second = json.loads((folder / "meta.json").read_text())["local"]
    assert second["content_sha256"] != first["content_sha256"]
    assert second["files"]["data/test-00000-of-00001.parquet"] == first["files"]["data/test-00000-of-00001.parquet"]
    built = build_task(settings.prepare_job("hs", hub_cache="resources/hub"))
    assert built.items[5].state == "A man gathers leaves by the fence. he" and built.items[4].state == HELLASWAG[4][1] + " he"
    lock = yaml.safe_load(Path("resources/lock.yaml").read_text())["datasets"]
    assert lock[task["hub"]["dataset"]]["content_sha256"] == second["content_sha256"]  # unpinned: the record follows


def test_a_pinned_lock_refuses_a_folder_whose_content_changed(offline, tmp_path: Path) -> None:
    task = hellaswag_task(tmp_path)
    dataset = task["hub"]["dataset"]
    Path("config").mkdir()
    Path("config/x.lock.yaml").write_text(yaml.safe_dump({"datasets": {dataset: {"content_sha256": "0" * 64}}, "models": {}}))
    settings = Settings.from_config(config({"hs": task}, tmp_path, lock="config/x.lock.yaml"))
    with pytest.raises(ConfigError) as info:
        fetch(settings, "hs")
    msg = str(info.value)
    assert msg.startswith("config key lock: ") and dataset in msg and "0" * 64 in msg and "\n" not in msg
    assert not Path("resources/hub/hs").exists()  # refused before anything was written
    # the lock made from this folder passes, and a pinned run leaves its entry alone
    content = hub.local_content(dataset)[0]
    Path("config/x.lock.yaml").write_text(yaml.safe_dump({"datasets": {dataset: {"content_sha256": content}}, "models": {}}))
    assert (fetch(settings, "hs") / "validation.jsonl").is_file()
    assert Lock("config/x.lock.yaml", True).read()["datasets"][dataset] == {"content_sha256": content}


def test_a_local_folder_with_a_config(offline, tmp_path: Path) -> None:
    [task] = [t for t in worked_examples().values() if t["hub"]["dataset"] == "cais/mmlu"]
    task = as_fixture_task(task, tmp_path, local=True)
    settings = Settings.from_config(config({"mmlu": task}, tmp_path))
    meta = json.loads((fetch(settings, "mmlu") / "meta.json").read_text())
    assert sorted(meta["local"]["files"]) == ["README.md", "all/test-00000-of-00001.parquet", "all/validation-00000-of-00001.parquet"]
    assert meta["config"] == "all" and len(build_task(settings.prepare_job("mmlu", hub_cache="resources/hub")).items) == 10


def test_the_fetch_step_lists_the_folders_files_as_its_inputs(tmp_path: Path) -> None:
    task = hellaswag_task(tmp_path)
    root = Path(task["hub"]["dataset"])
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "data" / ".hidden.parquet").write_text("x")
    settings = Settings.from_config(config({"hs": task, "banking20": {"source": "hub"}}, tmp_path))
    assert settings.fetch_inputs("hs") == [str(root / "data" / "test-00000-of-00001.parquet"),
                                           str(root / "data" / "validation-00000-of-00001.parquet")]
    assert settings.fetch_inputs("banking20") == []
