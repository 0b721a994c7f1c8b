#!/usr/bin/env python
"""Snakemake's own CPU time in a run of many jobs, under its rate limit's setting in the workflow profile, side by side.

Under its default rate limit (``--max-jobs-per-timespan 100/1s``) Snakemake's scheduler ends every round by starting a
timer of the limit's timespan, which starts another round when it fires, which starts another timer: every finished job
(a round) starts one more such chain, so the scheduler wakes up once more per timespan for every job finished so far,
for as long as the run lasts, and each round re-reads every waiting job (snakemake/snakemake#3804). Its own CPU time
grows with jobs x run time. A longer timespan at the same rate (``1000/10s``: at most 100 jobs started a second, as the
default) wakes each chain ten times less often; the timers are not daemon threads, so Snakemake's exit waits for the
last of them, up to one timespan.

This measures that alone, on a workflow of the anyjev workflow's shape with jobs that only sleep: per grid of M models
x T tasks, one job per model (its scoring, writing a file per task), then two per cell (publish; evaluate and draw)
and one over all cells; SLEEP seconds a job, on the cores of the default profile. Each setting is written into a
workflow profile of its own (the default profile's cores, and ``max-jobs-per-timespan``, or nothing: Snakemake's
default); per size, the settings run one after the other, REPS rounds of them, alternating; per run, the main process's
own CPU time (getrusage, its threads, not its jobs), its wall time, the threads still alive when it ends, and the wall
time of its process (with the wait at its exit for the timers still pending); the medians.

    .venv/bin/python bench/bench_scheduler.py                      # 300 cells -> results/bench/scheduler.json
    .venv/bin/python bench/bench_scheduler.py --sizes 9 --reps 1 --out /tmp/s.json
    .venv/bin/python bench/bench_scheduler.py --report results/bench/scheduler.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import measured_on, no_controller_shim, run_record, run_under_limit, write_json  # noqa: E402

SIZES = {9: (3, 3), 90: (10, 9), 300: (10, 30)}  # cells: (models, tasks), as bench/bench_scale.py
# The profile's max-jobs-per-timespan, by variant name: Snakemake's default (none set), and longer timespans at its rate.
SETTINGS = {"default": None, "300_per_3s": "300/3s", "1000_per_10s": "1000/10s"}  # names usable in a key path
CORES = 2  # workflow/profiles/default

SNAKEFILE = """\
M = [f"m{i}" for i in range(config["models"])]
T = [f"t{i}" for i in range(config["tasks"])]
SLEEP = config["sleep"]


rule all:
    input:
        "tables/summary.txt",


rule score_model:
    output:
        expand("staged/{{m}}/{t}.txt", t=T),
    shell:
        "sleep {SLEEP}; touch {output}"


rule publish_cell:
    input:
        "staged/{m}/{t}.txt",
    output:
        "cells/{m}/{t}/published.txt",
    shell:
        "sleep {SLEEP}; touch {output}"


rule evaluate_cell:
    input:
        "cells/{m}/{t}/published.txt",
    output:
        "cells/{m}/{t}/metrics.txt",
    shell:
        "sleep {SLEEP}; touch {output}"


rule summary_table:
    input:
        expand("cells/{m}/{t}/metrics.txt", m=M, t=T),
    output:
        "tables/summary.txt",
    shell:
        "sleep {SLEEP}; cat {input} > {output}"
"""

# Snakemake in this process, as its command line runs it; what it cost this process itself, as JSON on the last line.
RUNNER = """\
import json, resource, sys, threading, time
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
t0 = time.perf_counter()
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
finally:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"exit": code, "main_cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - t0,
                      "threads_at_end": threading.active_count()}))
"""


def env(shim: Path) -> dict[str, str]:
    """The environment of each run: an `scontrol` that fails at once (a machine with SLURM's client and no controller
    would otherwise wait 10 s in the SLURM plugin's import before every run)."""
    e = dict(os.environ)
    e["PATH"] = os.pathsep.join([str(shim), str(REPO / ".venv" / "bin"), e.get("PATH", "")])
    return e


def run_once(work: Path, n_models: int, n_tasks: int, sleep: float, setting: str | None, shim: Path) -> dict:
    if work.exists():
        shutil.rmtree(work)
    (work / "profile").mkdir(parents=True)
    (work / "Snakefile").write_text(SNAKEFILE)
    (work / "config.yaml").write_text(json.dumps({"models": n_models, "tasks": n_tasks, "sleep": sleep}))
    profile = {"cores": CORES} | ({"max-jobs-per-timespan": setting} if setting else {})
    (work / "profile" / "config.yaml").write_text(json.dumps(profile))
    cmd = [sys.executable, "-c", RUNNER, "--workflow-profile", "profile", "--configfile", "config.yaml", "--quiet",
           "progress"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env(shim), capture_output=True, text=True)
    exited_s = time.perf_counter() - t0  # with the wait at its exit for the timers still pending
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1]) if lines else {}
    out["process_wall_s"] = exited_s
    finished = len(list((work / "cells").rglob("metrics.txt"))) if (work / "cells").is_dir() else 0
    if proc.returncode != 0 or out.get("exit") != 0 or finished != n_models * n_tasks:
        raise SystemExit(f"the run of {n_models} x {n_tasks} (max-jobs-per-timespan {setting}) failed (exit "
                         f"{proc.returncode}, {finished} cells):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return {k: v for k, v in out.items() if k != "exit"}


def measure(cells: int, sleep: float, reps: int, root: Path, shim: Path) -> dict:
    """Every setting at the grid of CELLS, REPS rounds of them one after the other: each one's runs and medians."""
    n_models, n_tasks = SIZES[cells]
    out: dict = {"cells": cells, "models": n_models, "tasks": n_tasks, "jobs": n_models + 2 * cells + 1,
                 "loadavg_start": round(os.getloadavg()[0], 2)}
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for rep in range(reps):
        for name, setting in SETTINGS.items():
            runs[name].append(run_once(root / f"grid-{cells}-{rep}", n_models, n_tasks, sleep, setting, shim))
            print(f"[bench_scheduler {cells}] {name} ({rep + 1}/{reps}): {runs[name][-1]}", flush=True)
    for name, rows in runs.items():
        out[name] = {key: round(statistics.median(r[key] for r in rows), 2) for key in rows[0]} | {
            "runs": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in rows]}
    for name in SETTINGS:
        out[name]["cpu_vs_default"] = round(out[name]["main_cpu_s"] / out["default"]["main_cpu_s"], 3)
    return out


def markdown(report: dict) -> str:
    sizes = [report["sizes"][k] for k in sorted(report["sizes"], key=int)]
    lines = [f"Jobs that sleep {report['sleep_s']} s, {report['cores']} cores, medians of {report['reps']} runs of each "
             f"setting, alternating ({measured_on(report)}):", "",
             "| `max-jobs-per-timespan` | " + " | ".join(f"{s['cells']} cells ({s['jobs']} jobs): Snakemake's own CPU s "
                                                      f"(against the default), wall s to its exit, threads alive at its "
                                                      f"end" for s in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    settings = report.get("settings", SETTINGS)  # the record's own names: an older one named them otherwise
    for name, setting in settings.items():
        title = "Snakemake's default (100/1s)" if setting is None else f"`{setting}`"
        lines.append(f"| {title} | " + " | ".join(f"{s[name]['main_cpu_s']:.1f} ({s[name]['cpu_vs_default']:.2f}x), "
                                                  f"{s[name]['process_wall_s']:.0f}, {s[name]['threads_at_end']:.0f}"
                                                  for s in sizes) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="300", type=lambda v: [int(x) for x in v.split(",")],
                    help=f"grid sizes in cells, of {sorted(SIZES)}")
    ap.add_argument("--reps", type=int, default=3, help="rounds of the settings, one after the other")
    ap.add_argument("--sleep", type=float, default=0.4, help="seconds each job sleeps")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "scheduler.json"))
    ap.add_argument("--report", metavar="JSON", help="only print the docs block of an earlier run")
    args = ap.parse_args(argv)
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return 0
    root = Path(tempfile.mkdtemp(prefix="anyjev-bench-scheduler-"))
    try:
        shim = no_controller_shim(root / "no-slurm-controller")
        report = run_record() | {"sleep_s": args.sleep, "cores": CORES, "reps": args.reps, "settings": SETTINGS,
                                 "method": __doc__.split("\n\n")[2].replace("\n", " "), "sizes": {}}
        for cells in args.sizes:
            report["sizes"][str(cells)] = measure(cells, args.sleep, args.reps, root, shim)
        write_json(Path(args.out), report)
        print(markdown(report))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=3600))
