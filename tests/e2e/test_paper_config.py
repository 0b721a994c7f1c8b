"""Dry run of the published grid (config/paper.yaml) under the SLURM profile: which jobs, with which resources.

`snakemake -n` replaces the executor by its dry-run executor, so no SLURM is needed: the test puts stub
`sinfo`/`sacct`/`sbatch`/... first on PATH that record each call and fail, and asserts that the dry run succeeds
and made no call but the plugin's `scontrol show config` probe. It runs in a scratch
directory holding copies of config/config.yaml (so that a --configfile merged into the default config, instead
of replacing it, would show up as extra cells), config/paper.yaml and the published table, and no server environment:
docs/cluster.md checks a run (step 4) before it creates one (step 5), so the dry run and `anyjev plan` say what is
missing and go on, while a run refuses at once, naming the key.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.e2e.workflow_helpers import REPO, SNAKEMAKE, checkout_before_setup, env, job_blocks
from tests.waiting import HANG_GUARD

PROFILE = REPO / "workflow" / "profiles" / "slurm"
PAPER = REPO / "config" / "paper.yaml"
SLURM_COMMANDS = ("sinfo", "sacct", "sacctmgr", "sbatch", "squeue", "scancel", "scontrol", "srun", "sshare")

MODELS = ["Qwen3-8B", "Qwen2.5-7B-Instruct", "Qwen3-30B-A3B-Instruct-2507"]
TASKS = ["banking20", "newsgroups", "injection"]
GPUS = {"Qwen3-8B": 1, "Qwen2.5-7B-Instruct": 1, "Qwen3-30B-A3B-Instruct-2507": 2}
# Memory (MB) and time (minutes) of each model's scoring jobs: models.<name>.mem_mb / runtime in config/paper.yaml.
MEM_MB = {"Qwen3-8B": 64000, "Qwen2.5-7B-Instruct": 64000, "Qwen3-30B-A3B-Instruct-2507": 128000}
RUNTIME = {"Qwen3-8B": 240, "Qwen2.5-7B-Instruct": 240, "Qwen3-30B-A3B-Instruct-2507": 360}
JOB_COUNTS = {"fetch_hub_task": 3, "prepare_model": 3, "prepare_task": 3, "score_model": 3, "score_cell": 9,
              "evaluate_cell": 9, "summary_table": 1, "differences_table": 1,
              "provenance_table": 1, "summary_plots": 1,
              "vs_published": 1, "vs_published_plot": 1, "viewer": 1, "all": 1}
# Every rule but score_model (one job per model: docs/servers.md) runs in the main Snakemake process, never as a
# SLURM job (`all` has no action); render_prompts too, a rule no job of paper.yaml's asks for (render_prompts: job).
LOCAL_RULES = {"prepare_model", "fetch_hub_task", "prepare_task", "render_prompts", "score_cell", "evaluate_cell",
               "summary_table", "differences_table", "summary_plots", "vs_published", "vs_published_plot",
               "provenance_table", "viewer", "all"}

# Loads the workflow through Snakemake's API (no DAG, no jobs) and prints, per rule, whether Snakemake keeps it
# local: the rule is marked `localrule: True` (workflow._localrules) or has no action (`rule all`). That is
# Workflow.is_local() minus its `local_exec` term, which needs an executor (the dry-run one makes everything local).
LOCALRULES_SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
snakefile, workdir, configfile = map(Path, sys.argv[1:4])
with SnakemakeApi(OutputSettings()) as api:
    # Through the API there is no command line to show the executor: ask for the cluster cut (score_jobs: model).
    wf = api.workflow(snakefile=snakefile, workdir=workdir,
                      config_settings=ConfigSettings(configfiles=[configfile], config={"score_jobs": "model"}),
                      resource_settings=ResourceSettings(), storage_settings=StorageSettings())
    w = wf._workflow
    print("LOCALRULES=" + json.dumps({r.name: (r.name in w._localrules or r.norun) and r.group is None
                                      for r in w.rules}))
"""


def parse_job_stats(text: str) -> dict[str, int]:
    block = text[text.index("Job stats:"):]
    counts = {}
    for line in block.splitlines()[3:]:
        m = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    return counts


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("paper")
    snakefile = checkout_before_setup(work / "checkout")
    (work / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", work / "config" / "config.yaml")
    shutil.copy(PAPER, work / "config" / "paper.yaml")
    published = yaml.safe_load(PAPER.read_text())["published"]
    (work / published).parent.mkdir(parents=True)
    shutil.copy(REPO / published, work / published)
    # Stub SLURM commands: any call is recorded (and fails), so the test can tell that none was made.
    stubs = work / "stub-bin"
    stubs.mkdir()
    calls = work / "slurm-calls.log"
    for name in SLURM_COMMANDS:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        stub.chmod(0o755)
    e = env()
    e["PATH"] = f"{stubs}{os.pathsep}{e['PATH']}"
    cmd = [str(SNAKEMAKE), "-s", str(snakefile), "-d", str(work), "--configfile", str(work / "config" / "paper.yaml"),
           "--executor", "slurm", "--workflow-profile", str(PROFILE), "-n"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD, env=e, cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    local = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", LOCALRULES_SCRIPT, str(snakefile), str(work),
                            str(work / "config" / "paper.yaml")], capture_output=True, text=True, timeout=HANG_GUARD,
                           env=e, cwd=work)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    localrules = json.loads(re.search(r"^LOCALRULES=(.*)$", local.stdout, re.M).group(1))
    return {"work": work, "snakefile": snakefile, "env": e, "out": out, "jobs": job_blocks(out), "calls": calls, "localrules": localrules}


# What the dry run, the plan and a run say of the server environment paper.yaml uses before it is created.
MISSING = ("config key server.python: '.venv-server/bin/python' is not an executable interpreter (from {work}): "
           "`bash scripts/setup_env.sh` creates .venv-server/bin/python (with `--gpu`, the CUDA vLLM, where a cluster's "
           "GPU nodes see the checkout)")


def test_the_dry_run_before_the_setup_says_what_is_missing(paper_dry_run):
    """docs/cluster.md, step 4 before step 5: the dry run goes on (the fixture asserts it succeeded) and names the key,
    the interpreter it looked for and the command that creates it."""
    assert not (paper_dry_run["work"] / ".venv-server").exists()
    said = [line for line in paper_dry_run["out"].splitlines() if line.startswith("anyjev: not here yet: ")]
    assert said == [f"anyjev: not here yet: {MISSING.format(work=paper_dry_run['work'])}, or point it at a vLLM "
                    "environment's python (a dry run goes on without it; a run that starts a server refuses)"], said


def test_the_plan_before_the_setup_says_what_is_missing(paper_dry_run):
    """docs/cluster.md, step 4: `python -m anyjev plan --config config/paper.yaml`, run where the dry run ran."""
    work = paper_dry_run["work"]
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "anyjev", "plan", "--config", "config/paper.yaml"],
                          capture_output=True, text=True, timeout=600, env=paper_dry_run["env"] | {"PYTHONPATH": str(REPO)},
                          cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "anyjev plan: config/paper.yaml (9 cells)" in proc.stdout
    assert proc.stdout.endswith("not here yet (this plan does not need it; a run that starts a server does):\n  "
                                f"{MISSING.format(work=work)}, or point it at a vLLM environment's python\n"), proc.stdout


def test_a_run_before_the_setup_is_refused_at_once_naming_the_key(paper_dry_run):
    """The same grid run for real (locally: nothing to submit) before the server environment exists: refused before
    any job runs (nothing fetched, prepared or submitted), with one line that names server.python."""
    work = paper_dry_run["work"]
    cmd = [str(SNAKEMAKE), "-s", str(paper_dry_run["snakefile"]), "-d", str(work), "--configfile",
           str(work / "config" / "paper.yaml"), "--cores", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=paper_dry_run["env"], cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    refused = (f"invalid config ({work / 'config' / 'paper.yaml'}): {MISSING.format(work=work)}, or point it at a vLLM "
               "environment's python")
    assert refused in out, out[-4000:]
    assert "Select jobs to execute" not in out and "Traceback" not in out and "File " not in out, out[-4000:]
    said = [line for line in out.splitlines() if "server.python" in line]  # the parse's notice, then the refusal
    assert said[-1] == refused and said[:-1] == [line for line in said if line.startswith("anyjev: not here yet: ")]
    assert not (work / "resources").exists() and not (work / "logs").exists(), "a job ran"
    calls = paper_dry_run["calls"].read_text().splitlines() if paper_dry_run["calls"].exists() else []
    assert set(calls) <= {"scontrol show config"}, calls


def test_dry_run_needs_no_slurm(paper_dry_run):
    """Every SLURM command fails here, and the dry run still succeeds: the plugin only probes the cluster's
    limits with `scontrol show config` (MaxArraySize, MinJobAge; both fall back to defaults when it fails) and
    never submits, queries jobs or partitions (no sbatch, squeue, sacct, sinfo, sacctmgr)."""
    assert "Using workflow specific profile" in paper_dry_run["out"] and "profiles/slurm" in paper_dry_run["out"]
    calls = paper_dry_run["calls"].read_text().splitlines() if paper_dry_run["calls"].exists() else []
    assert set(calls) <= {"scontrol show config"}, calls


def test_paper_grid_lists_the_expected_jobs(paper_dry_run):
    jobs = paper_dry_run["jobs"]
    assert parse_job_stats(paper_dry_run["out"]) == JOB_COUNTS | {"total": sum(JOB_COUNTS.values())}
    assert {r: sum(j["rule"] == r for j in jobs) for r in JOB_COUNTS} == JOB_COUNTS
    assert len(jobs) == sum(JOB_COUNTS.values())

    def wildcards(rule, key):
        return sorted(j["wildcards"][key] for j in jobs if j["rule"] == rule)

    assert wildcards("prepare_model", "model") == sorted(MODELS)
    assert wildcards("fetch_hub_task", "dataset") == sorted(TASKS)
    assert wildcards("prepare_task", "task") == sorted(TASKS)
    cells = sorted((j["wildcards"]["model"], j["wildcards"]["task"]) for j in jobs if j["rule"] == "score_cell")
    assert cells == sorted(itertools.product(MODELS, TASKS))
    assert cells == sorted((j["wildcards"]["model"], j["wildcards"]["task"]) for j in jobs if j["rule"] == "evaluate_cell")
    vs = [j for j in jobs if j["rule"] == "vs_published"]
    assert vs[0]["input"] == "results/tables/summary.csv, results/published/anyjev-2026.csv"
    assert vs[0]["output"] == "results/tables/vs_published.csv, results/tables/vs_published.md"
    plot = [j for j in jobs if j["rule"] == "vs_published_plot"]
    assert plot[0]["output"] == "results/plots/vs_published.png, results/plots/vs_published.pdf"


def test_score_model_resources_come_from_config_per_model_and_profile(paper_dry_run):
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    site = profile["set-resources"]["score_model"]
    # The profile sets only what is per site; gpu, mem_mb and runtime there would override every model's.
    assert site == {"cpus_per_task": 8}
    paper = yaml.safe_load(PAPER.read_text())
    assert {m: paper["models"][m]["gpus"] for m in MODELS} == GPUS
    assert {m: paper["models"][m]["mem_mb"] for m in MODELS} == MEM_MB
    assert {m: paper["models"][m]["runtime"] for m in MODELS} == RUNTIME
    seen = set()
    for job in (j for j in paper_dry_run["jobs"] if j["rule"] == "score_model"):
        res = job["resources"]
        model = job["wildcards"]["model"]
        seen.add(model)
        assert (res["gpu"], res["mem_mb"], res["runtime"]) == (str(GPUS[model]), str(MEM_MB[model]), str(RUNTIME[model])), (
            model, res)
        assert res["cpus_per_task"] == str(site["cpus_per_task"]), res
        assert "slurm_partition" not in res and "slurm_account" not in res
    assert seen == set(MODELS)


def test_slurm_profile_keeps_going_and_shows_failed_logs():
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["keep-going"] is True and profile["show-failed-logs"] is True and profile["rerun-incomplete"] is True
    assert profile["latency-wait"] >= 30


def test_other_jobs_get_the_profile_default_resources_and_no_gpu(paper_dry_run):
    default = yaml.safe_load((PROFILE / "config.yaml").read_text())["default-resources"]
    assert default == {"mem_mb": 4000, "runtime": 60}
    others = [j for j in paper_dry_run["jobs"] if j["rule"] != "score_model"]
    assert len(others) == sum(JOB_COUNTS.values()) - 3
    for job in others:
        res = job["resources"]
        assert (res["mem_mb"], res["runtime"]) == ("4000", "60"), job
        assert "gpu" not in res and "cpus_per_task" not in res, job


def test_only_score_model_goes_to_the_cluster(paper_dry_run):
    localrules = paper_dry_run["localrules"]
    assert set(localrules) == set(JOB_COUNTS) | {"render_prompts"}
    assert {r for r, local in localrules.items() if local} == LOCAL_RULES
    assert {r for r, local in localrules.items() if not local} == {"score_model"}


# The job type each command reads (anyjev/cli.py), by the command's name.
JOB_TYPES = {"prepare-model": "anyjev.serving.models:ModelJob", "fetch-task": "anyjev.data.hub:FetchJob",
             "prepare-task": "anyjev.data.prepare:PrepareJob", "score-model": "anyjev.run.allocation:ScoreModelJob",
             "publish-cell": "anyjev.run.publish:PublishJob", "evaluate": "anyjev.run.evaluate:EvaluateJob",
             "summary-table": "anyjev.reports.tables:SummaryJob", "provenance-table": "anyjev.reports.provenance:ProvenanceJob",
             "vs-published": "anyjev.reports.tables:VsPublishedJob", "summary-plots": "anyjev.reports.plots:SummaryPlotsJob",
             "vs-published-plot": "anyjev.reports.plots:VsPublishedPlotJob",
             "differences-table": "anyjev.reports.differences:DifferencesJob", "viewer": "anyjev.reports.viewer:ViewerJob"}


def test_every_command_line_names_its_job_file(paper_dry_run):
    """Each printed `python -m anyjev` line hands its command a job file named by its type and content, not the job's
    JSON (a model's scoring job is about 4 KB of it), and the file holds that job, complete (anyjev.jobs)."""
    import importlib
    import shlex

    lines = [line.strip().removeprefix("Shell command:").strip() for line in paper_dry_run["out"].splitlines()]
    # every rule's command is the step's own process (`exec`: Snakemake waits for it and stops it, no shell between)
    commands = [line for line in lines if "python -m anyjev" in line]
    assert commands and all(line.startswith("exec python -m anyjev ") for line in commands), commands[:3]
    assert len(commands) == sum(JOB_COUNTS.values()) - 1  # every job but `all`, one command each
    seen = set()
    for line in commands:
        argv = shlex.split(line.split(" > ")[0])
        command, path = argv[4], argv[argv.index("--job") + 1]
        module, name = JOB_TYPES[command].split(":")
        assert re.fullmatch(rf"\.anyjev/jobs/{name}-[0-9a-f]{{16}}\.json", path), line
        getattr(importlib.import_module(module), name).from_json(str(paper_dry_run["work"] / path))
        assert "{" not in line and len(line) < 1000, line  # paths, and no JSON (a scoring job holds about 4 KB)
        seen.add(command)
    assert seen == set(JOB_TYPES)
