"""Is a server usable: HTTP probes, the server log's tail (with the root cause above it), and the handle a
scoring job holds, which turns "connection refused" into the server's own story."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import urllib3

from anyjev.errors import ServerError
from anyjev.serving.proc import pid_alive
from anyjev.serving.state import ServerRecord, read_api_key, read_record

LOG_TAIL_LINES = 30
# The last line of a Python exception ("RuntimeError: ..."), also behind vLLM's "(Worker pid=1) ERROR ... [f.py:9] "
# prefix. A worker's root cause is often further up than the tail (the API server's own traceback follows it).
EXCEPTION_LINE = re.compile(r"(?:^|\] )(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)\b: ")
EARLIER_EXCEPTIONS = 5
START_MARK = "=== anyjev "  # begins the line written to the (appended) log before each start


def bearer(api_key: str | None) -> dict[str, str]:
    """The header that carries API_KEY to a server started with one (vLLM's ``--api-key`` / ``VLLM_API_KEY``), or none."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificates every HTTP client of this process verifies an HTTPS server with (the system's, or SSL_CERT_FILE
    / SSL_CERT_DIR's: OpenSSL's default paths), loaded once: a client made without it loads them again, about 25 ms of
    CPU, and a scoring job makes several clients a cell."""
    return ssl.create_default_context()


def http_client(timeout: float = 5.0, connect: float = 2.0, *, api_key: str | None = None) -> urllib3.PoolManager:
    """The probes' client (urllib3, as the scoring client: :class:`anyjev.backends.vllm.VLLMBackend`): each request
    given up after TIMEOUT seconds (CONNECT to connect), never retried nor redirected here; with API_KEY every request
    carries it. It reads no proxy from the environment: 127.0.0.1 is never routed elsewhere."""
    return urllib3.PoolManager(timeout=urllib3.Timeout(connect=connect, read=timeout), retries=False,
                               headers=bearer(api_key), ssl_context=tls_context())


def get(client: urllib3.PoolManager, url: str) -> urllib3.BaseHTTPResponse:
    """GET URL with CLIENT (:func:`http_client`); a failure to get any answer is urllib3's HTTPError."""
    return client.request("GET", url, redirect=False)


def served_names(client: urllib3.PoolManager, url: str) -> list[str] | None:
    """Model ids listed by /v1/models, or None if the server does not answer."""
    try:
        resp = get(client, f"{url}/v1/models")
        if resp.status != 200:
            return None
        return [str(m.get("id")) for m in resp.json().get("data", []) if isinstance(m, dict)]
    except (urllib3.exceptions.HTTPError, ValueError, AttributeError):
        return None


def health(client: urllib3.PoolManager, url: str) -> int | None:
    """Status code of /health, or None when nothing answers."""
    try:
        return get(client, f"{url}/health").status
    except urllib3.exceptions.HTTPError:
        return None


def log_tail(log_path: str | os.PathLike[str], lines: int = LOG_TAIL_LINES, offset: int = 0) -> str:
    """The last LINES lines of the log from byte OFFSET on (this start's part of an appended log), preceded by the
    last exception lines above them (a worker's root cause), if any."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError as exc:
        return f"(log {log_path} unreadable: {exc})"
    text = data.decode(errors="replace").splitlines()
    if not text:
        return "    (log is empty)"
    tail, earlier = text[-lines:], text[:-lines]
    # "See root cause above": quote the exceptions above the tail too, or the cause is not in the message;
    # only this server's, since the log is appended to by every start of the model's server.
    start = max((i for i, line in enumerate(earlier) if line.startswith(START_MARK)), default=0)
    causes = [line for line in earlier[start:] if EXCEPTION_LINE.search(line)][-EARLIER_EXCEPTIONS:]
    if causes:
        tail = ["(exceptions further up:)", *causes, f"(last {lines} lines:)", *tail]
    return "\n".join("    " + line for line in tail)


@dataclass
class ServerHandle:
    """A running server as recorded in its state file; what a scoring job needs to talk to it and check it."""

    name: str
    url: str
    served_name: str
    port: int
    pid: int
    pgid: int
    supervisor_pid: int
    argv: list[str]
    log_path: str
    owner_pid: int
    host: str
    started_at: str
    start_seconds: float
    vllm_version: str | None
    state_file: str
    token: str = ""
    api_key_file: str = ""
    api_key: str | None = field(default=None, repr=False, compare=False)  # read from api_key_file; never in to_dict
    reused: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.api_key is None and self.api_key_file:
            self.api_key = read_api_key(self.api_key_file)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready), e.g. to record the server next to the scores: where its key is kept, never the
        key. ``ServerHandle(**to_dict())`` is the same handle, its key read again from its file."""
        data = dataclasses.asdict(self)
        del data["api_key"]
        return data

    @classmethod
    def from_record(cls, record: ServerRecord, *, reused: bool = False) -> ServerHandle:
        """Handle from a state record, with the key from the file the record names."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("reused", "api_key")]
        data = record.to_json()
        return cls(**{k: data[k] for k in names}, reused=reused)

    def _fail(self, why: str) -> ServerError:
        record = read_record(self.state_file)
        code = record.exit_code if record else None
        extra = f"; exit code {code}" if code is not None else "; exit code unknown"
        if record and record.stopped:
            extra += f"; stopped: {record.stopped}"
        return ServerError(
            f"vLLM server for model {self.name!r} ({self.url}, pid {self.pid}) is not usable: {why}{extra}. "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def check_alive(self) -> None:
        """Raise ServerError if the server process is gone, /health is not 200 or it serves another model.

        Scoring calls it after a transport error, to turn "connection refused" into the server's own story.
        """
        if not pid_alive(self.pid):
            # Give the supervisor a moment to record the exit code.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and getattr(read_record(self.state_file), "exit_code", None) is None:
                time.sleep(0.1)
            raise self._fail("the server process is gone")
        with http_client(api_key=self.api_key) as client:
            status = health(client, self.url)
            if status != 200:
                raise self._fail(f"GET /health answered {status if status is not None else 'nothing'}")
            names = served_names(client, self.url)
        if names is None or self.served_name not in names:
            raise self._fail(f"/v1/models lists {names}, not {self.served_name!r}")
