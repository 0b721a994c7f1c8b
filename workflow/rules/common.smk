# Helpers shared by all rule files (the validated config as typed settings, the cells, and each job's settings).
import dataclasses
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from anyjev.config import check_runnable, load_strict, validate_config
from anyjev.errors import ConfigError
from anyjev.settings import STATE_DIR, Settings


def _load_settings():
    # Re-read the config files strictly (duplicate keys are an error PyYAML would hide), then validate.
    for path in workflow.configfiles:
        try:
            load_strict(path)
        except ConfigError as exc:
            raise WorkflowError(f"invalid config {path}: {exc}")
    try:
        validated = validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
        check_runnable(validated)
        return validated, Settings.from_config(validated)
    except ConfigError as exc:
        files = ", ".join(map(str, workflow.configfiles))
        raise WorkflowError(f"invalid config ({files}): {exc}")


def _check_rule_python():
    # Rules run `python -m anyjev` from PATH: the activated environment, or each rule's conda env under
    # --sdm conda. Without either, PATH's python may be another interpreter (or another checkout's anyjev).
    if "conda" in str(workflow.deployment_settings.deployment_method).lower():
        return
    found = shutil.which("python")
    here = Path(sys.executable).parent
    if found is None or Path(found).parent.resolve() != here.resolve():
        raise WorkflowError(
            f"rules run `python` from PATH, which is {found or 'missing'}, not this Snakemake's environment ({here}): "
            f"activate it first (`. {here}/activate`) or run with --sdm conda"
        )


# The config as run (validated, defaults filled: shown in the report) and as typed settings.
CONFIG_AS_RUN, SETTINGS = _load_settings()
_check_rule_python()
CELLS = SETTINGS.cells


def _executor_name():
    # Snakemake parses this file before it creates the executor, so `workflow` cannot tell yet whether jobs will
    # go to a cluster. The parsed command line (with the profile's keys: --executor, or a profile's `executor:`)
    # is on the call stack, in snakemake.cli.args_to_api (Snakemake 9; pinned). None when called otherwise (API).
    frame = sys._getframe()
    while frame is not None:
        args = frame.f_locals.get("args") if frame.f_code.co_name == "args_to_api" else None
        if args is not None and isinstance(getattr(args, "executor", None), str):
            return args.executor
        frame = frame.f_back
    return None


# One scoring job per cell, or per model (docs/servers.md); auto: per model when jobs go to a cluster. A cluster
# job's own Snakemake (remote_exec) parses this file too and must define the rules its main process chose.
SCORE_JOBS = SETTINGS.score_jobs
if SCORE_JOBS == "auto":
    cluster = workflow.remote_exec or _executor_name() not in (None, "local", "dryrun", "touch")
    SCORE_JOBS = "model" if cluster else "cell"
MODELS = sorted({m for m, _ in CELLS})
TASKS = sorted({t for _, t in CELLS})
# The run's owner: a managed vLLM server lives as long as this Snakemake process (docs/servers.md). Each
# Snakemake process that parses this file (the main one, or a cluster job's) owns the servers its jobs start;
# a job passes its parent's pid ($PPID, this process) to `anyjev score`.
OWNER_PID = os.getpid()


def as_json(obj):
    """A job's settings as one shell argument (always passed quoted, with :q)."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    return json.dumps(obj, sort_keys=True)


def model_marker(model):
    """The prepared model folder's marker file, when the workflow prepares the model (else nothing)."""
    if SETTINGS.models[model].source in ("smollm2", "hub"):
        return [f"resources/models/{model}/anyjev-model.json"]
    return []


def task_inputs(wildcards):
    t = SETTINGS.tasks[wildcards.task]
    if t.source == "file":
        return [t.path]
    if t.source == "hub":
        return [f"resources/hub/{t.dataset(wildcards.task)}/meta.json"]
    return []


def cell_files(name):
    return [f"results/cells/{m}/{t}/{name}" for m, t in CELLS]


def published_overlap_rows():
    """Published rows this run can be compared with, known at parse time from keys alone (model, task,
    level, metric), so the comparison figure is requested only when it will hold something.
    """
    from anyjev.outputs.tables import published_overlap, read_published

    path = SETTINGS.published
    if not path or not os.path.isfile(path):
        return 0
    return len(published_overlap(read_published(path), CELLS, SETTINGS.levels))


def output_targets():
    """Every table, figure and note of a run (for the `all` rule): the comparison with published numbers
    when a published table is configured, and its figure only when some of it overlaps this run.
    """
    targets = [
        "results/tables/summary.csv",
        "results/tables/summary.md",
        "results/tables/summary.tex",
        "results/tables/provenance.md",
        "results/tables/provenance.html",
        "results/plots/metrics_by_level.png",
        "results/plots/metrics_by_level.pdf",
        "results/plots/flip_by_level.png",
        "results/plots/flip_by_level.pdf",
        *[f"results/plots/reliability/{m}/{t}.{ext}" for m, t in CELLS for ext in ("png", "pdf")],
        "results/viewer/index.html",
    ]
    if SETTINGS.published:
        targets += ["results/tables/vs_published.csv", "results/tables/vs_published.md"]
        if published_overlap_rows():
            targets += [
                "results/plots/vs_published.png",
                "results/plots/vs_published.pdf",
            ]
    return targets


def retry_failed_allocations():
    """After a run with failed cells (score_jobs: model): drop the outcome record of each model that has one, so
    the next run schedules the model's job again; it rescores only the cells that are not staged yet."""
    from anyjev.run.allocation import allocation_path, failed_cells

    for model in MODELS:
        path = allocation_path(model)
        failed = failed_cells(path)
        if failed:
            os.remove(path)
            print(
                f"anyjev: {model}: cell(s) {', '.join(failed)} failed; the next run retries them " f"(the model's finished cells are kept)"
            )


def stop_run_servers(why):
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(STATE_DIR, owner_pid=OWNER_PID)
    if stopped:
        print(f"anyjev: stopped {len(stopped)} vLLM server(s) at the end of the run ({why}): {', '.join(stopped)}")
