"""The workflow's rules as Snakemake itself reads them: each rule's output, log and benchmark patterns (with whether
Snakemake puts an output in the report), from the default config in the repository, so that tests name the
workflow's files by the workflow's own rules."""

from __future__ import annotations

import functools
import json
import os
import subprocess

from tests.conftest import REPO

# Loads the workflow through Snakemake's API (no DAG, no jobs) and prints every rule's patterns as JSON.
RULES_SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
snakefile, workdir, score_jobs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with SnakemakeApi(OutputSettings()) as api:
    wf = api.workflow(snakefile=snakefile, workdir=workdir, config_settings=ConfigSettings(config={"score_jobs": score_jobs}),
                      resource_settings=ResourceSettings(), storage_settings=StorageSettings())
    rules = {}
    for rule in wf._workflow.rules:
        names = {str(f): name for name, f in rule.output._allitems() if name}
        rules[rule.name] = {
            "output": [{"path": str(f), "name": names.get(str(f)), "report": bool(f.flags.get("report"))} for f in rule.output],
            "log": [str(f) for f in rule.log],
            "benchmark": [str(rule.benchmark)] if rule.benchmark else [],
        }
    print("RULES=" + json.dumps(rules))
"""


@functools.cache
def workflow_rules(score_jobs: str = "model") -> dict[str, dict]:
    """Every rule of the workflow (with `score_jobs` as given: the two cuts define different scoring rules):
    ``{"output": [{"path", "name", "report"}], "log": [...], "benchmark": [...]}``."""
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", RULES_SCRIPT, str(REPO / "workflow" / "Snakefile"),
                           str(REPO), score_jobs], capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RULES="))
    return json.loads(line.removeprefix("RULES="))


def written_paths() -> dict[str, set[str]]:
    """Every path a rule writes (outputs, logs, benchmarks) under either cut, with the rules that write it."""
    paths: dict[str, set[str]] = {}
    for cut in ("model", "cell"):
        for name, rule in workflow_rules(cut).items():
            for path in [o["path"] for o in rule["output"]] + rule["log"] + rule["benchmark"]:
                paths.setdefault(path, set()).add(name)
    return paths
