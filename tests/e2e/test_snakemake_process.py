"""What the workflow does to Snakemake's own process besides its rules: after parsing, the Snakefile freezes what
parsing made (`gc.freeze()`), so that the cyclic collector's full scans while the DAG is built and the jobs run, and
the exit's last scan, leave it out (docs/benchmarks.md, "Where the fixed costs go"; the scheduler's timers:
tests/unit/test_scheduler_timer.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.workflow_helpers import SNAKEFILE, env

# Snakemake's command line, and on its exit the number of objects frozen in its process.
SNAKEMAKE_REPORTING_FROZEN = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: print(f'FROZEN {gc.get_freeze_count()}', file=sys.stderr))\n"
    "from snakemake.cli import main\n"
    "sys.argv[0] = 'snakemake'\n"
    "main()\n"
)


def test_the_snakefile_freezes_what_parsing_made_after_its_last_rule() -> None:
    """The freeze is the Snakefile's last statement: after every include, rule and handler, so the rules' objects are
    frozen with Snakemake's and the library's."""
    text = SNAKEFILE.read_text()
    last = text.rstrip().splitlines()[-1]
    assert last == "gc.freeze()", last
    assert text.rindex("include:") < text.rindex("gc.freeze()") and text.rindex("onerror:") < text.rindex("gc.freeze()")
    assert "\nimport gc\n" in text.split("\ninclude:")[0]


def test_a_dry_run_ends_with_the_parsed_workflow_frozen(tmp_path: Path) -> None:
    """A dry run of the default experiment, from an empty folder: Snakemake's process has frozen objects when it exits
    (none are frozen without the Snakefile's freeze: Snakemake freezes nothing itself)."""
    proc = subprocess.run([sys.executable, "-c", SNAKEMAKE_REPORTING_FROZEN, "-s", str(SNAKEFILE), "-d", str(tmp_path),
                           "--cores", "1", "-n", "--quiet", "rules"], capture_output=True, text=True, timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    frozen = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("FROZEN ")]
    assert frozen and frozen[-1] > 100_000, proc.stderr[-3000:]
