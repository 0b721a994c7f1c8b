"""anyjev/run/allocation.py and anyjev/run/publish.py: the outcomes of one job scoring all of a model's cells, and publishing each cell.

The real workflow runs it in tests/e2e/test_score_jobs.py (stub server) and tests/e2e/test_rehearsal_slurm.py
(real SLURM, real vLLM); here the score job itself is replaced, to reach every outcome directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from anyjev.errors import LabelTokenError, ServerError, TaskDataError
from anyjev.run import allocation, publish


def _fake_score_job(failures: dict[str, Exception], tokenizers: list | None = None):
    def score_job(job, task_path, out, provenance_path, owner_pid, **kw):
        if tokenizers is not None:
            tokenizers.append(kw["tokenizers"])
        if job.task in failures:
            raise failures[job.task]
        for path, text in ((out, f"scores of {job.task}\n"), (provenance_path, json.dumps({"task": job.task}))):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        return {"items": 3, "scored": 3, "resumed": 0, "prompts": 9}
    return score_job


def staged(task: str) -> Path:
    return Path(f"cells/m/{task}/staged/scores.jsonl")


def _job(*tasks: str) -> allocation.ScoreModelJob:
    """A model's job whose cells name only their task (the score job itself is replaced here)."""
    cells = {t: allocation.ModelCell(SimpleNamespace(model="m", task=t, managed=None), f"{t}.jsonl", str(staged(t)),
                                     str(staged(t).with_suffix(".json")), f"definition of {t}") for t in tasks}
    for t in tasks:
        Path(f"{t}.jsonl").write_text(f"items of {t}\n")
    return allocation.ScoreModelJob("m", cells)


def test_a_cell_error_is_recorded_and_the_other_cells_go_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = LabelTokenError("prompt 0: missing label ids [2753]", missing_ids=[2753], returned_ids=[9454])
    monkeypatch.setattr(allocation, "score_job", _fake_score_job({"b": err}))
    out = tmp_path / "allocation.json"
    record = allocation.score_model_job(_job("a", "b", "c"), out, 1)
    assert {t: c["status"] for t, c in record["cells"].items()} == {"a": "ok", "b": "failed", "c": "ok"}
    assert record["cells"]["b"]["missing_ids"] == [2753] and json.loads(out.read_text()) == record
    assert publish.failed_cells(out) == ["b"]

    publish.publish_cell(publish.PublishJob("a"), out, tmp_path / "pub/a.jsonl", tmp_path / "pub/a.json")
    assert (tmp_path / "pub/a.jsonl").read_text() == "scores of a\n"
    with pytest.raises(LabelTokenError) as info:
        publish.publish_cell(publish.PublishJob("b"), out, tmp_path / "pub/b.jsonl", tmp_path / "pub/b.json")
    assert info.value.missing_ids == [2753]
    assert "cell m/b failed in the scoring job of model 'm'" in str(info.value) and "[2753]" in str(info.value)
    assert not (tmp_path / "pub/b.jsonl").exists()
    with pytest.raises(TaskDataError, match="did not score task 'zzz'"):
        publish.publish_cell(publish.PublishJob("zzz"), out, tmp_path / "pub/z.jsonl", tmp_path / "pub/z.json")


def test_the_cells_of_a_model_share_its_loaded_tokenizers(tmp_path, monkeypatch):
    """A model's job hands every cell the same Tokenizers, so each tokenizer folder is loaded once for all of them."""
    monkeypatch.chdir(tmp_path)
    handed: list = []
    monkeypatch.setattr(allocation, "score_job", _fake_score_job({}, handed))
    allocation.score_model_job(_job("a", "b", "c"), tmp_path / "allocation.json", 1)
    assert len(handed) == 3 and handed[0] is not None and all(t is handed[0] for t in handed)


def test_a_server_error_ends_the_job_and_keeps_what_was_staged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(allocation, "score_job", _fake_score_job({"b": ServerError("server exited with code 1")}))
    out = tmp_path / "allocation.json"
    with pytest.raises(ServerError):
        allocation.score_model_job(_job("a", "b", "c"), out, 1)
    assert not out.exists(), "no outcome record: Snakemake sees the job fail and reruns it next time"
    assert (tmp_path / staged("a")).read_text() == "scores of a\n"
    assert not (tmp_path / staged("c")).exists()


def test_a_published_failure_keeps_the_recorded_error_type(tmp_path, monkeypatch, capsys):
    """A TaskDataError or a batch collision recorded by the model's job reaches the user under its own name; a cell
    that failed on bad input (a task file, a config value) makes publish-cell exit 2, as every other step does."""
    from anyjev.cli import EXIT_BAD_INPUT, main
    from anyjev.errors import BatchCollisionError, InputError

    monkeypatch.chdir(tmp_path)
    failures = {"a": TaskDataError("tasks/a.jsonl", "line 3", "item 'q2': too long"),
                "b": BatchCollisionError("prompt 0: only the sampled label came back", missing_ids=[49])}
    monkeypatch.setattr(allocation, "score_job", _fake_score_job(failures))
    out = tmp_path / "allocation.json"
    allocation.score_model_job(_job("a", "b"), out, 1)
    with pytest.raises(InputError) as info:
        publish.publish_cell(publish.PublishJob("a", "logs/score_model/m.log"), out, tmp_path / "pub/a.jsonl",
                                tmp_path / "pub/a.json")
    assert "scoring job of model 'm', log logs/score_model/m.log: TaskDataError: tasks/a.jsonl:line 3: item 'q2'" in \
        str(info.value)
    job = publish.PublishJob("a", "logs/score_model/m.log").to_json()
    assert main(["publish-cell", "--job", job, "--allocation", str(out), "--out", "a.jsonl", "--provenance", "a.json"]) \
        == EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip().endswith("TaskDataError: tasks/a.jsonl:line 3: item 'q2': too long")
    with pytest.raises(BatchCollisionError) as collision:
        publish.publish_cell(publish.PublishJob("b"), out, tmp_path / "pub/b.jsonl", tmp_path / "pub/b.json")
    assert collision.value.missing_ids == [49] and "BatchCollisionError:" not in str(collision.value)


def test_a_later_job_finds_the_cells_an_earlier_job_finished(tmp_path, monkeypatch):
    """What a model's next job leaves out (anyjev.run.publish.finished_cells): a cell an earlier job scored under
    the same definition, from the same task file, whose staged scores are still the ones it wrote. Anything else is
    scored again: another definition, a task file built again with other items (or older than its source), staged
    scores written over since, a cell that failed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(allocation, "score_job", _fake_score_job({"c": LabelTokenError("missing", missing_ids=[1])}))
    job = _job("a", "b", "c")
    folder = tmp_path / "allocations"
    record = folder / "0123456789abcdef.json"
    allocation.score_model_job(job, record, 1)
    sources = {"a": ["src-a.jsonl"]}
    Path("src-a.jsonl").write_text("source of a\n")
    os.utime("src-a.jsonl", ns=(0, 0))
    assert publish.finished_cells(folder, job.cells, sources) == {"a": str(record), "b": str(record)}

    again = {t: dataclasses.replace(c, definition="another") if t == "a" else c for t, c in job.cells.items()}
    assert publish.finished_cells(folder, again, sources) == {"b": str(record)}
    Path("b.jsonl").write_text("other items of b\n")
    assert publish.finished_cells(folder, job.cells, sources) == {"a": str(record)}
    Path("src-a.jsonl").touch()  # the source is newer: the task is built again before it is scored
    os.utime("a.jsonl", ns=(1, 1))
    assert publish.finished_cells(folder, job.cells, sources) == {}
    os.utime("src-a.jsonl", ns=(0, 0))
    assert publish.finished_cells(folder, job.cells, sources) == {"a": str(record)}
    staged("a").write_text("scores of a, under another definition\n")
    assert publish.finished_cells(folder, job.cells, sources) == {}

    assert publish.retry_failed(record) == ["c"] and record.exists(), "a record with finished cells stays"
    only_c = _job("c")
    allocation.score_model_job(only_c, folder / "c.json", 1)
    assert publish.retry_failed(folder / "c.json") == ["c"] and not (folder / "c.json").exists(), \
        "a record that finished none of its cells goes: the next run does the same job again"
