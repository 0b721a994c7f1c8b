"""docs/benchmarks.md's tables are the ones bench/report.py makes from the committed JSON under results/bench/."""

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
    assert tables and tables in block, "docs/benchmarks.md's l0-cost block differs from `bench_l0_cost.py --report`: regenerate it"
    for w in report["workloads"].values():
        assert f"{w['n_test']} test items, {w['n_calib']} calibration items" in block
        assert f"(run {(w.get('run') or report)['date'][:10]}, " in block


def test_every_generated_block_equals_its_json() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name, make in bench_report.BLOCKS.items():
        generated = make(REPO)
        assert generated and bench_report.block(text, name) == generated, (
            f"docs/benchmarks.md's {name} block differs from its JSON: run python -m bench.report")
    assert bench_report.rewrite(text) == text


def test_every_table_is_dated_with_its_machine() -> None:
    for name in ("l0_cost", "backends", "prefix_drift_fp32", "prefix_drift_bf16", "cpu_threads", "block_size", "default_run"):
        r = bench_report.load(name)
        said = bench_report.measured_on(r)
        assert said.startswith(f"run {r['date'][:10]}, ") and ("CPU cores" in said or "machine not recorded" in said)
    text = DOC.read_text(encoding="utf-8")
    for name in bench_report.BLOCKS:
        titles = [line for line in bench_report.block(text, name).splitlines() if "(run " in line]
        assert titles and all("CPU cores" in t or "machine not recorded" in t for t in titles), name


def test_a_missing_marker_is_named() -> None:
    with pytest.raises(KeyError, match="backends:start"):
        bench_report.block("no markers here", "backends")
