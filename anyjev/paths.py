"""Where a run keeps its files: every folder and file of a run, spelled here once.

The workflow builds each rule's output, log and benchmark from :class:`RunPaths` (``workflow/rules/common.smk``; a
rule reads another's output as ``rules.<name>.output``), the people's commands look in the same places by default
(:mod:`anyjev.cli`), and the run reader finds a run's cells by the same names (:class:`anyjev.rundata.CellLayout`).
Paths are relative to the run's working directory (Snakemake's ``--directory``); patterns hold ``{model}``,
``{task}`` or ``{dataset}``. A step handed a folder names the files inside it itself: a fetched dataset's record
(:mod:`anyjev.data.hub`), a prepared model's record (:mod:`anyjev.serving.models`), the viewer's page
(:mod:`anyjev.reports.viewer`).
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG = "config/config.yaml"  # the experiment, when no --configfile names another

# A cell's files, in its folder (RunPaths.cell_dir): what a finished cell holds, and what the run reader reads.
SCORES, PROVENANCE, METRICS, PREDICTIONS = "scores.jsonl", "provenance.json", "metrics.json", "predictions.csv"
REPLICATES = "replicates.npz"  # the evaluation's bootstrap replicates, which the differences table pairs
CELL_FILES = (METRICS, PREDICTIONS, SCORES, PROVENANCE, REPLICATES)
STAGED = "staged"  # the folder in a cell's folder where a model's job (score_jobs: model) scores it before publishing
# A cell's folder in the results folder, and the logs (in the logs folder) of the steps that make its files.
CELL_DIR = "cells/{model}/{task}"
SCORE_LOG = "score/{model}/{task}.log"
EVALUATE_LOG = "evaluate/{model}/{task}.log"


@dataclass(frozen=True)
class Figure:
    """One figure's files: ``png`` (shown in the report) and ``pdf`` (for a paper); patterns may hold ``{model}`` and
    ``{task}``."""

    png: str
    pdf: str

    def of(self, model: str, task: str) -> Figure:
        return Figure(self.png.format(model=model, task=task), self.pdf.format(model=model, task=task))


@dataclass(frozen=True)
class RunPaths:
    """A run's folders and files. ROOT prefixes what is the run's own (a smoke run's ``smoke/limit-N/``: its task
    files, results, logs and benchmarks, so that it can neither overwrite nor have Snakemake delete the real run's);
    the prepared models, the fetched hub data, the lock record, the server leases and the job files are shared by
    every run in the working directory."""

    root: str = ""

    # -------------------------------------------------------------------------------- shared by every run here
    models_dir = "resources/models"  # prepared model folders, one per model
    hub_cache = "resources/hub"  # fetched hub datasets, one folder per dataset
    lock_record = "resources/lock.yaml"  # the hub commits an unpinned run (lock: null) resolved to (anyjev.lock)
    state_dir = ".anyjev/servers"  # the run's server leases (docs/servers.md)
    jobs_dir = ".anyjev/jobs"  # the typed jobs the rules hand their commands, one file per job (anyjev.jobs)
    claims = ".anyjev/claims.json"  # which config's runs made each finished file here, under which definition
    prepare_model_log = "logs/prepare_model/{model}.log"
    fetch_log = "logs/fetch_hub_task/{dataset}.log"

    # ----------------------------------------------------------------------------------------- the run's own
    @property
    def tasks_dir(self) -> str:
        return f"{self.root}resources/tasks"

    @property
    def task_file(self) -> str:
        """A task's prepared JSONL file."""
        return f"{self.tasks_dir}/{{task}}.jsonl"

    @property
    def rendered_prompts(self) -> str:
        """A model's scoring job's prompts rendered ahead (``render_prompts: ahead``), named by the job; removed once
        the job has read them."""
        return f"{self.root}resources/prompts/{{model}}/{{job}}.pickle"

    @property
    def results(self) -> str:
        return f"{self.root}results"

    @property
    def logs(self) -> str:
        return f"{self.root}logs"

    @property
    def benchmarks(self) -> str:
        return f"{self.root}benchmarks"

    @property
    def cell_dir(self) -> str:
        return f"{self.results}/{CELL_DIR}"

    def cell_file(self, name: str) -> str:
        """The pattern of a cell's file NAME (one of CELL_FILES)."""
        return f"{self.cell_dir}/{name}"

    @property
    def staged_dir(self) -> str:
        """Where one model's job (score_jobs: model) scores a cell before its score_cell job publishes it."""
        return f"{self.cell_dir}/{STAGED}"

    @property
    def allocations_dir(self) -> str:
        """A model's scoring jobs' outcome records (docs/servers.md); beside the cells' folder, not in it, as a task
        may have any name."""
        return f"{self.results}/allocations/{{model}}"

    @property
    def allocation(self) -> str:
        """The outcome per cell of one scoring job of a model, named by the job (``{job}``: its digest): a job that
        scores other cells of the model (another config's, or this config's once edited) writes a record of its own,
        and never replaces the record a finished cell is published from."""
        return f"{self.allocations_dir}/{{job}}.json"

    @property
    def summary(self) -> dict[str, str]:
        return {"csv": f"{self.results}/tables/summary.csv", "md": f"{self.results}/tables/summary.md",
                "tex": f"{self.results}/tables/summary.tex"}

    @property
    def provenance_report(self) -> dict[str, str]:
        return {"md": f"{self.results}/tables/provenance.md", "html": f"{self.results}/tables/provenance.html"}

    @property
    def vs_published(self) -> dict[str, str]:
        return {"csv": f"{self.results}/tables/vs_published.csv", "md": f"{self.results}/tables/vs_published.md"}

    @property
    def differences(self) -> dict[str, str]:
        """Each level minus raw and each model minus another, with the intervals of the differences."""
        return {"csv": f"{self.results}/tables/differences.csv", "md": f"{self.results}/tables/differences.md"}

    @property
    def metrics_by_level(self) -> Figure:
        return Figure(f"{self.results}/plots/metrics_by_level.png", f"{self.results}/plots/metrics_by_level.pdf")

    @property
    def flip_by_level(self) -> Figure:
        return Figure(f"{self.results}/plots/flip_by_level.png", f"{self.results}/plots/flip_by_level.pdf")

    @property
    def reliability(self) -> Figure:
        """A cell's reliability diagram."""
        return Figure(f"{self.results}/plots/reliability/{{model}}/{{task}}.png",
                      f"{self.results}/plots/reliability/{{model}}/{{task}}.pdf")

    @property
    def vs_published_plot(self) -> Figure:
        return Figure(f"{self.results}/plots/vs_published.png", f"{self.results}/plots/vs_published.pdf")

    @property
    def viewer(self) -> str:
        """The item-level viewer's folder (its files: :mod:`anyjev.reports.viewer`)."""
        return f"{self.results}/viewer"

    # ------------------------------------------------------------------------------------- logs and benchmarks
    @property
    def server_log(self) -> str:
        return f"{self.logs}/servers/{{model}}.log"

    @property
    def score_log(self) -> str:
        return f"{self.logs}/{SCORE_LOG}"

    @property
    def evaluate_log(self) -> str:
        return f"{self.logs}/{EVALUATE_LOG}"

    @property
    def score_model_log(self) -> str:
        """A model's scoring job's log, named by the job as its record is (:attr:`allocation`)."""
        return f"{self.logs}/score_model/{{model}}/{{job}}.log"

    @property
    def render_prompts_log(self) -> str:
        return f"{self.logs}/render_prompts/{{model}}/{{job}}.log"

    @property
    def prepare_task_log(self) -> str:
        return f"{self.logs}/prepare_task/{{task}}.log"

    @property
    def earlier_logs(self) -> tuple[str, ...]:
        """The logs of the steps before a cell's scoring, nearest first: its model's scoring job (``{job}``: the job
        that scores the cell), its task's preparation and fetch (``{dataset}``: a hub task's cache folder), its model's
        preparation."""
        return (self.score_model_log, self.prepare_task_log, self.fetch_log, self.prepare_model_log)

    @property
    def summary_log(self) -> str:
        return f"{self.logs}/tables/summary.log"

    @property
    def differences_log(self) -> str:
        return f"{self.logs}/tables/differences.log"

    @property
    def provenance_log(self) -> str:
        return f"{self.logs}/tables/provenance.log"

    @property
    def vs_published_log(self) -> str:
        return f"{self.logs}/tables/vs_published.log"

    @property
    def summary_plots_log(self) -> str:
        return f"{self.logs}/plots/summary.log"

    @property
    def vs_published_plot_log(self) -> str:
        return f"{self.logs}/plots/vs_published.log"

    @property
    def viewer_log(self) -> str:
        return f"{self.logs}/viewer.log"

    @property
    def score_benchmark(self) -> str:
        return f"{self.benchmarks}/score/{{model}}/{{task}}.tsv"

    @property
    def score_model_benchmark(self) -> str:
        return f"{self.benchmarks}/score_model/{{model}}/{{job}}.tsv"

    @property
    def render_prompts_benchmark(self) -> str:
        return f"{self.benchmarks}/render_prompts/{{model}}/{{job}}.tsv"


def run_paths(limit: int | None = None) -> RunPaths:
    """The run's paths: a smoke run (``--config limit=N``) keeps what is its own under ``smoke/limit-N/``."""
    return RunPaths("" if limit is None else f"smoke/limit-{limit}/")
