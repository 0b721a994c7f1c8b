"""The managed server's key guard (anyjev/serving/vllm_site/anyjev_key_guard.py), as vLLM loads it from --middleware:
every request without the run's key is refused, /health excepted, and it imports in an interpreter without anyjev.
The real server with it: tests/integration/test_server_lifecycle.py (test_real_vllm_cpu_server_lifecycle)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

from anyjev.serving.argv import API_KEY_ENV, KEY_GUARD, KEY_GUARD_DIR

KEY = "the-runs-key"
MODULE, CLASS = KEY_GUARD.rsplit(".", 1)


def load_guard(monkeypatch: pytest.MonkeyPatch, key: str | None = KEY) -> ModuleType:
    """A fresh copy of the guard module, imported with KEY as the server's VLLM_API_KEY (None: unset)."""
    if key is None:
        monkeypatch.delenv(API_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(API_KEY_ENV, key)
    spec = importlib.util.spec_from_file_location(MODULE, KEY_GUARD_DIR / f"{MODULE}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(guard_module: ModuleType, scope: dict[str, Any]) -> tuple[bool, list[dict[str, Any]]]:
    """Send SCOPE through the guard in front of an app that records that it was reached; (reached, what was sent)."""
    reached: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(True)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(getattr(guard_module, CLASS)(app)(scope, receive, send))
    return bool(reached), sent


def request(path: str, authorization: str | None = None, *, kind: str = "http", root_path: str = "") -> dict[str, Any]:
    headers = [(b"content-type", b"application/json")]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    return {"type": kind, "method": "POST" if path.startswith(("/v1/c", "/inv")) else "GET", "path": root_path + path,
            "root_path": root_path, "headers": headers}


# vLLM 0.32's own API-key check covers /v1, /v2, /inference, /cohere only: the rest are what the guard adds
@pytest.mark.parametrize("path", ["/invocations", "/v1/completions", "/v1/models", "/metrics", "/version",
                                  "/server_info", "/load", "/ping", "/tokenize", "/openapi.json", "/health/", "/"])
def test_a_request_without_the_key_is_refused_with_401_and_never_reaches_the_server(
        monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    guard = load_guard(monkeypatch)
    for authorization in (None, "Bearer wrong-key", f"Basic {KEY}", f"Bearer {KEY}x", KEY, "Bearer "):
        reached, sent = call(guard, request(path, authorization))
        assert not reached, (path, authorization)
        assert sent[0]["status"] == 401 and sent[1]["body"] == b'{"error": "Unauthorized"}', sent


@pytest.mark.parametrize("path", ["/invocations", "/v1/completions", "/metrics", "/version"])
def test_a_request_with_the_key_reaches_the_server(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    guard = load_guard(monkeypatch)
    for authorization in (f"Bearer {KEY}", f"bearer {KEY}"):
        assert call(guard, request(path, authorization)) == (True, [])


def test_health_and_the_servers_lifespan_need_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = load_guard(monkeypatch)
    assert call(guard, request("/health")) == (True, [])  # the readiness probe
    assert call(guard, request("/health", root_path="/under")) == (True, [])  # as vLLM's routes see it (--root-path)
    assert call(guard, {"type": "lifespan"}) == (True, [])  # start-up and shutdown, not a request


def test_a_websocket_without_the_key_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    guard = load_guard(monkeypatch)
    reached, sent = call(guard, request("/v1/realtime", kind="websocket"))
    assert not reached and sent == [{"type": "websocket.close", "code": 1008, "reason": "Unauthorized"}]
    assert call(guard, request("/v1/realtime", f"Bearer {KEY}", kind="websocket")) == (True, [])


def test_without_a_key_in_its_environment_the_server_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (None, ""):
        with pytest.raises(RuntimeError, match=f"{API_KEY_ENV} is not set"):
            load_guard(monkeypatch, key)


def test_it_imports_with_the_standard_library_alone() -> None:
    """The server's interpreter has no anyjev: with site-packages off (-S) and only its folder on the path, the guard
    imports and its middleware is the class vLLM's --middleware names."""
    code = (f"import sys; sys.path.insert(0, {str(KEY_GUARD_DIR)!r}); import {MODULE}, inspect; "
            f"assert inspect.isclass({KEY_GUARD}); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('anyjev', 'starlette', 'fastapi')))")
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", code], env={API_KEY_ENV: KEY}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
