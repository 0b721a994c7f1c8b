"""anyjev/claims.py: which config made each finished file of a folder, under which definition; a run of another config
that would replace one under another definition is refused (tests/e2e/test_runs_apart.py runs it in the workflow)."""

from __future__ import annotations

import json
from pathlib import Path

from anyjev.claims import Claim, config_name, made_by, record_claims, refusals


def job(folder: Path, kind: str, digest: str, data: dict) -> str:
    path = folder / f"{kind}-{digest}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_another_configs_file_under_another_definition_is_refused_and_the_same_configs_edit_is_not(tmp_path,
                                                                                                   monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    record = tmp_path / "claims.json"
    Path("mmlu.jsonl").write_text("items\n")
    builtin = job(tmp_path, "PrepareJob", "a" * 16, {"name": "mmlu", "source": "builtin", "n_test": 4})
    as_file = job(tmp_path, "PrepareJob", "b" * 16, {"name": "mmlu", "source": "file", "n_test": 4})
    record_claims(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (builtin,))], "config/a.yaml")

    assert refusals(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (builtin,))], "config/b.yaml") == [], \
        "the same definition is shared"
    assert refusals(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (as_file,))], "config/a.yaml") == [], \
        "the config that made it, edited, replaces its own file"
    [line] = refusals(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (as_file,))], "config/b.yaml")
    assert line.startswith("config/b.yaml: tasks.mmlu is not what config/a.yaml made its files from (PrepareJob "
                           "source: 'builtin' -> 'file'), and this run would replace them: mmlu.jsonl."), line
    assert "--directory" in line and "remove those files" in line
    assert refusals(record, [Claim("tasks.mmlu", ("gone.jsonl",), (as_file,))], "config/b.yaml") == [], \
        "nothing to replace"

    record_claims(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (builtin,))], "config/b.yaml")
    assert made_by(record, "mmlu.jsonl") == ["config/a.yaml", "config/b.yaml"], "two configs made it alike"
    record_claims(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (as_file,))], "config/b.yaml")
    assert made_by(record, "mmlu.jsonl") == ["config/b.yaml"], "b replaced it under another definition"
    assert refusals(record, [Claim("tasks.mmlu", ("mmlu.jsonl",), (builtin,))], "config/a.yaml")


def test_a_config_is_named_by_its_files_in_the_folder(tmp_path) -> None:
    (tmp_path / "config").mkdir()
    assert config_name([tmp_path / "config" / "a.yaml"], tmp_path) == "config/a.yaml"
    assert config_name(["/elsewhere/b.yaml"], tmp_path) == "/elsewhere/b.yaml"
