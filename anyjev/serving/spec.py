"""What defines one model's server (:class:`ServerSpec`, the ``server`` of a score job), and the check that its
interpreter exists. Making a spec runs nothing: :func:`anyjev.serving.build.resolve_server` resolves it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.errors import ConfigError
from anyjev.schema import setting
from anyjev.serving.proc import STOP_GRACE

# Fields that say how long to wait, not what runs: a lease is reused across different values of these.
TIMING_FIELDS = ("start_timeout", "stop_grace")


def prefix_caching_on(setting_value: bool | str, dtype: str) -> bool:
    """``models.<name>.prefix_caching`` resolved: ``auto`` is on only for float32, where the cache's drift is within
    the fp32 parity tolerance (measured: results/bench/prefix_drift_fp32.json; bf16 drifts by up to 0.15 nat)."""
    if isinstance(setting_value, bool):
        return setting_value
    if setting_value != "auto":
        raise ConfigError("models.<name>.prefix_caching", f"must be auto, true or false, got {setting_value!r}")
    return dtype == "float32"


@dataclass(frozen=True)
class ServerSpec:
    """Everything that defines one model's server. Defaults are the config schema's (``models.<name>.*``,
    ``server.*``). ``dtype: auto``, ``prefix_caching: auto`` and ``block_size: None`` (the size pinned for the server
    environment's vLLM; benchmarks and tests name one) are what the config says; the server runs what
    :func:`~anyjev.serving.build.resolve_server` makes of them on the machine that starts it, and a cell's identity
    records that. Making a spec runs nothing."""

    name: str
    model: str
    served_name: str
    python: str = setting("server", "python")
    dtype: str = setting("models", "*", "dtype")
    max_model_len: int | None = setting("models", "*", "max_model_len")
    max_logprobs: int = setting("server", "max_logprobs")
    tensor_parallel_size: int = setting("models", "*", "tensor_parallel_size")
    data_parallel_size: int = setting("models", "*", "data_parallel_size")
    seed: int = setting("server", "seed")
    prefix_caching: bool | str = setting("models", "*", "prefix_caching")
    # The lm-head in fp32 (vLLM's ModelConfig.head_dtype via --hf-overrides): in bf16 the label log-probs
    # come in steps of 0.125 nat and exact ties for the top label are common (18/100 MMLU items raw).
    fp32_head: bool = setting("models", "*", "fp32_head")
    server_flags: tuple[str, ...] = setting("models", "*", "server_flags")
    server_env: tuple[tuple[str, str], ...] = setting("models", "*", "server_env")  # (name, value) pairs, sorted
    start_timeout: float = setting("models", "*", "start_timeout")
    port: int | None = setting("models", "*", "port")
    block_size: int | None = None
    host: str = "127.0.0.1"
    stop_grace: float = STOP_GRACE

    def __post_init__(self) -> None:
        object.__setattr__(self, "server_flags", tuple(self.server_flags))
        env = self.server_env.items() if isinstance(self.server_env, dict) else self.server_env  # the config's mapping
        object.__setattr__(self, "server_env", tuple(sorted(tuple(kv) for kv in env)))

    def is_resolved(self) -> bool:
        """Whether this is what a server runs: a dtype, a block size and prefix caching on or off."""
        return self.dtype != "auto" and self.block_size is not None and isinstance(self.prefix_caching, bool)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerSpec:
        """From JSON (a state record's ``spec``): lists become the tuples the spec holds."""
        return cls(**data)

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


def check_server_python(python: str, workdir: str | os.PathLike = ".") -> None:
    """The vLLM environment's interpreter must exist (on a cluster the score job checks it again on its node)."""
    path = Path(python)
    found = shutil.which(python) if os.sep not in python else (Path(workdir) / path if not path.is_absolute() else path)
    if found is None or not (Path(found).is_file() and os.access(found, os.X_OK)):
        raise ConfigError("server.python", f"{python!r} is not an executable interpreter (from {Path(workdir).resolve()}): "
                          "`bash scripts/setup_env.sh` creates .venv-server/bin/python (with `--gpu`, the CUDA vLLM, "
                          "where a cluster's GPU nodes see the checkout), or point it at a vLLM environment's python")
