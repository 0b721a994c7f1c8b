"""The single-node SLURM cluster the SLURM tests and the scale benchmark run the workflow on (tests/slurm/cluster.sh),
a Snakemake run through `--executor slurm` on it, the plugin's submission lines and sacct's records."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SH = REPO / "tests" / "slurm" / "cluster.sh"
PROFILE = REPO / "workflow" / "profiles" / "slurm"
SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"
SNAKEFILE = REPO / "workflow" / "Snakefile"

# The snakemake-executor-plugin-slurm 2.8.0 line logged for each sbatch submission.
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")
# Overrides the tiny test cluster needs on top of workflow/profiles/slurm: a 2-CPU node with ~20 GB (the profile's
# GPU-node numbers would never be scheduled); no account or partition (the plugin takes the default partition
# "debug" and submits without -A, i.e. under root's default account ci_account); a fast first status check.
TEST_CLUSTER_ARGS = ("--default-resources", "mem_mb=2000", "runtime=60", "--slurm-init-seconds-before-status-checks", "2",
                     "--slurm-keep-successful-logs")
# The 2-CPU test node: one CPU per scoring job, so two models load and score at once (the profile's 8 would never
# be scheduled: its allocations pend with reason PartitionConfig); each model's memory and time come from the config
# (models.<name>.mem_mb / runtime). For a run with one score_model job per model.
NODE_ARGS = ("--set-resources", "score_model:cpus_per_task=1")


def cluster_step(step: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """`bash tests/slurm/cluster.sh STEP` (install, start, stop, status) and how long it took."""
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(CLUSTER_SH), step], capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def slurm_cmd(work: Path, *args: str) -> list[str]:
    """Snakemake on WORK's config/config.yaml through the SLURM profile, with the test cluster's overrides."""
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--configfile", str(work / "config" / "config.yaml"),
            "--executor", "slurm", "--workflow-profile", str(PROFILE), *TEST_CLUSTER_ARGS, *args]


def submissions(out: str) -> list[tuple[int, int, str]]:
    """(Snakemake job id, SLURM job id, SLURM log) of every sbatch submission the plugin logged."""
    return [(int(a), int(b), log) for a, b, log in SUBMITTED.findall(out)]


def sacct_records(ids: list[int], timeout: float, finished: bool = True) -> dict[int, dict]:
    """sacct records (allocation lines) of IDS, epoch times; with FINISHED, once slurmdbd has all of them finished
    (what it has when TIMEOUT seconds have passed, else)."""
    fields = ["JobIDRaw", "JobName", "State", "ExitCode", "Start", "End", "NodeList", "AllocCPUS"]
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(map(str, ids)), f"--format={','.join(fields)}"],
                              capture_output=True, text=True, timeout=timeout,
                              env=os.environ | {"SLURM_TIME_FORMAT": "%s"})
        rows = {}
        for line in proc.stdout.splitlines():
            rec = dict(zip(fields, line.split("|"), strict=True))
            rows[int(rec["JobIDRaw"])] = rec
        done = set(rows) == set(ids) and all(r["End"].isdigit() for r in rows.values())
        if done or not finished or time.monotonic() > deadline:
            return rows
        time.sleep(1)  # each look asks slurmdbd
