"""The committed fault report (docs/fault-report.md) is a whole, passing run's: a row for every fault test and
every covered fault, each passed. Fault tests write logs/fault-report.md; a full run's copy is committed."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO
from tests.e2e.fault_report import COVERED, COVERED_IN_SESSION, NOT_OBSERVED, excerpt

COMMITTED = REPO / "docs" / "fault-report.md"
FAULT_TESTS = REPO / "tests" / "e2e" / "test_faults.py"


def report_rows() -> list[dict[str, str]]:
    """The table's rows: node id (without a parametrize case) and outcome, read from the markdown."""
    rows = []
    for line in COMMITTED.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 7 and cells[4].startswith("`tests/"):
            nodeid = cells[4].strip("`")
            rows.append({"nodeid": nodeid, "function": nodeid.split("::")[-1].split("[")[0], "outcome": cells[5],
                         "seen": cells[1], "lost": cells[2], "left": cells[3]})
    return rows


def test_every_row_of_the_committed_report_passed_and_lost_nothing() -> None:
    rows = report_rows()
    assert len(rows) >= len(COVERED) + len(COVERED_IN_SESSION) + 15, f"{len(rows)} rows: not a full run's report"
    bad = [r["nodeid"] for r in rows if not r["outcome"].startswith("passed")]
    assert not bad, f"rows whose test did not pass in the run that wrote the report: {bad}"
    empty = [r["nodeid"] for r in rows if not r["seen"] or r["seen"] == excerpt(NOT_OBSERVED)]
    assert not empty, f"rows with no observed message: {empty}"
    assert all(r["lost"] in ("0", "n/a") and r["left"] in ("0", "n/a") for r in rows), rows


def test_the_committed_report_covers_every_fault_test_and_every_covered_fault() -> None:
    tree = ast.parse(FAULT_TESTS.read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    # the test that runs the covered tests records their rows, not one of its own; the last one only sweeps
    tests -= {"test_faults_covered_by_unit_and_integration_tests_pass", "test_no_vllm_process_of_this_module_is_left"}
    in_report = {r["function"] for r in report_rows() if r["nodeid"].startswith("tests/e2e/test_faults.py")}
    assert tests <= in_report, f"fault tests with no row in docs/fault-report.md (rerun them, copy the report): " \
                               f"{sorted(tests - in_report)}"
    assert in_report <= tests, f"rows of tests that no longer exist: {sorted(in_report - tests)}"
    nodeids = {r["nodeid"] for r in report_rows()}
    assert {nodeid for _, _, nodeid in COVERED + COVERED_IN_SESSION} <= nodeids
