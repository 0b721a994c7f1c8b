#!/usr/bin/env python
"""What the server check's probe (anyjev.run.server_check) can tell apart: the same server read twice, against
servers of another dtype or lm-head.

Three servers of the default model under the project's pinned flags, started side by side: float32, bfloat16 with
the fp32 lm-head (the CUDA default), bfloat16 without it. For the first ITEMS items of MMLU, SocialIQA and Rotten
Tomatoes, the probe's prompts (an item's first layouts, at most ``PROBE_LAYOUTS``, distinct) are read with a fresh
prefix-cache salt twice, and twice without a salt (the second time from the prefix cache). Recorded per task:

- per server: the system_fingerprint, the largest |difference| between the two salted reads (the probe's own noise),
  and between a salted read and a cached one (what the salt keeps out);
- per pair of servers: over the items, the smallest of each item's largest |difference| (the probe set, and its first
  prompt alone: what a check between chunks sends).

``PROBE_TOLERANCE`` must lie above every server's own noise and below every pair's smallest difference.

    .venv/bin/python bench/bench_server_probe.py [--items 20]   # writes results/bench/server_probe.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.backends.vllm import VLLMBackend  # noqa: E402
from anyjev.data.builtin import mmlu, rotten_tomatoes, socialiqa  # noqa: E402
from anyjev.decision.options import PromptOptions  # noqa: E402
from anyjev.decision.tokenizer import load_tokenizer  # noqa: E402
from anyjev.run.prepared import prepare_items  # noqa: E402
from anyjev.run.server_check import PROBE_LAYOUTS, PROBE_TOLERANCE, dedupe  # noqa: E402
from bench.common import run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402

OUT = REPO / "results" / "bench" / "server_probe.json"
SERVERS = {"float32": ("float32", True), "bfloat16+fp32-head": ("bfloat16", True), "bfloat16": ("bfloat16", False)}
TASKS = {"mmlu": mmlu, "socialiqa": socialiqa, "rotten_tomatoes": rotten_tomatoes}


def read(backend: VLLMBackend, probes: list[tuple[list[list[int]], list[int]]], salted: bool) -> list[np.ndarray]:
    return [backend.label_logprobs(prompts, labels, cache_salt=uuid.uuid4().hex if salted else None)
            for prompts, labels in probes]


def largest(a: list[np.ndarray], b: list[np.ndarray], first_only: bool = False) -> list[float]:
    """Each item's largest |difference| between two reads."""
    return [float(np.abs((x[:1] - y[:1]) if first_only else (x - y)).max()) for x, y in zip(a, b, strict=True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=20)
    args = ap.parse_args()
    state = REPO / "results" / "bench" / "logs" / "server_probe"
    specs = {name: smollm2_spec(f"probe-{i}", dtype=dtype, fp32_head=head) for i, (name, (dtype, head)) in enumerate(SERVERS.items())}
    tokenizer = load_tokenizer(smollm2())
    report: dict = run_record() | {"items": args.items, "probe_layouts": PROBE_LAYOUTS, "probe_tolerance": PROBE_TOLERANCE,
                    "servers": {name: list(cfg) for name, cfg in SERVERS.items()}, "tasks": {}}
    with contextlib.ExitStack() as servers:
        with ThreadPoolExecutor(len(specs)) as pool:  # started at once; each stopped at the end, those started if one fails
            started = {name: pool.submit(servers.enter_context, serving(spec, state)) for name, spec in specs.items()}
        handles = {name: f.result() for name, f in started.items()}
        for task, make in TASKS.items():
            items = make().items[: args.items]
            prepared = prepare_items(tokenizer, items, ["g"] * len(items), PromptOptions())
            probes = [(dedupe([ids for _, ids in p.layouts])[:PROBE_LAYOUTS], p.label_ids) for p in prepared]
            reads, own = {}, {}
            for name, handle in handles.items():
                with VLLMBackend(handle.url, handle.served_name, api_key=handle.api_key) as backend:
                    salted = [read(backend, probes, salted=True) for _ in range(2)]
                    cached = [read(backend, probes, salted=False) for _ in range(2)]  # the second from the cache
                    reads[name] = salted[0]
                    own[name] = {"fingerprint": sorted(backend.system_fingerprints),
                                 "salted_repeat_max": max(largest(*salted)),
                                 "cached_vs_salted_max": max(largest(salted[0], cached[1]))}
            pairs = {}
            for a, b in itertools.combinations(handles, 2):
                pairs[f"{a} vs {b}"] = {"probe_min": min(largest(reads[a], reads[b])),
                                        "first_prompt_min": min(largest(reads[a], reads[b], first_only=True)),
                                        "fingerprints_differ": own[a]["fingerprint"] != own[b]["fingerprint"]}
            report["tasks"][task] = {"servers": own, "pairs": pairs}
            print(task, json.dumps(report["tasks"][task], indent=1), flush=True)
    noise = max(s["salted_repeat_max"] for t in report["tasks"].values() for s in t["servers"].values())
    apart = min(p["first_prompt_min"] for t in report["tasks"].values() for p in t["pairs"].values())
    report["summary"] = {"largest_own_noise": noise, "smallest_difference_between_servers": apart,
                         "tolerance_between": noise < PROBE_TOLERANCE < apart}
    report["vllm_version"] = next(iter(next(iter(report["tasks"].values()))["servers"].values()))["fingerprint"][0].split("-")[1]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_json(OUT, report)
    print(json.dumps(report["summary"]), f"-> {OUT.relative_to(REPO)}")
    return 0 if report["summary"]["tolerance_between"] else 1


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1 * 3600))
