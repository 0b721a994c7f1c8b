"""The differences table (anyjev/outputs/differences.py): every level minus raw from each cell's metrics.json, and one
model minus another on the same task, each with its paired interval; the run reader's frame of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import anyjev.numbers.compare as compare
from anyjev.numbers.options import EvaluationOptions
from anyjev.outputs.differences import COLUMNS, differences_markdown, write_differences
from anyjev.results import read_cells
from anyjev.run.evaluate import EvaluateJob, compare_cells, compare_many, evaluate_cell

REPO = Path(__file__).resolve().parents[2]
CELL = REPO / "results" / "cells" / "smollm2-135m" / "mmlu"
FAST = EvaluationOptions(n_boot=1000)  # the least the schema allows


def another_model(src: Path, dst: Path, shift: float = 1.5) -> Path:
    """SRC's cell as if another model had read it: the same items, every layout's first label SHIFT nat likelier
    (renormalised), evaluated anew (metrics.json, predictions.csv)."""
    dst.mkdir(parents=True)
    lines = (src / "scores.jsonl").read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        rec = json.loads(line)
        for lay in rec.get("layouts", {}).values():
            lp = np.array(lay["lp"])
            lp[0] += shift
            lay["lp"] = (lp - np.logaddexp.reduce(lp)).tolist()
        out.append(json.dumps(rec))
    (dst / "scores.jsonl").write_text("\n".join(out) + "\n")
    evaluate_cell(EvaluateJob(FAST), str(dst / "scores.jsonl"), str(dst / "metrics.json"), str(dst / "predictions.csv"))
    return dst


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("two")
    a = root / "a" / "mmlu"
    a.mkdir(parents=True)
    for name in ("scores.jsonl", "provenance.json"):
        shutil.copy(CELL / name, a / name)
    evaluate_cell(EvaluateJob(FAST), str(a / "scores.jsonl"), str(a / "metrics.json"), str(a / "predictions.csv"))
    return [a, another_model(CELL, root / "b" / "mmlu")]


def test_level_minus_raw_is_each_cells_metrics_json(two_models, tmp_path):
    run = read_cells(two_models)
    table = write_differences(run, FAST, ["raw", "L0", "L1"], str(tmp_path / "d.csv"), str(tmp_path / "d.md"))
    assert list(table.columns) == COLUMNS
    mine = table[(table["model"] == table["versus_model"]) & (table["model"] == "a")]
    metrics = json.loads((two_models[0] / "metrics.json").read_text())
    for row in mine.itertuples():
        entry = metrics["level_minus_raw"][row.level][row.metric]
        assert (row.value, row.lo, row.hi) == (entry["value"], entry["lo"], entry["hi"])
        # the point is the difference of the levels' own values
        own = metrics["metrics"]
        assert row.value == pytest.approx(own[row.level][row.metric]["value"] - own["raw"][row.metric]["value"])
    # the run's levels only (metrics.json holds every level the evaluation computes)
    assert set(mine["level"]) == {"L0", "L1"} and set(metrics["level_minus_raw"]) > {"L0", "L1"}
    assert pd.read_csv(tmp_path / "d.csv").shape == table.shape


def test_model_minus_model_pairs_the_same_items(two_models, tmp_path):
    run = read_cells(two_models)
    table = write_differences(run, FAST, ["raw", "L0"], str(tmp_path / "d.csv"), str(tmp_path / "d.md"))
    pairs = table[table["model"] != table["versus_model"]]
    assert set(zip(pairs["model"], pairs["versus_model"], strict=True)) == {("a", "b")}
    assert set(pairs["level"]) == {"raw", "L0"}
    ma, mb = (json.loads((p / "metrics.json").read_text())["metrics"] for p in two_models)
    for row in pairs.itertuples():
        assert row.value == pytest.approx(ma[row.level][row.metric]["value"] - mb[row.level][row.metric]["value"])
        assert row.lo <= row.value <= row.hi
    # the shift moves raw accuracy; its paired interval is narrower than the two cells' own intervals put together
    acc = pairs[(pairs["level"] == "raw") & (pairs["metric"] == "acc")].iloc[0]
    assert acc.value != 0
    assert acc.hi - acc.lo < (ma["raw"]["acc"]["hi"] - ma["raw"]["acc"]["lo"]) + (mb["raw"]["acc"]["hi"] - mb["raw"]["acc"]["lo"])
    md = (tmp_path / "d.md").read_text()
    assert "## One model minus another" in md and "| mmlu | a | b | raw |" in md


def test_the_markdown_marks_intervals_that_exclude_zero():
    frame = pd.DataFrame([{"task": "t", "model": "m", "versus_model": "m", "level": "L0", "versus_level": "raw",
                           "metric": "ece", "value": -0.05, "lo": -0.08, "hi": -0.02, "widened": False},
                          {"task": "t", "model": "m", "versus_model": "m", "level": "L0", "versus_level": "raw",
                           "metric": "acc", "value": 0.01, "lo": -0.03, "hi": 0.05, "widened": False}])
    md = differences_markdown(frame)
    assert "**-0.050 [-0.080, -0.020]**" in md and "+0.010 [-0.030, +0.050]" in md and "**+0.010" not in md


def test_a_task_of_three_models_resamples_each_cell_once(two_models, tmp_path, monkeypatch):
    """The table's cost grows with the cells, not with the pairs of models: each cell's resamples are computed once for
    all its pairs, and a pair's numbers are those of comparing the two cells alone."""
    third = another_model(CELL, tmp_path / "c" / "mmlu", shift=-1.0)
    files = [str(p / "scores.jsonl") for p in [*two_models, third]]
    resampled = []
    real = compare.cell_replicates
    monkeypatch.setattr(compare, "cell_replicates", lambda *args, **kw: resampled.append(args[0]) or real(*args, **kw))
    many = compare_many(files, FAST)
    assert sorted(many) == [(0, 1), (0, 2), (1, 2)]
    assert len(resampled) == 3, f"{len(resampled)} cells resampled for three cells"
    alone = compare_cells(files[1], files[2], FAST)  # the two cells resampled afresh, without the others
    assert len(resampled) == 5
    assert json.dumps(many[(1, 2)], sort_keys=True) == json.dumps(alone, sort_keys=True)
