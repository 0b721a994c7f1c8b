"""The generated blocks of docs/benchmarks.md, docs/metrics.md, docs/viewer.md and README.md, from the committed JSON
under results/bench/.

Each block sits between ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->`` and is rewritten whole from its JSON;
every table names the date of its run and the machine the JSON records (:func:`bench.common.measured_on`; a JSON that
records none says so). A figure derived from several numbers of a JSON (a ratio of two rows, a difference) is
computed here, never written by hand.

    .venv/bin/python -m bench.report            # rewrite the blocks
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
README = REPO / "README.md"


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
        cpu = {k: c["client_cpu_ms_per_prompt_median"] for k, c in case["clients"].items()}
        lines.append(f"- client CPU per prompt, VLLMBackend / one request per prompt: "
                     f"{cpu['vllm_backend'] / cpu['per_prompt_pool16']:.2f}x")
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
        lines += ["", *block_size_comparisons(w["rows"]), ""]
    return "\n".join(lines).strip()


def _pair(a: float, b: float) -> str:
    """How far apart two times are: the larger over the smaller."""
    return f"{max(a, b) / min(a, b):.2f}x"


def block_size_comparisons(rows: dict) -> list[str]:
    """The same setting sent twice (each `_staged` row and its unstaged row) and each lever against `cache_b32`."""
    s = {k: r["s_per_item_median"] for k, r in rows.items()}
    staged = [f"block {rows[k]['block_size']} {_pair(s[k], s[k + '_staged'])}" for k in s if k + "_staged" in s]
    levers = [f"`{k}` {s[k] / s['cache_b32']:.2f}x" for k in s if k.startswith("lever_")]
    rss = {k: r["server_rss_mib"] - rows["cache_b32"]["server_rss_mib"] for k, r in rows.items() if k.startswith("lever_")}
    widest = max(rss, key=rss.get)
    return ["- s/item of a `_staged` row and its unstaged row (the same prompts, one pass each), larger over smaller: "
            + ", ".join(staged),
            "- s/item of each lever over `cache_b32`: " + ", ".join(levers),
            f"- server RSS of `{widest}` over `cache_b32`: {rss[widest]:+.0f} MiB"]


def _decisions_vs_last(run: dict, last: dict) -> str:
    if run is last:
        return "(the reference)"
    d = run.get("decisions_vs_last")
    if d is None:
        return "not compared"
    same = "all the same" if d["differ"] == 0 else f"{d['differ']} differ"
    missing = d["only_in_this_run"] + d["only_in_the_last"]
    return f"{d['decisions']}: {same}" + (f" ({missing} in one run only)" if missing else "")


def default_run_block(root: Path = REPO) -> str:
    r = load("default_run", root)
    last = r["runs"][-1]
    tasks = list(last["cells"])
    lines = [f"{r['workflow']} ({measured_on(r)}):", "",
             "| commit | what it is | workflow (s) | vs the last | " + " | ".join(f"{t} cell (s)" for t in tasks)
             + " | server start (s) | decisions, against the last |",
             "|---|---|---:|---:|" + "---:|" * len(tasks) + "---:|---|"]
    for run in r["runs"]:
        starts = {c["server_start_s"] for c in run["cells"].values() if c["server_start_s"] is not None}
        lines.append(f"| {run['commit'][:7]} | {run['what']} | {run['wall_s']:.0f} | {run['vs_last']:.2f}x | "
                     + " | ".join(f"{run['cells'][t]['seconds']:.0f}" for t in tasks)
                     + f" | {max(starts):.0f} | {_decisions_vs_last(run, last)} |")
    besides = [run["wall_s"] - sum(c["seconds"] for c in run["cells"].values()) for run in r["runs"]]
    lines += ["", "- the workflow's seconds besides its cells' scoring, per commit: " + ", ".join(f"{s:.0f}" for s in besides)]
    return "\n".join(lines)


def setup_block(root: Path = REPO) -> str:
    r = load("setup", root)
    lines = [f"`{r['setup_command']}` in a fresh clone at {r['commit'][:7]}, empty pip cache ({measured_on(r)}); "
             f"{r['vllm']}; pip settings of the machine: {', '.join(r['pip_settings']) or 'none'}:", "",
             "| step | seconds |", "|---|---:|"]
    lines += [f"| {step} | {s:.0f} |" for step, s in r["steps_s"].items()]
    lines += [f"| the whole setup | {r['wall_s']:.0f} |", "",
              "- environments made (MB): " + ", ".join(f"`{k}` {v:.0f}" for k, v in r["environments_mb"].items())]
    return "\n".join(lines)


def readme_timing_block(root: Path = REPO) -> str:
    """README command 1's two parts, each from its benchmark: the setup from a fresh clone and the workflow."""
    setup, run = load("setup", root), load("default_run", root)
    last = run["runs"][-1]
    return (f"The setup took {setup['wall_s'] / 60:.1f} minutes from a fresh clone at {setup['commit'][:7]} "
            f"(`results/bench/setup.json`: {measured_on(setup)}), and the workflow part {last['wall_s'] / 60:.1f} "
            f"minutes at {last['commit'][:7]}, its environments already made "
            f"(`results/bench/default_run.json`: {measured_on(run)}; [docs/benchmarks.md](docs/benchmarks.md), "
            f"\"The default run\").")


def reproduced_block(root: Path = REPO) -> str:
    """README's record of command 1 reproducing summary.csv: each kind of machine it was run on, from a fresh clone
    (results/bench/reproduced.json, bench/bench_default_run.py --reproduce)."""
    path = root / "results" / "bench" / "reproduced.json"
    if not path.is_file():
        return ("No kind of machine has recorded it yet: `python bench/bench_default_run.py --reproduce` runs command 1 "
                "in a fresh clone and records the row of the machine it ran on.")
    rows = sorted(json.loads(path.read_text())["rows"].items(), key=lambda kv: kv[1]["date"])
    said = []
    for kind, row in rows:
        when = f"run {row['date'][:10]} at {row['commit'][:7]}"
        if row.get("reproduced"):
            said.append(f"{kind} ({when}): every value within the tolerance above, the largest difference "
                        f"{row['largest_difference']:.1e} ({row['largest_at']})")
        elif row.get("exit_status"):
            said.append(f"{kind} ({when}): NOT reproduced, command 1 exited {row['exit_status']}")
        else:
            said.append(f"{kind} ({when}): NOT reproduced, {row['beyond_tolerance']} of {row['values']} values beyond the "
                        f"tolerance above")
    return ("Command 1 from a fresh clone, its `summary.csv` compared with the commit's, on each kind of machine "
            "`results/bench/reproduced.json` records: " + "; ".join(said) + ".")


def prior_modes_block(root: Path = REPO) -> str:
    """docs/metrics.md's prior-mode table: each committed cell evaluated in both modes (results/bench/prior_modes.json)."""
    r = load("prior_modes", root)
    metrics = ("acc", "nll", "brier", "ece", "flip")
    titles = {"acc": "acc", "nll": "NLL", "brier": "Brier", "ece": "ECE", "flip": "flip"}
    first = r["cells"][0]
    lines = [f"The committed reference scores ({first['n']} test and {first['n_calib']} calibration items a cell), each "
             f"cell evaluated in both modes, refit-BCa 95% intervals ({measured_on(r)}; `results/bench/prior_modes.json`):",
             "", "| task | level | mode | " + " | ".join(titles[m] for m in metrics) + " |",
             "|---|---|---|" + "---|" * len(metrics)]
    for level in ("L0", "L0-bc"):
        for c in r["cells"]:
            shown = (c["metrics"][level][m] for m in metrics)
            lines.append(f"| {c['task']} | {level} | {c['mode']} | "
                         + " | ".join(f"{e['value']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]" for e in shown) + " |")
    mean = r["mean_over_cells"]
    lines += ["", "Mean over the cells, L0, batch vs streaming: "
              + ", ".join(f"{titles[m]} {mean['batch'][m]:.3f} vs {mean['streaming'][m]:.3f}" for m in metrics) + ".",
              "", f"One evaluation of a cell ({first['n_boot']} resamples, every level, the jackknife) took "
              f"{r['median_seconds']:.1f} s (the median of {len(r['seconds'])})."]
    return "\n".join(lines)


def l0_limits_block(root: Path = REPO) -> str:
    from bench import cache_limit

    return cache_limit.markdown(load("l0_cost_limits", root)).strip()


def scale_block(root: Path = REPO) -> str:
    from bench import bench_scale

    return bench_scale.markdown(load("scale", root)).strip()


def scheduler_block(root: Path = REPO) -> str:
    from bench import bench_scheduler

    return bench_scheduler.markdown(load("scheduler", root)).strip()


def ceiling_block(root: Path = REPO) -> str:
    from bench import bench_ceiling

    return bench_ceiling.markdown(load("ceiling", root)).strip()


def ceiling_ready_block(root: Path = REPO) -> str:
    from bench import bench_ceiling

    return bench_ceiling.ready_markdown(load("ceiling_from_ready", root)).strip()


def client_block(root: Path = REPO) -> str:
    from bench import bench_client

    return bench_client.markdown(load("client", root)).strip()


def viewer_block(root: Path = REPO) -> str:
    from bench import bench_viewer

    return bench_viewer.markdown(load("viewer", root)).strip()


BLOCKS: dict[str, Callable[[Path], str]] = {
    "l0-cost": l0_cost_block,
    "l0-limits": l0_limits_block,
    "prefix-drift": prefix_drift_block,
    "backends": backends_block,
    "cpu-threads": cpu_threads_block,
    "block-size": block_size_block,
    "default-run": default_run_block,
    "setup": setup_block,
    "client": client_block,
    "ceiling": ceiling_block,
    "ceiling-ready": ceiling_ready_block,
    "scale": scale_block,
    "scheduler": scheduler_block,
}
README_BLOCKS: dict[str, Callable[[Path], str]] = {"readme-timing": readme_timing_block, "reproduced": reproduced_block}
METRICS_DOC = REPO / "docs" / "metrics.md"
METRICS_BLOCKS: dict[str, Callable[[Path], str]] = {"prior-modes": prior_modes_block}
VIEWER_BLOCKS: dict[str, Callable[[Path], str]] = {"viewer-bench": viewer_block}
# every doc with generated blocks (its path in the repository) -> its blocks
DOCUMENTS: dict[str, dict[str, Callable[[Path], str]]] = {
    "docs/benchmarks.md": BLOCKS, "README.md": README_BLOCKS, "docs/metrics.md": METRICS_BLOCKS,
    "docs/viewer.md": VIEWER_BLOCKS}


def blocks_of(doc: str) -> dict[str, Callable[[Path], str]]:
    """The generated blocks of DOC (its path in the repository) that this module writes."""
    return DOCUMENTS.get(doc, {})


def block(text: str, name: str) -> str:
    """The text between NAME's markers in TEXT (stripped); KeyError when a marker is missing."""
    start, end = text.find(f"<!-- {name}:start"), text.find(f"<!-- {name}:end -->")
    if start < 0 or end < start:
        raise KeyError(f"no <!-- {name}:start ... --> ... <!-- {name}:end --> markers")
    return text[text.index("-->", start) + 3 : end].strip("\n")


def rewrite(text: str, root: Path = REPO, blocks: dict[str, Callable[[Path], str]] = BLOCKS) -> str:
    """TEXT with every one of BLOCKS regenerated from the JSON under ROOT."""
    for name, make in blocks.items():
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
    stale = []
    for rel, blocks in DOCUMENTS.items():
        doc = REPO / rel
        text = doc.read_text(encoding="utf-8")
        new = rewrite(text, blocks=blocks)
        if new != text:
            stale.append(doc)
            if not args.check:
                doc.write_text(new, encoding="utf-8")
    if args.check and stale:
        for doc in stale:
            print(f"{doc.relative_to(REPO)}: a generated block differs from results/bench/: run python -m bench.report")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
