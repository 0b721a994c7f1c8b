"""The run reader (anyjev/rundata/): a run's frames equal its files, every value, on the committed reference run
(the files read here with json and csv alone); a failed cell is a row with its error line and log; a file that is
missing, empty or malformed is one error naming it (never a parser's traceback), from the library and from the
`anyjev viewer` command; whatever metrics.json holds per level becomes a column."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anyjev.cli import main
from anyjev.errors import FileFormatError
from anyjev.reports.tables import read_published, read_summary
from anyjev.rundata import read_cells, read_run
from tests.viewer_helpers import FAILED_ERROR, MODEL, RESULTS, TASKS, failed_run

CELLS = [RESULTS / "cells" / MODEL / t for t in TASKS]


@pytest.fixture(scope="module")
def run():
    return read_run(RESULTS, RESULTS.parent / "logs", cells=[(MODEL, t) for t in TASKS])


def metrics_of(task: str) -> dict:
    return json.loads((RESULTS / "cells" / MODEL / task / "metrics.json").read_text())


def records_of(task: str) -> list[dict]:
    lines = (RESULTS / "cells" / MODEL / task / "scores.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines[1:]) if r.get("type") == "item"]


def same(a: object, b: object) -> bool:
    """Equal values; a missing value in a frame (NaN, None, NA) equals a missing one in a file."""
    if a is None or (isinstance(a, float) and math.isnan(a)) or a is pd.NA:
        return b is None or (isinstance(b, float) and math.isnan(b)) or b is pd.NA
    return a == b and (isinstance(a, bool) == isinstance(b, bool) or not isinstance(a, bool | np.bool_))


# ------------------------------------------------------------------------------ the frames equal the files
def test_the_cells_frame_is_each_cells_metrics_and_provenance(run) -> None:
    cells = run.cells
    assert list(zip(cells["model"], cells["task"], strict=True)) == [(MODEL, t) for t in TASKS]
    for row, task in zip(cells.to_dict("records"), TASKS, strict=True):
        m = metrics_of(task)
        prov = json.loads((RESULTS / "cells" / MODEL / task / "provenance.json").read_text())
        want = {"status": "done", "n": m["n"], "n_calib": m["n_calib"], "K": m["k"], "levels": ",".join(m["levels"]),
                "prompt_profile": m["identity"]["prompt_profile"]["name"], "prior_mode": m["settings"]["prior_mode"],
                "prior_source": m["settings"]["prior_source"], "interval": m["settings"]["interval"],
                "n_boot": m["settings"]["n_boot"], "resampled": m["settings"]["resampled"], "notes": m["notes"],
                "task_sha256": m["identity"]["task_sha256"], "served_model": m["identity"]["model"]["served_name"],
                "vllm_version": prov["vllm_version"], "git_commit": prov["git"]["commit"], "git_dirty": prov["git"]["dirty"],
                "started": prov["started"], "finished": prov["finished"], "seconds": prov["seconds"],
                "folder": str(RESULTS / "cells" / MODEL / task), "error": None, "log": None}
        want |= {("answer_mass" if k == "value" else f"answer_mass_{k}"): v for k, v in m["answer_mass"].items()}
        for g, fit in m["temperature"].items():
            want |= {(f"T_{g}" if k == "T" else f"T_{g}_{k}"): v for k, v in fit.items()}
        assert set(row) == {"model", "task", *want}
        for key, value in want.items():
            assert same(row[key], value), (task, key, row[key], value)


def test_the_metrics_frame_is_every_entry_of_every_level(run) -> None:
    seen = 0
    frame = run.metrics.set_index(["model", "task", "level", "metric"])
    for task in TASKS:
        m = metrics_of(task)
        for level in m["levels"]:
            for metric, entry in m["metrics"][level].items():
                row = frame.loc[(MODEL, task, level, metric)]
                assert {k: row[k] for k in entry} == entry, (task, level, metric)
                seen += 1
    assert seen == len(run.metrics) == 3 * 5 * 9


def test_the_predictions_frame_is_every_row_of_predictions_csv(run) -> None:
    rows = []
    for task in TASKS:
        with open(RESULTS / "cells" / MODEL / task / "predictions.csv", newline="") as fh:
            rows += [{"model": MODEL, "task": task} | r for r in csv.DictReader(fh)]
    frame = run.predictions
    assert list(frame.columns) == ["model", "task", "item_id", "level", "group", "gold", "pred", "conf", "p_gold", "n_top"]
    assert len(frame) == len(rows)
    for got, want in zip(frame.to_dict("records"), rows, strict=True):
        assert got == {k: (int(v) if k in ("gold", "pred", "n_top") else float(v) if k in ("conf", "p_gold") else v)
                       for k, v in want.items()}


def test_the_items_and_probabilities_frames_are_every_record_of_scores_jsonl(run) -> None:
    items = run.items.to_dict("records")
    probabilities = run.probabilities.itertuples(index=False)
    n_items = 0
    for task in TASKS:
        for rec in records_of(task):
            item = items[n_items]
            n_items += 1
            assert {k: item[k] for k in ("model", "task", "item_id", "split", "gold", "k", "prior_group", "question_key",
                                         "labels", "label_ids", "label_kind", "answer_mass", "adaptive")} == {
                "model": MODEL, "task": task, "item_id": rec["id"], "split": rec["split"], "gold": rec["gold"], "k": rec["k"],
                "prior_group": rec["group"], "question_key": rec["question"], "labels": rec["labels"],
                "label_ids": rec["label_ids"], "label_kind": rec["label_kind"], "answer_mass": rec.get("answer_mass"),
                "adaptive": rec.get("adaptive")}
            for name, lay in rec["layouts"].items():
                for pos in range(rec["k"]):
                    p = next(probabilities)
                    assert (p.model, p.task, p.item_id, p.split, p.layout, p.swapped, p.prompt_sha, p.position, p.label,
                            p.option, p.lp) == (MODEL, task, rec["id"], rec["split"], name, lay["swapped"], lay["prompt_sha"],
                                                pos, rec["labels"][pos], lay["order"][pos], lay["lp"][pos])
                    assert (p.group, p.rotation) == (name.split("/r")[0], int(name.split("/r")[1]))
                    assert p.p == pytest.approx(math.exp(lay["lp"][pos]), rel=1e-15)  # numpy's exp, to its last bit
    assert n_items == len(items) == 3 * 160
    assert next(probabilities, None) is None


def test_a_failed_cell_is_a_row_with_its_error_line_and_log(tmp_path) -> None:
    job = failed_run(tmp_path, dict.fromkeys(TASKS, ""))
    run = read_run(tmp_path / "results", tmp_path / "logs", cells=job.cells)
    assert [c.task for c in run.finished] == ["socialiqa", "rotten_tomatoes"]
    failed = run.failed.to_dict("records")
    assert failed[0] == {"model": MODEL, "task": "mmlu", "error": FAILED_ERROR,
                         "log": str(tmp_path / "logs" / "score" / MODEL / "mmlu.log")}
    assert failed[1]["model"] == "never-ran" and "has not run" in failed[1]["error"]
    assert list(run.cells["status"]) == ["failed", "done", "done", "failed"]
    assert run.cells["n"].tolist()[1:3] == [100, 100]  # counts stay integers beside the failed cells
    assert set(run.predictions["task"]) == {"socialiqa", "rotten_tomatoes"}
    # read without its config: the cells found there (a folder or a log), the one that never ran unknown
    found = read_run(tmp_path / "results", tmp_path / "logs")
    assert found.order == [(MODEL, "mmlu"), (MODEL, "rotten_tomatoes"), (MODEL, "socialiqa")]
    assert list(found.failures) == [(MODEL, "mmlu")]
    with pytest.raises(FileFormatError, match=f"{MODEL}/mmlu:cell: not finished: anyjev score: LabelTokenError"):
        found.require_finished()


def test_cell_folders_read_as_a_run() -> None:
    run = read_cells(CELLS)
    assert [c.key for c in run.finished] == [f"{MODEL}/{t}" for t in TASKS]
    assert run.metrics.equals(read_run(RESULTS, cells=[(MODEL, t) for t in TASKS]).metrics)


def test_whatever_metrics_json_holds_per_level_is_a_column(tmp_path) -> None:
    """A field the evaluation adds to an entry (say a paired difference with raw, with its interval) becomes columns
    of the metrics frame without the reader naming it."""
    m = metrics_of("mmlu")
    m["metrics"]["L0"]["acc"]["minus_raw"] = {"value": -0.03, "lo": -0.1, "hi": 0.05}
    m["metrics"]["L0"]["ece_gap"] = 0.25
    cell = tmp_path / MODEL / "mmlu"
    shutil.copytree(RESULTS / "cells" / MODEL / "mmlu", cell)
    (cell / "metrics.json").write_text(json.dumps(m))
    frame = read_cells([cell]).metrics.set_index(["level", "metric"])
    assert frame.loc[("L0", "acc"), ["minus_raw", "minus_raw_lo", "minus_raw_hi"]].tolist() == [-0.03, -0.1, 0.05]
    assert frame.loc[("L0", "ece_gap"), "value"] == 0.25
    assert math.isnan(frame.loc[("raw", "acc"), "minus_raw"])


# ------------------------------------------------------------------------------ malformed files
def broken_cell(tmp_path: Path, name: str, text: str) -> Path:
    cell = tmp_path / MODEL / "rotten_tomatoes"
    shutil.copytree(RESULTS / "cells" / MODEL / "rotten_tomatoes", cell)
    (cell / name).write_text(text)
    return cell


PREDICTIONS_HEAD = "item_id,level,group,gold,pred,conf,p_gold,n_top\n"


@pytest.mark.parametrize(("name", "text", "frame", "where"), [
    ("metrics.json", "", "metrics", "metrics.json:line 1: empty file"),
    ("metrics.json", '{"n": 3,', "metrics", "metrics.json:line 1: not JSON"),
    ("metrics.json", "[1, 2]", "metrics", "metrics.json:line 1: a JSON list, not an object"),
    ("metrics.json", '{"n": 3}', "metrics", "metrics.json:n_calib: missing"),
    ("predictions.csv", "\n", "predictions", "predictions.csv:line 1: empty file"),
    ("predictions.csv", PREDICTIONS_HEAD, "predictions", "predictions.csv:line 2: no rows"),
    ("predictions.csv", "item_id,level\nrt-1,raw\n", "predictions", "predictions.csv:line 1: the header lacks column"),
    ("predictions.csv", PREDICTIONS_HEAD + "rt-1,raw,fwd,0,1,0.5,0.5,1\nrt-2,raw,fwd,x,1,0.5,0.5,1\n", "predictions",
     "predictions.csv:line 3: column gold is 'x', not an integer"),
    ("scores.jsonl", "", "items", "scores.jsonl:line 1: empty scores file"),
    ("scores.jsonl", "{not json\n", "probabilities", "scores.jsonl:line 1: not JSON"),
    ("scores.jsonl", '{"type": "header", "format": "anyjev.scores/1", "identity": {}}\n{"type": "item", "id": "a"}\n',
     "items", "scores.jsonl:line 2: item record lacks 'gold'"),
])
def test_a_malformed_file_is_one_error_naming_it(tmp_path, name, text, frame, where) -> None:
    run = read_cells([broken_cell(tmp_path, name, text)])
    with pytest.raises(FileFormatError) as err:
        getattr(run, frame)
    assert where in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(str(tmp_path))


def test_a_missing_table_or_an_empty_one_is_one_error_naming_it(tmp_path) -> None:
    (tmp_path / "summary.csv").write_text("")
    with pytest.raises(FileFormatError, match=r"summary.csv:line 1: empty file"):
        read_summary(tmp_path / "summary.csv")
    (tmp_path / "summary.csv").write_text("model,task,level\nm,t,raw\n")
    with pytest.raises(FileFormatError, match=r"summary.csv:line 1: the header lacks column\(s\) n, K, acc"):
        read_summary(tmp_path / "summary.csv")
    with pytest.raises(FileFormatError, match=r"published.csv:file: missing"):
        read_published(tmp_path / "published.csv")


def test_the_viewer_command_names_a_malformed_file_in_one_line(tmp_path, capsys) -> None:
    from tests.viewer_helpers import reference_job

    broken_cell(tmp_path / "results" / "cells", "predictions.csv", "\n")  # a 1-byte CSV
    # the task path does not exist: a cell's predictions.csv is checked before its task is read
    job = reference_job({"rotten_tomatoes": "unused"}, tmp_path / "results", tmp_path / "logs", [(MODEL, "rotten_tomatoes")])
    assert main(["viewer", "--job", job.to_json(), "--out", str(tmp_path / "viewer")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("anyjev viewer: FileFormatError: ") and "predictions.csv:line 1: empty file" in err[-1]
    assert "Traceback" not in "\n".join(err)
