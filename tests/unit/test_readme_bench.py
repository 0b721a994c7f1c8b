"""The README's L0 cost tables are the ones bench/bench_l0_cost.py makes from results/bench/l0_cost.json."""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import REPO


def test_readme_l0_cost_tables_are_generated_from_the_committed_json() -> None:
    spec = importlib.util.spec_from_file_location("bench_l0_cost", REPO / "bench" / "bench_l0_cost.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    report = json.loads((REPO / "results" / "bench" / "l0_cost.json").read_text())
    readme = (REPO / "README.md").read_text()
    start, end = readme.index("<!-- l0-cost:start"), readme.index("<!-- l0-cost:end -->")
    block = readme[start:end]
    tables = bench.markdown(report).strip()
    assert tables and tables in block, "README's l0-cost block differs from `bench_l0_cost.py --report`: regenerate it"
    for w in report["workloads"].values():
        assert f"{w['n_test']} test items, {w['n_calib']} calibration items" in block
