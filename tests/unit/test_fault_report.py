"""The committed fault report (docs/fault-report.md) is a whole, passing run's: a row for every fault test and
every covered fault, each passed, written by a session that passed whole, from committed code that is still the code
of this checkout (the report records a digest of it). Fault tests write logs/fault-report.md; a full run's copy is
committed."""

from __future__ import annotations

import ast
import re
import subprocess

from tests.conftest import REPO
from tests.e2e.fault_report import (
    COVERED,
    COVERED_IN_SESSION,
    FAULT_SESSION,
    NOT_OBSERVED,
    FaultReport,
    code_digest,
    covered_code,
    excerpt,
    git_blob,
    is_covered,
    read_session,
    row_test_modules,
)

COMMITTED = REPO / "docs" / "fault-report.md"
FAULT_TESTS = REPO / "tests" / "e2e" / "test_faults.py"
REGENERATE = (f"commit the code, then run `{FAULT_SESSION}` (under the heavy-test lock) and commit its report: "
              "`cp logs/fault-report.md docs/fault-report.md`")


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


def committed_session() -> dict:
    session = read_session(COMMITTED.read_text())
    assert session is not None, f"docs/fault-report.md records no session (commit, code digest, outcomes): {REGENERATE}"
    return session


def test_the_committed_report_was_written_by_a_whole_passing_session_of_committed_code() -> None:
    session = committed_session()
    assert re.fullmatch(r"[0-9a-f]{40}", session["commit"]), session["commit"]
    assert session["uncommitted"] == [], f"written from code that was not its commit's: {session['uncommitted']}"
    # every test the session ran, and every covered test test_faults.py ran for it ("passed (run by test_faults.py)")
    assert session["exitstatus"] == 0 and all(o.startswith("passed") for o in session["outcomes"]), session["outcomes"]
    assert sum(session["outcomes"].values()) >= len(report_rows()), "fewer tests passed than the report has rows"
    assert session["started"] <= session["finished"]


def test_the_committed_report_covers_the_code_of_this_checkout() -> None:
    """The code the session exercised (the library, the workflow, the default config, the requirements, the tests'
    helpers and the rows' test modules) is HEAD's: a change to any of it needs a new report."""
    session = committed_session()
    now = covered_code("HEAD")
    if code_digest(now) == session["code_digest"]:
        return
    # the session ran its commit's code (the test above): that commit's covered code, by today's rule, is HEAD's
    diff = subprocess.run(["git", "-C", str(REPO), "diff", "--name-only", session["commit"], "HEAD"],
                          capture_output=True, text=True)
    modules = row_test_modules()
    changed = ([p for p in diff.stdout.split() if is_covered(p, modules)] if diff.returncode == 0
               else f"(its commit {session['commit']} is not in this clone)")
    if changed == []:
        return
    raise AssertionError(f"docs/fault-report.md was written for other code than HEAD's; changed since its commit: "
                         f"{changed}. {REGENERATE}")


def test_what_a_report_records_of_its_code_and_session(tmp_path) -> None:
    modules = row_test_modules()
    for path in ("anyjev/cli.py", "workflow/Snakefile", "config/config.yaml", "requirements/server.txt",
                 "tests/waiting.py", "tests/e2e/workflow_helpers.py", "tests/unit/test_vllm_backend_faults.py",
                 "testbed/vllm_server.py"):
        assert is_covered(path, modules), path
    for path in ("docs/fault-report.md", "tests/unit/test_fault_report.py", "tests/data/reference-reduced/summary.csv",
                 "README.md", "config/paper.yaml", "tests/e2e/fault_report.py"):
        assert not is_covered(path, modules), path
    snakefile = REPO / "workflow" / "Snakefile"
    assert git_blob(snakefile.read_bytes()) == subprocess.run(["git", "-C", str(REPO), "hash-object", str(snakefile)],
                                                              capture_output=True, text=True).stdout.strip()
    head = covered_code("HEAD")
    assert "anyjev/cli.py" in head and "docs/fault-report.md" not in head
    assert code_digest(head | {"anyjev/cli.py": git_blob(b"# another cli\n")}) != code_digest(head)
    report = FaultReport()
    report.record("tests/e2e/test_faults.py::test_x", "a fault", "what was seen", 0, 0, 1.0)
    session = report.session_record("pytest tests/e2e/test_faults.py", 0)
    assert session["commit"] and session["files"] == len(covered_code())
    report.write(tmp_path / "report.md", session)
    assert read_session((tmp_path / "report.md").read_text()) == session


def test_the_report_writes_each_path_relative_to_the_run_that_saw_it(tmp_path) -> None:
    """A message naming a file in the test's own folder, the folder itself, and a file of this checkout: the row names
    each relative to its run (the test's folder, the checkout), no folder of the machine that wrote it."""
    seen = (f"TaskDataError: {tmp_path}/my tasks/t.jsonl:line 2: not valid JSON; '{tmp_path}' is a folder; "
            f"see {REPO}/config/config.yaml")
    assert excerpt(seen) == ("TaskDataError: my tasks/t.jsonl:line 2: not valid JSON; '.' is a folder; "
                             "see config/config.yaml")
