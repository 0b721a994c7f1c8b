"""Every script under workflow/scripts/ writes what it prints to the log its rule declares: its logging, and
its stderr (warnings, a traceback) too, so `--show-failed-logs` shows why a job failed. Each script runs
here as Snakemake runs it, in its own Python process with a `snakemake` object in its globals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.waiting import HANG_GUARD

SCRIPTS = REPO / "workflow" / "scripts"
LEVELS = ["raw", "L0-perm", "L0-bc", "L0", "L1"]

# Stands in for the `snakemake` object of Snakemake's script preamble: named lists for input, output and
# log, namespaces for params and wildcards.
RUNNER = """
import json, runpy, sys, types
class Named(list):
    pass
def named(value):
    if isinstance(value, dict):
        out = Named(value.values()); out.__dict__.update(value); return out
    return Named(value)
spec = json.loads(sys.argv[2])
snakemake = types.SimpleNamespace(
    input=named(spec["input"]), output=named(spec["output"]), log=named(spec["log"]),
    params=types.SimpleNamespace(**spec.get("params", {})), wildcards=types.SimpleNamespace(**spec.get("wildcards", {})))
runpy.run_path(sys.argv[1], init_globals={"snakemake": snakemake}, run_name="__main__")
"""


def run_script(name: str, spec: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", RUNNER, str(SCRIPTS / name), json.dumps(spec)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_GUARD)


def specs(tmp_path: Path, missing: Path) -> dict[str, dict]:
    """A rule-like spec per script whose (first) input does not exist."""
    log = [str(tmp_path / "job.log")]
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)  # Snakemake creates output folders before a job runs
    return {
        "reliability_plot.py": {"input": {"predictions": str(missing), "metrics": str(missing)},
                                "output": {"png": str(out / "r.png"), "pdf": str(out / "r.pdf")}, "log": log,
                                "params": {"levels": LEVELS}, "wildcards": {"model": "m", "task": "t"}},
        "summary_plots.py": {"input": [str(missing)], "output": {"by_level": str(out / "b.png"), "by_level_pdf": str(out / "b.pdf"),
                                                                 "flip": str(out / "f.png"), "flip_pdf": str(out / "f.pdf")},
                             "log": log},
        # the tables' inputs are cells' metrics.json: the run reader reads their folders
        "summary_table.py": {"input": [str(missing / "metrics.json")], "output": {"csv": str(out / "s.csv"), "md": str(out / "s.md"),
                                                                 "tex": str(out / "s.tex")},
                             "log": log, "params": {"levels": LEVELS}},
        "provenance_table.py": {"input": {"provenance": [str(missing / "provenance.json")],
                                          "metrics": [str(missing / "metrics.json")]},
                                "output": {"md": str(out / "p.md"), "html": str(out / "p.html")}, "log": log,
                                "params": {"config": {"levels": LEVELS}}},
        "vs_published.py": {"input": {"summary": str(missing), "published": str(REPO / "results/published/anyjev-2026.csv")},
                            "output": {"csv": str(out / "v.csv"), "md": str(out / "v.md")}, "log": log},
        "vs_published_plot.py": {"input": [str(missing)], "output": {"png": str(out / "vp.png"), "pdf": str(out / "vp.pdf")},
                                 "log": log},
    }


def test_every_script_is_covered(tmp_path):
    assert sorted(p.name for p in SCRIPTS.glob("*.py")) == sorted(specs(tmp_path, tmp_path))


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_a_failing_script_leaves_its_traceback_in_the_log(name, tmp_path):
    missing = tmp_path / "no-such-input.csv"
    proc = run_script(name, specs(tmp_path, missing)[name], tmp_path)
    assert proc.returncode != 0
    assert proc.stderr == "", f"{name} printed outside its log:\n{proc.stderr}"
    log = (tmp_path / "job.log").read_text()
    # a file the run reader (anyjev.results) reads is named by its FileFormatError; others by Python's own error
    assert "Traceback" in log and ("FileNotFoundError" in log or "FileFormatError" in log) and missing.name in log, log


def test_plot_scripts_log_what_they_wrote(tmp_path):
    cell = REPO / "results" / "cells" / "smollm2-135m" / "mmlu"
    spec = specs(tmp_path, cell)["reliability_plot.py"]
    spec["input"] = {"predictions": str(cell / "predictions.csv"), "metrics": str(cell / "metrics.json")}
    proc = run_script("reliability_plot.py", spec, tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr + (tmp_path / "job.log").read_text()
    assert all(Path(p).stat().st_size > 0 for p in spec["output"].values())
    assert "reliability diagram:" in (tmp_path / "job.log").read_text()

    spec = specs(tmp_path, REPO / "results" / "tables" / "summary.csv")["summary_plots.py"]
    proc = run_script("summary_plots.py", spec, tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr + (tmp_path / "job.log").read_text()
    assert all(Path(p).stat().st_size > 0 for p in spec["output"].values())
    assert "summary plots:" in (tmp_path / "job.log").read_text()
