"""Command line: ``python -m anyjev <command>`` (the commands are listed below).

The workflow's rules call the job commands with one ``--job`` file, the typed job that
:class:`anyjev.settings.Settings` built from the validated config (:mod:`anyjev.jobs`), and the files the rule
writes; the other commands are for people. Each command parses its arguments and calls one library function.

One convention throughout: a flag means one thing in every command (``--task-file`` is a JSONL task file,
``--task`` a task name, ``--config`` one config file, default config/config.yaml, ``--out`` what the command makes:
a file, or a folder; a command that writes several files names each: ``--csv``, ``--md``, ``--png``, ...); what a
command makes goes to ``--out``, what it reports to a person goes to standard output (``--json`` where a program reads
it), and the log and errors go to standard error.
Exit codes: 0 ok; 1 the work failed (a label, server or backend error: its last line says which); 2 bad input (a
config value, a task file, a command's argument: one line on standard error naming it, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import time
import typing
from collections.abc import Callable

from anyjev.errors import AnyjevError, ArgumentError, ConfigError, InputError
from anyjev.paths import CONFIG, SCORES, RunPaths
from anyjev.serving.proc import set_parent_death_signal

log = logging.getLogger("anyjev")

EXIT_WORK_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130
# Where the workflow keeps a run's files (anyjev.paths); the people's commands look there by default.
PATHS = RunPaths()


# -------------------------------------------------------------------------------------------- job commands
def cmd_prepare_model(args: argparse.Namespace) -> None:
    from anyjev.serving.models import ModelJob, prepare_model

    record = prepare_model(ModelJob.from_json(args.job), args.out)
    log.info("prepared %s: %s", args.out, json.dumps(record, sort_keys=True))


def cmd_prepare_task(args: argparse.Namespace) -> None:
    from anyjev.data.prepare import PrepareJob, prepare_task

    prepare_task(PrepareJob.from_json(args.job), args.out)


def cmd_fetch_task(args: argparse.Namespace) -> None:
    from anyjev.data.hub import FetchJob, fetch_job

    log.info("fetched into %s", fetch_job(FetchJob.from_json(args.job), args.out))


def cmd_score(args: argparse.Namespace) -> None:
    from anyjev.run.cell import ScoreJob, score_job

    score_job(ScoreJob.from_json(args.job), args.task_file, args.out, args.provenance, owner_pid=args.owner_pid or os.getppid())


def cmd_score_model(args: argparse.Namespace) -> None:
    from anyjev.run.allocation import ScoreModelJob, score_model_job

    score_model_job(ScoreModelJob.from_json(args.job), args.out, owner_pid=args.owner_pid or os.getppid(),
                    prompts=args.prompts)


def cmd_render_prompts(args: argparse.Namespace) -> None:
    from anyjev.run.allocation import ScoreModelJob
    from anyjev.run.rendered import render_cells

    outcomes = render_cells(ScoreModelJob.from_json(args.job).cells, args.out)
    log.info("rendered %d of %d cells into %s", sum(o == "rendered" for o in outcomes.values()), len(outcomes), args.out)


def cmd_publish_cell(args: argparse.Namespace) -> None:
    from anyjev.run.publish import PublishJob, publish_cell

    publish_cell(PublishJob.from_json(args.job), args.allocation, args.out, args.provenance, args.task_file)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from anyjev.run.evaluate import EvaluateJob, evaluate_cell

    if bool(args.png) != bool(args.pdf):
        raise ArgumentError("--pdf" if args.png else "--png", "the reliability diagram is drawn as PNG and PDF: give both")
    job = EvaluateJob.from_json(args.job)
    figure = None
    if args.png:  # the cell's reliability diagram, drawn in this process from the evaluation it holds
        from anyjev.reports.draw import evaluation_reliability

        def figure(evaluation):
            log.info("reliability diagram: %s", evaluation_reliability(evaluation, job.levels, args.png, args.pdf,
                                                                      title=job.title)[0])

    evaluate_cell(job, args.scores, args.out, args.predictions, args.replicates, task_file=args.task_file,
                  figure=figure)


def cmd_summary_table(args: argparse.Namespace) -> None:
    from anyjev.reports.tables import SummaryJob, summary_table

    log.info("summary: %d rows", len(summary_table(SummaryJob.from_json(args.job), args.csv, args.md, args.tex)))


def cmd_differences_table(args: argparse.Namespace) -> None:
    from anyjev.reports.differences import DifferencesJob, differences_table

    log.info("differences: %d rows", len(differences_table(DifferencesJob.from_json(args.job), args.csv, args.md)))


def cmd_provenance_table(args: argparse.Namespace) -> None:
    from anyjev.reports.provenance import ProvenanceJob, provenance_table

    log.info("provenance: %d sections", len(provenance_table(ProvenanceJob.from_json(args.job), args.md, args.html)))


def cmd_vs_published(args: argparse.Namespace) -> None:
    from anyjev.reports.tables import VsPublishedJob, vs_published

    log.info("vs published: %d matching rows", len(vs_published(VsPublishedJob.from_json(args.job), args.csv, args.md)))


def cmd_reliability_plot(args: argparse.Namespace) -> None:
    from anyjev.reports.plots import ReliabilityJob, reliability_plot

    log.info("reliability diagram: %s", reliability_plot(ReliabilityJob.from_json(args.job), args.png, args.pdf)[0])


def cmd_summary_plots(args: argparse.Namespace) -> None:
    from anyjev.reports.plots import SummaryPlotsJob, summary_plots

    summary = summary_plots(SummaryPlotsJob.from_json(args.job), args.by_level_png, args.by_level_pdf, args.flip_png,
                            args.flip_pdf)
    log.info("summary plots: %d rows", len(summary))


def cmd_vs_published_plot(args: argparse.Namespace) -> None:
    from anyjev.reports.plots import VsPublishedPlotJob, vs_published_plot

    log.info("vs published plot: %d rows", len(vs_published_plot(VsPublishedPlotJob.from_json(args.job), args.png, args.pdf)))


def cmd_serve(args: argparse.Namespace) -> None:
    from anyjev.run.cell import ScoreJob
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.stop import stop_servers

    job = ScoreJob.from_json(args.job)
    if job.managed is None:
        raise ConfigError(f"models.{job.model}.source", "is url: that server is yours, there is nothing to start")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` ends it as Ctrl-C does: server and record go
    # and Ctrl-C ends it even when it was started with SIGINT ignored (from a script's background job, or nohup), where
    # Python would leave it ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handle = acquire_server(job.managed.spec, state_dir=job.managed.state_dir, owner_pid=os.getpid(),
                                log_path=job.managed.log)
        log.info("requests to %s/v1 need the header 'Authorization: Bearer <key>', the key in %s (readable by you only), "
                 "e.g. curl -H \"Authorization: Bearer $(cat %s)\" %s/v1/models", handle.url, handle.api_key_file,
                 handle.api_key_file, handle.url)
        print(json.dumps(handle.to_dict(), indent=1), flush=True)  # the handle says where the key is, never the key
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:  # this command's server, ready or still starting, and its record (a lease on a server that is gone)
        stopped = stop_servers(job.managed.state_dir, owner_pid=os.getpid())
        log.info("stopped %s", ", ".join(stopped) or "nothing (the server had not started)")


# ----------------------------------------------------------------------------------------- people's commands
def cmd_check_config(args: argparse.Namespace) -> None:
    from anyjev.config import check_config_file, check_runnable, with_shipped_paths, workflow_home

    config = check_config_file(args.config)
    home = workflow_home()  # what ships with the workflow, read from its folder as the workflow reads it
    check_runnable(with_shipped_paths(config, home) if home is not None else config)
    print(f"{args.config}: ok")


def cmd_stop_servers(args: argparse.Namespace) -> None:
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(args.state_dir, owner_pid=args.owner_pid)
    print(f"stopped {len(stopped)} server(s): {', '.join(stopped) or '-'}")


def _prompt_options(args: argparse.Namespace):
    """The prompt options of ``anyjev show``: the scored cell's own (``--scores``), else the config's for ``--model``
    (which may be left out when every model of the config renders alike)."""
    from anyjev.decision.options import PromptOptions
    from anyjev.rundata.scores import read_scores
    from anyjev.settings import Settings

    if args.scores:
        if args.model is not None:
            raise ArgumentError("--model", "goes with --config: a scores file records the prompt options it was scored with")
        return PromptOptions.from_identity(read_scores(args.scores).identity)
    settings = Settings.load(args.config)
    if args.model is not None:
        if args.model not in settings.models:
            raise ArgumentError("--model", f"{args.model!r} is not a model of {args.config} ({', '.join(settings.models)})")
        return settings.prompt_options(args.model)
    by_model = {m: settings.prompt_options(m) for m in settings.models}
    if len(set(by_model.values())) > 1:
        templates = ", ".join(f"{m}: {o.chat_template.name}" for m, o in by_model.items())
        raise ArgumentError("--model", f"the models of {args.config} render with different chat templates ({templates}): "
                            "name the model whose prompt to show")
    return next(iter(by_model.values()))


def cmd_show(args: argparse.Namespace) -> None:
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.run.inspect import show_prompt

    tokenizer = load_tokenizer(args.tokenizer, argument="--tokenizer")
    sys.stdout.write(show_prompt(args.task_file, args.item, tokenizer, _prompt_options(args), args.layout,
                                 show_ids=args.ids))


def cmd_export_prompts(args: argparse.Namespace) -> None:
    from anyjev.decision.tokenizer import load_tokenizer
    from anyjev.run.inspect import export_scores_with_prompts

    tokenizer = load_tokenizer(args.tokenizer, argument="--tokenizer")
    print(export_scores_with_prompts(args.scores, args.task_file, tokenizer, out=args.out))


def cmd_ls(args: argparse.Namespace) -> None:
    from anyjev.config import load_strict
    from anyjev.run.inspect import ls_text

    sys.stdout.write(ls_text(load_strict(args.config), args.tasks_dir))


def cmd_compare(args: argparse.Namespace) -> None:
    from anyjev.reports.versus import compare_run_folders

    _, md = compare_run_folders(args.run_a, args.run_b, csv_out=args.csv, md_out=args.md)
    sys.stdout.write(md)


def cmd_viewer(args: argparse.Namespace) -> None:
    from anyjev.reports.viewer import ViewerJob, write_viewer
    from anyjev.rundata import CellLayout
    from anyjev.settings import Settings

    if args.job:
        job = ViewerJob.from_json(args.job)
    else:  # a person regenerating a run's viewer: the workflow's layout
        settings = Settings.load(args.config)
        job = settings.viewer_job(models_dir=PATHS.models_dir, task_file=PATHS.task_file,
                                  layout=CellLayout.of_paths(PATHS, settings.hub_folders()))
    log.info("wrote %s", write_viewer(job, args.out))


def cmd_plan(args: argparse.Namespace) -> None:
    from anyjev import collector
    from anyjev.plan import plan_config, plan_text

    # Rendering and tokenising every prompt allocates containers by the million; with the collector on, the full
    # collections they set off rescan the transformers and torch import each time and free nothing (docs/benchmarks.md,
    # "Where the fixed costs go").
    with collector.collector_paused():
        plan = plan_config(args.config, models_dir=args.models_dir, hub_cache=args.hub_cache, results=args.results,
                           logs=args.logs)
    print(json.dumps(plan, indent=1) if args.json else plan_text(plan), end="\n" if args.json else "")


# ----------------------------------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """A usage error is bad input like any other: one line naming the argument, exit 2 (not argparse's usage block)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _existing_file(value: str) -> str:
    """An input file argument: refused at once, naming it, when it is not there (before any work)."""
    if not os.path.isfile(value):
        raise argparse.ArgumentTypeError(f"{value!r} is a folder, not a file" if os.path.isdir(value) else
                                         f"no such file {value!r}")
    return value


def _command(sub: argparse._SubParsersAction, name: str, func: Callable[[argparse.Namespace], None], help: str, *,
             job: str | None = None, step: bool | None = None) -> argparse.ArgumentParser:
    """A subcommand calling FUNC; with JOB (the job type's name), it takes that job as ``--job`` JSON. STEP (default:
    whether it takes a job): run with a ``--job``, it is a workflow step, whose process ends with its job's
    (:func:`_end_with_job`)."""
    s = sub.add_parser(name, help=help, description=help)
    s.set_defaults(func=func, step=bool(job) if step is None else step)
    if job:
        s.add_argument("--job", required=True, help=f"the {job} file (or its JSON), as the workflow writes it")
    return s


def _config_flag(s: argparse._ActionsContainer) -> None:
    s.add_argument("--config", default=CONFIG, help=f"config file (default {CONFIG})")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="anyjev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    owner = "the process whose exit stops a managed server (default: the parent)"

    s = _command(sub, "prepare-model", cmd_prepare_model, "prepare model weights once into a Hugging Face folder", job="ModelJob")
    s.add_argument("--out", required=True, help="the model folder")
    s = _command(sub, "prepare-task", cmd_prepare_task, "build a task, split it (seeded), write it as a JSONL task file",
                 job="PrepareJob")
    s.add_argument("--out", required=True, help="the JSONL task file")
    s = _command(sub, "fetch-task", cmd_fetch_task, "download a hub task's declared dataset splits at its revision, "
                 "recording the resolved commit in the lock file (refusing another commit when pinned)", job="FetchJob")
    s.add_argument("--out", required=True, help="the dataset's cache folder (meta.json and one JSONL file per split)")
    s = _command(sub, "score", cmd_score, "score one (model, task) cell; resumes an interrupted run", job="ScoreJob")
    s.add_argument("--task-file", required=True, type=_existing_file, help="the cell's JSONL task file (from prepare-task)")
    s.add_argument("--out", required=True, help="the scores file (JSON lines); the checkpoint is OUT.partial")
    s.add_argument("--provenance", help="also write the cell's provenance record (JSON) here")
    s.add_argument("--owner-pid", type=int, help=owner)
    s = _command(sub, "score-model", cmd_score_model, "score every cell of one model in one job (one server start), "
                 "recording each cell's outcome; a failed cell does not stop the others", job="ScoreModelJob")
    s.add_argument("--out", required=True, help="the job's outcome record (JSON): what publish-cell reads")
    s.add_argument("--prompts", type=_existing_file, help="the job's prompts, rendered ahead by render-prompts (each "
                   "cell's read when it was rendered from what the job has, else rendered here)")
    s.add_argument("--owner-pid", type=int, help=owner)
    s = _command(sub, "render-prompts", cmd_render_prompts, "render the prompts of every cell of one model's scoring job "
                 "to token ids ahead of it (render_prompts: ahead), so that the job loads no tokenizer", job="ScoreModelJob")
    s.add_argument("--out", required=True, help="the rendered prompts (a pickle that score-model --prompts reads)")
    s = _command(sub, "publish-cell", cmd_publish_cell, "publish a cell scored by score-model, or fail with the cell's "
                 "own error (e.g. the missing label ids)", job="PublishJob")
    s.add_argument("--allocation", required=True, type=_existing_file, help="the outcome record score-model wrote")
    s.add_argument("--task-file", type=_existing_file, help="the cell's JSONL task file as it is now: the staged scores "
                   "must have been scored from it")
    s.add_argument("--out", required=True, help="the cell's scores file")
    s.add_argument("--provenance", required=True, help="the cell's provenance record")
    s = _command(sub, "evaluate", cmd_evaluate, "levels and metrics (bootstrap intervals) of a scored cell; no server needed",
                 job="EvaluateJob")
    s.add_argument("--scores", required=True, type=_existing_file, help="the scores file from `anyjev score`")
    s.add_argument("--task-file", type=_existing_file, help="the cell's task file: the scores must hold each of its items "
                   "once (the workflow gives it)")
    s.add_argument("--out", required=True, help="the metrics JSON")
    s.add_argument("--predictions", help="also write the per-item predictions CSV (for reliability diagrams) here")
    s.add_argument("--replicates", help="also write the bootstrap replicates (for the differences table) here")
    s.add_argument("--png", help="with --pdf, also draw the cell's reliability diagram (the job's levels): the figure as PNG")
    s.add_argument("--pdf", help="with --png, the reliability diagram: the figure as PDF")
    _command(sub, "serve", cmd_serve, "start a managed vLLM server from a score job and hold it until Ctrl-C", job="ScoreJob",
             step=False)
    s = _command(sub, "summary-table", cmd_summary_table, "the summary table of a run's finished cells, its failed cells "
                 "listed", job="SummaryJob")
    s.add_argument("--csv", required=True, help="the table as CSV")
    s.add_argument("--md", required=True, help="the table as Markdown")
    s.add_argument("--tex", required=True, help="the table as LaTeX")
    s = _command(sub, "differences-table", cmd_differences_table, "each level minus raw and each model minus another on "
                 "the same task, with the paired intervals of the differences", job="DifferencesJob")
    s.add_argument("--csv", required=True, help="the differences as CSV (long form)")
    s.add_argument("--md", required=True, help="the differences as Markdown")
    s = _command(sub, "provenance-table", cmd_provenance_table, "the provenance report of a run: the config as run and "
                 "what made each cell", job="ProvenanceJob")
    s.add_argument("--md", required=True, help="the report as Markdown")
    s.add_argument("--html", required=True, help="the report as HTML (shown in the Snakemake report)")
    s = _command(sub, "vs-published", cmd_vs_published, "the summary beside published numbers, for the cells both "
                 "have", job="VsPublishedJob")
    s.add_argument("--csv", required=True, help="the comparison as CSV")
    s.add_argument("--md", required=True, help="the comparison as Markdown")
    for name, func, what, job in (("reliability-plot", cmd_reliability_plot, "a cell's reliability diagram (a failed "
                                   "cell: a figure naming its error)", "ReliabilityJob"),
                                  ("vs-published-plot", cmd_vs_published_plot, "ours against the published numbers, "
                                   "one panel per metric", "VsPublishedPlotJob")):
        s = _command(sub, name, func, what, job=job)
        s.add_argument("--png", required=True, help="the figure as PNG")
        s.add_argument("--pdf", required=True, help="the figure as PDF")
    s = _command(sub, "summary-plots", cmd_summary_plots, "the summary table's figures: each metric by level, and the "
                 "flip rate of every level", job="SummaryPlotsJob")
    for figure in ("by-level", "flip"):
        s.add_argument(f"--{figure}-png", required=True, help=f"the {figure} figure as PNG")
        s.add_argument(f"--{figure}-pdf", required=True, help=f"the {figure} figure as PDF")

    s = _command(sub, "check-config", cmd_check_config, "check a config file as the workflow will (YAML syntax with line "
                 "numbers, schema, the vLLM interpreter)")
    _config_flag(s)
    s = _command(sub, "stop-servers", cmd_stop_servers, "stop managed servers recorded in a state folder")
    s.add_argument("--state-dir", default=PATHS.state_dir, help=f"lease folder (default {PATHS.state_dir})")
    s.add_argument("--owner-pid", type=int, help="only servers of this owner")
    s = _command(sub, "show", cmd_show, "print the exact prompt (text, token count, ids) of a task item and layout, as "
                 "its cell scored it")
    s.add_argument("--task-file", required=True, type=_existing_file, help=f"the JSONL task file (e.g. {PATHS.task_file})")
    s.add_argument("--item", required=True, help="the item id")
    s.add_argument("--tokenizer", required=True, help=f"the model's tokenizer folder (e.g. {PATHS.models_dir}/{{model}})")
    s.add_argument("--layout", default="fwd/r0", help="layout name (fwd/r0, fwd/r1, rev/r0, ...) or 'all' (default fwd/r0)")
    s.add_argument("--ids", action="store_true", help="also print the token ids")
    options = s.add_mutually_exclusive_group()  # the prompt options come from one of them
    options.add_argument("--scores", type=_existing_file, help="the cell's scores file: its prompt options (profile, "
                         "option order, chat template) are used, not a config's")
    _config_flag(options)
    s.add_argument("--model", help="with the config: the model whose chat template renders the prompt (needed when "
                   "the config's models set different ones)")
    s = _command(sub, "export-prompts", cmd_export_prompts, "write a cell's scores with each layout's prompt text "
                 "(checked against the stored prompt hashes)")
    s.add_argument("--scores", required=True, type=_existing_file, help=f"the cell's scores file ({PATHS.cell_file(SCORES)})")
    s.add_argument("--task-file", required=True, type=_existing_file, help=f"the task file it was scored from ({PATHS.task_file})")
    s.add_argument("--tokenizer", required=True, help=f"the model's tokenizer folder ({PATHS.models_dir}/{{model}})")
    s.add_argument("--out", help="output JSONL (default: scores_with_prompts.jsonl next to the scores)")
    s = _command(sub, "ls", cmd_ls, "list the configured tasks with their kind, K and sizes")
    _config_flag(s)
    s.add_argument("--tasks-dir", default=PATHS.tasks_dir, help=f"prepared task files (default {PATHS.tasks_dir})")
    s = _command(sub, "plan", cmd_plan, "what a run will send, from the config alone: items, layouts, prompts and prompt "
                 "tokens per cell and in total, the server starts per model, and the power of each task's test items")
    _config_flag(s)
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s.add_argument("--models-dir", default=PATHS.models_dir, help=f"prepared models, for their tokenizers (default {PATHS.models_dir})")
    s.add_argument("--hub-cache", default=PATHS.hub_cache, help=f"fetched hub data (default {PATHS.hub_cache})")
    s.add_argument("--results", default=PATHS.results, help="a finished run's results folder: its cells of a task are "
                   f"the pilot the power estimate reads (default {PATHS.results})")
    s.add_argument("--logs", default=PATHS.logs, help=f"that run's logs folder (default {PATHS.logs})")
    s = _command(sub, "compare", cmd_compare, "one run against another, cell by cell (B minus A): every metric of every "
                 "level on the same items, with the paired interval of the difference; a cell whose items differ is "
                 "refused, naming the first that does")
    s.add_argument("run_a", metavar="RUN_A", help="the first run: its results folder, or its working directory")
    s.add_argument("run_b", metavar="RUN_B", help="the second run (each difference is B minus A)")
    s.add_argument("--csv", help="also write the differences as CSV (long form)")
    s.add_argument("--md", help="also write them as Markdown (what is printed)")
    s = _command(sub, "viewer", cmd_viewer, "write the run's item-level viewer (an index.html that opens from disk, "
                 "offline) from the cells that finished; the others are shown as failed", step=True)
    s.add_argument("--job", help="the ViewerJob file (or its JSON), as the workflow writes it (else from --config and the "
                   "workflow's folders)")
    _config_flag(s)
    s.add_argument("--out", default=PATHS.viewer, help=f"output folder, replaced (default {PATHS.viewer})")
    return p


def _end_with_job() -> None:
    """This process ends when its parent does, however the parent ends (SIGKILL too; Linux). A rule's command is
    this process itself (``exec``: its parent is Snakemake's process) or the child of a shell: either way, a job that
    is killed, or a Snakemake that is killed, takes its step with it, instead of leaving it to write outputs that
    Snakemake has already failed."""
    parent = os.getppid()
    why = set_parent_death_signal(signal.SIGKILL)
    if why is not None:
        log.debug("this step will not end with its parent process (%s)", why)
    elif os.getppid() != parent:  # the parent ended before the signal was set: so does its step
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None, *, as_program: bool = False) -> int:
    """Run the command ARGV (default: the process's arguments); its exit code. AS_PROGRAM: this is the ``anyjev``
    program's process (:func:`run`), so a workflow step's process is tied to its job's (:func:`_end_with_job`)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "httpcore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if as_program and args.step and getattr(args, "job", None):
        _end_with_job()
    try:
        args.func(args)
    except AnyjevError as exc:
        print(f"anyjev {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, InputError) else EXIT_WORK_FAILED
    except KeyboardInterrupt:
        print(f"anyjev {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def run() -> typing.NoReturn:
    """The ``anyjev`` program (``python -m anyjev`` and the console script): :func:`main`, then exit with its code.
    Python's exit scans every live object for cycles once more, after a tokenizer's import all of transformers and
    torch, for objects the process drops anyway (bench/bench_fixed_costs.py measures the plan with this and the
    collector's pause taken out): frozen, they are left to the exit unscanned. atexit handlers and
    flushes run as before; :func:`main` called in a process that goes on (a test) freezes nothing."""
    code = main(as_program=True)
    gc.freeze()
    sys.exit(code)
