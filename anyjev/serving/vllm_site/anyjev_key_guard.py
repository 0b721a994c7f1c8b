"""The managed server's guard: a vLLM ``--middleware`` that answers a request only when it carries the run's key,
``/health`` (the readiness probe) excepted.

vLLM 0.32 checks its API key (``VLLM_API_KEY``) only on the routes under ``/v1``, ``/v2``, ``/inference`` and
``/cohere``; every other route answers anyone, ``/invocations`` (completions, as ``/v1`` serves them) included. This
guards them all. vLLM loads it by its import path (``--middleware anyjev_key_guard.RunKeyGuard``, pinned in
``anyjev.serving.argv``) in the server's own interpreter, which has no anyjev: it lives in a folder of its own, which
``anyjev.serving.launch`` puts on the server's PYTHONPATH, and imports the standard library only (a pure ASGI
middleware).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_ENV = "VLLM_API_KEY"
OPEN_PATHS = frozenset({"/health"})  # what the run's probes read without the key: the server is up

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _digest(value: bytes) -> bytes:
    # Compared as fixed-length digests, so the comparison takes the same time whatever the length of what was sent.
    return hashlib.sha256(value).digest()


_KEY = os.environ.get(KEY_ENV, "")
if not _KEY:  # a guard without a key would let nothing in, or everything: the server must not start
    raise RuntimeError(f"anyjev_key_guard: {KEY_ENV} is not set in the server's environment: the run starts its "
                       "server with a fresh key there (anyjev.serving.launch)")
_KEY_DIGEST = _digest(_KEY.encode())
_UNAUTHORIZED = json.dumps({"error": "Unauthorized"}).encode()  # vLLM's own 401 body


def carries_key(scope: Scope) -> bool:
    """Whether the request's ``Authorization`` header is ``Bearer <the run's key>`` (constant-time comparison)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = value.partition(b" ")
            return scheme.lower() == b"bearer" and hmac.compare_digest(_digest(token), _KEY_DIGEST)
    return False


def admitted(scope: Scope) -> bool:
    """Whether the guard lets SCOPE through: not a request (lifespan), the readiness probe's route, or the run's key."""
    if scope["type"] not in ("http", "websocket"):
        return True
    root = scope.get("root_path", "")
    path = scope["path"].removeprefix(root) if root else scope["path"]  # as vLLM's routes see it (--root-path)
    return path in OPEN_PATHS or carries_key(scope)


class RunKeyGuard:
    """Pure ASGI middleware: a request without the run's key gets 401 (a websocket: closed with 1008, policy
    violation) and never reaches vLLM."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if admitted(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "Unauthorized"})
        else:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(_UNAUTHORIZED)).encode())]})
            await send({"type": "http.response.body", "body": _UNAUTHORIZED})
