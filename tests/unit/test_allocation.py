"""anyjev/run/allocation.py: the outcomes of one job scoring all of a model's cells, and publishing each cell.

The real workflow runs it in tests/e2e/test_score_jobs.py (stub server) and tests/e2e/test_rehearsal_slurm.py
(real SLURM, real vLLM); here the score job itself is replaced, to reach every outcome directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from anyjev.errors import LabelTokenError, ServerError, TaskDataError
from anyjev.run import allocation


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
    return allocation.ScoreModelJob("m", {t: allocation.ModelCell(SimpleNamespace(model="m", task=t, managed=None), f"{t}.jsonl",
                                                                  str(staged(t)), str(staged(t).with_suffix(".json")))
                                          for t in tasks})


def test_a_cell_error_is_recorded_and_the_other_cells_go_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = LabelTokenError("prompt 0: missing label ids [2753]", missing_ids=[2753], returned_ids=[9454])
    monkeypatch.setattr(allocation, "score_job", _fake_score_job({"b": err}))
    out = tmp_path / "allocation.json"
    record = allocation.score_model_job(_job("a", "b", "c"), out, 1)
    assert {t: c["status"] for t, c in record["cells"].items()} == {"a": "ok", "b": "failed", "c": "ok"}
    assert record["cells"]["b"]["missing_ids"] == [2753] and json.loads(out.read_text()) == record
    assert allocation.failed_cells(out) == ["b"]

    allocation.publish_cell(allocation.PublishJob("a"), out, tmp_path / "pub/a.jsonl", tmp_path / "pub/a.json")
    assert (tmp_path / "pub/a.jsonl").read_text() == "scores of a\n"
    with pytest.raises(LabelTokenError) as info:
        allocation.publish_cell(allocation.PublishJob("b"), out, tmp_path / "pub/b.jsonl", tmp_path / "pub/b.json")
    assert info.value.missing_ids == [2753]
    assert "cell m/b failed in model 'm''s scoring job" in str(info.value) and "[2753]" in str(info.value)
    assert not (tmp_path / "pub/b.jsonl").exists()
    with pytest.raises(TaskDataError, match="did not score task 'zzz'"):
        allocation.publish_cell(allocation.PublishJob("zzz"), out, tmp_path / "pub/z.jsonl", tmp_path / "pub/z.json")


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


def test_a_published_failure_keeps_the_recorded_error_type(tmp_path, monkeypatch):
    """A TaskDataError or a batch collision recorded by the model's job reaches the user under its own name."""
    from anyjev.errors import AnyjevError, BatchCollisionError

    monkeypatch.chdir(tmp_path)
    failures = {"a": TaskDataError("tasks/a.jsonl", "line 3", "item 'q2': too long"),
                "b": BatchCollisionError("prompt 0: only the sampled label came back", missing_ids=[49])}
    monkeypatch.setattr(allocation, "score_job", _fake_score_job(failures))
    out = tmp_path / "allocation.json"
    allocation.score_model_job(_job("a", "b"), out, 1)
    with pytest.raises(AnyjevError) as info:
        allocation.publish_cell(allocation.PublishJob("a", "logs/score_model/m.log"), out, tmp_path / "pub/a.jsonl",
                                tmp_path / "pub/a.json")
    assert "scoring job, log logs/score_model/m.log: TaskDataError: tasks/a.jsonl:line 3: item 'q2'" in str(info.value)
    with pytest.raises(BatchCollisionError) as collision:
        allocation.publish_cell(allocation.PublishJob("b"), out, tmp_path / "pub/b.jsonl", tmp_path / "pub/b.json")
    assert collision.value.missing_ids == [49] and "BatchCollisionError:" not in str(collision.value)
