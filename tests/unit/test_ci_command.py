"""README command 2 is CI's command (`.ci/run`), and that command fails on any test that did not run: every
asset a test can require is required there (ANYJEV_REQUIRE_<WHAT>=1), and `--fail-on-skip` (tests/conftest.py)
reports any other skip, or an expected failure, as a failure."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import FAIL_ON_SKIP, REPO

CI = REPO / ".ci" / "run"


def readme_command(number: int) -> str:
    """The shell command in the code block under README.md's "Command NUMBER"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^Command {number} - .*?```bash\n(.*?)```", text, re.S | re.M)
    assert m, f"README.md has no ```bash block under 'Command {number} - '"
    return m.group(1).strip()


def ci_pytest_argv() -> list[str]:
    """The argv of the pytest that .ci/run runs (its last line that runs pytest)."""
    [line] = [x for x in CI.read_text().splitlines() if re.match(r"^\S*python -m pytest\b", x.strip())]
    return shlex.split(line)


def test_readme_command_2_is_what_ci_runs() -> None:
    assert readme_command(2) == "bash .ci/run", "README command 2 must be CI's own command, not a copy of part of it"


def test_ci_fails_on_any_skip_and_runs_the_linters() -> None:
    """(That it requires every asset a test can require: tests/unit/test_environments.py.)"""
    text = CI.read_text()
    assert FAIL_ON_SKIP in ci_pytest_argv()
    for step in (".venv/bin/ruff check .", ".venv/bin/snakefmt --check workflow", "snakemake --lint"):
        assert step in text, f".ci/run does not run {step!r}"


SKIPPING = '''
import pytest
from tests.conftest import require


@pytest.fixture
def missing_tool():
    pytest.skip("a fixture skips")


def test_passes():
    pass


def test_calls_skip():
    pytest.skip("skipped in the test")


@pytest.mark.skipif(True, reason="a skipif mark")
def test_marked():
    pass


def test_through_a_fixture(missing_tool):
    pass


def test_through_require():
    require("latex", False, "pdflatex is missing")


@pytest.mark.xfail(reason="an expected failure")
def test_expected_failure():
    assert False
'''

SKIPPED_MODULE = '''
from tests.conftest import require

require("assets", False, "a module whose every test needs an asset")


def test_never_collected():
    pass
'''


def run_pytest(tmp_path: Path, test_file: str, *args: str) -> str:
    """pytest on TEST_FILE (SKIPPING or SKIPPED_MODULE), with tests/conftest.py loaded as a plugin and no
    ANYJEV_REQUIRE_* set: its exit code and output."""
    (tmp_path / "test_skipping.py").write_text(textwrap.dedent(SKIPPING))
    (tmp_path / "test_skipped_module.py").write_text(textwrap.dedent(SKIPPED_MODULE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANYJEV_REQUIRE_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rA",
                           "--rootdir", str(tmp_path), *args, test_file], cwd=tmp_path, capture_output=True, text=True,
                          env=env)
    return f"exit {proc.returncode}\n{proc.stdout}{proc.stderr}"


def fail_line(why: str) -> str:
    return f"{why}; {FAIL_ON_SKIP} (.ci/run) reports a test that did not run as failed"


def test_without_the_option_a_skip_is_a_skip(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, "test_skipping.py")
    assert out.startswith("exit 0\n") and re.search(r"\b1 passed, 4 skipped, 1 xfailed\b", out), out
    out = run_pytest(tmp_path, "test_skipped_module.py")
    assert out.startswith("exit 5\n") and re.search(r"\b1 skipped\b", out), out  # 5: no test ran


def test_fail_on_skip_fails_every_test_that_did_not_run(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, "test_skipping.py", FAIL_ON_SKIP)
    assert out.startswith("exit 1\n"), out
    for nodeid in ("test_calls_skip", "test_through_require", "test_expected_failure"):
        assert re.search(rf"^FAILED test_skipping.py::{nodeid}\b", out, re.M), out
    for nodeid in ("test_marked", "test_through_a_fixture"):  # skipped at setup: the setup fails
        assert re.search(rf"^ERROR test_skipping.py::{nodeid}\b", out, re.M), out
    for why in ("skipped: skipped in the test", "skipped: a skipif mark", "skipped: a fixture skips",
                "skipped: pdflatex is missing", "an expected failure (xfail: an expected failure)"):
        assert fail_line(why) in out, (why, out)
    assert "PASSED test_skipping.py::test_passes" in out
    assert re.search(r"\b3 failed, 1 passed, 2 errors\b", out) and not re.search(r"\d+ (skipped|xfailed)", out), out


def test_fail_on_skip_fails_a_module_that_skips_at_its_top(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, "test_skipped_module.py", FAIL_ON_SKIP)
    assert out.startswith("exit 2\n"), out  # a collection error interrupts the session
    assert re.search(r"^ERROR test_skipped_module.py\b", out, re.M), out
    assert fail_line("skipped: a module whose every test needs an asset") in out, out


def test_no_test_skips_outside_require() -> None:
    """A skip goes through tests/conftest.py's `require` (which fails under ANYJEV_REQUIRE_<WHAT>=1), nowhere else."""
    skipping = re.compile(r"pytest\.(skip\(|importorskip\(|mark\.skip|mark\.xfail|xfail\()|unittest\.skip|SkipTest")
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for path in sorted((REPO / "tests").rglob("*.py"))
             if path not in (REPO / "tests" / "conftest.py", Path(__file__).resolve())
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if skipping.search(line)]
    assert found == [], "skips outside tests/conftest.py's require():\n" + "\n".join(found)
