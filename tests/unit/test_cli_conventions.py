"""One convention for every command of ``python -m anyjev``: bad input (a config value, a task file, a command's
argument, a usage error) is one line on standard error that names the culprit, exit code 2, no traceback; a failure
of the work exits 1 (issue 31, item 6). Each command is given a bad input of its own here, and a test keeps the cases
equal to the parser's commands, so a new command is checked too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from anyjev.backends.vllm import ClientOptions
from anyjev.cli import build_parser
from anyjev.run.cell import ExternalServer, ScoreJob
from anyjev.run.identity import ScoringOptions
from anyjev.rundata.allocations import FORMAT as ALLOCATION_FORMAT
from tests.conftest import REPO

ITEM = {"id": "a", "state": "It rains.", "question": "Is it wet?", "kind": "noul", "gold": 0}


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anyjev", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "0"})


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


def task_file(tmp: Path) -> str:
    return write(tmp / "t.jsonl", json.dumps(ITEM) + "\n")


def url_score_job(tokenizer: str) -> str:
    return ScoreJob(model="m", task="t", tokenizer=tokenizer, client=ClientOptions(), scoring=ScoringOptions(),
                    managed=None, external=ExternalServer("http://127.0.0.1:9", "m", "state")).to_json()


def duplicate_options_job(tmp: Path) -> str:
    """A hub task whose option_names give two labels one option text: the question is invalid (a QuestionError)."""
    cache = tmp / "hub" / "spam"
    cache.mkdir(parents=True)
    (cache / "meta.json").write_text(json.dumps({"dataset": "someone/spam", "config": None, "revision": "v1"}))
    (cache / "test.jsonl").write_text("".join(json.dumps({"text": f"msg {i}", "label": ["spam", "ham"][i % 2]}) + "\n"
                                              for i in range(6)))
    hub = {"dataset": "someone/spam", "revision": "v1", "label_field": "label", "question": "Spam?", "kind": "choice",
           "splits": ["test"], "text_field": "text", "option_names": {"ham": "spam"}}
    from anyjev.data.declared import HubTaskDeclaration
    from anyjev.jobs import from_data, to_data

    hub = to_data(from_data(HubTaskDeclaration, hub, "hub"))  # the declaration as a config gives it, defaults filled
    return json.dumps({"name": "spam", "source": "hub", "dataset": "spam", "path": None, "hub": hub, "n_test": 2,
                       "n_calib": 2, "allow_fewer": False, "split_seed": 0, "hub_cache": "hub", "fits_temperature": False})


# command -> (its arguments in a scratch folder, what the one line must name)
CASES: dict[str, Callable[[Path], tuple[list[str], str]]] = {
    "prepare-model": lambda tmp: (["prepare-model", "--job", "no-such-job.json", "--out", "m"], "no-such-job.json"),
    "prepare-task": lambda tmp: (["prepare-task", "--job", duplicate_options_job(tmp), "--out", "t.jsonl"], "options"),
    "fetch-task": lambda tmp: (["fetch-task", "--job", "{}", "--out", "hub/x"], "job.hub"),
    "score": lambda tmp: (["score", "--job", url_score_job("no-tokenizer"), "--task-file", task_file(tmp),
                           "--out", "s.jsonl"], "no-tokenizer"),
    "score-model": lambda tmp: (["score-model", "--job", '{"model": "m", "cells": []}', "--out", "a.json"], "job.cells"),
    "render-prompts": lambda tmp: (["render-prompts", "--job", '{"model": "m", "cells": []}', "--out", "p.pickle"],
                                   "job.cells"),
    "publish-cell": lambda tmp: (["publish-cell", "--job", '{"task": "t"}', "--allocation", "no-such.json", "--out",
                                  "s.jsonl", "--provenance", "p.json"], "no-such.json"),
    "summary-table": lambda tmp: (["summary-table", "--job", "no-such-job.json", "--csv", "s.csv", "--md", "s.md",
                                   "--tex", "s.tex"], "no-such-job.json"),
    "differences-table": lambda tmp: (["differences-table", "--job", '{"cells": []}', "--csv", "d.csv", "--md", "d.md"],
                                      "job.levels"),
    "provenance-table": lambda tmp: (["provenance-table", "--job", "{}", "--md", "p.md", "--html", "p.html"], "job.cells"),
    "vs-published": lambda tmp: (["vs-published", "--job", '{"summary": "s.csv"}', "--csv", "v.csv", "--md", "v.md"],
                                 "job.published"),
    "reliability-plot": lambda tmp: (["reliability-plot", "--job", "{not json", "--png", "r.png", "--pdf", "r.pdf"], "--job"),
    "summary-plots": lambda tmp: (["summary-plots", "--job", "no-such-job.json", "--by-level-png", "a.png", "--by-level-pdf",
                                   "a.pdf", "--flip-png", "f.png", "--flip-pdf", "f.pdf"], "no-such-job.json"),
    "vs-published-plot": lambda tmp: (["vs-published-plot", "--job", '{"table": "v.csv", "extra": 1}', "--png", "v.png",
                                       "--pdf", "v.pdf"], "extra"),
    "evaluate": lambda tmp: (["evaluate", "--job", "{}", "--scores", "no-scores.jsonl", "--out", "m.json"],
                             "no-scores.jsonl"),
    "serve": lambda tmp: (["serve", "--job", url_score_job("tok")], "models.m.source"),
    "check-config": lambda tmp: (["check-config"], "config/config.yaml"),
    "stop-servers": lambda tmp: (["stop-servers", "--owner-pid", "me"], "--owner-pid"),
    "show": lambda tmp: (["show", "--task-file", task_file(tmp), "--item", "a", "--tokenizer", "models/nope"],
                         "models/nope"),
    "export-prompts": lambda tmp: (["export-prompts", "--scores", "no-scores.jsonl", "--task-file", task_file(tmp),
                                    "--tokenizer", "tok"], "no-scores.jsonl"),
    "ls": lambda tmp: (["ls", "--config", "no-such.yaml"], "no-such.yaml"),
    "plan": lambda tmp: (["plan", "--config", write(tmp / "user.yaml", "limit: 0\n")], "user.yaml"),
    "compare": lambda tmp: (["compare", "no-such-run", str(tmp)], "no-such-run"),
    "viewer": lambda tmp: (["viewer", "--job", "{not json"], "--job"),
}


def subparsers() -> dict:
    return next(a for a in build_parser()._actions if a.dest == "command").choices


def commands() -> set[str]:
    return set(subparsers())


def test_every_command_has_a_bad_input_case() -> None:
    assert set(CASES) == commands()


@pytest.mark.parametrize("command", sorted(CASES))
def test_bad_input_is_one_line_naming_the_culprit_and_exit_2(command: str, tmp_path: Path, fault_seen) -> None:
    args, culprit = CASES[command](tmp_path)
    proc = run_cli(args, tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"anyjev {command}:") and culprit in lines[0], lines[0]
    fault_seen(f"{lines[0]} (exit 2)")


def test_a_question_error_is_bad_input(tmp_path: Path) -> None:
    proc = run_cli(["prepare-task", "--job", duplicate_options_job(tmp_path), "--out", "t.jsonl"], tmp_path)
    assert proc.returncode == 2 and "QuestionError" in proc.stderr and "duplicates options[0]" in proc.stderr, proc.stderr


def test_a_failure_of_the_work_exits_1(tmp_path: Path) -> None:
    """A cell that failed in its model's job is published as its own error: the work failed, the input was fine."""
    record = {"format": ALLOCATION_FORMAT, "model": "m", "cells": {"t": {
        "task": "t", "status": "failed", "error": "LabelTokenError", "message": "prompt 0: Missing label ids: 9454",
        "missing_ids": [9454], "returned_ids": [0]}}}
    (tmp_path / "a.json").write_text(json.dumps(record))
    proc = run_cli(["publish-cell", "--job", '{"task": "t", "model_log": null}', "--allocation", "a.json", "--out", "s.jsonl",
                    "--provenance", "p.json"], tmp_path)
    assert proc.returncode == 1 and "LabelTokenError" in proc.stderr and "9454" in proc.stderr, proc.stderr


def test_check_config_takes_one_config_with_the_default_of_every_command() -> None:
    for command in ("check-config", "plan", "ls", "show", "viewer"):
        flag = next(a for a in subparsers()[command]._actions if a.dest == "config")
        assert flag.default == "config/config.yaml" and flag.nargs is None and not flag.required, command


def test_show_refuses_scores_and_config_together(tmp_path: Path) -> None:
    """The scored cell's prompt options or a config's: one of them, never one silently over the other."""
    (tmp_path / "s.jsonl").write_text("{}\n")
    proc = run_cli(["show", "--task-file", task_file(tmp_path), "--item", "a", "--tokenizer", "tok", "--scores", "s.jsonl",
                    "--config", "config/config.yaml"], tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "--scores" in lines[0] and "--config" in lines[0] and "not allowed" in lines[0], lines[0]


def test_fetch_task_writes_into_its_out_folder(tmp_path: Path) -> None:
    """`--out` is the dataset's cache folder: a cache there that matches the job is used, nothing is fetched."""
    from anyjev.data.declared import HubDataset
    from anyjev.data.hub import FetchJob, fetch_job
    from anyjev.lock import Lock

    folder = tmp_path / "cache" / "mine"
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"dataset": "someone/spam", "config": None, "revision": "v1",
                                                  "resolved_sha": "c" * 40}))
    (folder / "test.jsonl").write_text("{}\n")
    job = FetchJob(hub=HubDataset("someone/spam", None, "v1", ("test",)), lock=Lock(str(tmp_path / "lock.yaml"), False))
    assert fetch_job(FetchJob.from_json(job.to_json()), folder) == folder


def test_the_program_exits_with_mains_code_after_freezing_what_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """`anyjev` (the console script and ``python -m anyjev``) is :func:`anyjev.cli.run`: main's exit code, main run as
    the program (a workflow step's process is tied to its job's), and the live objects frozen first so that Python's
    exit does not scan them all once more (docs/benchmarks.md)."""
    import gc
    import tomllib

    from anyjev import cli

    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["anyjev"] == "anyjev.cli:run"
    assert "run()" in (REPO / "anyjev" / "__main__.py").read_text()
    events: list[str] = []
    monkeypatch.setattr(cli, "main", lambda *, as_program: events.append(f"main as_program={as_program}") or 2)
    monkeypatch.setattr(gc, "freeze", lambda: events.append("freeze"))
    with pytest.raises(SystemExit) as exited:
        cli.run()
    assert exited.value.code == 2 and events == ["main as_program=True", "freeze"]


@pytest.mark.parametrize("fails", [False, True])
def test_plan_runs_with_the_collector_paused_and_gives_it_back(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    """`anyjev plan` keeps what it renders to the end: the cyclic collector is off while it plans, and on again after,
    also when the plan refuses the config (a test calling main() goes on with a collector)."""
    import gc

    import anyjev.plan
    from anyjev import cli
    from anyjev.errors import ConfigError

    seen: list[bool] = []

    def plan_config(*args, **kwargs) -> dict:
        seen.append(gc.isenabled())
        if fails:
            raise ConfigError("config", "bad")
        return {}

    monkeypatch.setattr(anyjev.plan, "plan_config", plan_config)
    monkeypatch.setattr(anyjev.plan, "plan_text", lambda plan: "the plan\n")
    assert gc.isenabled()
    assert cli.main(["plan"]) == (2 if fails else 0)
    assert seen == [False] and gc.isenabled()
