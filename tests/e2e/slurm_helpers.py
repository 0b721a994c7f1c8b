"""The pieces the SLURM end-to-end tests share beyond testbed/slurm.py's (the real single-node cluster, the command of
a Snakemake run through `--executor slurm`, the plugin's submission lines and sacct's records, each under the tests'
hang guard): a run with a hard time limit, the requirement the cluster has, the supervisor's log lines."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testbed import slurm
from testbed.slurm import CLUSTER_SH, slurm_cmd, submissions
from tests.conftest import interruptible, require
from tests.e2e.workflow_helpers import env, job_blocks
from tests.waiting import HANG_GUARD

# A line of the server supervisor in a model's server log: module, time, pid, text.
SUPERVISOR = re.compile(r"\[anyjev\.serving\.supervisor (\S+) pid (\d+)\] (.*)")


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
    """testbed.slurm's, under the hang guard."""
    return slurm.cluster_step(step, HANG_GUARD)


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


def sacct_records(ids: list[int], finished: bool = True) -> dict[int, dict]:
    """testbed.slurm's, under the hang guard."""
    return slurm.sacct_records(ids, HANG_GUARD, finished)
