"""Stand-in for ``python -m vllm.entrypoints.openai.api_server`` (stdlib only), for lifecycle tests.

The lifecycle tests copy this file to ``<tmp>/vllm/entrypoints/openai/api_server.py`` and put ``<tmp>`` on the
server's PYTHONPATH (ServerSpec.env), so anyjev.serving.launch starts it with the real argv. It accepts the flags it
needs, ignores the others, and behaves as the environment says:

STUB_MODE       ok (default) | exit_at_start | never_ready | die_after_ready | addr_in_use
STUB_DELAY      seconds before it listens (default 0.3)
STUB_DIE_WHEN   die_after_ready mode: die once this file exists (it is removed first, so a replacement started with
                the same environment keeps serving)
STUB_FAIL_ONCE  addr_in_use mode only: fail only if this file does not exist yet (then create it)
STUB_IGNORE_TERM=1  ignore SIGTERM (tests the SIGKILL escalation)
STUB_CHILD=1 (default) also start a child process in the group, like vLLM's EngineCore
VLLM_API_KEY    as vLLM: every /v1 request must carry it as ``Authorization: Bearer``, else 401
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _unknown = parser.parse_known_args()
    mode = os.environ.get("STUB_MODE", "ok")
    print(f"stub vllm: argv {sys.argv[1:]}", flush=True)
    print(f"stub vllm: mode {mode}, model {args.model}", flush=True)
    if os.environ.get("STUB_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    if mode == "exit_at_start":
        print(f"stub vllm: loading {args.model}", flush=True)
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

    child = None
    if os.environ.get("STUB_CHILD", "1") == "1":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100000)"])
        print(f"stub vllm: engine child pid {child.pid}", flush=True)

    if mode == "never_ready":
        while True:
            time.sleep(1)

    time.sleep(float(os.environ.get("STUB_DELAY", "0.3")))
    served = args.served_model_name

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            key = os.environ.get("VLLM_API_KEY")
            if key and self.path.startswith("/v1") and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": "Unauthorized"})
            elif self.path == "/health":
                self._send(200, {})
            elif self.path == "/version":
                self._send(200, {"version": "stub-0.0"})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": served, "object": "model", "root": args.model}]})
            else:
                self._send(404, {"error": self.path})

        def log_message(self, fmt: str, *fargs: object) -> None:
            pass

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"stub vllm: serving {served} on {args.host}:{args.port}", flush=True)
    if mode == "die_after_ready":
        trigger = os.environ["STUB_DIE_WHEN"]

        def die() -> None:
            while True:  # the test says when, not a clock: on a loaded machine a timer could fire before ready
                try:
                    os.remove(trigger)
                    break
                except FileNotFoundError:
                    time.sleep(0.05)
            print("stub vllm: engine died (RuntimeError: simulated crash)", flush=True)
            if child is not None:
                child.kill()
            os._exit(7)

        threading.Thread(target=die, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
