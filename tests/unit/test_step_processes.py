"""A cell's own steps as the workflow runs them, each an ordinary process of its own (`exec python -m anyjev <step>`):
each imports what it uses and nothing else (no HTTP client, terminal library, schema validator or plotting library
where it has no use for one), and a step ends with the process that started it, so that a job killed with its shell
leaves no step behind to write the outputs Snakemake has failed (issue 46, item 2; tests/e2e/test_killed_jobs.py kills
the jobs of a real run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from anyjev.run.evaluate import EvaluateJob
from anyjev.run.publish import PublishJob
from anyjev.rundata.allocations import FORMAT
from anyjev.serving.proc import pid_alive, proc_cmdline
from tests.conftest import REPO
from tests.waiting import has_mapped, wait_for

CELL = REPO / "results" / "cells" / "smollm2-135m" / "rotten_tomatoes"  # a committed cell: its scores and provenance
# What `python -m anyjev ARGV` imported, written to the file named by the first argument when the process exits: the
# program's own entry (anyjev/__main__.py), as a rule's command runs it.
IMPORTS_AT_EXIT = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "sys.argv[0] = 'anyjev'\n"
    "runpy.run_module('anyjev', run_name='__main__', alter_sys=True)\n"
)
# Imported by a step that talks to a server, reads a run as tables, or tokenises: none is any use to a cell's own steps.
NOT_FOR_A_CELL_STEP = {"httpx", "httpcore", "urllib3", "rich", "pandas", "transformers", "tokenizers", "torch"}


def step_env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO)}


def at_start() -> set[str]:
    """What this interpreter imports before it runs anything (its site hooks: an editable install's finder)."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=600, env=step_env(), check=True)
    return {name.split(".")[0] for name in json.loads(proc.stdout)}


def imported_by(tmp_path: Path, argv: list[str]) -> set[str]:
    """The top-level packages `python -m anyjev ARGV` had imported when it exited (after a successful run)."""
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", IMPORTS_AT_EXIT, str(out), *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=step_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name.split(".")[0] for name in json.loads(out.read_text())}


def evaluate_argv(tmp_path: Path, **figure: str) -> list[str]:
    job = tmp_path / "evaluate.json"
    job.write_text(EvaluateJob(model="smollm2-135m", task="rotten_tomatoes").to_json())
    return ["evaluate", "--job", str(job), "--scores", str(CELL / "scores.jsonl"), "--out", str(tmp_path / "metrics.json"),
            "--predictions", str(tmp_path / "predictions.csv"), "--replicates", str(tmp_path / "replicates.npz"),
            *(arg for flag, path in figure.items() for arg in (f"--{flag}", path))]


def test_publishing_a_cell_imports_the_standard_library_and_the_package_alone(tmp_path: Path) -> None:
    record = {"format": FORMAT, "model": "smollm2-135m", "cells": {"rotten_tomatoes": {
        "task": "rotten_tomatoes", "status": "ok", "counts": {}, "scores": str(CELL / "scores.jsonl"),
        "provenance": str(CELL / "provenance.json")}}}
    (tmp_path / "allocation.json").write_text(json.dumps(record))
    (tmp_path / "publish.json").write_text(PublishJob("rotten_tomatoes").to_json())
    modules = imported_by(tmp_path, ["publish-cell", "--job", "publish.json", "--allocation", "allocation.json",
                                     "--out", "scores.jsonl", "--provenance", "provenance.json"])
    assert (tmp_path / "scores.jsonl").read_bytes() == (CELL / "scores.jsonl").read_bytes()
    third_party = modules - set(sys.stdlib_module_names) - at_start() - {"anyjev"}
    assert third_party == set(), third_party


def test_evaluating_a_cell_and_drawing_its_diagram_import_no_client_and_no_tables(tmp_path: Path) -> None:
    """One process evaluates the cell and draws its reliability diagram from the evaluation it holds: matplotlib,
    numpy and the schema's validator (the job's settings are checked), but no HTTP client and no pandas."""
    modules = imported_by(tmp_path, evaluate_argv(tmp_path, png=str(tmp_path / "r.png"), pdf=str(tmp_path / "r.pdf")))
    assert {"numpy", "matplotlib"} <= modules
    assert modules & NOT_FOR_A_CELL_STEP == set(), modules & NOT_FOR_A_CELL_STEP
    assert (tmp_path / "r.png").stat().st_size and (tmp_path / "metrics.json").is_file()


def test_a_step_whose_shell_is_killed_ends_with_it(tmp_path: Path) -> None:
    """A rule's command run under a shell of its own (not `exec`'d: the shell stays the step's parent), killed at work
    (once it has imported numpy, after its start-up): SIGKILL of the shell ends the step at once, before it writes
    metrics.json (without the parent-death signal it would run on, orphaned, and write it)."""
    shell = subprocess.Popen(["bash", "-c", " ".join(map(repr, [sys.executable, "-m", "anyjev", *evaluate_argv(tmp_path)]))
                              + " > evaluate.log 2>&1"], cwd=tmp_path, env=step_env())

    def step() -> int | None:
        children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split()
        return next((int(pid) for pid in children if proc_cmdline(int(pid))[1:4] == ["-m", "anyjev", "evaluate"]
                     and has_mapped(int(pid), "numpy")), None)

    pid = wait_for(step, "the evaluate step at work under its shell",
                   unless=lambda: None if shell.poll() is None else f"the shell exited ({shell.returncode})")
    shell.send_signal(signal.SIGKILL)
    shell.wait()
    wait_for(lambda: not pid_alive(pid) or (tmp_path / "metrics.json").exists(), "the step's end or its metrics.json")
    assert not (tmp_path / "metrics.json").exists(), "the orphaned step wrote metrics.json after its shell was killed"
    assert not pid_alive(pid)


@pytest.mark.parametrize("flags", [["--png", "r.png"], ["--pdf", "r.pdf"]])
def test_the_diagram_is_asked_for_as_both_files_or_not_at_all(tmp_path: Path, flags: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "anyjev", *evaluate_argv(tmp_path), *flags], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=step_env())
    assert proc.returncode == 2 and "give both" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "metrics.json").exists()
