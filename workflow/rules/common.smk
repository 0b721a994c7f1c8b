# Helpers shared by all rule files. The validated config as typed settings, the cells, and where a run keeps its
# files. Paths live here and in the rules; the library takes them as arguments.
import os
import re
import shutil
import sys
from pathlib import Path

from anyjev.config import check_runnable, load_strict, validate_config, value_source
from anyjev.errors import ConfigError
from anyjev.outputs.run import Figure, RunOutputs, kept_as_they_are, write_run_outputs
from anyjev.results import CellLayout
from anyjev.run.allocation import failed_cells, score_jobs_mode
from anyjev.settings import SCORE_RESOURCES, Settings

# A smoke run (`--config limit=N`) keeps what it writes under smoke/limit-N/: its task files, results, logs and
# benchmarks are its own, so it cannot overwrite the real run's outputs, nor can Snakemake delete them when one of its
# jobs fails. Prepared models, hub data and server leases are shared (the same files either way).
RUN_ROOT = ""
if config.get("limit") is not None:
    RUN_ROOT = f"smoke/limit-{config['limit']}/"
MODELS_DIR = "resources/models"
HUB_CACHE = "resources/hub"
TASK_FILE = f"{RUN_ROOT}resources/tasks/{{task}}.jsonl"
# Where an unpinned run (lock: null) records the commits its hub datasets and models resolved to (anyjev.lock).
LOCK_RECORD = "resources/lock.yaml"
# The run's server leases (one server start per model and run: docs/servers.md).
STATE_DIR = ".anyjev/servers"
LOGS = f"{RUN_ROOT}logs"
BENCHMARKS = f"{RUN_ROOT}benchmarks"
SERVER_LOG = f"{LOGS}/servers/{{model}}.log"
SCORE_LOG = f"{LOGS}/score/{{model}}/{{task}}.log"
EVALUATE_LOG = f"{LOGS}/evaluate/{{model}}/{{task}}.log"
SCORE_MODEL_LOG = f"{LOGS}/score_model/{{model}}.log"
PREPARE_TASK_LOG = f"{LOGS}/prepare_task/{{task}}.log"
# Shared by a smoke run and the real one, as what they make is.
FETCH_LOG = "logs/fetch_hub_task/{dataset}.log"
PREPARE_MODEL_LOG = "logs/prepare_model/{model}.log"
RESULTS = f"{RUN_ROOT}results"
CELL_DIR = f"{RESULTS}/cells/{{model}}/{{task}}"
TABLES = f"{RESULTS}/tables"
PLOTS = f"{RESULTS}/plots"
RELIABILITY = f"{PLOTS}/reliability/{{model}}/{{task}}"
VIEWER = f"{RESULTS}/viewer"
# Where one model's job (score_jobs: model) scores a cell before its score_cell job publishes it (docs/servers.md).
STAGED_DIR = f"{CELL_DIR}/staged"
# Beside the cells' folder, not in it: a task may have any name (allocation.json too).
ALLOCATION = f"{RESULTS}/allocations/{{model}}.json"
# Where a cell's files and the logs of its steps are: what tells a finished cell from a failed one, and why
# (CELL_LAYOUT, below the settings: a hub task's fetch log is named by its cache folder).
EARLIER_LOGS = (SCORE_MODEL_LOG, PREPARE_TASK_LOG, FETCH_LOG, PREPARE_MODEL_LOG)


def _invalid_config_line(exc):
    return f"invalid config ({', '.join(map(str, workflow.configfiles))}): {exc}"


def _invalid_config(exc):
    return WorkflowError(_invalid_config_line(exc))


def _load_settings():
    # Re-read the config files strictly (duplicate keys are an error PyYAML would hide), then validate.
    for path in workflow.configfiles:
        try:
            load_strict(path)
        except ConfigError as exc:
            raise WorkflowError(f"invalid config {path}: {exc}")
    try:
        validated = validate_config(config)
        return validated, Settings.from_config(validated)
    except ConfigError as exc:
        # Name the file (or --config) the wrong value came from, not every file merged.
        sources = [(str(p), load_strict(p)) for p in workflow.configfiles]
        sources.append(("--config", dict(workflow.config_settings.config)))
        where = value_source(exc.key_path, sources) or ", ".join(name for name, _ in sources[:-1])
        raise WorkflowError(f"invalid config ({where}): {exc}")


def _missing_for_a_run():
    # What a run needs on this machine that a dry run (and `anyjev plan`) does not: the vLLM interpreter, when the
    # workflow starts servers. Said here, refused by check_servers_can_start() when jobs that start servers will run.
    try:
        check_runnable(CONFIG_AS_RUN)
    except ConfigError as exc:
        return exc
    return None


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
MISSING_FOR_A_RUN = _missing_for_a_run()
if MISSING_FOR_A_RUN is not None:
    print(f"anyjev: not here yet: {MISSING_FOR_A_RUN} (a dry run goes on without it; a run that starts a server refuses)")
CELL_LAYOUT = CellLayout(CELL_DIR, SCORE_LOG, EVALUATE_LOG, EARLIER_LOGS, SETTINGS.hub_folders())


# One scoring job per model (the default: one server start, each cell published or failed alone) or per cell
# (docs/servers.md). A cluster job's own Snakemake parses this file with the same config, so it defines the same rules.
SCORE_JOBS = score_jobs_mode(SETTINGS.score_jobs)
MODELS = sorted({m for m, _ in CELLS})
TASKS = sorted({t for _, t in CELLS})
# The run's owner: a managed vLLM server lives as long as this Snakemake process (docs/servers.md). Each
# Snakemake process that parses this file (the main one, or a cluster job's) owns the servers its jobs start;
# a job passes its parent's pid ($PPID, this process) to `anyjev score`.
OWNER_PID = os.getpid()


def check_servers_can_start():
    """At the start of a run (not a dry run), before any job: refused when a job that starts a managed server will
    run and the server environment is not here (docs/cluster.md: the dry run before the setup only says so)."""
    starts_servers = "score_cell" if SCORE_JOBS == "cell" else "score_model"
    models = {job.wildcards.model for job in workflow.dag.needrun_jobs() if job.rule.name == starts_servers}
    if MISSING_FOR_A_RUN is not None and any(SETTINGS.models[m].managed for m in models):
        # One line and the exit code: a WorkflowError raised in the hook would print its frames. Nothing has run.
        print(_invalid_config_line(MISSING_FOR_A_RUN), file=sys.stderr)
        sys.exit(1)


def score_resources():
    """The scoring job's memory and time per model (models.<name>.mem_mb / runtime, the profile's default-resources
    for a model that leaves them unset) as Snakemake resources: functions of the job's model."""
    site = workflow.resource_settings.default_resources
    defaults = {key: getattr(site.get(key), "value", None) if site is not None else None for key in SCORE_RESOURCES}
    try:
        per_model = SETTINGS.score_resources(defaults)
    except ConfigError as exc:
        raise _invalid_config(exc)
    return {key: (lambda wc, values=values: values[wc.model]) for key, values in per_model.items()}


def score_job(wildcards):
    """One cell's score job (always passed quoted, with :q)."""
    return SETTINGS.score_job(
        wildcards.model, wildcards.task, models_dir=MODELS_DIR, state_dir=STATE_DIR, server_log=SERVER_LOG.format(model=wildcards.model)
    ).to_json()


def score_model_job(wildcards):
    """One model's scoring job: every cell, its task file and its staging folder."""
    m = wildcards.model
    return SETTINGS.score_model_job(
        m,
        models_dir=MODELS_DIR,
        state_dir=STATE_DIR,
        server_log=SERVER_LOG.format(model=m),
        task_file=TASK_FILE,
        staged=STAGED_DIR.replace("{model}", m),
    ).to_json()


def viewer_job():
    """The item-level viewer's job: every cell, its task file and tokenizer, and where its files and logs are."""
    return SETTINGS.viewer_job(models_dir=MODELS_DIR, task_file=TASK_FILE, layout=CELL_LAYOUT)


def model_marker(model):
    """The prepared model folder's marker file, when the workflow prepares the model (else nothing)."""
    return [f"{MODELS_DIR}/{model}/anyjev-model.json"] if SETTINGS.models[model].prepared else []


def task_inputs(wildcards):
    job = SETTINGS.prepare_job(wildcards.task, hub_cache=HUB_CACHE)
    if job.source == "file":
        return [job.path]
    if job.source == "hub":
        return [f"{HUB_CACHE}/{job.dataset}/meta.json"]
    return []


def cell_files(name):
    return [f"{CELL_DIR.format(model=m, task=t)}/{name}" for m, t in CELLS]


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
    job = run_outputs()
    # Every cell's metrics too: after a run with failed cells, the tables written from the cells that finished
    # exist, and Snakemake does not rerun a job whose outputs exist because one of its inputs is missing.
    targets = [*cell_files("metrics.json"), *job.summary.values(), *job.provenance.values(), f"{job.viewer_out}/index.html"]
    for fig in (job.metrics_by_level, job.flip_by_level, *[job.reliability.of(m, t) for m, t in CELLS]):
        targets += [fig.png, fig.pdf]
    if SETTINGS.published:
        targets += list(job.vs_published.values())
        if published_overlap_rows():
            targets += [job.vs_published_plot.png, job.vs_published_plot.pdf]
    return targets


def run_outputs():
    """Every cross-cell output of the run, where the rules write it: what a run with failed cells writes at its end
    from the cells that finished (anyjev/outputs/run.py)."""
    return RunOutputs(
        cells=list(CELLS),
        levels=list(SETTINGS.levels),
        layout=CELL_LAYOUT,
        config=CONFIG_AS_RUN,
        published=SETTINGS.published,
        summary={ext: f"{TABLES}/summary.{ext}" for ext in ("csv", "md", "tex")},
        provenance={ext: f"{TABLES}/provenance.{ext}" for ext in ("md", "html")},
        metrics_by_level=figure(f"{PLOTS}/metrics_by_level"),
        flip_by_level=figure(f"{PLOTS}/flip_by_level"),
        reliability=figure(RELIABILITY),
        vs_published={ext: f"{TABLES}/vs_published.{ext}" for ext in ("csv", "md")},
        vs_published_plot=figure(f"{PLOTS}/vs_published"),
        viewer=viewer_job(),
        viewer_out=VIEWER,
    )


def figure(stem):
    return Figure(f"{stem}.png", f"{stem}.pdf")


# The rules whose outputs span cells: a run whose targets hold none of them (a task file, one cell) writes no
# cross-cell output at its end.
RUN_OUTPUT_RULES = {"all", "summary_table", "provenance_table", "summary_plots", "vs_published", "vs_published_plot", "viewer"}


def write_partial_outputs():
    """At the end of a run with failed cells: the tables, figures, comparison, provenance report and viewer of the
    cells that finished, each failed cell listed with its error line and log, when the run was asked for them and
    they replace nothing of another run's (anyjev/outputs/run.py, kept_as_they_are). Never raises: the run's own error
    is what matters."""
    if not any(job.rule.name in RUN_OUTPUT_RULES for job in workflow.dag.jobs):
        return
    outputs = run_outputs()
    try:
        kept = kept_as_they_are(outputs)
        if kept:
            print(f"anyjev: the outputs under {RESULTS}/ are not rewritten: {kept}")
            return
        failed = write_run_outputs(outputs)
    except Exception as exc:  # noqa: BLE001 - a partial output that cannot be written must not hide the run's error
        print(f"anyjev: could not write the outputs of the cells that finished ({type(exc).__name__}: {exc})")
        return
    if failed:
        print(f"anyjev: {len(failed)} cell(s) failed; {TABLES}/, {PLOTS}/ and {VIEWER}/ show the cells that finished:")
        for (m, t), why in failed.items():
            print(f"  {m}/{t}: {why['error']} (log: {why['log']})")


def retry_failed_allocations():
    """After a run with failed cells (score_jobs: model): drop the outcome record of each model that has one, so
    the next run schedules the model's job again; it rescores only the cells that are not staged yet."""
    for model in MODELS:
        path = ALLOCATION.format(model=model)
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
