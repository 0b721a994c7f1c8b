"""The pieces the SLURM end-to-end tests share: the real single-node cluster (tests/slurm/cluster.sh), a Snakemake
run through `--executor slurm` with a hard time limit, the plugin's submission lines and sacct's records."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import interruptible, require
from tests.e2e.workflow_helpers import REPO, SNAKEFILE, SNAKEMAKE, env, job_blocks
from tests.waiting import HANG_GUARD

CLUSTER_SH = REPO / "tests" / "slurm" / "cluster.sh"
PROFILE = REPO / "workflow" / "profiles" / "slurm"

# The snakemake-executor-plugin-slurm 2.8.0 line logged for each sbatch submission.
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
# A line of the server supervisor in a model's server log: module, time, pid, text.
SUPERVISOR = re.compile(r"\[anyjev\.serving\.supervisor (\S+) pid (\d+)\] (.*)")

# Overrides the tiny test cluster needs on top of workflow/profiles/slurm: a 2-CPU node with ~20 GB (the profile's
# GPU-node numbers would never be scheduled); no account or partition (the plugin takes the default partition
# "debug" and submits without -A, i.e. under root's default account ci_account); a fast first status check.
TEST_CLUSTER_ARGS = ("--default-resources", "mem_mb=2000", "runtime=60", "--slurm-init-seconds-before-status-checks", "2",
                     "--slurm-keep-successful-logs")
# The 2-CPU test node: one CPU per scoring job, so two models load and score at once (the profile's 8 would never
# be scheduled: its allocations pend with reason PartitionConfig); each model's memory and time come from the config
# (models.<name>.mem_mb / runtime). For a run with one score_model job per model.
NODE_ARGS = ("--set-resources", "score_model:cpus_per_task=1")


def require_slurm() -> None:
    """Skip (or fail, under ANYJEV_REQUIRE_SLURM=1) where the cluster cannot be installed: not root, or no apt-get."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not running as root")
    if shutil.which("apt-get") is None:
        problems.append("apt-get is not available")
    require("slurm", not problems,
            f"the SLURM tests start a real cluster with {CLUSTER_SH} (root, Debian packages): {', '.join(problems)}")


def cluster_step(step: str) -> tuple[subprocess.CompletedProcess, float]:
    """`bash tests/slurm/cluster.sh STEP` (install, start, stop, status) and how long it took."""
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(CLUSTER_SH), step], capture_output=True, text=True, timeout=HANG_GUARD)
    return proc, time.monotonic() - t0


def slurm_cmd(work: Path, *args: str) -> list[str]:
    """Snakemake on WORK's config/config.yaml through the SLURM profile, with the test cluster's overrides."""
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--configfile", str(work / "config" / "config.yaml"),
            "--executor", "slurm", "--workflow-profile", str(PROFILE), *TEST_CLUSTER_ARGS, *args]


def finish(proc: subprocess.Popen) -> tuple[str, bool]:
    """Wait for PROC (stdout piped); past the hang guard: SIGTERM, then SIGKILL once SIGTERM is seen to have failed
    (the process still runs when its output ends). Returns (output, hung)."""
    try:
        out, _ = proc.communicate(timeout=HANG_GUARD)
        return out, False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return out, True


def start_slurm_run(work: Path, *args: str) -> subprocess.Popen:
    """Start Snakemake through SLURM in WORK (the client venv first on PATH: jobs get sbatch --export=ALL)."""
    return subprocess.Popen(slurm_cmd(work, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(),
                            cwd=work, preexec_fn=interruptible)


def run_slurm(work: Path, *args: str) -> dict:
    """A whole Snakemake run through SLURM: output, exit code, wall seconds, main pid, jobs and submissions."""
    t0 = time.monotonic()
    proc = start_slurm_run(work, *args)
    out, hung = finish(proc)
    if hung:
        pytest.fail(f"hang: the SLURM run still ran after {HANG_GUARD:.0f} s (tests/waiting.py):\n{out[-8000:]}")
    return {"dir": work, "out": out, "rc": proc.returncode, "seconds": time.monotonic() - t0, "main_pid": proc.pid,
            "jobs": job_blocks(out), "submitted": submissions(out)}


def submissions(out: str) -> list[tuple[int, int, str]]:
    """(Snakemake job id, SLURM job id, SLURM log) of every sbatch submission the plugin logged."""
    return [(int(a), int(b), log) for a, b, log in SUBMITTED.findall(out)]


def sacct_records(ids: list[int], finished: bool = True) -> dict[int, dict]:
    """sacct records (allocation lines) of IDS, epoch times; with FINISHED, once slurmdbd has all of them finished
    (what it has when the hang guard ends the wait, else)."""
    fields = ["JobIDRaw", "JobName", "State", "ExitCode", "Start", "End", "NodeList", "AllocCPUS"]
    deadline = time.monotonic() + HANG_GUARD
    while True:
        proc = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(map(str, ids)), f"--format={','.join(fields)}"],
                              capture_output=True, text=True, timeout=HANG_GUARD,
                              env=os.environ | {"SLURM_TIME_FORMAT": "%s"})
        rows = {}
        for line in proc.stdout.splitlines():
            rec = dict(zip(fields, line.split("|"), strict=True))
            rows[int(rec["JobIDRaw"])] = rec
        done = set(rows) == set(ids) and all(r["End"].isdigit() for r in rows.values())
        if done or not finished or time.monotonic() > deadline:
            return rows
        time.sleep(1)  # each look asks slurmdbd
