"""One cell, one server: the server a cell's items were scored on is recorded with them, and every later request is
checked against it, so a resumed or running cell never mixes the numbers of two servers.

What a server is, as far as a client can tell (:class:`ServerIdentity`): what its endpoints say
(:class:`anyjev.serving.describe.ServerDescription`: vLLM version, the model it loaded, its context length, its
KV-cache settings), the ``system_fingerprint`` its responses carry (vLLM's hash of its model config: model, revision,
dtype, quantisation; not the lm-head dtype), and a probe: the label log-probs of the cell's first item under its first
layouts, computed afresh (a per-request prefix-cache salt), which any change of weights, dtype or lm-head moves.

:class:`ServerGuard` reads the identity before a cell's first new request; the checkpoint refuses to resume under a
server that differs from the one it recorded (:class:`anyjev.run.store.PartialScores`), and before each chunk of
items is checkpointed the guard reads the first probe prompt again, sent once every answer of the chunk has come back
(beside the requests of the chunks still being read: :meth:`ServerGuard.start_probe`), and checks the fingerprints of every response
since, so items from a server that changed during the cell are never written.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from anyjev.errors import ServerChangedError
from anyjev.run.prepared import PreparedItem
from anyjev.serving.describe import ServerDescription, describe_server

# The prompts of the first item the probe reads (its first layouts: enough values to tell a dtype or lm-head change).
PROBE_LAYOUTS = 4
# Largest |difference| of a probe log-prob (nat) between two reads of one server. The same server, settings and
# prompt, computed afresh, return the same values; another dtype or lm-head moves the largest by far more
# (results/bench/server_probe.json).
PROBE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ServerIdentity:
    """What a client can tell of a server: its description, the fingerprints its responses carried, and the probe's
    label log-probs (one row per probe prompt)."""

    description: dict[str, Any]
    fingerprints: list[str]
    probe: list[list[float]]

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, "fingerprints": self.fingerprints, "probe": self.probe}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerIdentity:
        return cls(dict(data["description"]), list(data["fingerprints"]), [list(map(float, r)) for r in data["probe"]])


def differences(recorded: ServerIdentity, now: ServerIdentity, *, tolerance: float = PROBE_TOLERANCE) -> list[str]:
    """What differs between RECORDED and NOW, one phrase each (empty when they are the same server)."""
    found = []
    before = ServerDescription(**recorded.description).compared()
    after = ServerDescription(**now.description).compared()
    for key in before:
        if before[key] != after[key] and None not in (before[key], after[key]):
            found.append(f"{key} {before[key]!r} -> {after[key]!r}")
    if recorded.fingerprints and now.fingerprints and set(now.fingerprints) - set(recorded.fingerprints):
        found.append(f"system_fingerprint {', '.join(recorded.fingerprints)} -> {', '.join(now.fingerprints)} (vLLM's "
                     "hash of its model config: another model, revision, dtype or quantisation)")
    gap = probe_gap(recorded.probe, now.probe)
    if gap > tolerance:
        found.append(f"the probe's label log-probs moved by up to {gap:.4g} nat (the same server moves them by at "
                     f"most {tolerance:g}: other weights, another dtype or another lm-head precision)")
    return found


def probe_gap(recorded: Sequence[Sequence[float]], now: Sequence[Sequence[float]]) -> float:
    """Largest |difference| over the probe prompts both reads hold (inf when their shapes differ)."""
    n = min(len(recorded), len(now))
    a, b = np.asarray(recorded[:n], float), np.asarray(now[:n], float)
    if n == 0 or a.shape != b.shape:
        return math.inf
    return float(np.abs(a - b).max())


class ServerGuard:
    """Reads a server's identity for one cell, and checks it again before each checkpoint.

    BACKEND is the cell's :class:`anyjev.backends.vllm.VLLMBackend`; PROBE is the cell's first prepared item (the
    same for every run of the cell, whatever is resumed)."""

    def __init__(self, backend, probe: PreparedItem, *, where: str) -> None:
        self.backend = backend
        self.prompts = dedupe([ids for _, ids in probe.layouts])[:PROBE_LAYOUTS]
        self.label_ids = list(probe.label_ids)
        self.where = where  # the cell, for messages: "model/task (results/cells/...)"
        self.reference: ServerIdentity | None = None
        self.prompts_sent = 0
        self.tokens_sent = 0
        self._ahead: Future | None = None  # the probe sent by start_probe, which the next verify reads
        self._thread: ThreadPoolExecutor | None = None

    def read(self) -> ServerIdentity:
        """The server's identity now (four GETs and the probe's prompts)."""
        description = describe_server(self.backend.base_url, self.backend.model, api_key=self.backend.api_key)
        probe = self._probe(self.prompts)
        return ServerIdentity(description.as_dict(), sorted(self.backend.system_fingerprints), probe)

    def start_probe(self) -> None:
        """Send the first probe prompt now, beside whatever requests follow, for the next :meth:`verify` to read: to
        check the items whose every answer has come back before this call (the chunk the next checkpoint writes)."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="server-check")
        self._ahead = self._thread.submit(self._probe, self.prompts[:1])

    def close(self) -> None:
        """Wait for a probe still in flight and let its thread go."""
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None

    def verify(self) -> None:
        """Before a checkpoint: the first probe prompt again (the one :meth:`start_probe` sent, else one sent now), and
        every fingerprint seen so far, against the reference; raises :class:`ServerChangedError` (nothing is written)
        when the server is not the same."""
        if self.reference is None:
            raise RuntimeError("ServerGuard.verify before a reference identity was set")
        ahead, self._ahead = self._ahead, None
        probe = ahead.result() if ahead is not None else self._probe(self.prompts[:1])
        now = ServerIdentity(self.reference.description, sorted(self.backend.system_fingerprints), probe)
        found = differences(self.reference, now)
        if found:
            raise ServerChangedError(self.where, found, during=True)

    def _probe(self, prompts: list[list[int]]) -> list[list[float]]:
        values = self.backend.label_logprobs(prompts, self.label_ids, cache_salt=uuid.uuid4().hex)
        self.prompts_sent += len(prompts)
        self.tokens_sent += sum(map(len, prompts))
        return [[float(v) for v in row] for row in values]


def dedupe(prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """PROMPTS without repeats, in order (a Yes/No item's two layout groups show the same two prompts)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for ids in prompts:
        key = tuple(ids)
        if key not in seen:
            seen.add(key)
            out.append(list(ids))
    return out
