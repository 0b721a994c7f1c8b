"""What the run's last words say after a SIGINT (anyjev.run.interrupt): the steps it stopped, from the command lines
of the processes it was passed on to (tests/e2e/test_interrupt.py sends it to a real run)."""

from __future__ import annotations

from anyjev.run.allocation import ModelCell, ScoreModelJob
from anyjev.run.interrupt import interrupted_line, job_of


def test_the_stopped_steps_are_named(tmp_path) -> None:
    cell = ModelCell(None, "t.jsonl", "s/scores.jsonl", "s/provenance.json", "d")  # type: ignore[arg-type]
    job = ScoreModelJob("m", {"a": cell, "b": cell}).to_file(tmp_path)
    shell = ["/bin/bash", "-c", "set -euo pipefail; python -m anyjev score-model ..."]
    scoring = ["python", "-m", "anyjev", "score-model", "--job", job, "--out", "results/allocations/m/x.json"]
    evaluate = ["python", "-m", "anyjev", "evaluate", "--job", "j.json", "--scores", "s", "--out", "m.json"]
    assert job_of(shell) is None and job_of(["vllm", "serve"]) is None
    assert job_of(scoring) == "the scoring job of model 'm' (cells a, b)"
    assert interrupted_line([shell, scoring, evaluate, scoring]) == (
        "interrupted (SIGINT): stopped the scoring job of model 'm' (cells a, b); anyjev evaluate (m.json); run the "
        "same command again: what they checkpointed resumes")
    assert interrupted_line([shell]) == "interrupted (SIGINT): no job was running"
