"""Run against run (``anyjev compare``, anyjev/reports/versus.py) on two small runs: the committed reference run's MMLU
cell and a copy whose scores are moved as another server's would be. Its numbers equal a direct computation (raw
accuracy's difference and its BCa interval from the two cells' per-item correctness on the seeded resamples), a cell
whose items differ is refused naming the first one, and the command line prints and writes the same table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anyjev.cli import main
from anyjev.numbers.bootstrap import resample_rows
from anyjev.numbers.metrics import interval, jackknife_acceleration
from anyjev.numbers.power import detectable_from_interval
from anyjev.reports.versus import compare_runs
from anyjev.run.records import cell_groups
from anyjev.rundata import read_run
from anyjev.rundata.scores import read_scores
from tests.unit.test_differences import CELL, FAST, another_model, evaluate

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Run A: the committed MMLU cell evaluated with FAST settings; run B: its scores moved (every first label 1.5 nat
    likelier), as another server (another dtype, another vLLM) would read them."""
    root = tmp_path_factory.mktemp("runs")
    a = root / "a" / "results" / "cells" / MODEL / "mmlu"
    a.mkdir(parents=True)
    for name in ("scores.jsonl", "provenance.json"):
        shutil.copy(CELL / name, a / name)
    evaluate(a)
    another_model(CELL, root / "b" / "results" / "cells" / MODEL / "mmlu")
    return root / "a", root / "b"


def raw_correct(scores: Path) -> np.ndarray:
    """Each test item's raw correctness (no ties here), cell order: its fwd/r0 layout's top label maps to gold."""
    records = read_scores(scores).items
    test = [r for r in records if r.get("split") in (None, "test")]
    out = []
    for r in test:
        lay = r["layouts"]["fwd/r0"]
        lp = np.array(lay["lp"])
        assert (lp >= lp.max() - 1e-12).sum() == 1
        out.append(float(lay["order"][int(lp.argmax())] == r["gold"]))
    return np.array(out)


def test_run_b_minus_run_a_equals_a_direct_computation(two_runs):
    a, b = two_runs
    comparison = compare_runs(read_run(a / "results"), read_run(b / "results"))
    assert comparison.refused == {} and comparison.only_a == comparison.only_b == []
    frame = comparison.differences
    ma, mb = (json.loads((d / "results/cells" / MODEL / "mmlu/metrics.json").read_text()) for d in two_runs)
    for row in frame.itertuples():  # every value: B's metrics.json minus A's
        assert row.value == pytest.approx(mb["metrics"][row.level][row.metric]["value"]
                                          - ma["metrics"][row.level][row.metric]["value"], abs=1e-12)
        assert row.detectable == pytest.approx(detectable_from_interval(row.lo, row.hi))
    assert set(frame["level"]) == set(ma["levels"]) and {"acc", "nll", "ece"} <= set(frame["metric"])

    # raw accuracy, directly: the per-item correctness of both cells on the seeded resamples of the test items
    scores = [d / "results/cells" / MODEL / "mmlu/scores.jsonl" for d in two_runs]
    ca, cb = (raw_correct(s) for s in scores)
    read = read_scores(scores[0])
    records, extras = read.items, read.extras
    groups = cell_groups(records, extras, FAST.prior_mode, "a").groups
    rows = resample_rows(groups, [True] * len(groups), FAST).test  # the test items each resample draws (one K group)
    boot = cb[rows].mean(axis=1) - ca[rows].mean(axis=1)
    n = len(ca)
    jack = (cb.sum() - cb) / (n - 1) - (ca.sum() - ca) / (n - 1)
    lo, hi, _ = interval(cb.mean() - ca.mean(), boot, accel=jackknife_acceleration([jack]), level=0.95, method="bca")
    acc = frame[(frame["level"] == "raw") & (frame["metric"] == "acc")].iloc[0]
    assert acc.value == pytest.approx(cb.mean() - ca.mean(), abs=1e-12) and acc.value != 0
    assert (acc.lo, acc.hi) == pytest.approx((lo, hi), abs=1e-12)


def test_a_cell_whose_items_differ_is_refused_naming_the_first_one(two_runs, tmp_path):
    a, b = two_runs
    c = tmp_path / "c"
    shutil.copytree(b, c)
    scores = c / "results/cells" / MODEL / "mmlu/scores.jsonl"
    lines = scores.read_text().splitlines()
    third = json.loads(lines[3])
    third["gold"] = (third["gold"] + 1) % third["k"]
    lines[3] = json.dumps(third)
    scores.write_text("\n".join(lines) + "\n")
    comparison = compare_runs(read_run(a / "results"), read_run(c / "results"))
    assert comparison.differences.empty
    why = comparison.refused[(MODEL, "mmlu")]
    assert f"item 3 ({third['id']})" in why and "gold" in why, why


def test_the_command_prints_and_writes_the_comparison(two_runs, tmp_path, capsys):
    a, b = two_runs
    csv, md = tmp_path / "versus.csv", tmp_path / "versus.md"
    assert main(["compare", str(a), str(b / "results"), "--csv", str(csv), "--md", str(md)]) == 0
    printed = capsys.readouterr().out
    assert printed == md.read_text() and f"# {b / 'results'} minus {a}" in printed
    table = pd.read_csv(csv)
    assert list(table.columns[:4]) == ["model", "task", "level", "metric"] and len(table) > 0
    assert f"| {MODEL} | mmlu | raw |" in printed
    assert main(["compare", str(a), str(tmp_path)]) == 2  # no run there: one line, bad input
    assert "no run here" in capsys.readouterr().err
