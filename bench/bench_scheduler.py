#!/usr/bin/env python
"""Snakemake's own CPU time as a run grows, with and without workflow/rules/scheduler.smk, side by side.

The scale benchmark (bench/bench_scale.py) found Snakemake's main process using 7 s of CPU at 9 cells and 311 s at 90.
The cause is in its scheduler: under the default rate limit (``--max-jobs-per-timespan 100/1s``) every round that
leaves jobs waiting starts another one-second timer, and every finished job starts a round, so the wake-ups a second
grow with the jobs finished, for as long as jobs wait (snakemake/snakemake#3804). workflow/rules/scheduler.smk keeps
one timer pending at a time.

This measures that alone, on a workflow of the anyjev workflow's shape with jobs that only sleep: per grid of M models
x T tasks, one job per model (its scoring, writing a file per task), then three per cell (publish, evaluate, plot) and
one over all cells; SLEEP seconds a job, on the cores of the default profile. Each size runs twice in a row, once as
Snakemake comes and once with the repository's scheduler.smk included; per run, the main process's own CPU time
(getrusage, its threads, not its jobs), its wall time and the threads still alive when it ends.

    .venv/bin/python bench/bench_scheduler.py                      # 9, 90 and 300 cells -> results/bench/scheduler.json
    .venv/bin/python bench/bench_scheduler.py --sizes 9 --out /tmp/s.json
    .venv/bin/python bench/bench_scheduler.py --report results/bench/scheduler.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import measured_on, no_controller_shim, run_record, run_under_limit, write_json  # noqa: E402

SCHEDULER_SMK = REPO / "workflow" / "rules" / "scheduler.smk"
SIZES = {9: (3, 3), 90: (10, 9), 300: (10, 30)}  # cells: (models, tasks), as bench/bench_scale.py
VARIANTS = ("snakemake_as_is", "one_timer")
CORES = 2  # workflow/profiles/default

SNAKEFILE = """\
if config["one_timer"]:

    include: {scheduler!r}


M = [f"m{{i}}" for i in range(config["models"])]
T = [f"t{{i}}" for i in range(config["tasks"])]
SLEEP = config["sleep"]


rule all:
    input:
        "tables/summary.txt",
        expand("cells/{{m}}/{{t}}/plot.txt", m=M, t=T),
        expand("cells/{{m}}/{{t}}/published.txt", m=M, t=T),


rule score_model:
    output:
        expand("staged/{{{{m}}}}/{{t}}.txt", t=T),
    shell:
        "sleep {{SLEEP}}; touch {{output}}"


rule publish_cell:
    input:
        "staged/{{m}}/{{t}}.txt",
    output:
        "cells/{{m}}/{{t}}/published.txt",
    shell:
        "sleep {{SLEEP}}; touch {{output}}"


rule evaluate_cell:
    input:
        "cells/{{m}}/{{t}}/published.txt",
    output:
        "cells/{{m}}/{{t}}/metrics.txt",
    shell:
        "sleep {{SLEEP}}; touch {{output}}"


rule reliability_plot:
    input:
        "cells/{{m}}/{{t}}/metrics.txt",
    output:
        "cells/{{m}}/{{t}}/plot.txt",
    shell:
        "sleep {{SLEEP}}; touch {{output}}"


rule summary_table:
    input:
        expand("cells/{{m}}/{{t}}/metrics.txt", m=M, t=T),
    output:
        "tables/summary.txt",
    shell:
        "sleep {{SLEEP}}; cat {{input}} > {{output}}"
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


def run_once(work: Path, n_models: int, n_tasks: int, sleep: float, one_timer: bool, shim: Path) -> dict:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "Snakefile").write_text(SNAKEFILE.format(scheduler=str(SCHEDULER_SMK)))
    (work / "config.yaml").write_text(json.dumps({"models": n_models, "tasks": n_tasks, "sleep": sleep,
                                                  "one_timer": one_timer}))
    cmd = [sys.executable, "-c", RUNNER, "--cores", str(CORES), "--configfile", "config.yaml", "--quiet", "progress"]
    proc = subprocess.run(cmd, cwd=work, env=env(shim), capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1]) if lines else {}
    finished = len(list((work / "cells").rglob("plot.txt"))) if (work / "cells").is_dir() else 0
    if proc.returncode != 0 or out.get("exit") != 0 or finished != n_models * n_tasks:
        raise SystemExit(f"the run of {n_models} x {n_tasks} (one_timer={one_timer}) failed (exit {proc.returncode}, "
                         f"{finished} cells):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items() if k != "exit"}


def measure(cells: int, sleep: float, root: Path, shim: Path) -> dict:
    n_models, n_tasks = SIZES[cells]
    jobs = n_models + 3 * cells + 1
    out: dict = {"cells": cells, "models": n_models, "tasks": n_tasks, "jobs": jobs, "loadavg_start": round(os.getloadavg()[0], 2)}
    for variant in VARIANTS:
        out[variant] = run_once(root / f"grid-{cells}-{variant}", n_models, n_tasks, sleep, variant == "one_timer", shim)
        print(f"[bench_scheduler {cells}] {variant}: {out[variant]}", flush=True)
    out["main_cpu_as_is_vs_one_timer"] = round(out["snakemake_as_is"]["main_cpu_s"] / out["one_timer"]["main_cpu_s"], 2)
    return out


def growth(sizes: dict, variant: str) -> float | None:
    """The exponent of the main process's CPU time in cells, from the smallest size to the largest."""
    keys = sorted(sizes, key=int)
    if len(keys) < 2:
        return None
    a, b = sizes[keys[0]], sizes[keys[-1]]
    return round(math.log(b[variant]["main_cpu_s"] / a[variant]["main_cpu_s"]) / math.log(b["cells"] / a["cells"]), 2)


def markdown(report: dict) -> str:
    sizes = [report["sizes"][k] for k in sorted(report["sizes"], key=int)]
    lines = [f"Jobs that sleep {report['sleep_s']} s, {report['cores']} cores, each size run as Snakemake comes and then with "
             f"`workflow/rules/scheduler.smk` ({measured_on(report)}):", "",
             "| | " + " | ".join(f"{s['cells']} cells ({s['jobs']} jobs)" for s in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for variant, title in (("snakemake_as_is", "as Snakemake comes"), ("one_timer", "one timer pending")):
        lines.append(f"| {title}: Snakemake's own CPU s | " + " | ".join(f"{s[variant]['main_cpu_s']:.1f}" for s in sizes) + " |")
        lines.append(f"| {title}: wall s | " + " | ".join(f"{s[variant]['wall_s']:.0f}" for s in sizes) + " |")
        lines.append(f"| {title}: threads alive at its end | " + " | ".join(str(s[variant]["threads_at_end"]) for s in sizes) + " |")
    lines.append("| CPU as it comes / with one timer | " + " | ".join(f"{s['main_cpu_as_is_vs_one_timer']:.2f}x" for s in sizes) + " |")
    def exponent(a: dict, b: dict, variant: str) -> float:
        return math.log(b[variant]["main_cpu_s"] / a[variant]["main_cpu_s"]) / math.log(b["cells"] / a["cells"])

    pairs = [f"{exponent(a, b, 'snakemake_as_is'):.2f} and {exponent(a, b, 'one_timer'):.2f} from {a['cells']} to "
             f"{b['cells']} cells" for a, b in itertools.pairwise(sizes)]
    if pairs:
        lines += ["", "The exponent in cells of Snakemake's own CPU time, as it comes and with one timer pending: "
                      + "; ".join(pairs) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="9,90,300", type=lambda v: [int(x) for x in v.split(",")],
                    help=f"grid sizes in cells, of {sorted(SIZES)}")
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
        report = run_record() | {"sleep_s": args.sleep, "cores": CORES, "method": __doc__.split("\n\n")[2].replace("\n", " "),
                                 "sizes": {}}
        for cells in args.sizes:
            report["sizes"][str(cells)] = measure(cells, args.sleep, root, shim)
        report["growth_exponent"] = {v: growth(report["sizes"], v) for v in VARIANTS}
        write_json(Path(args.out), report)
        print(markdown(report))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=3600))
