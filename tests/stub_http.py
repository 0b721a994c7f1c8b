"""An in-process stand-in for vLLM's ``POST /v1/completions`` (stdlib only), told per test how to misbehave.

    with StubCompletions() as stub:
        stub.script = [Status(500), Reply()]          # first request 500, then a normal answer
        backend = VLLMBackend(stub.url, "m", ...)

Every request body is recorded (``stub.requests``) before the action runs. ``script`` is consumed one
action per request; when it runs out, ``default`` answers (a normal completion); ``decide``, when set, picks each
request's action from its body instead (requests sent side by side arrive in any order). Actions:

* ``Reply(mutate=..., first=...)``: a vLLM-shaped completion of every prompt; ``first()`` runs before it is made,
  ``mutate(body, payload)`` may edit it
* ``Status(code, body)``: an HTTP error with a JSON (dict) or raw (str) body
* ``Raw(text)``: HTTP 200 with this body (e.g. malformed JSON)
* ``Hang(seconds)``: read the request, then answer nothing until the client gives up and closes the connection
  (counted in ``stub.abandoned``), or for ``seconds`` at most (a stuck server)
* ``Reset()``: read the request, then close the socket without a byte of answer (RST)

With ``api_key`` set, it refuses a request to vLLM's guarded routes without that key (401), as vLLM does.

The normal answer is testbed.replies's (the stand-in vLLM server's too): keyed ``token_id:<id>`` like a server asked for
``return_tokens_as_token_ids``, its label log-probs ``model_logprobs(prompt, labels)``, a deterministic function of the
prompt ids, renormalised over the labels like ``--logprobs-mode processed_logprobs``; an answer-mass request
(``logprob_token_ids``, no ``allowed_token_ids``) gets full-vocabulary log-probs: the same values plus
``log(answer_mass(prompt))``.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.replies import FINGERPRINT, UNAUTHORIZED, completion, models, not_here, refused, send


@dataclass
class Reply:
    mutate: Callable[[dict, dict], None] | None = None
    delay: float = 0.0
    first: Callable[[], None] | None = None  # runs before the answer is made (e.g. the stub becomes another server)


@dataclass
class Status:
    code: int
    body: dict | str = field(default_factory=lambda: {"error": {"message": "stub failure", "type": "InternalServerError"}})


@dataclass
class Raw:
    text: str


@dataclass
class Hang:
    seconds: float


@dataclass
class Reset:
    pass


Action = Reply | Status | Raw | Hang | Reset


class StubCompletions:
    """A ThreadingHTTPServer on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.script: list[Action] = []
        self.default: Action = Reply()
        self.decide: Callable[[dict], Action] | None = None  # when set: each request's action, from its body
        # What the stub says it is (GET /version, /v1/models, /metrics) and how it computes: change them to stand in
        # for another server on the same port.
        self.version = "0.32.0"
        self.served_names = ["m"]
        self.root = "stub-org/stub-model"
        self.max_model_len = 2048
        self.fingerprint: str | None = FINGERPRINT
        self.dtype: str | None = None  # said by GET /server_info (vLLM's development mode) when set
        self.shift = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.abandoned = 0  # hanging requests whose client closed the connection (it gave up waiting)
        self.api_key: str | None = None  # a server started with this key (vLLM's --api-key / VLLM_API_KEY)
        self.refused = 0  # requests answered 401
        self._lock = threading.Lock()
        self._stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as vLLM's server: no delayed-ACK wait of ~40 ms a request

            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if not stub._refuse(self):
                    stub._answer_get(self)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"null")
                if stub._refuse(self):
                    return
                with stub._lock:
                    stub.requests.append(payload)
                    stub.paths.append(self.path)
                    if stub.decide is not None:
                        action = stub.decide(payload)
                    else:
                        action = stub.script.pop(0) if stub.script else stub.default
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    stub._act(self, action, payload)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="stub-vllm", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> StubCompletions:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes hanging handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> StubCompletions:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- behaviour ---------------------------------------------------------------------------------
    def _refuse(self, h: BaseHTTPRequestHandler) -> bool:
        """Answer 401 (True) when the stub has a key and the request does not carry it."""
        if not refused(h.path, h.headers.get("Authorization"), self.api_key):
            return False
        with self._lock:
            self.refused += 1
        self._send(h, 401, UNAUTHORIZED)
        return True

    def _answer_get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path == "/version":
            self._send(h, 200, json.dumps({"version": self.version}))
        elif h.path == "/v1/models":
            self._send(h, 200, json.dumps(models(self.served_names, self.root, self.max_model_len)))
        elif h.path == "/health":
            self._send(h, 200, "")
        elif h.path.startswith("/server_info") and self.dtype is not None:
            self._send(h, 200, json.dumps({"vllm_config": {"model_config": {"dtype": f"torch.{self.dtype}"}}}))
        else:
            self._send(h, 404, not_here(h.path))

    def _act(self, h: BaseHTTPRequestHandler, action: Action, payload: dict) -> None:
        if isinstance(action, Reset):
            h.close_connection = True
            # SO_LINGER 0: close() sends RST instead of FIN, as a crashed worker's socket does.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            return
        if isinstance(action, Hang):
            if self._until_the_client_leaves(h, action.seconds):
                with self._lock:
                    self.abandoned += 1
            h.close_connection = True
            return
        if isinstance(action, Raw):
            self._send(h, 200, action.text)
            return
        if isinstance(action, Status):
            body = action.body if isinstance(action.body, str) else json.dumps(action.body)
            self._send(h, action.code, body)
            return
        if action.delay:
            self._stop.wait(action.delay)
        if action.first is not None:
            action.first()
        body = completion(payload, shift=self.shift, fingerprint=self.fingerprint)
        if action.mutate is not None:
            action.mutate(body, payload)
        self._send(h, 200, json.dumps(body))

    def _until_the_client_leaves(self, h: BaseHTTPRequestHandler, seconds: float) -> bool:
        """Answer nothing until the client closes the connection (True), the stub stops or SECONDS pass (False)."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and time.monotonic() < deadline:
            if select.select([h.connection], [], [], 0.05)[0]:  # the request was read whole: readable means closed
                try:
                    return not h.connection.recv(1, socket.MSG_PEEK)
                except ConnectionResetError:
                    return True
        return False

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, text: str) -> None:
        send(h, code, text)


def free_port() -> int:
    """A port nobody listens on (bound once by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Forwarder:
    """An HTTP forwarder on 127.0.0.1 (free port) to a real server: what a client sees as one server on one URL while
    the test replaces what stands behind it (``target``, another server; ``switch_at_check``: from the Nth request of
    the server check on) or stops it answering a cell's own completions after ``completions_left`` of them (HTTP 503,
    as a server going down; the server check's requests, which carry a ``cache_salt`` and go beside a cell's own,
    are not counted and still answered). The model is served under PUBLIC_NAME whatever the target's own name
    (rewritten in requests and in /v1/models). KEYS: each target's API key (by its URL), which the forwarder sends it,
    so that its own clients need none."""

    def __init__(self, target: str, target_name: str, public_name: str, keys: dict[str, str | None] | None = None) -> None:
        import httpx

        from anyjev.serving.health import bearer

        self.target, self.target_name, self.public_name = target.rstrip("/"), target_name, public_name
        self.keys = keys or {}
        self.completions_left: int | None = None
        self.switch_at_check: tuple[int, str, str] | None = None  # (the server check's request number, target, name)
        self.completions = 0  # a cell's own (no cache_salt)
        self.checks = 0  # the server check's (cache_salt)
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=600, trust_env=False)
        fwd = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as vLLM's server: no delayed-ACK wait of ~40 ms a request

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                resp = fwd._http.get(fwd.target + self.path, headers=bearer(fwd.keys.get(fwd.target)))
                text = resp.text
                if self.path == "/v1/models":
                    body = resp.json()
                    for card in body.get("data", []):
                        if card.get("id") == fwd.target_name:
                            card["id"] = fwd.public_name
                    text = json.dumps(body)
                StubCompletions._send(self, resp.status_code, text)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                payload = json.loads(self.rfile.read(length) or b"null")
                with fwd._lock:
                    if "cache_salt" in payload:
                        fwd.checks += 1
                        if fwd.switch_at_check and fwd.checks >= fwd.switch_at_check[0]:
                            _, fwd.target, fwd.target_name = fwd.switch_at_check
                            fwd.switch_at_check = None
                    else:
                        fwd.completions += 1
                        if fwd.completions_left is not None:
                            if fwd.completions_left <= 0:
                                StubCompletions._send(self, 503, json.dumps({"error": {"message": "going down"}}))
                                return
                            fwd.completions_left -= 1
                payload["model"] = fwd.target_name
                resp = fwd._http.post(fwd.target + self.path, json=payload, headers=bearer(fwd.keys.get(fwd.target)))
                StubCompletions._send(self, resp.status_code, resp.text)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="forwarder", daemon=True)

    def __enter__(self) -> Forwarder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._http.close()
