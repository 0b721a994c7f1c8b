"""The generated blocks of docs/benchmarks.md, from the committed JSON under results/bench/.

Each block sits between ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->`` and is rewritten whole from its JSON;
every table names the date of its run and the machine the JSON records (a JSON that records none says so).

    .venv/bin/python -m bench.report            # rewrite the blocks of docs/benchmarks.md
    .venv/bin/python -m bench.report --check    # exit 1 when a block differs from its JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.common import measured_on

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "results" / "bench"
DOC = REPO / "docs" / "benchmarks.md"


def load(name: str, root: Path = REPO) -> dict:
    return json.loads((root / "results" / "bench" / f"{name}.json").read_text())


def l0_cost_block(root: Path = REPO) -> str:
    from bench import bench_l0_cost  # its tables; importing it starts nothing

    return bench_l0_cost.markdown(load("l0_cost", root)).strip()


def prefix_drift_block(root: Path = REPO) -> str:
    lines = []
    for tag in ("fp32", "bf16"):
        r = load(f"prefix_drift_{tag}", root)
        lines += [f"{r['model']}, {r['dtype']}{', fp32 head' if r.get('fp32_head') else ''} ({measured_on(r)}); "
                  f"{r['how']}:", "",
                  "| workload | prompts | prompt tokens (mean) | cache hits, pass 1 / 2 | max \\|Δ label lp\\| pass 1 / 2 (nat) "
                  "| mean \\|Δ\\| pass 1 | full vocabulary, max \\|Δ\\| | argmax changed |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        drift = r["drift"]
        for kind in r["prompts"]:
            p1, p2 = drift["on_pass1"]["label_logprobs"][kind], drift["on_pass2"]["label_logprobs"][kind]
            hits = [r["counters"][k][kind]["hit_rate"] for k in ("on_pass1", "on_pass2")]
            vocab = drift["on_pass1"].get("vocab_logprobs", {}).get(kind)
            changed = sum(d["label_logprobs"][kind]["argmax_changed"] for d in drift.values())
            lines.append(f"| {kind} | {r['prompts'][kind]} | {r['prompt_tokens_mean'][kind]:.0f} | "
                         f"{hits[0]:.0%} / {hits[1]:.0%} | {p1['max_abs_diff']:.1e} / {p2['max_abs_diff']:.1e} | "
                         f"{p1['mean_abs_diff']:.1e} | {'' if vocab is None else format(vocab['max_abs_diff'], '.1e')} | "
                         f"{changed} |")
        lines.append("")
    return "\n".join(lines).strip()


def backends_block(root: Path = REPO) -> str:
    r = load("backends", root)
    lines = []
    for case in r["servers"].values():
        lines += [f"{case['title']}: {case['prompts']} MMLU prompts ({case['prompt_tokens_mean']:.0f} tokens mean), "
                  f"{case['repeats']} repeats, medians [min-max] ({measured_on(r | {'vllm_version': case['server']['vllm_version']})})",
                  "", "| client | prompts/s | requests | client CPU ms/prompt | server CPU ms/prompt |",
                  "|---|---:|---:|---:|---:|"]
        for c in case["clients"].values():
            lines.append(f"| {c['title']} | {c['prompts_per_s_median']:.1f} [{c['prompts_per_s_min']:.1f}-"
                         f"{c['prompts_per_s_max']:.1f}] | {c['requests']} | {c['client_cpu_ms_per_prompt_median']:.3f} | "
                         f"{c['server_cpu_ms_per_prompt_median']:.2f} |")
        lines.append("")
        for key, name in (("vs_per_prompt_pool16", "one request per prompt"), ("vs_single_request", "one request")):
            x = case["ratios"][key]
            met = ("met" if x["met"] else "not met") if case["targets_apply"] else "the target applies to the fast server only"
            lines.append(f"- VLLMBackend / {name}: {x['median']:.2f}x (median of per-repeat ratios), target >= "
                         f"{x['target']}: {met}")
        lines.append("")
    return "\n".join(lines).strip()


def cpu_threads_block(root: Path = REPO) -> str:
    r = load("cpu_threads", root)
    w, s, pair, lp = r["workload"], r["single"], r["pair"], r["logprobs"]
    titles = {"vllm_default": "vLLM's default (one core kept for the scheduler)",
              "none_reserved": "`VLLM_CPU_NUM_OF_RESERVED_CPU=0` (config/config.yaml)"}
    lines = [f"{r['model']}, {r['dtype']}, fp32 head, prefix caching on; full L0 on {w['items']} MMLU items "
             f"({w['prompts']} prompts, each item's layouts in one request), the prefix cache emptied before each of "
             f"{len(s['vllm_default']['pass_s'])} passes ({measured_on(r)}):", "",
             "| server | start (s) | s per item (median) | two servers at once, wall (s) |", "|---|---:|---:|---:|"]
    for key, title in titles.items():
        lines.append(f"| {title} | {s[key]['start_s']:.0f} | {s[key]['s_per_item_median']:.2f} | "
                     f"{pair[key]['wall_s_both']:.0f} |")
    lines += ["", f"- One server: {r['speedup_single']:.2f}x faster; two servers at once: {r['speedup_pair']:.2f}x.",
              f"- Label log-probs of the two settings: max |Δ| {lp['max_abs_diff']:.1e}, "
              f"{'bit for bit equal' if lp['bitwise_equal'] else 'not bit for bit equal'}, "
              f"{lp['argmax_changed']} argmax changed."]
    return "\n".join(lines)


def block_size_block(root: Path = REPO) -> str:
    r = load("block_size", root)
    lines = []
    for w in r["workloads"].values():
        lines += [f"{w['title']}: {w['n_test']} items, {w['prompt_tokens_mean']:.0f} prompt tokens per prompt on average "
                  f"({measured_on(r)}):", "",
                  "| row | block | computed tokens/item | vs no cache | cache hits | s/item (median) | vs no cache "
                  "| server RSS (MiB) | max \\|Δ lp\\| vs no cache | decisions as no cache |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key, row in w["rows"].items():
            hits = "" if row["cache_hit_rate"] is None else f"{row['cache_hit_rate']:.0%}"
            same = "" if "decisions_equal" not in row else ("all" if row["decisions_equal"] else f"{row['decisions_differ']} differ")
            lines.append(f"| {key} | {row['block_size']} | {row['computed_tokens_per_item']:.0f} | "
                         f"{row.get('vs_nocache_computed', 1.0):.2f}x | {hits} | {row['s_per_item_median']:.2f} | "
                         f"{row.get('vs_nocache_seconds', 1.0):.2f}x | {row['server_rss_mib']:.0f} | "
                         f"{row.get('max_abs_dlp', 0.0):.1e} | {same} |")
        lines.append("")
    return "\n".join(lines).strip()


def default_run_block(root: Path = REPO) -> str:
    r = load("default_run", root)
    tasks = list(r["runs"][-1]["cells"])
    lines = [f"{r['workflow']} ({measured_on(r)}):", "",
             "| commit | what it is | workflow (s) | vs the last | " + " | ".join(f"{t} cell (s)" for t in tasks)
             + " | server start (s) | same accuracies |",
             "|---|---|---:|---:|" + "---:|" * len(tasks) + "---:|---|"]
    for run in r["runs"]:
        starts = {c["server_start_s"] for c in run["cells"].values() if c["server_start_s"] is not None}
        lines.append(f"| {run['commit'][:7]} | {run['what']} | {run['wall_s']:.0f} | {run['vs_last']:.2f}x | "
                     + " | ".join(f"{run['cells'][t]['seconds']:.0f}" for t in tasks)
                     + f" | {max(starts):.0f} | {'yes' if run['same_accuracy_as_last'] else 'no'} |")
    return "\n".join(lines)


def l0_limits_block(root: Path = REPO) -> str:
    from bench import cache_limit

    return cache_limit.markdown(load("l0_cost_limits", root)).strip()


def scale_block(root: Path = REPO) -> str:
    from bench import bench_scale

    return bench_scale.markdown(load("scale", root)).strip()


def ceiling_block(root: Path = REPO) -> str:
    from bench import bench_ceiling

    return bench_ceiling.markdown(load("ceiling", root)).strip()


BLOCKS: dict[str, Callable[[Path], str]] = {
    "l0-cost": l0_cost_block,
    "l0-limits": l0_limits_block,
    "prefix-drift": prefix_drift_block,
    "backends": backends_block,
    "cpu-threads": cpu_threads_block,
    "block-size": block_size_block,
    "default-run": default_run_block,
}


def block(text: str, name: str) -> str:
    """The text between NAME's markers in TEXT (stripped); KeyError when a marker is missing."""
    start, end = text.find(f"<!-- {name}:start"), text.find(f"<!-- {name}:end -->")
    if start < 0 or end < start:
        raise KeyError(f"no <!-- {name}:start ... --> ... <!-- {name}:end --> markers")
    return text[text.index("-->", start) + 3 : end].strip("\n")


def rewrite(text: str, root: Path = REPO) -> str:
    """TEXT with every block regenerated from the JSON under ROOT."""
    for name, make in BLOCKS.items():
        old = block(text, name)
        start = text.index("-->", text.find(f"<!-- {name}:start")) + 3
        end = text.find(f"<!-- {name}:end -->")
        new = make(root)
        text = text[:start] + "\n" + new + "\n" + text[end:] if old != new else text
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say whether docs/benchmarks.md is current")
    args = ap.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    new = rewrite(text)
    if args.check:
        if new != text:
            print(f"{DOC.relative_to(REPO)}: a generated block differs from results/bench/: run python -m bench.report")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
