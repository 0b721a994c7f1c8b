"""Prompt-token and prefix-cache counters from a vLLM server's Prometheus ``/metrics`` (vLLM 0.32 names).

``vllm:prompt_tokens_total`` counts every prompt token scheduled; ``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total`` count the tokens looked up in the prefix cache and those found there.
The tokens the server actually computed = prompt tokens - hits. Counters are cumulative since the server
started: take differences of two readings (:meth:`CacheCounters.minus`) around the work measured.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import urllib3

from anyjev.errors import BackendError
from anyjev.serving.health import get, http_client

COUNTERS = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "cache_queries": "vllm:prefix_cache_queries_total",
    "cache_hits": "vllm:prefix_cache_hits_total",
    "requests_ok": "vllm:request_success_total",
}
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class CacheCounters:
    """One reading (or the difference of two) of the server's prompt-token and prefix-cache counters."""

    prompt_tokens: float
    cache_queries: float
    cache_hits: float
    requests_ok: float

    @property
    def computed_tokens(self) -> float:
        """Prompt tokens the server prefilled (not served from the prefix cache)."""
        return self.prompt_tokens - self.cache_hits

    @property
    def hit_rate(self) -> float:
        """Hits over queries (tokens); nan when nothing was queried."""
        return self.cache_hits / self.cache_queries if self.cache_queries else float("nan")

    def minus(self, earlier: CacheCounters) -> CacheCounters:
        return CacheCounters(*(getattr(self, k) - getattr(earlier, k) for k in COUNTERS))

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in COUNTERS} | {"computed_tokens": self.computed_tokens,
                                                          "hit_rate": self.hit_rate}


def parse_counters(text: str, served_name: str | None = None) -> CacheCounters:
    """Sum each counter over its label sets (engines, finish reasons), restricted to MODEL_NAME=SERVED_NAME
    when given. A counter the text does not hold raises BackendError naming it (another vLLM version)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m["name"] not in COUNTERS.values():
            continue
        if served_name is not None and m["labels"] and f'model_name="{served_name}"' not in m["labels"]:
            continue
        found[m["name"]] = found.get(m["name"], 0.0) + float(m["value"])
    missing = [name for name in COUNTERS.values() if name not in found]
    if missing:
        raise BackendError(f"/metrics has no {', '.join(missing)} (vLLM 0.32 names; is this a vLLM server with "
                           f"stats logging on, serving {served_name!r}?)")
    return CacheCounters(*(found[name] for name in COUNTERS.values()))


def parse_in_flight(text: str, served_name: str | None = None) -> float:
    """Requests the server holds now (running + waiting), from the same text; nan when it does not say."""
    total, seen = 0.0, False
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m["name"] not in IN_FLIGHT:
            continue
        if served_name is not None and m["labels"] and f'model_name="{served_name}"' not in m["labels"]:
            continue
        total, seen = total + float(m["value"]), True
    return total if seen else float("nan")


def read_metrics(base_url: str, timeout: float = 10.0, *, api_key: str | None = None) -> str:
    """The text of BASE_URL/metrics, asked with API_KEY (a managed server answers /metrics only to its run's key)."""
    url = base_url.rstrip("/") + "/metrics"
    try:
        with http_client(timeout, connect=timeout, api_key=api_key) as client:
            resp = get(client, url)
    except urllib3.exceptions.HTTPError as exc:
        raise BackendError(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc
    if resp.status != 200:
        raise BackendError(f"GET {url} answered HTTP {resp.status}")
    return resp.data.decode("utf-8", "replace")


def read_counters(base_url: str, served_name: str | None = None, *, api_key: str | None = None,
                  timeout: float = 10.0) -> CacheCounters:
    """Read the counters from BASE_URL/metrics (asked with API_KEY)."""
    return parse_counters(read_metrics(base_url, timeout, api_key=api_key), served_name)


def settled_counters(base_url: str, served_name: str, *, expected_requests: float,
                     api_key: str | None = None) -> CacheCounters:
    """The counters once the server has counted EXPECTED_REQUESTS (a total) or has settled: nothing in flight and the
    request count unchanged between two readings. A request's success is counted just after its response is sent, so
    a reading taken as the last response arrives can miss it; waiting on the count itself, not on a clock, reads it
    once it is there, and stops when nothing more is coming."""
    previous: CacheCounters | None = None
    while True:
        text = read_metrics(base_url, api_key=api_key)
        now = parse_counters(text, served_name)
        idle = not parse_in_flight(text, served_name) > 0  # a server that does not say counts as idle
        if now.requests_ok >= expected_requests or (idle and previous is not None and
                                                    previous.requests_ok == now.requests_ok):
            return now
        previous = now if idle else None
        time.sleep(0.05)
