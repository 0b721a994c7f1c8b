"""A job's work ends with its job (issue 46, items 2 and 3), through the real workflow on the smallest config that makes
an evaluation job: one `url` model read from an in-process stub of vLLM (no vLLM starts), one task of a few items.

* An evaluation job killed with SIGKILL at work (as a supervisor or the out-of-memory killer would: the process
  Snakemake started for the job, which the rule's `exec` makes the step itself) fails; no process of it is left, none
  of its outputs (metrics.json, predictions.csv, replicates.npz, the diagram) is written after the failure, and the
  next run evaluates the cell again instead of saying "Nothing to be done". (A step under a shell of its own ends with
  the shell: tests/unit/test_step_processes.py.)
* Snakemake itself killed with SIGKILL while a step works: the step ends with it, nothing is left in the temporary
  folder, no traceback is printed or logged; `snakemake --unlock`, then a rerun, finishes the cell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from anyjev.paths import METRICS, PREDICTIONS, REPLICATES, RunPaths
from anyjev.serving.proc import proc_stat
from tests.conftest import QWEN3_TOKENIZER_DIR, interruptible
from tests.e2e.workflow_helpers import env, processes_in, run_snakemake, snakemake_cmd, step_pids
from tests.stub_http import StubCompletions
from tests.waiting import HANG_GUARD, has_mapped, settle, wait_for

MODEL, TASK = "stub-url", "capitals"
CELL = RunPaths().cell_dir.format(model=MODEL, task=TASK)
TARGET = f"{CELL}/{METRICS}"
FIGURE = RunPaths().reliability.of(MODEL, TASK)
EVALUATE_OUTPUTS = (f"{CELL}/{METRICS}", f"{CELL}/{PREDICTIONS}", f"{CELL}/{REPLICATES}", FIGURE.png, FIGURE.pdf)


@pytest.fixture(scope="module")
def stub():
    with StubCompletions() as s:
        s.served_names = [MODEL]  # a url cell checks that its server serves the model's name (/v1/models)
        yield s


@pytest.fixture(scope="module")
def work(tmp_path_factory, stub) -> Path:
    """The study folder: a config of one url model and one task of eight items."""
    work = tmp_path_factory.mktemp("killed") / "w"
    (work / "config").mkdir(parents=True)
    items = [{"id": f"c{i}", "state": f"Country number {i}.", "question": "Which city is the capital?",
              "kind": "choice", "options": ["Paris", "Rome", "Madrid"], "gold": i % 3} for i in range(8)]
    (work / f"{TASK}.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    config = {"models": {MODEL: {"source": "url", "url": stub.url, "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
              "tasks": {TASK: {"source": "file", "path": f"{TASK}.jsonl", "n_test": 6, "n_calib": 2}},
              "levels": ["raw", "L0"], "published": None}
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return work


def start(work: Path, label: str, tmpdir: Path) -> tuple[subprocess.Popen, Path]:
    """Snakemake making the cell's metrics in WORK, in its own session, with TMPDIR as its temporary folder; its
    output file."""
    out = work.parent / f"{label}.out"
    tmpdir.mkdir()
    with open(out, "w") as fh:
        proc = subprocess.Popen(snakemake_cmd(work, TARGET), stdout=fh, stderr=subprocess.STDOUT, text=True,
                                env=env() | {"TMPDIR": str(tmpdir)}, start_new_session=True, preexec_fn=interruptible)
    return proc, out


def evaluate_at_work(work: Path, run: subprocess.Popen, out: Path) -> int:
    """The cell's evaluate step, once it is at work (it has imported numpy: after its start-up)."""
    def found() -> int | None:
        return next((pid for pid in step_pids(work, "evaluate") if has_mapped(pid, "numpy")), None)

    return wait_for(found, "the evaluate step at work",
                    unless=lambda: None if run.poll() is None else f"snakemake exited ({out.read_text()[-3000:]})")


def job_process(pid: int, snakemake: int) -> int:
    """The process Snakemake started for the job whose step is PID: PID itself, or the shell above it."""
    while (parent := int(proc_stat(pid)[1])) != snakemake:
        pid = parent
    return pid


def written(work: Path) -> list[str]:
    return [path for path in EVALUATE_OUTPUTS if (work / path).exists()]


def tracebacks(work: Path, output: str) -> list[str]:
    """Where a traceback was printed: the run's output, or a log of the run (its jobs', Snakemake's own)."""
    logs = [*(work / "logs").rglob("*.log"), *(work / ".snakemake" / "log").glob("*.log")]
    texts = {"output": output} | {str(p): p.read_text(errors="replace") for p in logs}
    return [where for where, text in texts.items() if "Traceback" in text]


def test_an_evaluation_job_killed_at_work_writes_nothing_after_and_leaves_nothing(work: Path) -> None:
    run, out = start(work, "killed-job", work.parent / "tmp-killed-job")
    step = evaluate_at_work(work, run, out)
    os.kill(job_process(step, run.pid), signal.SIGKILL)
    assert run.wait(HANG_GUARD) != 0
    text = out.read_text()
    assert "Error in rule evaluate_cell" in text, text[-3000:]
    assert settle(lambda: processes_in(work)) == [], "a process of the run outlived it"
    # nothing of the run is left running: what is written now stays
    assert written(work) == [], "a killed job's outputs were written"
    again = run_snakemake(work, TARGET, "-n")
    assert again.returncode == 0 and "Nothing to be done" not in again.stdout, again.stdout[-3000:]
    assert "evaluate_cell" in again.stdout


def test_snakemake_killed_takes_its_steps_along_and_a_rerun_after_unlock_finishes(work: Path) -> None:
    """What the killed run leaves in its temporary folder is Snakemake's own scratch folder (`snakemake*`, which its
    exit would have removed) and what a run that finishes leaves there too (torch's compile cache: the config check
    loads the url model's tokenizer); nothing of the workflow's."""
    killed_tmp, finished_tmp = work.parent / "tmp-killed-snakemake", work.parent / "tmp-finished"
    run, out = start(work, "killed-snakemake", killed_tmp)
    step = evaluate_at_work(work, run, out)
    os.kill(run.pid, signal.SIGKILL)  # Snakemake's process alone, not its process group
    run.wait(HANG_GUARD)
    assert settle(lambda: processes_in(work)) == [], f"a process of the run (evaluate step: {step}) outlived Snakemake"
    assert written(work) == []
    assert tracebacks(work, out.read_text()) == []
    assert run_snakemake(work, "--unlock").returncode == 0
    finished_tmp.mkdir()
    rerun = subprocess.run(snakemake_cmd(work, TARGET), capture_output=True, text=True, timeout=HANG_GUARD,
                           env=env() | {"TMPDIR": str(finished_tmp)})
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    assert written(work) == list(EVALUATE_OUTPUTS) and processes_in(work) == []
    assert tracebacks(work, rerun.stdout + rerun.stderr) == []
    left = {p.name for p in killed_tmp.iterdir() if not p.name.startswith("snakemake")}
    assert left <= {p.name for p in finished_tmp.iterdir()}, left
