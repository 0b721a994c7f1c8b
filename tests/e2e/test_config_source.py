"""A wrong value in one of the config files a run merges is refused naming the file it came from (or `--config`), not
every file, nor config/config.yaml when it is not there (issue 32, item 5). A dry run: the config is refused while
Snakemake parses the workflow, before any job, so nothing runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.workflow_helpers import SNAKEFILE, SNAKEMAKE, env


def dry_run(work: Path, *args: str) -> str:
    proc = subprocess.run([str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--cores", "1", "-n", *args],
                          capture_output=True, text=True, timeout=600, env=env())
    assert proc.returncode != 0, proc.stdout
    return next(line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("invalid config"))


@pytest.mark.parametrize("where", ["user file", "--config"])
def test_the_value_is_blamed_on_the_file_it_came_from(where, tmp_path: Path, fault_seen) -> None:
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    base = {"models": {"m": {"source": "smollm2"}}, "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(base))
    user = work / "mine.yaml"
    user.write_text("split_seed: 1\n" + ("limit: 0\n" if where == "user file" else ""))
    args = ["--configfile", str(work / "config" / "config.yaml"), str(user)]
    line = dry_run(work, *args, *(["--config", "limit=0"] if where == "--config" else []))
    fault_seen(line.replace(str(work), "<work>"))
    named = str(user) if where == "user file" else "--config"
    assert line.startswith(f"invalid config ({named}): config key limit: 0 is less than the minimum of 1"), line
