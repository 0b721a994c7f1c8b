"""The differences table (anyjev/reports/differences.py): every level minus raw from each cell's metrics.json, and one
model minus another on the same task, each with its paired interval; the run reader's frame of them."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import anyjev.numbers.compare as compare
from anyjev.errors import FileFormatError
from anyjev.numbers.options import EvaluationOptions
from anyjev.paths import REPLICATES
from anyjev.reports.differences import COLUMNS, differences_markdown, write_differences
from anyjev.run.evaluate import EvaluateJob, compare_cells, compare_many, evaluate_cell
from anyjev.run.records import cell_groups
from anyjev.rundata import read_cells
from anyjev.rundata.replicates import read_replicates
from anyjev.rundata.scores import read_scores

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
    evaluate(dst)
    return dst


def evaluate(cell: Path) -> None:
    """The evaluate job on CELL's scores, as the workflow runs it: metrics, predictions and replicates."""
    evaluate_cell(EvaluateJob(FAST), str(cell / "scores.jsonl"), str(cell / "metrics.json"), str(cell / "predictions.csv"),
                  str(cell / REPLICATES))


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("two")
    a = root / "a" / "mmlu"
    a.mkdir(parents=True)
    for name in ("scores.jsonl", "provenance.json"):
        shutil.copy(CELL / name, a / name)
    evaluate(a)
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


def as_text(pairs: dict) -> str:
    """compare_many's pairs as JSON text (every float's repr): equal text, equal numbers to the last bit."""
    return json.dumps({str(k): v for k, v in pairs.items()}, sort_keys=True)


def counting_resamples(monkeypatch) -> list:
    """The cells anyjev.numbers.compare resamples from here on (each call's K groups)."""
    resampled: list = []
    real = compare.cell_replicates
    monkeypatch.setattr(compare, "cell_replicates", lambda *args, **kw: resampled.append(args[0]) or real(*args, **kw))
    return resampled


def test_the_table_pairs_each_cells_own_replicates_and_they_are_a_resampling_s_numbers(two_models, tmp_path,
                                                                                        monkeypatch):
    """The differences table resamples no cell whose evaluation kept its replicates, and its numbers are those of
    resampling both cells afresh, to the last bit."""
    files = [str(p / "scores.jsonl") for p in two_models]
    fresh = compare_many(files, FAST)
    resampled = counting_resamples(monkeypatch)
    kept = compare_many(files, FAST, replicates=[str(p / REPLICATES) for p in two_models])
    assert resampled == [], f"{len(resampled)} cells resampled although both kept their replicates"
    assert as_text(kept) == as_text(fresh)
    table = write_differences(read_cells(two_models), FAST, ["raw", "L0", "L1"], str(tmp_path / "d.csv"),
                              str(tmp_path / "d.md"))
    assert resampled == [] and len(table[table["model"] != table["versus_model"]]) > 0


def test_replicates_of_other_scores_or_other_settings_are_not_used(two_models, tmp_path, monkeypatch, caplog):
    """A replicates file made from another scores file (a rescored cell whose evaluation did not run again) or under
    other evaluation settings is passed over, with a warning naming it: the cell is resampled, and the numbers are
    right."""
    a, b = (tmp_path / name for name in ("a", "b"))
    for src, dst in zip(two_models, (a, b), strict=True):
        shutil.copytree(src, dst)
    shutil.copy(b / REPLICATES, a / REPLICATES)  # a's file now holds b's replicates
    files, kept = [str(a / "scores.jsonl"), str(b / "scores.jsonl")], [str(a / REPLICATES), str(b / REPLICATES)]
    resampled = counting_resamples(monkeypatch)
    with caplog.at_level("WARNING", logger="anyjev.run.replicates"):
        pairs = compare_many(files, FAST, replicates=kept)
    assert len(resampled) == 1 and f"{a / REPLICATES} was made from another scores file" in caplog.text
    assert as_text(pairs) == as_text(compare_many(files, FAST))
    other = EvaluationOptions(n_boot=1001)
    resampled.clear()
    caplog.clear()
    with caplog.at_level("WARNING", logger="anyjev.run.replicates"):
        compare_many(files, other, replicates=kept)
    assert len(resampled) == 2 and f"{b / REPLICATES} was made from another evaluation" in caplog.text


def test_a_pair_resampling_other_calibration_rows_than_a_cells_evaluation_resamples_that_cell(two_models, monkeypatch):
    """Kept replicates are used only for the calibration rows they were resampled on."""
    _, kept = read_replicates(two_models[0] / REPLICATES)
    assert any(kept.calib), "the cell's evaluation resampled no calibration rows: nothing to tell apart"
    elsewhere = dataclasses.replace(kept, calib=tuple(not c for c in kept.calib))
    groups = [cell_groups(read_scores(str(p / "scores.jsonl")).items, None, FAST.prior_mode, "test").groups for p in two_models]
    resampled = counting_resamples(monkeypatch)
    compare.models_minus_models(groups, FAST, known=[kept, None])
    assert len(resampled) == 1  # the second cell only
    compare.models_minus_models(groups, FAST, known=[elsewhere, None])
    assert len(resampled) == 3


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not a zip", b"\x93NUMPY"])
def test_a_replicates_file_that_is_not_one_is_refused_naming_it(two_models, tmp_path, content):
    broken = tmp_path / REPLICATES
    broken.write_bytes(content)
    with pytest.raises(FileFormatError, match=str(broken)):
        compare_many([str(p / "scores.jsonl") for p in two_models], FAST,
                     replicates=[str(broken), str(two_models[1] / REPLICATES)])


def test_the_evaluation_writes_the_same_replicates_file_twice(two_models, tmp_path):
    again = tmp_path / "again"
    again.mkdir()
    shutil.copy(two_models[0] / "scores.jsonl", again / "scores.jsonl")
    evaluate(again)
    assert (again / REPLICATES).read_bytes() == (two_models[0] / REPLICATES).read_bytes()
    assert (again / "metrics.json").read_bytes() == (two_models[0] / "metrics.json").read_bytes()
