"""What the failed-cell report (tables, provenance report, viewer, the run's last words) says about a cell without
``metrics.json``: the error of the step that failed, whole and on one line, from the cell's own log or, when its
scoring never ran, from the log of the earlier step that stopped it (issue 32, item 5)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anyjev.rundata import CellLayout

MISSING = [9454 + i for i in range(40)]
LABEL_LINE = ("anyjev publish-cell: LabelTokenError: cell m/t failed in the scoring job of model 'm': prompt 0: the server's "
              f"top_logprobs do not hold exactly the label ids {MISSING}. Missing label ids: "
              + ", ".join(f"{i} ('x{i}')" for i in MISSING) + ". No value is filled in for a missing label.")
NGINX = ("anyjev score: BackendError: POST http://gpu:8000/v1/completions answered HTTP 502: <html> <head><title>502 Bad "
         "Gateway</title></head> <body> <center><h1>502 Bad Gateway</h1></center> <hr><center>nginx/1.18.0</center> "
         "</body> </html>")


def layout(root: Path, *, earlier: bool = True) -> CellLayout:
    """The workflow's layout (workflow/rules/common.smk) under ROOT; task "hubtask" is fetched into "hubdata". Without
    EARLIER, only the cell's own steps' logs."""
    logs = root / "logs"
    own = (f"{root}/results/cells/{{model}}/{{task}}", f"{logs}/score/{{model}}/{{task}}.log",
           f"{logs}/evaluate/{{model}}/{{task}}.log")
    if not earlier:
        return CellLayout(*own)
    return CellLayout(*own, (f"{logs}/score_model/{{model}}/{{job}}.log", f"{logs}/prepare_task/{{task}}.log",
                             f"{logs}/fetch_hub_task/{{dataset}}.log", f"{logs}/prepare_model/{{model}}.log"),
                      {"hubtask": "hubdata"})


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


FETCH_ERROR = ("anyjev fetch-task: TaskDataError: resources/hub/hubdata:fetch: hub dataset 'someone/data' at revision "
               "'main' is not cached (no cached copy) and the hub cannot be reached")
PREPARE_ERROR = "anyjev prepare-task: TaskDataError: tasks/t.jsonl:line 3: not valid JSON (Expecting value: column 1)"


@pytest.mark.parametrize(("step", "log", "text", "task"), [
    ("fetch", "logs/fetch_hub_task/hubdata.log", f"INFO fetching\n{FETCH_ERROR}\n", "hubtask"),
    ("prepare", "logs/prepare_task/t.log", f"{PREPARE_ERROR}\n", "t"),
    ("prepare, Ctrl-C", "logs/prepare_task/t.log", "INFO building\nanyjev prepare-task: interrupted\n", "t"),
    ("the model's job", "logs/score_model/m/0123456789abcdef.log",
     "INFO cell 1/2\nanyjev score-model: ServerError: vLLM server for model 'm' did not start: exit code 1\n", "t"),
    ("model preparation", "logs/prepare_model/m.log",
     "Traceback (most recent call last):\n  File x\nOSError: no space left on device\n", "t"),
])
def test_a_cell_whose_scoring_never_ran_names_the_step_that_failed(step, log, text, task, tmp_path, fault_seen) -> None:
    cells = layout(tmp_path)
    write(tmp_path / "logs/prepare_task/other.log", "anyjev prepare-task: TaskDataError: another task's error\n")
    write(tmp_path / log, text)
    failure = cells.failure("m", task)
    assert failure["log"] == str(tmp_path / log), failure
    assert failure["error"] == [line for line in text.splitlines() if "Error" in line or "interrupted" in line][-1]
    assert "has not run" not in failure["error"]
    fault_seen(f"{step}: {failure['error']} (log: {failure['log'].replace(str(tmp_path), '<run>')})")


def test_a_step_that_ran_comes_before_an_earlier_one(tmp_path) -> None:
    cells = layout(tmp_path)
    write(tmp_path / "logs/prepare_task/t.log", "INFO task t: 4 test + 2 calibration items\n")
    write(tmp_path / "logs/score/m/t.log", "INFO scoring\nanyjev score: BackendError: POST x failed after 3 attempts\n")
    assert cells.failure("m", "t") == {"error": "anyjev score: BackendError: POST x failed after 3 attempts",
                                       "log": str(tmp_path / "logs/score/m/t.log")}


def test_a_log_an_earlier_run_left_is_not_taken_for_this_runs_failure(tmp_path) -> None:
    """The cell's scoring failed in a run before; in this one its task's preparation failed (the scoring never ran):
    the newer error is the one that stops the cell now."""
    cells = layout(tmp_path)
    old = write(tmp_path / "logs/score/m/t.log", "anyjev score: BackendError: POST x failed after 3 attempts\n")
    new = write(tmp_path / "logs/prepare_task/t.log", f"{PREPARE_ERROR}\n")
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    assert cells.failure("m", "t") == {"error": PREPARE_ERROR, "log": str(new)}
    os.utime(old, (3_000_000, 3_000_000))  # the other way round: scoring ran (and failed) after the preparation
    assert cells.failure("m", "t")["log"] == str(old)


def test_a_step_stopped_without_an_error_says_so(tmp_path) -> None:
    """Ctrl-C or a kill ends a job's log mid-progress: that is said, not its last progress line passed off as the error."""
    write(tmp_path / "logs/score/m/t.log", "INFO canary ok\nINFO 12/60 items (20%), 3.1 items/s\n")
    error = layout(tmp_path, earlier=False).failure("m", "t")["error"]
    assert error.startswith("the step stopped without an error (interrupted or killed)") and "12/60 items" in error


def test_a_cell_no_step_of_which_ran_has_not_run(tmp_path) -> None:
    write(tmp_path / "logs/prepare_task/t.log", "INFO task t: 4 test + 2 calibration items\n")
    assert "has not run" in layout(tmp_path).failure("m", "t")["error"]


def test_the_error_line_keeps_every_label_id(tmp_path) -> None:
    write(tmp_path / "logs/score/m/t.log", f"INFO x\n{LABEL_LINE}\n")
    error = layout(tmp_path, earlier=False).failure("m", "t")["error"]
    assert error == LABEL_LINE and f"{MISSING[-1]} ('x{MISSING[-1]}')" in error and len(error) > 300


def test_a_servers_html_error_page_is_reduced_to_its_text(tmp_path, fault_seen) -> None:
    write(tmp_path / "logs/score/m/t.log", f"INFO x\n{NGINX}\n")
    error = layout(tmp_path, earlier=False).failure("m", "t")["error"]
    assert error == ("anyjev score: BackendError: POST http://gpu:8000/v1/completions answered HTTP 502: 502 Bad Gateway "
                     "nginx/1.18.0"), error
    fault_seen(error)
