"""Command line: ``python -m anyjev <command>`` (the commands are listed below).

The workflow's rules call these commands with one ``--settings`` JSON argument built from the validated config
(``anyjev.settings.Settings``); each command parses its arguments and calls one library function.
Exit codes: 0 ok, 2 bad input (config, task data), 3 LabelTokenError, 4 server error, 5 backend error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from anyjev.decision.prompts import DEFAULT_PROFILE, PROFILES
from anyjev.errors import AnyjevError, BackendError, ConfigError, LabelTokenError, ServerError, TaskDataError
from anyjev.settings import STATE_DIR

log = logging.getLogger("anyjev")

EXIT_CODES = ((LabelTokenError, 3), (ServerError, 4), (BackendError, 5), (ConfigError, 2), (TaskDataError, 2))
SETTINGS_HELP = "the job's settings as JSON (or a file holding it), as the workflow writes them"


# -------------------------------------------------------------------------------------------- commands
def cmd_prepare_model(args: argparse.Namespace) -> None:
    from anyjev.serving.models import prepare_model
    from anyjev.settings import load_job

    print(json.dumps(prepare_model(load_job(args.settings), args.out), indent=1))


def cmd_prepare_task(args: argparse.Namespace) -> None:
    from anyjev.data.prepare import prepare_task
    from anyjev.settings import load_job

    prepare_task(load_job(args.settings), args.out)


def cmd_score(args: argparse.Namespace) -> None:
    from anyjev.run.cell import score_job
    from anyjev.settings import load_job

    score_job(load_job(args.settings), args.task, args.out, args.provenance, owner_pid=args.owner_pid or os.getppid())


def cmd_score_model(args: argparse.Namespace) -> None:
    from anyjev.run.allocation import score_model_job
    from anyjev.settings import load_job

    task_files = {}
    for pair in args.task:
        name, sep, path = pair.partition("=")
        if not sep:
            raise ConfigError("--task", f"{pair!r} is not NAME=PATH")
        task_files[name] = path
    score_model_job(load_job(args.settings), task_files, args.out, owner_pid=args.owner_pid or os.getppid())


def cmd_publish_cell(args: argparse.Namespace) -> None:
    from anyjev.run.allocation import publish_cell

    publish_cell(args.allocation, args.task, args.out, args.provenance)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from anyjev.numbers.evaluation import evaluate_file
    from anyjev.settings import EvaluationSettings, load_job

    evaluate_file(args.scores, args.out, args.predictions, load_job(args.settings, EvaluationSettings))


def cmd_serve(args: argparse.Namespace) -> None:
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.spec import ServerSpec
    from anyjev.serving.stop import stop_server
    from anyjev.settings import load_job

    job = load_job(args.settings)
    handle = acquire_server(ServerSpec.from_dict(job["server"]), state_dir=job["state_dir"], owner_pid=os.getpid(),
                            log_path=job["server_log"])
    print(json.dumps(handle.to_dict(), indent=1), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(handle)


def cmd_check_config(args: argparse.Namespace) -> None:
    from anyjev.config import check_config_file, check_runnable

    for path in args.configfile:
        check_runnable(check_config_file(path))
        print(f"{path}: ok")


def cmd_stop_servers(args: argparse.Namespace) -> None:
    from anyjev.serving.stop import stop_servers

    stopped = stop_servers(args.state_dir, owner_pid=args.owner_pid)
    log.info("stopped %d server(s): %s", len(stopped), ", ".join(stopped) or "-")


def cmd_show(args: argparse.Namespace) -> None:
    from anyjev.run.cell import load_tokenizer
    from anyjev.run.inspect import show_prompt

    sys.stdout.write(show_prompt(args.task, args.item, load_tokenizer(args.tokenizer), args.layout, show_ids=args.ids,
                                 profile=args.profile))


def cmd_export_prompts(args: argparse.Namespace) -> None:
    from anyjev.run.cell import load_tokenizer
    from anyjev.run.inspect import export_scores_with_prompts

    print(export_scores_with_prompts(args.scores, args.task, load_tokenizer(args.tokenizer), out=args.out))


def cmd_ls(args: argparse.Namespace) -> None:
    from anyjev.run.inspect import ls_text

    sys.stdout.write(ls_text(args.config, args.tasks_dir))


def cmd_fetch_task(args: argparse.Namespace) -> None:
    from anyjev.data.hub import fetch_job
    from anyjev.settings import load_job

    print(fetch_job(load_job(args.settings)))


def cmd_viewer(args: argparse.Namespace) -> None:
    from anyjev.outputs.viewer import load_viewer_job, write_viewer

    print(write_viewer(load_viewer_job(args.settings, args.config), args.out))


def cmd_plan(args: argparse.Namespace) -> None:
    from anyjev.run.plan import plan_config, plan_text

    plan = plan_config(args.config)
    print(json.dumps(plan, indent=1) if args.json else plan_text(plan), end="" if not args.json else "\n")


# ----------------------------------------------------------------------------------------------- parser
def _command(sub, name: str, func, help: str, settings: str | None = None) -> argparse.ArgumentParser:
    """A subcommand calling FUNC; with SETTINGS (what builds them), it takes the job's --settings JSON."""
    s = sub.add_parser(name, help=help)
    s.set_defaults(func=func)
    if settings:
        s.add_argument("--settings", required=True, help=f"{SETTINGS_HELP} ({settings})")
    return s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="anyjev", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    s = _command(sub, "prepare-model", cmd_prepare_model, "prepare model weights once into a Hugging Face folder",
                 "Settings.model_job")
    s.add_argument("--out", required=True, help="output folder")
    s = _command(sub, "prepare-task", cmd_prepare_task, "build a task, split it (seeded), write it as a JSONL task file",
                 "Settings.prepare_job")
    s.add_argument("--out", required=True, help="output JSONL task file")


    s = _command(sub, "score", cmd_score, "score one (model, task) cell; resumes an interrupted run", "Settings.score_job")
    s.add_argument("--task", required=True, help="JSONL task file (from prepare-task)")
    s.add_argument("--out", required=True, help="output scores file (JSON lines); the checkpoint is OUT.partial")
    s.add_argument("--provenance", help="write the cell's provenance record (JSON) here")
    s.add_argument("--owner-pid", type=int, help="the process whose exit stops a managed server (default: the parent)")

    s = _command(sub, "score-model", cmd_score_model, "score every cell of one model in one job (one server start), "
                 "recording each cell's outcome; a failed cell does not stop the others", "Settings.score_model_job")
    s.add_argument("--task", action="append", required=True, help="NAME=PATH of each cell's task file (repeat)")
    s.add_argument("--out", required=True, help="the job's outcome record (JSON): what publish-cell reads")
    s.add_argument("--owner-pid", type=int, help="the process whose exit stops a managed server (default: the parent)")
    s = _command(sub, "publish-cell", cmd_publish_cell, "publish a cell scored by score-model, or fail with the "
                 "cell's own error (e.g. the missing label ids)")
    s.add_argument("--allocation", required=True, help="the outcome record score-model wrote")
    s.add_argument("--task", required=True, help="the cell's task name")
    s.add_argument("--out", required=True, help="the cell's scores file")
    s.add_argument("--provenance", required=True, help="the cell's provenance record")

    s = _command(sub, "evaluate", cmd_evaluate, "levels and metrics (bootstrap intervals) of a scored cell; no server needed",
                 "the evaluation section")
    s.add_argument("--scores", required=True, help="scores file from `anyjev score`")
    s.add_argument("--out", required=True, help="metrics JSON")
    s.add_argument("--predictions", help="per-item predictions CSV (for reliability diagrams)")
    _command(sub, "serve", cmd_serve, "start a managed vLLM server from a score job's settings and hold it until Ctrl-C",
             "Settings.score_job of a managed model")

    s = sub.add_parser("check-config", help="check config files as the workflow will (YAML syntax with line numbers, schema)")
    s.add_argument("configfile", nargs="+", help="config YAML file(s)")
    s.set_defaults(func=cmd_check_config)

    s = sub.add_parser("stop-servers", help="stop managed servers recorded in a state folder")
    s.add_argument("--state-dir", default=STATE_DIR, help="lease folder")
    s.add_argument("--owner-pid", type=int, help="only servers of this owner")
    s.set_defaults(func=cmd_stop_servers)

    s = _command(sub, "show", cmd_show, "print the exact prompt (text, token count, ids) of a task item and layout")
    s.add_argument("task", help="JSONL task file (e.g. resources/tasks/mmlu.jsonl)")
    s.add_argument("item", help="item id")
    s.add_argument("--tokenizer", required=True, help="the model's tokenizer folder (e.g. resources/models/<model>)")
    s.add_argument("--layout", default="fwd/r0", help="layout name (fwd/r0, fwd/r1, rev/r0, ...) or 'all' (default fwd/r0)")
    s.add_argument("--ids", action="store_true", help="also print the token ids")
    s.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE,
                   help=f"the prompt profile the cell was scored with (scoring.prompt_profile; default {DEFAULT_PROFILE})")
    s = _command(sub, "export-prompts", cmd_export_prompts,
                 "write a cell's scores with each layout's prompt text (checked against the stored prompt hashes)")
    s.add_argument("--scores", required=True, help="results/cells/<model>/<task>/scores.jsonl")
    s.add_argument("--task", required=True, help="the task file it was scored from (resources/tasks/<task>.jsonl)")
    s.add_argument("--tokenizer", required=True, help="the model's tokenizer folder (resources/models/<model>)")
    s.add_argument("--out", help="output JSONL (default: scores_with_prompts.jsonl next to the scores)")

    s = _command(sub, "ls", cmd_ls, "list the configured tasks with their kind, K and sizes")
    s.add_argument("--config", default="config/config.yaml", help="config file (default config/config.yaml)")
    s.add_argument("--tasks-dir", default="resources/tasks", help="prepared task files (default resources/tasks)")

    _command(sub, "fetch-task", cmd_fetch_task, "download a hub task's dataset into resources/hub at the configured "
             "revision, recording the resolved commit in the lock file (refusing another commit when pinned)",
             "Settings.fetch_job")
    s = _command(sub, "plan", cmd_plan, "what a run will send, from the config alone: items, layouts, prompts and "
                 "prompt tokens per cell and in total, and the server starts per model")
    s.add_argument("--config", default="config/config.yaml", help="config file (default config/config.yaml)")
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s = _command(sub, "viewer", cmd_viewer, "write the run's item-level viewer (results/viewer/index.html: opens from disk, "
                 "offline) from the cells that finished; the others are shown as failed")
    s.add_argument("--settings", help=f"{SETTINGS_HELP} (anyjev.outputs.viewer.viewer_job)")
    s.add_argument("--config", default="config/config.yaml", help="without --settings: the run's config file "
                   "(default config/config.yaml)")
    s.add_argument("--out", default="results/viewer", help="output folder (default results/viewer; replaced)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        args.func(args)
    except AnyjevError as exc:
        code = next((c for t, c in EXIT_CODES if isinstance(exc, t)), 1)
        print(f"anyjev {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return code
    return 0
