"""docs/benchmarks.md's tables and README's timing are the ones bench/report.py makes from the committed JSON under
results/bench/, each naming the machine its JSON records; the JSON hold measured rows only."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from bench import report as bench_report
from tests.conftest import REPO

DOC = REPO / "docs" / "benchmarks.md"


def test_l0_cost_tables_are_generated_from_the_committed_json() -> None:
    spec = importlib.util.spec_from_file_location("bench_l0_cost", REPO / "bench" / "bench_l0_cost.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    report = json.loads((REPO / "results" / "bench" / "l0_cost.json").read_text())
    doc = DOC.read_text()
    start, end = doc.index("<!-- l0-cost:start"), doc.index("<!-- l0-cost:end -->")
    block = doc[start:end]
    tables = bench.markdown(report).strip()
    assert tables and tables in block, "docs/benchmarks.md's l0-cost block differs from its JSON (`python -m bench.report`): regenerate it"
    for w in report["workloads"].values():
        assert f"{w['n_test']} test items, {w['n_calib']} calibration items" in block
        assert f"(run {(w.get('run') or report)['date'][:10]}, " in block


@pytest.mark.parametrize("doc", sorted(bench_report.DOCUMENTS))
def test_every_generated_block_equals_its_json(doc: str) -> None:
    blocks = bench_report.DOCUMENTS[doc]
    text = (REPO / doc).read_text(encoding="utf-8")
    for name, make in blocks.items():
        generated = make(REPO)
        assert generated and bench_report.block(text, name) == generated, (
            f"{doc}'s {name} block differs from its JSON: run python -m bench.report")
    assert bench_report.rewrite(text, blocks=blocks) == text


def test_the_readme_states_the_setup_from_a_fresh_clone_and_the_workflow_with_their_machines() -> None:
    said = bench_report.block((REPO / "README.md").read_text(encoding="utf-8"), "readme-timing")
    setup, run = bench_report.load("setup"), bench_report.load("default_run")
    assert f"{setup['wall_s'] / 60:.1f} minutes from a fresh clone" in said
    assert f"{run['runs'][-1]['wall_s'] / 60:.1f} minutes" in said
    assert bench_report.measured_on(setup) in said and bench_report.measured_on(run) in said
    assert setup["machine"]["cpu_flags"] is not None and "CPU flags not recorded" not in bench_report.measured_on(setup)


def test_every_table_is_dated_with_its_machine() -> None:
    for path in sorted((REPO / "results" / "bench").glob("*.json")):
        r = bench_report.load(path.stem)
        said = bench_report.measured_on(r)
        assert said.startswith(f"run {r['date'][:10]}, ") and ("CPU cores" in said or "machine not recorded" in said)
        if r.get("machine", {}).get("cpu_flags") is not None:  # a machine recorded by bench.common.machine()
            assert f"({r['machine']['cpu_model']}; " in said and "CPU flags not recorded" not in said
    text = DOC.read_text(encoding="utf-8")
    for name in bench_report.BLOCKS:
        titles = [line for line in bench_report.block(text, name).splitlines() if "(run " in line]
        assert titles and all("CPU cores" in t or "machine not recorded" in t for t in titles), name


def test_the_machine_is_quoted_with_its_cpu_flags() -> None:
    record = {"date": "2026-12-03T00:00:00+00:00", "vllm_version": "0.32.0",
              "machine": {"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "avx512f"], "nproc": 2, "loadavg_start": 0.4}}
    assert bench_report.measured_on(record) == "run 2026-12-03, 2 CPU cores (AMD EPYC; avx2, avx512f), load 0.4 at start, vLLM 0.32.0"
    older = record | {"machine": {"cpu_model": "AMD EPYC", "nproc": 2}}
    assert "(AMD EPYC; CPU flags not recorded)" in bench_report.measured_on(older)


def test_no_benchmark_row_is_a_copy_of_another() -> None:
    """A row is measured or absent: no two rows of a workload share their server counters (a copied row would)."""
    for w in bench_report.load("l0_cost")["workloads"].values():
        counters = [json.dumps(r["counters"], sort_keys=True) for r in w["rows"].values()]
        assert len(set(counters)) == len(counters), [k for k in w["rows"]]
        for key, r in w["rows"].items():
            assert "not_run" not in r, key


def test_no_row_is_compared_with_itself() -> None:
    """(a) is the reference of the L0-cost rows, and the last commit that of the default run: neither carries a
    comparison with itself; every other default-run row compares decisions, not accuracies."""
    for w in bench_report.load("l0_cost")["workloads"].values():
        for key, r in w["rows"].items():
            assert not (key.startswith("full_nocache") and "agreement_with_full_l0" in r), key
    runs = bench_report.load("default_run")["runs"]
    assert all("same_accuracy_as_last" not in run for run in runs)
    assert "decisions_vs_last" not in runs[-1]


def test_a_missing_marker_is_named() -> None:
    with pytest.raises(KeyError, match="backends:start"):
        bench_report.block("no markers here", "backends")
