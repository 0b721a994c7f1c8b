"""What defines one model's server: the ``server`` part of a score job's settings (``Settings.server_spec``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

# Fields that say how long to wait, not what runs: a lease is reused across different values of these.
TIMING_FIELDS = ("start_timeout", "stop_grace")


@dataclass(frozen=True)
class ServerSpec:
    """Everything that defines one model's server. Defaults are the config schema's (``models.<name>.*``,
    ``server.*``); the workflow always passes every field."""

    name: str
    model: str
    served_name: str
    python: str
    dtype: str = "auto"
    max_model_len: int | None = None
    max_logprobs: int = 26
    tensor_parallel_size: int = 1
    seed: int = 0
    prefix_caching: bool = False
    # The lm-head in fp32 (vLLM's ModelConfig.head_dtype via --hf-overrides): in bf16 the label log-probs
    # come in steps of 0.125 nat and exact ties for the top label are common (18/100 MMLU items raw).
    fp32_head: bool = True
    server_flags: tuple[str, ...] = ()
    server_env: tuple[tuple[str, str], ...] = ()
    start_timeout: float = 900
    port: int | None = None
    host: str = "127.0.0.1"
    stop_grace: float = 15.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSpec:
        """From JSON (a score job's ``server`` settings): lists become the tuples the spec holds."""
        fields = dict(data)
        fields["server_flags"] = tuple(fields.get("server_flags", ()))
        fields["server_env"] = tuple(tuple(kv) for kv in fields.get("server_env", ()))
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples as lists); ``from_dict(to_dict())`` is the identity."""
        data = dataclasses.asdict(self)
        data["server_flags"] = list(self.server_flags)
        data["server_env"] = [list(kv) for kv in self.server_env]
        return data

    def spec_hash(self) -> str:
        """Hash of what defines the server (every field but the timings): a lease is reused only for an
        identical spec."""
        data = {k: v for k, v in self.to_dict().items() if k not in TIMING_FIELDS}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
