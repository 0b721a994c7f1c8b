"""A SIGINT sent to Snakemake's process alone, passed on to the jobs it runs (docs/failures.md).

A terminal's Ctrl-C sends SIGINT to every process of the foreground process group: Snakemake and the jobs it started
(they share its group), which stop. Sent to Snakemake's process alone (``kill -INT``, a supervisor, a batch system's
signal to the job's leader), Snakemake says it terminates its processes, but its local executor waits for the running
jobs, which get no signal and run to their end. The workflow sends it on (:func:`interrupt_jobs`) to the processes
Snakemake started in its own process group, as Ctrl-C would have, and the run's last words say what was stopped
(:func:`interrupted_line`). The servers are not in that group: they stop with the run, as after Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from anyjev.serving.proc import descendants, proc_cmdline, proc_stat, signal_quietly


def interrupt_jobs(pid: int | None = None) -> list[list[str]]:
    """SIGINT to each process descending from PID (this process) in its process group; returns their argv."""
    pid = pid or os.getpid()
    group = os.getpgid(pid)
    stopped = []
    for child in descendants(pid):
        fields = proc_stat(child)
        if fields is None or int(fields[2]) != group:
            continue
        argv = proc_cmdline(child)
        signal_quietly(os.kill, child, signal.SIGINT)
        stopped.append(argv)
    return stopped


def job_of(argv: Sequence[str]) -> str | None:
    """The workflow step ARGV runs, in words (``the scoring job of model 'm' (cells a, b)``, ``anyjev evaluate
    (results/cells/m/t/metrics.json)``); None for a process that is not an anyjev command (a job's shell)."""
    argv = list(argv)
    module = argv.index("-m") + 1 if "-m" in argv else len(argv)
    if argv[module:module + 1] != ["anyjev"]:
        return None
    step = next((a for a in argv[module + 1:] if not a.startswith("-")), None)
    if step == "score-model" and "--job" in argv[:-1]:
        try:  # the job file's model and cells (anyjev.run.allocation.ScoreModelJob)
            job = json.loads(Path(argv[argv.index("--job") + 1]).read_text())
            return f"the scoring job of model {job['model']!r} (cells {', '.join(job['cells'])})"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    out = argv[argv.index("--out") + 1] if "--out" in argv[:-1] else None
    return f"anyjev {step}" + (f" ({out})" if out else "")


def interrupted_line(stopped: Sequence[Sequence[str]]) -> str:
    """The run's last words after SIGINT: the steps it stopped (STOPPED: the argv of the processes signalled)."""
    jobs = list(dict.fromkeys(j for j in map(job_of, stopped) if j))
    if not jobs:
        return "interrupted (SIGINT): no job was running"
    return (f"interrupted (SIGINT): stopped {'; '.join(jobs)}; run the same command again: what they checkpointed "
            "resumes")
