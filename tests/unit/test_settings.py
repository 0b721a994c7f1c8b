"""One name and one default per setting: the schema's. Every default the library or the CLI uses for a config
setting equals the schema's, and every config key an error message points to exists in the schema."""

from __future__ import annotations

import dataclasses
import inspect
import re
import tokenize
from pathlib import Path

import pytest

from anyjev import cli
from anyjev.backends.vllm import VLLMBackend
from anyjev.config import validate_config
from anyjev.numbers import levels, metrics
from anyjev.run import scoring
from anyjev.serving.spec import ServerSpec
from anyjev.settings import (
    SCHEMA_PATH,
    ClientSettings,
    EvaluationSettings,
    ModelSettings,
    ScoringSettings,
    ServerSettings,
    Settings,
    TaskSettings,
    schema,
    schema_node,
)

REPO = Path(__file__).resolve().parents[2]


def schema_defaults(node: dict, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every key path of the schema that has a default (``*`` for a name-keyed mapping)."""
    found: dict[tuple[str, ...], object] = {}
    for name, sub in node.get("properties", {}).items():
        if "default" in sub:
            found[path + (name,)] = sub["default"]
        found |= schema_defaults(sub, path + (name,))
    if isinstance(node.get("additionalProperties"), dict):
        found |= schema_defaults(node["additionalProperties"], path + ("*",))
    return found


SETTINGS_CLASSES = {("client",): ClientSettings, ("evaluation",): EvaluationSettings, ("server",): ServerSettings,
                    ("scoring",): ScoringSettings,
                    ("models", "*"): ModelSettings, ("tasks", "*"): TaskSettings, (): Settings}

# Library functions that take a setting as a keyword argument with a default: (schema key path, function, parameter).
LIBRARY_DEFAULTS = [
    (("client", "prompts_per_request"), VLLMBackend.__init__, "prompts_per_request"),
    (("client", "max_concurrency"), VLLMBackend.__init__, "max_concurrency"),
    (("client", "timeout"), VLLMBackend.__init__, "timeout"),
    (("client", "retries"), VLLMBackend.__init__, "retries"),
    (("client", "chunk_items"), scoring.score_cell, "chunk_items"),
    # scoring.*: score_cell and scoring_identity take ScoringSettings itself, whose defaults are the schema's
    (("evaluation", "prior_strength"), levels.compute_levels, "strength"),
    (("evaluation", "prior_min_items"), levels.compute_levels, "min_items"),
    (("evaluation", "prior_batch_size"), levels.compute_levels, "batch_size"),
    (("evaluation", "prior_strength"), levels.prior_correct, "strength"),
    (("evaluation", "n_boot"), metrics.bootstrap, "n_boot"),
    (("evaluation", "bootstrap_seed"), metrics.bootstrap, "seed"),
]
SPEC_FIELDS = {"dtype": ("models", "*", "dtype"), "max_model_len": ("models", "*", "max_model_len"),
               "tensor_parallel_size": ("models", "*", "tensor_parallel_size"), "port": ("models", "*", "port"),
               "start_timeout": ("models", "*", "start_timeout"),
               "max_logprobs": ("server", "max_logprobs"), "seed": ("server", "seed"),
               "fp32_head": ("models", "*", "fp32_head")}


def test_every_schema_default_is_a_settings_default() -> None:
    defaults = schema_defaults(schema())
    assert len(defaults) >= 25
    covered = set()
    for path, value in defaults.items():
        owner = next(k for k in sorted(SETTINGS_CLASSES, key=len, reverse=True) if len(k) < len(path) and path[: len(k)] == k)
        cls = SETTINGS_CLASSES[owner]
        name = path[len(owner)]
        if len(path) > len(owner) + 1:
            continue  # a nested mapping's own default (evaluation: {} etc.) is checked through its class
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert name in fields, f"{'.'.join(path)} has no field in {cls.__name__}"
        f = fields[name]
        got = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(got):
            # A section's default ({}) is filled with its keys' defaults, checked key by key.
            assert value == {}, path
            covered.add(path)
            continue
        assert got == value, f"{cls.__name__}.{name} defaults to {got!r}, the schema's {'.'.join(path)} to {value!r}"
        covered.add(path)
    assert covered == set(defaults)


@pytest.mark.parametrize(("path", "func", "param"), LIBRARY_DEFAULTS, ids=lambda x: getattr(x, "__qualname__", str(x)))
def test_library_defaults_equal_the_schema(path, func, param) -> None:
    assert inspect.signature(func).parameters[param].default == schema_node(*path)["default"], (func, param)


def test_server_spec_defaults_equal_the_schema() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(ServerSpec)}
    for name, path in SPEC_FIELDS.items():
        assert fields[name] == schema_node(*path)["default"], name
    # prefix_caching's schema default ("auto") is resolved per dtype before it reaches a spec: for the spec's
    # default dtype it resolves to the spec's default.
    assert schema_node("models", "*", "prefix_caching")["default"] == "auto"
    assert fields["prefix_caching"] is _resolved_prefix_caching("auto", fields["dtype"])


def _resolved_prefix_caching(value, dtype: str) -> bool:
    config = validate_config({"models": {"m": {"source": "smollm2", "dtype": dtype, "prefix_caching": value}},
                              "tasks": {"mmlu": {"source": "builtin"}}}, SCHEMA_PATH)
    return Settings.from_config(config).server_spec("m")["prefix_caching"]


def test_prefix_caching_auto_is_on_for_float32_only() -> None:
    assert [_resolved_prefix_caching("auto", d) for d in ("float32", "bfloat16", "float16", "auto")] == [True, False, False, False]
    assert [_resolved_prefix_caching(v, "bfloat16") for v in (True, False)] == [True, False]
    assert [_resolved_prefix_caching(v, "float32") for v in (True, False)] == [True, False]


def test_the_cli_has_no_defaults_of_its_own_for_config_settings() -> None:
    """Settings reach the CLI only through --settings; no option may carry a second default for one."""
    names = {p[-1] for p in schema_defaults(schema())}
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command, p in sub.choices.items():
        for action in p._actions:
            assert action.dest not in names, f"anyjev {command} --{action.dest} duplicates a config setting"


# A key path starts a word (not a module path such as anyjev.numbers.evaluation.evaluate_records).
CONFIG_KEY = re.compile(r"(?<![\w.])(models|tasks)\.(?:<name>|\{[^{}]+\}|[A-Za-z0-9_-]+)\.([a-z_]+)\b"
                        r"|(?<![\w.])(server|client|evaluation)\.([a-z_]+)\b")


def hinted_keys() -> set[tuple[str, ...]]:
    """Config keys named in the library's and the workflow's messages and docstrings."""
    keys: set[tuple[str, ...]] = set()
    for f in (REPO / "anyjev").rglob("*.py"):
        with open(f, encoding="utf-8") as fh:
            strings = [tok.string for tok in tokenize.generate_tokens(fh.readline) if tok.type == tokenize.STRING]
        for m in CONFIG_KEY.finditer("\n".join(strings)):
            if m.group(1):
                keys.add((m.group(1), "*", m.group(2)))
            elif m.group(3) in ("server", "client", "evaluation"):
                keys.add((m.group(3), m.group(4)))
    return keys


def test_every_hinted_config_key_exists() -> None:
    keys = hinted_keys()
    assert ("server", "max_logprobs") in keys and ("models", "*", "server_flags") in keys
    bad = []
    for key in sorted(keys):
        try:
            schema_node(*key)
        except KeyError:
            bad.append(".".join(key))
    assert not bad, f"messages name config keys that do not exist: {bad}"


def test_cli_commands_named_in_messages_exist() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = "\n".join(f.read_text() for f in (REPO / "anyjev").rglob("*.py"))
    for m in re.finditer(r"anyjev ([a-z][a-z-]+) (--[a-z-]+)", text):
        command, flag = m.groups()
        if command not in sub.choices:
            continue
        options = {s for a in sub.choices[command]._actions for s in a.option_strings}
        assert flag in options, f"a message suggests `anyjev {command} {flag}`, which does not exist"
