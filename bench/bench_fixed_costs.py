#!/usr/bin/env python
"""Where the two fixed costs of a large study go: ``snakemake -n`` (the dry run) and ``anyjev plan``, on the scale
benchmark's grids (:func:`bench.bench_scale.build_grid`: 9 = 3 x 3 and 300 = 10 x 30 cells), side by side in one run.

* The dry run: Snakemake starting (``snakemake --version``, which imports it and its plugins), and ``snakemake -n`` at
  9 and at 300 cells with the jobs each plans; the cost of one planned job is the difference of the two dry runs over
  the difference of their jobs.
* ``anyjev plan`` at 300 cells, and its parts: importing transformers and loading the grid's tokenizer in a fresh
  interpreter; then, in one process, rendering every prompt the plan renders (each task once: the models share one
  tokenizer), and tokenising them one call each (as the plan did) and in batches (``encode_many``, as it does now).
* The same plan with the cyclic garbage collector on, alternating with ``anyjev plan`` (which pauses it and leaves
  the live objects to the exit unscanned, ``anyjev.collector.collector_paused`` and ``anyjev.cli.run``): ``main(["plan", ...])`` with
  the pause taken out and Python's usual exit, and the collections it makes (``gc.callbacks``), by generation; wall
  and CPU seconds of each.

Medians of ``--reps`` runs each (default 3). The SLURM executor plugin is given an ``scontrol`` that fails at once
where SLURM's client is installed and no controller answers (bench/common.py, ``no_controller_shim``).

    .venv/bin/python bench/bench_fixed_costs.py      # results/bench/fixed_costs.json
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_scale  # noqa: E402
from bench.common import REPO, run_record, run_under_limit, write_json  # noqa: E402
from testbed.vllm_server import make_server_env  # noqa: E402

GRIDS = (9, 300)
# frozen before the exit, as `anyjev` leaves them (anyjev.cli.run): the import's objects are not scanned once more
IMPORT_AND_LOAD = "import gc, sys; from anyjev.decision.tokenizer import load_tokenizer; load_tokenizer(sys.argv[1]); gc.freeze()"
# `anyjev plan` with the collector on: main() (no freeze before the exit) with the pause taken out; the
# collections it made, by generation, on standard error as JSON when it ends.
COLLECTOR_ON = """
import atexit, contextlib, gc, json, sys, time
from anyjev import cli, collector
made, began = {}, []
def count(phase, info):
    if phase == "start":
        began.append(time.perf_counter())
    else:
        n, s = made.get(info["generation"], (0, 0.0))
        made[info["generation"]] = (n + 1, s + time.perf_counter() - began.pop())
gc.callbacks.append(count)
atexit.register(lambda: print("COLLECTIONS " + json.dumps(made), file=sys.stderr))
collector.collector_paused = contextlib.nullcontext
sys.exit(cli.main(sys.argv[1:]))
"""


def median_wall(cmd: list[str], cwd: Path, what: str, reps: int) -> tuple[float, str]:
    runs = [bench_scale.timed(cmd, cwd, what) for _ in range(reps)]
    return statistics.median(s for s, _ in runs), runs[-1][1]


def planned_jobs(dry_run_output: str) -> int:
    """The total of the dry run's "Job stats" table."""
    found = re.findall(r"^total\s+(\d+)\s*$", dry_run_output, re.M)
    if not found:
        raise SystemExit(f"no job total in the dry run's output:\n{dry_run_output[-2000:]}")
    return int(found[-1])


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def alternating(first: list[str], second: list[str], work: Path, what: str, reps: int) -> tuple[dict, dict, str, str]:
    """FIRST and SECOND run in WORK one after the other, REPS times: for each, its median wall and CPU seconds (its
    process and those it waited for: what other work on the machine disturbs less), and its last output."""
    runs: tuple[dict, dict] = ({"wall_s": [], "cpu_s": []}, {"wall_s": [], "cpu_s": []})
    texts = ["", ""]
    for _ in range(reps):
        for i, cmd in enumerate((first, second)):
            cpu = children_cpu_s()
            seconds, texts[i] = bench_scale.timed(cmd, work, f"{what} ({'as is' if i == 0 else 'the variant'})")
            runs[i]["cpu_s"].append(children_cpu_s() - cpu)
            runs[i]["wall_s"].append(seconds)
    first_s, second_s = ({k: statistics.median(v) for k, v in run.items()} for run in runs)
    return first_s, second_s, texts[0], texts[1]


def dry_runs(work: Path, reps: int) -> dict:
    """`snakemake -n` of the grid in WORK: the median, and the jobs planned."""
    seconds, text = median_wall(bench_scale.snakemake_cmd(work, "-n", "--quiet", "rules"), work, "snakemake -n", reps)
    return {"dry_run_s": round(seconds, 3), "jobs": planned_jobs(text)}


def plan_with_the_collector(config: Path, work: Path, reps: int) -> dict:
    """`anyjev plan` of CONFIG (collector paused) and the same with the collector on (COLLECTOR_ON), alternating: the
    medians, their ratio, and the collections the latter made in its last run."""
    args = ["plan", "--config", str(config), "--json"]
    paused, on, _, text = alternating([sys.executable, "-m", "anyjev", *args], [sys.executable, "-c", COLLECTOR_ON, *args],
                                      work, "anyjev plan", reps)
    made = json.loads(text.rsplit("COLLECTIONS ", 1)[1].splitlines()[0])
    out = {"plan_s": paused["wall_s"], "collector_on_s": on["wall_s"], "plan_cpu_s": paused["cpu_s"],
           "collector_on_cpu_s": on["cpu_s"], "collections": sum(n for n, _ in made.values()),
           "full_collections": made.get("2", [0, 0.0])[0], "collect_s": sum(s for _, s in made.values())}
    out["collector_on_vs_paused"] = out["collector_on_s"] / out["plan_s"]
    out["collector_on_vs_paused_cpu"] = out["collector_on_cpu_s"] / out["plan_cpu_s"]
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def plan_parts(work: Path, reps: int) -> dict:
    """The plan's parts at the grid in WORK (see the module docstring)."""
    from anyjev.decision.labels import label_strings
    from anyjev.decision.prompts import encode, encode_many
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.plan import task_counts
    from anyjev.settings import Settings

    tok_dir = str(work / "models" / "m00")
    loads = [bench_scale.timed([sys.executable, "-c", IMPORT_AND_LOAD, tok_dir], work, "import and load")[0]
             for _ in range(reps)]
    settings = Settings.load(work / "config" / "config.yaml", workdir=work)
    tokenizer = load_tokenizer(tok_dir)
    options = settings.scoring.prompt
    t0 = time.perf_counter()
    texts = []
    for task in settings.tasks:
        for item in task_counts(settings, task, str(work / "hub")).items:
            labels = label_strings(item.question, "default")
            for group in options.layouts(item.question).values():
                texts += [options.render(tokenizer, item.question, item.state, layout, labels) for layout in group]
    render_s = time.perf_counter() - t0
    one_each, batched = [], []
    for _ in range(reps):  # side by side, alternating
        t0 = time.perf_counter()
        single = [encode(tokenizer, text) for text in texts]
        one_each.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        together = [ids for i in range(0, len(texts), 2048) for ids in encode_many(tokenizer, texts[i:i + 2048])]
        batched.append(time.perf_counter() - t0)
        if together != single:
            raise SystemExit("encode_many gave other ids than one call each")
    tokens = sum(map(len, single))
    out = {"import_and_load_s": statistics.median(loads), "prompts_rendered": len(texts), "render_s": render_s,
           "tokens": tokens, "encode_one_each_s": statistics.median(one_each), "encode_batched_s": statistics.median(batched)}
    out["batched_vs_one_each"] = out["encode_one_each_s"] / out["encode_batched_s"]
    out["batched_tokens_per_s"] = tokens / out["encode_batched_s"]
    out["parts_s"] = out["import_and_load_s"] + render_s + out["encode_batched_s"]
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "fixed_costs.json"))
    args = ap.parse_args(argv)
    report: dict = run_record() | {"reps": args.reps}
    root = Path(tempfile.mkdtemp(prefix="bench-fixed-"))
    try:
        report["slurm_client"] = bench_scale.slurm_client(root)
        server_python = make_server_env(root / "stand-in")
        start, _ = median_wall([str(bench_scale.SNAKEMAKE), "--version"], root, "snakemake --version", args.reps)
        report["snakemake_start_s"] = round(start, 3)
        for cells in GRIDS:
            n_models, n_tasks = bench_scale.SIZES[cells]
            work = root / f"grid-{cells}"
            config = bench_scale.build_grid(work, n_models, n_tasks, items=50, n_test=30, server_python=server_python,
                                            starts=work / "server-starts.log")
            grid = {"cells": cells} | dry_runs(work, args.reps)
            if cells == max(GRIDS):
                collector = plan_with_the_collector(config, work, args.reps)
                grid |= {"plan_s": collector.pop("plan_s"), "collector": collector, "plan": plan_parts(work, args.reps)}
            report.setdefault("grids", {})[str(cells)] = grid
            print(f"[bench_fixed_costs] {cells} cells: {grid}", flush=True)
        small, big = (report["grids"][str(c)] for c in GRIDS)
        report["dry_run_ms_per_job"] = round(1000 * (big["dry_run_s"] - small["dry_run_s"]) / (big["jobs"] - small["jobs"]), 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    print(f"[bench_fixed_costs] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1800))
