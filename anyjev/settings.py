"""Typed settings, built once from the validated config; each setting keeps its schema key's name.

The schema (``workflow/schemas/config.schema.yaml``) is the one place a default lives: the dataclass defaults
below are read from it, the workflow hands each job its resolved settings as one JSON argument, and the CLI
has no defaults of its own for these settings (``tests/unit/test_settings.py`` proves it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from anyjev.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = REPO / "config" / "config.yaml"
STATE_DIR = ".anyjev/servers"
HUB_CACHE = "resources/hub"
# Where an unpinned run (lock: null) records the commits its hub datasets and models resolved to (anyjev.lock).
LOCK_RECORD = "resources/lock.yaml"


@functools.cache
def schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def schema_node(*keys: str) -> dict[str, Any]:
    """The schema of a config key path; ``*`` steps into a name-keyed mapping (``models.*.dtype``)."""
    node = schema()
    for key in keys:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return node


def default(*keys: str) -> Any:
    """The schema's default of a config key path (a fresh copy)."""
    return json.loads(json.dumps(schema_node(*keys)["default"]))


T = TypeVar("T")


def from_mapping(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build a settings dataclass from a config mapping, refusing keys it does not know (naming WHERE)."""
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown setting (known: {', '.join(sorted(known))})")
    return cls(**data)


def schema_section(*section: str) -> Callable[[type[T]], type[T]]:
    """Make a frozen dataclass of a config section whose field defaults are the schema's: each annotated field
    with a schema default gets it (a fresh copy per instance); the others keep their own (or none)."""

    def wrap(cls: type[T]) -> type[T]:
        keys = schema_node(*section).get("properties", {}) if section else schema()["properties"]
        for name in cls.__annotations__:
            if name in keys and "default" in keys[name] and name not in vars(cls):
                setattr(cls, name, field(default_factory=functools.partial(default, *section, name)))
        return dataclass(frozen=True)(cls)

    return wrap


@schema_section("client")
class ClientSettings:
    """How the scoring client talks to a vLLM server (``client.*``)."""

    prompts_per_request: int
    max_concurrency: int
    timeout: float
    retries: int
    chunk_items: int


@schema_section("evaluation")
class EvaluationSettings:
    """Levels, priors and bootstrap of the offline evaluation (``evaluation.*``)."""

    prior_strength: float
    prior_min_items: int
    prior_mode: str
    prior_batch_size: int | None
    n_boot: int
    bootstrap_seed: int


@schema_section("server")
class ServerSettings:
    """What every managed server shares (``server.*``)."""

    python: str
    seed: int
    max_logprobs: int


@schema_section("scoring")
class ScoringSettings:
    """What every cell asks the model and records per item (``scoring.*``)."""

    prompt_profile: str
    answer_mass: bool
    rotations: str
    target_disagreement: float
    confidence: float
    rotations_per_round: int
    option_order: str


@schema_section("models", "*")
class ModelSettings:
    """One model (``models.<name>.*``); the keys without a default depend on the source."""

    source: str
    repo: str | None = None
    revision: str | None = None
    path: str | None = None
    url: str | None = None
    served_name: str | None = None
    tokenizer: str | None = None
    dtype: str
    max_model_len: int | None
    tensor_parallel_size: int
    gpus: int
    mem_mb: int | None
    runtime: int | None
    server_flags: list[str]
    server_env: dict[str, str]
    port: int | None
    start_timeout: float
    prefix_caching: bool | str
    fp32_head: bool

    @property
    def prefix_caching_on(self) -> bool:
        """``prefix_caching`` resolved: ``auto`` is on only for float32, where the cache's drift is within the
        fp32 parity tolerance (measured: results/bench/prefix_drift_fp32.json; bf16 drifts by up to 0.15 nat)."""
        if isinstance(self.prefix_caching, bool):
            return self.prefix_caching
        return self.dtype == "float32"

    @property
    def managed(self) -> bool:
        """The workflow starts this model's server (every source but ``url``)."""
        return self.source != "url"


@schema_section("tasks", "*")
class TaskSettings:
    """One task (``tasks.<name>.*``)."""

    source: str
    builtin: str | None = None
    path: str | None = None
    revision: str | None = None
    n_test: int
    n_calib: int
    allow_fewer: bool

    def dataset(self, name: str) -> str:
        """The built-in or hub dataset the task loads (``builtin``, default: the task's name)."""
        return self.builtin or name


@schema_section()
class Settings:
    """The whole validated config, typed."""

    models: dict[str, ModelSettings]
    tasks: dict[str, TaskSettings]
    cells: list[tuple[str, str]]
    levels: list[str]
    split_seed: int
    published: str | None
    limit: int | None
    lock: str | None
    score_jobs: str
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    scoring: ScoringSettings = field(default_factory=ScoringSettings)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Settings:
        """From a config already validated (and default-filled) by :func:`anyjev.config.validate_config`."""
        from anyjev.config import cells

        return cls(
            models={n: from_mapping(ModelSettings, m, f"models.{n}") for n, m in config["models"].items()},
            tasks={n: from_mapping(TaskSettings, t, f"tasks.{n}") for n, t in config["tasks"].items()},
            cells=cells(config),
            levels=list(config["levels"]),
            split_seed=config["split_seed"],
            limit=config["limit"],
            lock=config["lock"],
            score_jobs=config["score_jobs"],
            evaluation=from_mapping(EvaluationSettings, config["evaluation"], "evaluation"),
            server=from_mapping(ServerSettings, config["server"], "server"),
            client=from_mapping(ClientSettings, config["client"], "client"),
            scoring=from_mapping(ScoringSettings, config["scoring"], "scoring"),
            published=config.get("published"),
        )

    @classmethod
    def load(cls, path: str | Path, *, workdir: str | Path = ".") -> Settings:
        """Read, validate and type one config file (as the workflow does with its config)."""
        from anyjev.config import check_config_file

        return cls.from_config(check_config_file(path, workdir=workdir))

    @property
    def content_free(self) -> bool:
        """Whether score jobs also read the content-free probes: the prior mode or a listed level needs them."""
        return self.evaluation.prior_mode == "content_free" or "L0-cf" in self.levels

    # ------------------------------------------------------------------ what each job is handed
    def model_dir(self, model: str) -> str:
        """The model's weights/tokenizer folder: prepared under resources/, or the user's."""
        m = self.models[model]
        if m.source == "local":
            return str(m.path)
        if m.source == "url":
            return str(m.tokenizer)
        return f"resources/models/{model}"

    def server_spec(self, model: str) -> dict[str, Any]:
        """The model's server spec (anyjev.serving.spec.ServerSpec fields) from the config."""
        m = self.models[model]
        return {
            "name": model,
            "model": self.model_dir(model),
            "served_name": model,
            "python": self.server.python,
            "dtype": m.dtype,
            "max_model_len": m.max_model_len,
            "max_logprobs": self.server.max_logprobs,
            "tensor_parallel_size": m.tensor_parallel_size,
            "seed": self.server.seed,
            "prefix_caching": m.prefix_caching_on,
            "fp32_head": m.fp32_head,
            "server_flags": list(m.server_flags),
            "server_env": sorted([k, v] for k, v in m.server_env.items()),
            "start_timeout": m.start_timeout,
            "port": m.port,
        }

    def score_job(self, model: str, task: str) -> dict[str, Any]:
        """Everything a score job needs besides its files: how to reach the model, and the client settings."""
        m = self.models[model]
        job: dict[str, Any] = {"model": model, "task": task, "tokenizer": self.model_dir(model),
                               "client": dataclasses.asdict(self.client), "scoring": dataclasses.asdict(self.scoring)}
        if self.content_free:
            job["content_free"] = True
        if m.managed:
            job["server"] = self.server_spec(model)
            job["server_log"] = f"logs/servers/{model}.log"
            job["state_dir"] = STATE_DIR
        else:
            job["url"] = m.url
            job["served_name"] = m.served_name or model
        return job

    def model_tasks(self, model: str) -> list[str]:
        """The tasks of MODEL's cells, in config order."""
        return [t for m, t in self.cells if m == model]

    def score_model_job(self, model: str) -> dict[str, Any]:
        """What one job scoring every cell of MODEL needs (``score_jobs: model``): each cell's score job."""
        return {"model": model, "cells": {t: self.score_job(model, t) for t in self.model_tasks(model)}}

    def prepare_job(self, task: str) -> dict[str, Any]:
        """Everything the prepare step needs to build and split a task."""
        job = {"name": task, "split_seed": self.split_seed, "hub_cache": HUB_CACHE, **dataclasses.asdict(self.tasks[task])}
        if self.limit is not None:  # a smoke run: the first items of the same seeded order
            job |= {"n_test": min(job["n_test"], self.limit), "n_calib": min(job["n_calib"], self.limit), "allow_fewer": True}
        return job

    def score_resources(self, site: Any = None) -> dict[str, Callable[[Any], int | float]]:
        """score_cell's memory and time per model (``models.<name>.mem_mb`` / ``runtime``), as Snakemake resources.

        A resource is returned only when some model sets it (otherwise the profile decides, as for any rule); a model
        that leaves it null then gets SITE's value (the profile's default-resources, a Snakemake Resources mapping),
        which must be a number. Snakemake's --set-resources for score_cell would override both.
        """
        found: dict[str, Callable[[Any], int | float]] = {}
        for key in ("mem_mb", "runtime"):
            values = {m: getattr(self.models[m], key) for m, _ in self.cells}
            if all(v is None for v in values.values()):
                continue
            fallback = getattr(site.get(key), "value", None) if site is not None else None
            for m, v in values.items():
                if v is None and (isinstance(fallback, bool) or not isinstance(fallback, int | float)):
                    raise ConfigError(f"models.{m}.{key}", f"is null while another model sets it, and the profile has no "
                                      f"default-resources {key} number to fall back on: set it, or {key} under default-resources")
            found[key] = lambda wc, key=key, fallback=fallback: getattr(self.models[wc.model], key) or fallback
        return found

    def lock_job(self) -> dict[str, Any]:
        """Where fetch and prepare-model record resolved commits, and whether they must match it (anyjev.lock)."""
        return {"lock_file": self.lock or LOCK_RECORD, "pinned": self.lock is not None}

    def model_job(self, model: str) -> dict[str, Any]:
        """What the prepare-model step needs."""
        return {"name": model, **dataclasses.asdict(self.models[model]), **self.lock_job()}

    def fetch_job(self, dataset: str) -> dict[str, Any]:
        """What the fetch step of a hub dataset needs: its revision from the config, the cache and the lock."""
        return {"dataset": dataset, "revision": self.hub_datasets()[dataset], "cache": HUB_CACHE, **self.lock_job()}

    def hub_datasets(self) -> dict[str, str | None]:
        """Hub datasets to fetch, each with the revision its tasks ask for (refusing two different ones)."""
        wanted: dict[str, tuple[str, str | None]] = {}
        for name, t in self.tasks.items():
            if t.source != "hub":
                continue
            ds = t.dataset(name)
            if ds in wanted and wanted[ds][1] != t.revision:
                raise ConfigError(f"tasks.{name}.revision", f"dataset {ds!r} is also fetched at revision "
                                  f"{wanted[ds][1]!r} for task {wanted[ds][0]!r}: one dataset, one revision")
            wanted[ds] = (name, t.revision)
        return {ds: rev for ds, (_, rev) in wanted.items()}


def load_job(text_or_path: str, cls: type[T] | None = None) -> Any:
    """A job's settings from the JSON argument the workflow passes (or a file holding it)."""
    text = Path(text_or_path).read_text() if not text_or_path.lstrip().startswith("{") else text_or_path
    data = json.loads(text)
    return from_mapping(cls, data, "settings") if cls is not None else data
