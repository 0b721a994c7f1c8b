"""What the workflow does to the Snakemake process that runs it, besides its rules and handlers: nothing. A workflow
that uses this one as a module keeps Snakemake as it comes: no method of Snakemake's replaced by one of ours, its
garbage collector on, nothing frozen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.workflow_helpers import REPO, SNAKEFILE, env

# Snakemake's command line (its first argument: this repository's folder); on its exit, on standard error: the state of
# its collector, and every function on a class of Snakemake's modules whose code is in this repository's library or
# workflow (a method replaced from here; not its environments, .venv/, which may lie in the same folder).
SNAKEMAKE_REPORTING_ITS_STATE = """
import atexit, gc, inspect, json, sys

repo = sys.argv.pop(1)
ours = tuple(f"{repo}/{part}/" for part in ("anyjev", "workflow"))

def state():
    replaced = []
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] != "snakemake" or module is None:
            continue
        for cls in [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == name]:
            for attr, value in vars(cls).items():
                code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
                if code is not None and code.co_filename.startswith(ours):
                    replaced.append(f"{name}.{cls.__name__}.{attr} from {code.co_filename}")
    print("STATE " + json.dumps({"frozen": gc.get_freeze_count(), "collector": gc.isenabled(), "replaced": replaced}),
          file=sys.stderr)

atexit.register(state)
from snakemake.cli import main
sys.argv[0] = "snakemake"
main()
"""


def test_snakemake_runs_the_workflow_as_it_comes(tmp_path: Path) -> None:
    """A dry run of the default experiment, from an empty folder (the parse, every include, the DAG)."""
    proc = subprocess.run([sys.executable, "-c", SNAKEMAKE_REPORTING_ITS_STATE, str(REPO), "-s", str(SNAKEFILE), "-d",
                           str(tmp_path), "--cores", "1", "-n", "--quiet", "rules"], capture_output=True, text=True,
                          timeout=600, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("STATE ")]
    assert json.loads(line.removeprefix("STATE ")) == {"frozen": 0, "collector": True, "replaced": []}
