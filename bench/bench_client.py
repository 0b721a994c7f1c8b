#!/usr/bin/env python
"""The scoring job's own CPU per prompt: ``anyjev score-model``, the real job command in a process of its own as the
workflow runs it, over a realistic cell set against the stand-in vLLM server (testbed/vllm_server.py: it answers at
once, in processes of its own), so that what is measured is the client.

Two jobs, one model each (SmolLM2's files; the stand-in computes nothing):

* ``default``: the default config (config/config.yaml) as it is, its three tasks at full size (160 items each, answer
  mass on), a local model in place of its prepared SmolLM2;
* ``grid``: the scale benchmark's mixed-K tasks (bench/bench_scale.py: 30 tasks of 50 items, K 2-20, Yes/No where
  K = 2), one model's 30 cells, as each of the scale run's ten scoring jobs scores them.

Per job (medians of the ``--reps`` runs after the first): the wall time, the job process's own CPU time (user + sys, read from /proc once it
has exited and before it is reaped: not the server's, nor the server supervisor's), the prompts its cells sent (what
``anyjev plan`` counts; the canary's and the server check's apart), CPU ms per prompt and prompts per second of wall.
A third job scores one cell of one test and one calibration item: what every job costs whatever it scores (its start,
imports, tokenizer, server start), and what a prompt costs beyond that. The jobs keep a user cache of their own: the
first run of each loads its tokenizer through AutoTokenizer (as the first job of a model folder does) and the runs
after it through the class it chose (the medians; every job's first run is kept in its ``cpu_s_runs``, and the fixed
job's is recorded apart).
Then each job once more under a stack sampler (CPU time: ``setitimer(ITIMER_PROF)``, each sample weighted by the CPU
time since the one before; ``client.max_concurrency: 1`` so that every request runs on the sampled thread): the share
of each part (startup, prepare, tokenise, request, parse, guard, checkpoint, records, ...) and the top functions.

    .venv/bin/python -m bench.bench_client                       # results/bench/client.json
    .venv/bin/python -m bench.bench_client --grid-tasks 3 --reps 1 --out /tmp/client.json   # a quick look
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CLK_TCK = os.sysconf("SC_CLK_TCK")
MODEL = "m00"
SAMPLE_S = 0.002  # the sampler's CPU-time interval
# What a sample of the job is spent on: the innermost frame of its stack that one of these names (file, function; a
# function of None: any in that file), except that anything under the server check is the guard's. Nothing named: the
# interpreter's start and imports, before the job's function runs (startup), or the job's own glue (other).
PARTS: tuple[tuple[str, str | None, str], ...] = (
    ("anyjev/run/server_check.py", None, "guard"),
    ("anyjev/serving/describe.py", None, "guard"),
    ("anyjev/run/store.py", None, "checkpoint"),
    ("anyjev/files.py", None, "checkpoint"),
    ("httpx/_models.py", "json", "parse"),
    ("anyjev/backends/vllm.py", "_read_response", "parse"),
    ("anyjev/backends/vllm.py", "_post", "request"),
    ("anyjev/run/records.py", "item_record", "records"),
    ("anyjev/decision/prompts.py", "encode_many", "tokenise"),
    ("anyjev/decision/labels.py", "check_in_context", "tokenise"),
    ("anyjev/run/prepared.py", None, "prepare"),
    ("anyjev/run/context.py", None, "prepare"),
    ("anyjev/decision/tokenizer.py", "load_tokenizer", "tokenizer load"),
    ("anyjev/data/taskfile.py", None, "task file"),
    ("anyjev/serving/", None, "server start"),
    ("anyjev/run/allocation.py", "score_model_job", "other"),
)
GUARD_PARTS = {"guard"}
# Frames every sample holds, and the standard library's: not listed among the functions by the CPU under them.
PLUMBING = ("<frozen", "<string>", str(Path(__file__)), sys.base_prefix + "/lib/python3")


# ------------------------------------------------------------------------------------------------ the cell sets
def build(work: Path, grid_tasks: int, items: int, n_test: int) -> dict[str, Path]:
    """The two run folders under WORK (config, prepared task files, a model folder of links), sharing the stand-in's
    server environment; {job name: its config}."""
    import yaml

    from bench.bench_scale import build_grid
    from bench.common import CONFIG, SMOL_DIR
    from testbed.vllm_server import make_server_env

    server_python = make_server_env(work / "stand-in")
    configs = {}
    default = yaml.safe_load(CONFIG.read_text())
    folder = work / "default" / "models" / MODEL
    folder.mkdir(parents=True)
    for source in SMOL_DIR.iterdir():  # links: the stand-in reads no weights
        (folder / source.name).symlink_to(source)
    server = {k: default["models"]["smollm2-135m"][k] for k in ("max_model_len", "server_flags", "server_env")}
    default["models"] = {MODEL: {"source": "local", "path": str(folder), **server}}
    default["server"] = {"python": str(server_python)}
    configs["default"] = work / "default" / "config" / "config.yaml"
    configs["default"].parent.mkdir(parents=True)
    configs["default"].write_text(yaml.safe_dump(default, sort_keys=False))
    configs["grid"] = build_grid(work / "grid", 1, grid_tasks, items=items, n_test=n_test, server_python=server_python,
                                 starts=work / "grid" / "server-starts.log")
    # what a job costs whatever it scores: one cell of one test and one calibration item
    configs["fixed"] = build_grid(work / "fixed", 1, 1, items=2, n_test=1, server_python=server_python,
                                  starts=work / "fixed" / "server-starts.log")
    for config in configs.values():
        prepare_tasks(config)
    return configs


def prepare_tasks(config: Path) -> None:
    """Every task of CONFIG prepared (built and split, as the workflow's prepare step) into its run folder."""
    from anyjev.data.prepare import prepare_task
    from anyjev.paths import RunPaths
    from anyjev.settings import Settings

    run = config.parent.parent
    settings = Settings.load(config, workdir=run)
    for task in settings.tasks:
        prepare_task(settings.prepare_job(task, hub_cache=str(run / RunPaths.hub_cache)),
                     run / RunPaths().task_file.format(task=task))


def job_file(config: Path, **client: int) -> Path:
    """The model's scoring job of CONFIG's run folder (CLIENT: client.* settings changed), written as the workflow
    writes it."""
    import yaml

    from anyjev.paths import RunPaths
    from anyjev.settings import Settings

    run = config.parent.parent
    if client:
        data = yaml.safe_load(config.read_text())
        data["client"] = data.get("client", {}) | client
        config = config.with_name("config-" + "-".join(f"{k}{v}" for k, v in client.items()) + ".yaml")
        config.write_text(yaml.safe_dump(data, sort_keys=False))
    from anyjev.run.allocation import ScoreModelJob

    paths = RunPaths()
    cells = Settings.load(config, workdir=run).model_cells(
        MODEL, models_dir=str(run / paths.models_dir), state_dir=str(run / paths.state_dir),
        server_log=str(run / paths.server_log.format(model=MODEL)), task_file=str(run / paths.task_file),
        staged=str(run / paths.staged_dir.replace("{model}", MODEL)), hub_cache=str(run / paths.hub_cache),
        lock_record=str(run / paths.lock_record))
    return Path(ScoreModelJob(MODEL, cells).to_file(run / paths.jobs_dir))


# ------------------------------------------------------------------------------------------------ one run
def own_cpu_s(proc: subprocess.Popen) -> float:
    """PROC's own CPU seconds (user + sys), read from /proc once it has exited and before it is reaped; reaps it."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (stat fields 14 and 15)
    proc.wait()
    return cpu


CODE: list[Path] = [REPO]  # the checkout whose anyjev the jobs run (--code)
RENDER: list[str] = ["ahead"]  # where the jobs' prompts are rendered (--render-prompts): ahead, or in the job


def run_job(job: Path, out: Path, *, sampled: Path | None = None, code: Path | None = None,
            cache: Path | None = None, render: str | None = None) -> dict:
    """One run of the scoring job JOB from nothing (its staged cells removed), its outcome record OUT: wall, own CPU,
    prompts sent. With SAMPLED, under the stack sampler, whose profile is written there. CODE: the checkout whose
    anyjev runs it (default: --code's, or this one); CACHE: the user cache it keeps (default: the benchmark's).
    RENDER (default: --render-prompts'): ``ahead``, the job's prompts rendered first by ``anyjev render-prompts`` (its
    own CPU recorded apart, ``render_cpu_s``; never sampled) and read by the job (``render_prompts: ahead``), or
    ``job``, rendered by the job itself."""
    from anyjev.serving.stop import stop_servers

    run = out.parents[2]
    for staged in (run / "results" / "cells").glob(f"{MODEL}/*/staged"):
        shutil.rmtree(staged)
    out.unlink(missing_ok=True)
    head = [sys.executable, "-m", "anyjev"]
    if sampled is not None:
        head = [sys.executable, "-c", "import sys; from bench.bench_client import sampled; sampled(sys.argv[1:])",
                str(sampled)]
    path = [str(code or CODE[0])] + ([str(REPO)] if sampled is not None else [])  # the sampler is this checkout's
    # the benchmark's own user cache (anyjev.files.user_cache): each job's first run loads its tokenizer through
    # AutoTokenizer, as a first run on a machine does, and the runs after it the class it chose
    env = dict(os.environ) | {"PYTHONPATH": os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")])),
                              "XDG_CACHE_HOME": str(cache or run.parent / "cache")}
    log = run / "logs" / f"score_model-{'sampled' if sampled else 'plain'}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rendered: dict = {}
    prompts: list[str] = []
    if (render or RENDER[0]) == "ahead":
        pickle = run / "resources" / "prompts" / f"{MODEL}.pickle"
        pickle.unlink(missing_ok=True)
        render_log = run / "logs" / "render_prompts.log"
        t0 = time.perf_counter()
        with open(render_log, "w") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "anyjev", "render-prompts", "--job", str(job), "--out",
                                     str(pickle)], cwd=run, env=env, stdout=fh, stderr=subprocess.STDOUT)
            rendered = {"render_cpu_s": own_cpu_s(proc), "render_wall_s": time.perf_counter() - t0}
        if proc.returncode != 0:
            raise SystemExit(f"rendering {job} failed (exit {proc.returncode}):\n{render_log.read_text()[-4000:]}")
        prompts = ["--prompts", str(pickle)]
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen([*head, "score-model", "--job", str(job), *prompts, "--out", str(out), "--owner-pid",
                                 str(os.getpid())], cwd=run, env=env, stdout=fh, stderr=subprocess.STDOUT)
        cpu = own_cpu_s(proc)
    wall = time.perf_counter() - t0
    stop_servers(run / ".anyjev" / "servers", owner_pid=os.getpid())
    if proc.returncode != 0:
        raise SystemExit(f"the scoring job {job} failed (exit {proc.returncode}):\n{log.read_text()[-4000:]}")
    record = json.loads(out.read_text())
    failed = [t for t, c in record["cells"].items() if c["status"] != "ok"]
    if failed:
        raise SystemExit(f"cells {failed} failed: {[record['cells'][t]['message'] for t in failed]}")
    counts = [c["counts"] for c in record["cells"].values()]
    if prompts and "loading the tokenizer" in log.read_text():
        raise SystemExit(f"the scoring job {job} loaded a tokenizer though its prompts were rendered ahead:\n"
                         f"{log.read_text()[-4000:]}")
    return rendered | {"wall_s": wall, "cpu_s": cpu, "cells": len(counts), "items": sum(c["items"] for c in counts),
            "prompts": sum(c["prompts"] for c in counts),
            "canary_prompts": sum(c["canary"]["prompts"] for c in counts),
            "server_check_prompts": sum(c.get("server_check", {}).get("prompts", 0) for c in counts),
            "prompt_tokens": sum(c.get("prompt_tokens", 0) for c in counts)}


def short_commit(checkout: Path) -> str:
    """The short hash of CHECKOUT's HEAD ("" where it is no git checkout)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()


def job_figures(runs: list[dict]) -> dict:
    """One job's figures from its plain RUNS: the medians of the runs after the first, which loaded its tokenizer
    through AutoTokenizer (torch imported) as only a model folder's first job on a machine does; every run's CPU
    seconds kept in ``cpu_s_runs``."""
    first = runs[0]
    warm = runs[1:] or runs
    cpu, wall = statistics.median(r["cpu_s"] for r in warm), statistics.median(r["wall_s"] for r in warm)
    result = {k: first[k] for k in ("cells", "items", "prompts", "canary_prompts", "server_check_prompts", "prompt_tokens")}
    result |= {"reps": len(runs), "cpu_s_runs": [round(r["cpu_s"], 2) for r in runs], "cpu_s": round(cpu, 2),
               "wall_s": round(wall, 2), "job_cpu_ms_per_prompt": round(1000 * cpu / first["prompts"], 4),
               "prompts_per_s": round(first["prompts"] / wall, 1),
               "prompts_per_cpu_s": round(first["prompts"] / cpu, 1)}
    if "render_cpu_s" in first:  # rendered ahead: the render job's own figures, apart
        render = statistics.median(r["render_cpu_s"] for r in warm)
        result |= {"render_cpu_s_runs": [round(r["render_cpu_s"], 2) for r in runs], "render_cpu_s": round(render, 2),
                   "render_wall_s": round(statistics.median(r["render_wall_s"] for r in warm), 2),
                   "render_cpu_ms_per_prompt": round(1000 * render / first["prompts"], 4)}
    return result


def totals_of(measured: dict[str, dict], fixed: dict) -> dict:
    """Over the measured jobs (MEASURED, by name): their prompts and CPU seconds, a prompt's job CPU all told, and
    beyond what every job costs (FIXED: the job of one item's figures; its first run: a model folder's first job)."""
    totals = {"prompts": sum(j["prompts"] for j in measured.values()),
              "cpu_s": round(sum(j["cpu_s"] for j in measured.values()), 2), "fixed_cpu_s": fixed["cpu_s"],
              "fixed_first_run_cpu_s": fixed["cpu_s_runs"][0]}
    totals["job_cpu_ms_per_prompt"] = round(1000 * totals["cpu_s"] / totals["prompts"], 4)
    totals["marginal_cpu_ms_per_prompt"] = round(
        1000 * (totals["cpu_s"] - len(measured) * fixed["cpu_s"]) / totals["prompts"], 4)
    if all("render_cpu_s" in j for j in measured.values()):  # rendered ahead: the render jobs apart, and both together
        totals["render_cpu_s"] = round(sum(j["render_cpu_s"] for j in measured.values()), 2)
        totals["render_cpu_ms_per_prompt"] = round(1000 * totals["render_cpu_s"] / totals["prompts"], 4)
        totals["with_render_cpu_ms_per_prompt"] = round(
            1000 * (totals["cpu_s"] + totals["render_cpu_s"]) / totals["prompts"], 4)
    return totals


def side_by_side(codes: dict[str, tuple[Path, str]], configs: dict[str, Path], jobs: list[str], reps: int,
                 root: Path) -> dict:
    """The jobs run with each of CODES' anyjev (name: checkout, and where its prompts are rendered) in turn, REPS rounds
    of every job, each code's run of a job right after the others' (what other work on the machine does to one, it does
    to its neighbours), each code with a user cache of its own (its first run of a job loads the tokenizer through
    AutoTokenizer, the medians are of the rest). Per code, the figures of :func:`totals_of`; per code after the first,
    its ratios to the first: of their job CPU a prompt all told (``all_told``), and the median over the rounds after
    the first of the ratio of the jobs' summed CPU seconds (``per_round_median``)."""
    runs: dict[str, dict[str, list[dict]]] = {name: {job: [] for job in [*jobs, "fixed"]} for name in codes}
    for rep in range(reps):
        for job in [*jobs, "fixed"]:
            config = configs[job]
            for name, (code, render) in codes.items():
                r = run_job(job_file(config), config.parent.parent / "results" / "allocations" / f"{MODEL}.json",
                            code=code, cache=root / f"cache-{name}", render=render)
                runs[name][job].append(r)
                print(f"[bench_client side by side {rep + 1}/{reps}] {job} {name}: {r['cpu_s']:.2f} CPU s", flush=True)
    out: dict = {"reps": reps, "codes": {}}
    for name, (code, render) in codes.items():
        measured = {job: job_figures(runs[name][job]) for job in jobs}
        out["codes"][name] = {"commit": short_commit(code), "render_prompts": render,
                              **totals_of(measured, job_figures(runs[name]["fixed"])),
                              "jobs": {job: {k: m[k] for k in ("prompts", "cpu_s", "cpu_s_runs", "job_cpu_ms_per_prompt")}
                                       for job, m in measured.items()}}
    base = next(iter(codes))
    summed = {name: [sum(runs[name][job][r]["cpu_s"] for job in jobs) for r in range(reps)] for name in codes}
    for name in list(codes)[1:]:
        out["codes"][name]["vs_" + base] = {
            "all_told": round(out["codes"][name]["job_cpu_ms_per_prompt"]
                                           / out["codes"][base]["job_cpu_ms_per_prompt"], 3),
            "per_round_median": round(statistics.median(a / b for a, b in zip(summed[name][1:], summed[base][1:],
                                                                                strict=True)) if reps > 1 else
                                      summed[name][0] / summed[base][0], 3)}
    return out


def measure(name: str, config: Path, reps: int, *, profile: bool = True) -> dict:
    """JOB's plain runs (medians) and (PROFILE) its sampled run's parts."""
    run = config.parent.parent
    out = run / "results" / "allocations" / f"{MODEL}.json"
    job = job_file(config)
    runs = [run_job(job, out) for _ in range(reps)]
    for r in runs:
        print(f"[bench_client {name}] {r['prompts']} prompts: {r['cpu_s']:.2f} CPU s, {r['wall_s']:.1f} s wall", flush=True)
    result = job_figures(runs)
    if not profile:
        return result
    profile = run / "profile.json"
    sampled_run = run_job(job_file(config, max_concurrency=1), out, sampled=profile)
    result["profile"] = json.loads(profile.read_text()) | {"cpu_s": round(sampled_run["cpu_s"], 2),
                                                          "client": {"max_concurrency": 1}}
    return result


# ------------------------------------------------------------------------------------------------ the sampler
def sampled(argv: list[str]) -> None:
    """``python -m anyjev ARGV[1:]`` in this process under a CPU-time stack sampler; its profile written to ARGV[0]."""
    import runpy

    out, args = argv[0], argv[1:]
    stacks: dict[tuple, float] = {}
    last = [time.process_time()]

    def sample(signum, frame) -> None:
        now = time.process_time()
        codes = []
        while frame is not None:
            codes.append(frame.f_code)
            frame = frame.f_back
        key = tuple(codes)  # a long call into C delivers one signal: weigh each sample by the CPU since the last
        stacks[key] = stacks.get(key, 0.0) + now - last[0]
        last[0] = now

    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, SAMPLE_S, SAMPLE_S)
    sys.argv = ["anyjev", *args]
    code: int | str | None = 0
    try:
        runpy.run_module("anyjev", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        stacks[()] = stacks.get((), 0.0) + time.process_time() - last[0]
        Path(out).write_text(json.dumps(summarise(stacks), indent=1))
    sys.exit(code)


def _where(code) -> str:
    """FUNCTION's file (within its package, the standard library's within lib/) and name: no folder of this machine."""
    path = code.co_filename
    for marker in ("site-packages/", str(REPO) + "/", sys.base_prefix + "/lib/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_name}"


def part_of(codes: tuple) -> str:
    """The part a sample's stack (innermost frame first) is spent on (PARTS)."""
    found = None
    for code in codes:
        for suffix, function, part in PARTS:
            if suffix in code.co_filename and function in (None, code.co_name):
                if part in GUARD_PARTS:
                    return part
                found = found or part
                break
    if found is not None:
        return found
    return "other" if any(c.co_name == "score_model_job" for c in codes) else "startup"


def summarise(stacks: dict[tuple, float], top: int = 40) -> dict:
    """The parts' CPU seconds and shares, and the top functions by their own CPU and by the CPU under them."""
    total = sum(stacks.values())
    parts: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    under: collections.Counter = collections.Counter()
    for codes, seconds in stacks.items():
        parts[part_of(codes)] += seconds
        if codes:
            own[_where(codes[0])] += seconds
        for where in {_where(c) for c in codes if not c.co_filename.startswith(PLUMBING)}:
            under[where] += seconds
    return {"sampled_cpu_s": round(total, 2), "interval_s": SAMPLE_S,
            "parts": {p: {"cpu_s": round(s, 3), "share": round(s / total, 4)} for p, s in parts.most_common()},
            "top_own": [{"function": f, "cpu_s": round(s, 3), "share": round(s / total, 4)} for f, s in own.most_common(top)],
            "top_cumulative": [{"function": f, "cpu_s": round(s, 3), "share": round(s / total, 4)}
                               for f, s in under.most_common(top)]}


# ------------------------------------------------------------------------------------------------ report
def markdown(report: dict) -> str:
    """The jobs side by side and the parts of each."""
    from bench.common import measured_on

    jobs = report["jobs"]
    lines = [f"The scoring job against the stand-in server ({measured_on(report)}, commit {report['commit']}"
             f"{', uncommitted changes' if report.get('dirty') else ''}):", "",
             "| | " + " | ".join(jobs) + " |", "|---|" + "---:|" * len(jobs)]

    def row(title: str, fmt) -> None:
        lines.append(f"| {title} | " + " | ".join(fmt(j) for j in jobs.values()) + " |")

    row("cells, items", lambda j: f"{j['cells']}, {j['items']:,}")
    row("prompts (canary, server check apart)", lambda j: f"{j['prompts']:,} ({j['canary_prompts']}, {j['server_check_prompts']})")
    row("job CPU s (median of runs)", lambda j: f"{j['cpu_s']:.2f}")
    row("job CPU ms a prompt", lambda j: f"{j['job_cpu_ms_per_prompt']:.3f}")
    row("prompts a second (wall), a CPU second", lambda j: f"{j['prompts_per_s']:,.0f}, {j['prompts_per_cpu_s']:,.0f}")
    if all("render_cpu_s" in j for j in jobs.values()):
        row("render job CPU s (median of runs), ms a prompt",
            lambda j: f"{j['render_cpu_s']:.2f}, {j['render_cpu_ms_per_prompt']:.3f}")
    parts = sorted({p for j in jobs.values() for p in j["profile"]["parts"]},
                   key=lambda p: -sum(j["profile"]["parts"].get(p, {}).get("cpu_s", 0) for j in jobs.values()))
    for part in parts:
        row(f"part: {part} (share of the sampled CPU)",
            lambda j, p=part: f"{j['profile']['parts'].get(p, {}).get('share', 0):.1%}")
    ahead = report.get("render_prompts") == "ahead"
    lines += ["", f"All jobs: {report['job_cpu_ms_per_prompt']:.3f} job CPU ms a prompt "
                  f"({report['prompts']:,} prompts, {report['cpu_s']:.1f} CPU s); a job that scores one item costs "
                  f"{report['fixed_cpu_s']:.2f} CPU s, and beyond that a prompt costs "
                  f"{report['marginal_cpu_ms_per_prompt']:.3f} ms."
                  + (f" The prompts were rendered ahead (`render_prompts: ahead`), by render jobs that took "
                     f"{report['render_cpu_s']:.1f} CPU s apart ({report['render_cpu_ms_per_prompt']:.3f} ms a prompt; "
                     f"both jobs together {report['with_render_cpu_ms_per_prompt']:.3f} ms a prompt)."
                     if ahead and "render_cpu_s" in report else "")
                  + (f" The first job of a model folder costs {report['fixed_first_run_cpu_s']:.2f} CPU s: it loads the "
                     "tokenizer through AutoTokenizer, which imports torch, and remembers the class it chose."
                     if "fixed_first_run_cpu_s" in report and not ahead else "")]
    if report.get("steps"):
        lines += ["", "| step | commit | job CPU ms a prompt | beyond a job's fixed cost | fixed CPU s a job |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {s['step']} | {s['run'].get('code_commit', s['run']['commit'])} | {s['job_cpu_ms_per_prompt']:.3f} | "
                  f"{s['marginal_cpu_ms_per_prompt']:.3f} | {s['fixed_cpu_s']:.2f} |" for s in report["steps"]]
    if report.get("side_by_side"):
        lines += ["", side_by_side_markdown(report["side_by_side"])]
    return "\n".join(lines)


def side_by_side_markdown(compared: dict) -> str:
    """The codes run side by side (:func:`side_by_side`), a row each, with their ratios to the first."""
    from bench.common import measured_on

    base = next(iter(compared["codes"]))
    lines = [f"Side by side, round by round ({compared['reps']} rounds; {measured_on(compared['run'])}):", "",
             f"| code | commit | prompts rendered | job CPU ms a prompt | beyond a job's fixed cost | fixed CPU s a job | "
             f"render jobs' CPU ms a prompt | vs {base} (all told) | vs {base} (median of the rounds) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, c in compared["codes"].items():
        vs = c.get("vs_" + base)
        render = c.get("render_prompts", "by the job")
        lines.append(f"| {name} | {c['commit']} | {'ahead' if render == 'ahead' else 'by the job'} | "
                     f"{c['job_cpu_ms_per_prompt']:.3f} | {c['marginal_cpu_ms_per_prompt']:.3f} | {c['fixed_cpu_s']:.2f} | "
                     + (f"{c['render_cpu_ms_per_prompt']:.3f} | " if "render_cpu_ms_per_prompt" in c else "| ")
                     + (f"{vs['all_told']:.3f}x | {vs['per_round_median']:.3f}x |" if vs else "| |"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid-tasks", type=int, default=30, help="mixed-K tasks of the grid job (the scale run's: 30)")
    ap.add_argument("--items", type=int, default=50, help="items a grid task")
    ap.add_argument("--n-test", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5,
                    help="plain runs of each job (the first loads its tokenizer through AutoTokenizer; medians of the rest)")
    ap.add_argument("--jobs", default="default,grid", help="which jobs, of default and grid")
    ap.add_argument("--workdir", help="where the run folders are built (default: a scratch folder, removed)")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "client.json"))
    ap.add_argument("--step", metavar="WHAT",
                    help="only the plain runs, recorded as a row of the existing JSON's steps (what a change won)")
    ap.add_argument("--code", metavar="CHECKOUT", help="run the jobs with the anyjev of this checkout (another commit's, "
                    "for --step), measured the same way")
    ap.add_argument("--render-prompts", choices=("ahead", "job"), default="ahead",
                    help="where the jobs' prompts are rendered: ahead (render_prompts: ahead; the render job's CPU "
                         "recorded apart) or by the scoring job itself (render_prompts: job)")
    ap.add_argument("--side-by-side", metavar="NAME=CHECKOUT[@RENDER]", action="append", default=[],
                    help="only this (twice or more): the jobs with each checkout's anyjev in turn, round by round "
                         "(side_by_side in the existing JSON; the first named is the one the others are compared with); "
                         "@ahead or @job: where its prompts are rendered (default: --render-prompts')")
    ap.add_argument("--report", metavar="JSON", help="only print the docs block of an earlier run")
    args = ap.parse_args(argv)
    if args.report:
        print(markdown(json.loads(Path(args.report).read_text())))
        return 0
    from bench.common import run_record, write_json

    # the code's state as run_record() reads it (results/, which benchmarks write, left out); the commit short
    record = run_record() | {"commit": short_commit(REPO), "render_prompts": args.render_prompts}
    RENDER[0] = args.render_prompts
    if args.code:
        CODE[0] = Path(args.code).resolve()
        record["code_commit"] = short_commit(CODE[0])
    out = Path(args.out)
    earlier = json.loads(out.read_text()) if out.is_file() else {}
    measured: dict = {}
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-client-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.side_by_side:
        codes = {}
        for name, _, given in (v.partition("=") for v in args.side_by_side):
            path, _, render = given.partition("@")
            codes[name] = (Path(path).resolve(), render or args.render_prompts)
        if len(codes) < 2:
            ap.error("--side-by-side compares two checkouts or more: give it once for each")
        try:
            configs = build(root, args.grid_tasks, args.items, args.n_test)
            compared = side_by_side(codes, configs, args.jobs.split(","), args.reps, root)
        finally:
            if not args.workdir:
                shutil.rmtree(root, ignore_errors=True)
        report = earlier | {"side_by_side": {"run": record} | compared}
        write_json(out, report)
        print(side_by_side_markdown(report["side_by_side"]))
        return 0
    try:
        configs = build(root, args.grid_tasks, args.items, args.n_test)
        for name in args.jobs.split(","):
            measured[name] = measure(name, configs[name], args.reps, profile=args.step is None)
        fixed = measure("fixed", configs["fixed"], args.reps, profile=False)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    totals = totals_of(measured, fixed)
    steps = [s for s in earlier.get("steps", []) if s["step"] != args.step]
    if args.step is not None:  # a row of what each change won, each with the record of its own run
        steps.append({"step": args.step, "run": record, **totals,
                      "jobs": {n: {k: j[k] for k in ("prompts", "cpu_s", "cpu_s_runs", "job_cpu_ms_per_prompt")}
                               for n, j in measured.items()}})
        report = earlier | {"steps": steps}
    else:
        method = " ".join(line.strip() for line in "\n".join(__doc__.split("\n\n")[1:4]).splitlines())  # not the usage
        report = record | {"method": method, "jobs": measured, **totals, "steps": steps} | (
            {"side_by_side": earlier["side_by_side"]} if "side_by_side" in earlier else {})
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    if "jobs" in report:
        print(markdown(report))
    for s in steps:
        print(f"step {s['step']!r} ({s['run'].get('code_commit', s['run']['commit'])}): "
              f"{s['job_cpu_ms_per_prompt']:.3f} ms a prompt, "
              f"{s.get('marginal_cpu_ms_per_prompt', float('nan')):.3f} beyond {s.get('fixed_cpu_s', float('nan')):.2f} "
              "CPU s a job")
    return 0


if __name__ == "__main__":
    from bench.common import run_under_limit

    sys.exit(run_under_limit(main, seconds=2 * 3600))
