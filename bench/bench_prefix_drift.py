#!/usr/bin/env python
"""Log-prob drift caused by vLLM's prefix caching: the same prompts on a server with it off and one with it on.

Prompts are real scorer prompts (``prepare_item``) of two workloads: MMLU (K = 4, all 8 layouts, short
prompts) and the newsgroups-shaped long-state task (K = 20, all 40 layouts, states up to 2,000 characters;
:func:`anyjev.data.synthetic.long_state_task`). Each item's layouts go in one request, item after item, as
``score_prepared`` sends them, so the cache can serve the rotations of an item from its first one.

The caching server is read twice: pass 1 (a cold cache: rotation s > 0 hits the blocks of the shared prefix
the item's first rotation left) and pass 2 (the same prompts again: every full block hits). Both are compared
with the no-cache server: max |Δ label log-prob| (label-restricted, as scored) and, with ``--vocab``, the
full-vocabulary label log-probs (answer mass requests). Prefix-cache counters come from /metrics
(:mod:`anyjev.serving.metrics`). The servers run one after the other (the off server first), with the
project's pinned flags (config/config.yaml's smollm2-135m, fp32 head on).

    .venv/bin/python bench/bench_prefix_drift.py --dtype float32 [--mmlu-items 16 --long-items 3 --vocab]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.backends.vllm import VLLMBackend  # noqa: E402
from anyjev.data.builtin import mmlu  # noqa: E402
from anyjev.data.synthetic import long_state_task  # noqa: E402
from anyjev.decision.labels import LabelChecker  # noqa: E402
from anyjev.decision.options import PromptOptions  # noqa: E402
from anyjev.run.prepared import PreparedItem, prepare_item  # noqa: E402
from anyjev.serving.metrics import read_counters  # noqa: E402
from anyjev.serving.spec import ServerSpec  # noqa: E402
from bench.common import run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402


def server_spec(name: str, dtype: str, prefix_caching: bool) -> ServerSpec:
    """The default config's SmolLM2 server (pinned flags, fp32 head), under NAME, DTYPE and the cache setting."""
    return smollm2_spec(name, dtype=dtype, prefix_caching=prefix_caching)


def workload(tokenizer, n_mmlu: int, n_long: int, long_layouts: int | None) -> list[tuple[str, PreparedItem]]:
    checker = LabelChecker(tokenizer)
    out = [("mmlu", prepare_item(tokenizer, checker, it, "g", PromptOptions())) for it in mmlu(n_mmlu).items[:n_mmlu]]
    for it in long_state_task(n_long).items:
        p = prepare_item(tokenizer, checker, it, "g", PromptOptions())
        out.append(("long", p.first_layouts(long_layouts) if long_layouts else p))
    return out


def read_all(url: str, served: str, api_key: str | None, items: list[tuple[str, PreparedItem]], vocab: bool) -> dict:
    """Per item one request holding all its layouts; label (and, with VOCAB, full-vocabulary) log-probs,
    and the /metrics deltas per workload."""
    backend = VLLMBackend(url, served, prompts_per_request=64, max_concurrency=1, api_key=api_key)
    labels, vocabs, counters, wall = [], [], {}, {}
    try:
        for kind in dict.fromkeys(k for k, _ in items):
            c0, t0 = read_counters(url, served, api_key=api_key), time.perf_counter()
            for k, p in items:
                if k == kind:
                    labels.append(backend.label_logprobs([ids for _, ids in p.layouts], p.label_ids))
            counters[kind] = read_counters(url, served, api_key=api_key).minus(c0).as_dict()
            wall[kind] = round(time.perf_counter() - t0, 2)
        if vocab:
            for _, p in items:
                vocabs.append(backend.vocab_logprobs([ids for _, ids in p.layouts], p.label_ids))
    finally:
        backend.close()
    return {"labels": labels, "vocab": vocabs, "counters": counters, "wall_s": wall}


def compare(a: list[np.ndarray], b: list[np.ndarray], kinds: list[str]) -> dict:
    out = {}
    for kind in dict.fromkeys(kinds):
        xs = [x for x, k in zip(a, kinds, strict=True) if k == kind]
        ys = [y for y, k in zip(b, kinds, strict=True) if k == kind]
        d = np.concatenate([np.abs(x - y).ravel() for x, y in zip(xs, ys, strict=True)])
        rows_equal = sum(int(np.array_equal(x[i], y[i])) for x, y in zip(xs, ys, strict=True) for i in range(len(x)))
        argmax_changed = sum(int((x.argmax(1) != y.argmax(1)).sum()) for x, y in zip(xs, ys, strict=True))
        out[kind] = {"prompts": int(sum(len(x) for x in xs)), "max_abs_diff": float(d.max()),
                     "mean_abs_diff": float(d.mean()), "prompts_bitwise_equal": rows_equal,
                     "argmax_changed": argmax_changed}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--mmlu-items", type=int, default=16)
    ap.add_argument("--long-items", type=int, default=3)
    ap.add_argument("--long-layouts", type=int, help="only the first N layouts of each long item (bf16 is slow)")
    ap.add_argument("--vocab", action="store_true", help="also the full-vocabulary label log-probs")
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2())
    items = workload(tokenizer, args.mmlu_items, args.long_items, args.long_layouts)
    kinds = [k for k, _ in items]
    lens = {k: [len(ids) for kk, p in items if kk == k for _, ids in p.layouts] for k in dict.fromkeys(kinds)}
    out_dir = REPO / args.out
    tag = {"float32": "fp32", "bfloat16": "bf16"}[args.dtype]
    report: dict = {
        **run_record(),
        "dtype": args.dtype, "fp32_head": True, "model": "SmolLM2-135M-Instruct",
        "items": {k: sum(1 for kk in kinds if kk == k) for k in dict.fromkeys(kinds)},
        "prompts": {k: len(v) for k, v in lens.items()},
        "prompt_tokens_mean": {k: round(float(np.mean(v)), 1) for k, v in lens.items()},
        "how": "each item's layouts in one request, items in order; off server first, then the caching server twice "
               "(pass 1 cold cache, pass 2 the same prompts again)",
    }
    runs = {}
    for cache, passes in ((False, 1), (True, 2)):
        name = f"drift-{tag}-{'on' if cache else 'off'}"
        with serving(server_spec(name, args.dtype, cache), out_dir / "logs" / "prefix-drift") as handle:
            report.setdefault("vllm_version", handle.vllm_version)
            warm = items[0][1]  # the first prompt compiles/warms kernels; not part of the measured counters
            with VLLMBackend(handle.url, handle.served_name, api_key=handle.api_key) as b:
                b.label_logprobs([warm.layouts[-1][1]], warm.label_ids)
            for i in range(passes):
                key = f"{'on' if cache else 'off'}_pass{i + 1}"
                t0 = time.perf_counter()
                runs[key] = read_all(handle.url, handle.served_name, handle.api_key, items, args.vocab)
                print(f"{key}: {time.perf_counter() - t0:.0f} s, counters {runs[key]['counters']}", flush=True)
    report["counters"] = {k: r["counters"] for k, r in runs.items()}
    report["wall_s"] = {k: r["wall_s"] for k, r in runs.items()}
    report["drift"] = {}
    for key in ("on_pass1", "on_pass2"):
        report["drift"][key] = {"label_logprobs": compare(runs[key]["labels"], runs["off_pass1"]["labels"], kinds)}
        if args.vocab:
            report["drift"][key]["vocab_logprobs"] = compare(runs[key]["vocab"], runs["off_pass1"]["vocab"], kinds)
    path = out_dir / f"prefix_drift_{tag}.json"
    write_json(path, report)
    print(json.dumps({k: report[k] for k in ("drift", "counters")}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1 * 3600))
