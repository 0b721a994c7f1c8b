"""The reduced e2e config through a REAL single-node SLURM cluster (tests/slurm/cluster.sh, with slurmdbd).

The same config as `finished_run` (tests/e2e/conftest.py: same model name, tasks, items and published table)
runs in a fresh scratch directory with `--executor slurm --workflow-profile workflow/profiles/slurm`, plus the
overrides the tiny test cluster needs. Checked: every score_cell job went through sbatch and sacct says it
COMPLETED, every other job stayed in the main process (`localrule`), the summary table equals the local run's
to 3 decimals, and the design of docs/servers.md "On a cluster": each job's own Snakemake (the jobstep's, which
re-parses the Snakefile) owns the server started inside it, so each job starts one server and that server stops
when the job's Snakemake exits, leaving nothing behind.

Needs root and apt-get (the cluster is installed from Debian packages and started as plain processes); it is
skipped otherwise, except under ANYJEV_REQUIRE_SLURM=1, where that is a failure.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import require_vllm
from tests.e2e.conftest import MODEL, write_e2e_workdir
from tests.e2e.slurm_helpers import SUBMITTED, SUPERVISOR, run_slurm, sacct_records
from tests.e2e.workflow_helpers import leftover_vllm

pytestmark = [pytest.mark.slurm, pytest.mark.vllm, pytest.mark.slow]

TASKS = ("mmlu", "socialiqa", "rotten_tomatoes")
RUN_TIMEOUT = 1800  # hard limit of the SLURM run (SIGTERM, then SIGKILL 60 s later, like `timeout -k 60`)
# Each job's server must have been told to stop at most this long after its SLURM job ended (the supervisor
# polls its owner every 0.5 s; slack for a loaded 2-core machine).
STOP_SLACK_S = 15


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory, smollm2_dir):
    """The reduced config through SLURM, in a fresh scratch directory."""
    require_vllm()
    work = tmp_path_factory.mktemp("slurm")
    write_e2e_workdir(work, smollm2_dir)
    run = run_slurm(work, "--set-resources", "score_cell:mem_mb=6000", "score_cell:cpus_per_task=2", "score_cell:runtime=60",
                    "-j", "4", "--show-failed-logs", timeout=RUN_TIMEOUT)
    print(f"\n[slurm] reduced run through SLURM (3 score_cell jobs, -j 4): {run['seconds']:.0f} s wall")
    return run


def _score_jobs(run) -> dict[int, dict]:
    """score_cell jobs by Snakemake job id, each with its SLURM job id and log (from the plugin's line)."""
    by_id = {int(j["jobid"]): dict(j) for j in run["jobs"] if j["rule"] == "score_cell"}
    for jobid, slurm_id, log in run["submitted"]:
        if jobid in by_id:
            by_id[jobid].setdefault("slurm", []).append(slurm_id)
            by_id[jobid]["slurm_log"] = log
    return by_id


def test_slurm_run_submits_every_score_cell_through_sbatch(slurm_run):
    out = slurm_run["out"]
    assert slurm_run["rc"] == 0, out[-10000:]
    assert re.search(r"SLURM run ID: \S+", out), out[-4000:]
    score = _score_jobs(slurm_run)
    cells = sorted(tuple(j["wildcards"].values()) for j in score.values())
    assert cells == sorted((MODEL, t) for t in TASKS)
    # Exactly one submission per score_cell job, and nothing else submitted.
    assert sorted(j for j, _, _ in slurm_run["submitted"]) == sorted(score)
    for j in score.values():
        assert len(j["slurm"]) == 1, j
        task = j["wildcards"]["task"]
        assert j["slurm_log"].endswith(f"/.snakemake/slurm_logs/rule_score_cell/{MODEL}_{task}/{j['slurm'][0]}.log"), j
        assert not j["local"], j
        # The job's own log (kept by --slurm-keep-successful-logs): the jobstep Snakemake ran this cell's rule.
        job_log = Path(j["slurm_log"]).read_text()
        assert f"wildcards: model={MODEL}, task={task}" in job_log, job_log[-3000:]
        assert "1 of 1 steps (100%) done" in job_log, job_log[-3000:]
    lines = [m.group(0) for m in SUBMITTED.finditer(out)]
    print("\n[slurm] submission lines:\n  " + "\n  ".join(lines))
    # Every other job ran in the main process: Snakemake heads it "localrule" when the executor is not local.
    others = [j for j in slurm_run["jobs"] if j["rule"] != "score_cell"]
    assert {j["rule"] for j in others} >= {"evaluate_cell", "summary_table", "summary_plots", "reliability_plot",
                                          "vs_published", "prepare_task", "all"}
    assert all(j["local"] for j in others), [j["rule"] for j in others if not j["local"]]


def test_sacct_lists_the_jobs_as_completed(slurm_run):
    assert slurm_run["rc"] == 0
    run_id = re.search(r"SLURM run ID: (\S+)", slurm_run["out"]).group(1)
    ids = [j["slurm"][0] for j in _score_jobs(slurm_run).values()]
    rows = sacct_records(ids)
    assert sorted(rows) == sorted(ids), rows
    for rec in rows.values():
        assert (rec["State"], rec["ExitCode"], rec["JobName"]) == ("COMPLETED", "0:0", run_id), rec
        assert rec["AllocCPUS"] == "2", rec  # score_cell:cpus_per_task=2 reached sbatch


def test_summary_matches_the_local_run(slurm_run, finished_run):
    assert slurm_run["rc"] == 0
    ours = pd.read_csv(slurm_run["dir"] / "results/tables/summary.csv")
    local = pd.read_csv(finished_run["dir"] / "results/tables/summary.csv")
    assert list(ours.columns) == list(local.columns)
    assert ours.shape == local.shape
    keys = ["model", "task", "level"]
    ours, local = ours.sort_values(keys).reset_index(drop=True), local.sort_values(keys).reset_index(drop=True)
    numeric = local.select_dtypes("number").columns
    text = [c for c in local.columns if c not in numeric]
    pd.testing.assert_frame_equal(ours[text], local[text])
    diff = (ours[numeric] - local[numeric]).abs()
    both_nan = ours[numeric].isna() & local[numeric].isna()
    diff = diff.where(~both_nan, 0.0)
    worst = diff.max().sort_values(ascending=False)
    print(f"\n[slurm] summary.csv vs local run: max |diff| {worst.iloc[0]:.2e} ({worst.index[0]}); "
          f"exactly equal: {bool((diff == 0).all().all())}")
    bad = [f"{ours.loc[i, 'task']}/{ours.loc[i, 'level']} {c}: slurm {ours.loc[i, c]!r}, local {local.loc[i, c]!r}"
           for c in numeric for i in diff.index if not diff.loc[i, c] < 5e-4]
    assert not bad, "summary.csv differs from the local run beyond 3 decimals:\n  " + "\n  ".join(bad)


def test_each_job_owns_its_server_and_the_server_dies_with_it(slurm_run):
    """docs/servers.md "On a cluster": the jobstep Snakemake inside each SLURM job re-parses the Snakefile and
    becomes the owner (ANYJEV_OWNER_PID) of the server started in that job; the server stops when that
    process exits, i.e. with the job, and nothing is left behind."""
    assert slurm_run["rc"] == 0
    work = slurm_run["dir"]
    score = _score_jobs(slurm_run)
    log = (work / f"logs/servers/{MODEL}.log").read_text()
    assert log.count("starting server") == len(score) == 3, "one server start per score_cell job"

    events = [(datetime.fromisoformat(ts).timestamp(), text) for ts, _, text in SUPERVISOR.findall(log)]
    started = [re.fullmatch(rf"started {MODEL}: pid (\d+), owner (\d+)", t) for _, t in events]
    owners = [int(m.group(2)) for m in started if m]
    assert len(owners) == 3 and len(set(owners)) == 3, events
    assert slurm_run["main_pid"] not in owners, "the main Snakemake must not own a server started in a job"
    stop_at = {}
    for ts, text in events:
        m = re.fullmatch(rf"stopping {MODEL}: owner (\d+) exited", text)
        if m:
            stop_at[int(m.group(1))] = ts
    assert sorted(stop_at) == sorted(owners), f"each server stops because its owner exited: {events}"
    assert sum(bool(re.fullmatch(rf"{MODEL} stopped \(exit code -?\d+\)", t)) for _, t in events) == 3, events
    assert "anyjev: stopped" not in slurm_run["out"], "onsuccess of the main process had nothing to stop"

    # Which job owned which server: the provenance of each cell records the server it used.
    acct = sacct_records([j["slurm"][0] for j in score.values()])
    for j in score.values():
        task = j["wildcards"]["task"]
        prov = json.loads((work / f"results/cells/{MODEL}/{task}/provenance.json").read_text())
        server = prov["server"]
        assert server["reused"] is False, "a job's server is never another job's"
        owner = server["owner_pid"]
        assert owner in owners, (task, owner, owners)
        rec = acct[j["slurm"][0]]
        start, end = int(rec["Start"]), int(rec["End"])
        # The server of this job was stopped once its owner exited, inside the job's lifetime (+ slack).
        assert start - 1 <= stop_at[owner] <= end + STOP_SLACK_S, (task, rec, stop_at[owner])
        print(f"\n[slurm] {task}: SLURM job {j['slurm'][0]} ran {end - start} s; its server (owner pid {owner}) was "
              f"told to stop {stop_at[owner] - end:+.0f} s after the job's end")
    assert leftover_vllm(MODEL) == []
