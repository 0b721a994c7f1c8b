"""The run reader (anyjev/rundata/): a run's frames equal its files, every value, on the committed reference run
(the files read here with json and csv alone); a failed cell is a row with its error line and log; a file that is
missing, empty or malformed is one error naming it (never a parser's traceback), from the library and from the
`anyjev viewer` command; whatever metrics.json holds per level becomes a column."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anyjev.cli import main
from anyjev.errors import FileFormatError
from anyjev.rundata import read_cells, read_run
from anyjev.rundata.allocations import read_allocation
from anyjev.rundata.cellfiles import read_metrics, read_predictions, read_provenance
from anyjev.rundata.replicates import read_replicates
from anyjev.rundata.scores import read_scores
from anyjev.rundata.summary import read_published, read_summary, read_vs_published
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
        audit = m["audit"]  # the batch audit's numbers: what it read, what moved, what changed at each level, its cost
        want |= {"audit_items": audit["items"], "audit_max_abs_logprob_diff": audit["max_abs_logprob_diff"]}
        want |= {f"audit_changed_{level}": n for level, n in audit["changed"].items()}
        want |= {f"audit_cost_{k}": v for k, v in audit["cost"].items()}
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


# Every kind of file of a run, read through its one reader: (reader, file name, its malformed text, where that is).
SCORES_HEAD = '{"type": "header", "format": "anyjev.scores/1", "identity": {}}\n'
ALLOCATION_HEAD = '{"format": "anyjev.allocation/1", "model": "m", "cells": '
READERS = {
    "scores.jsonl": (read_scores, SCORES_HEAD + '{"type": "item", "id": "a"}\n', "line 2: item record lacks 'gold'"),
    "metrics.json": (read_metrics, "[1, 2]", "line 1: a JSON list, not an object"),
    "predictions.csv": (read_predictions, "item_id,level\nrt-1,raw\n", "line 1: the header lacks column(s) group"),
    "provenance.json": (read_provenance, '{"vllm_version": ', "line 1: not JSON"),
    "replicates.npz": (read_replicates, "PK not an archive", "file: not a replicates file"),
    "allocation.json": (read_allocation, ALLOCATION_HEAD + '{"t": {"status": "ok"}}}', "cells.t: the outcome lacks 'scores'"),
    "summary.csv": (read_summary, "model,task,level\nm,t,raw\n", "line 1: the header lacks column(s) n, K, acc"),
    "published.csv": (read_published, "# source\nmodel,task,level,metric,value\nm,t,raw,acc,high\n",
                      "line 3: column value is 'high', not a number"),
    "vs_published.csv": (read_vs_published, "model,task\nm,t\n", "line 1: the header lacks column(s) level"),
}
# What an empty one is refused as (a provenance.json may be missing: a cell scored outside the workflow has none).
EMPTY = {"scores.jsonl": "line 1: empty scores file", "replicates.npz": "file: empty file"}
CSV_EMPTY = "line 1: empty file (no header line"


@pytest.mark.parametrize("kind", ["missing", "empty", "malformed"])
@pytest.mark.parametrize("name", sorted(READERS))
def test_every_file_of_a_run_read_bad_is_one_error_naming_it(tmp_path: Path, name: str, kind: str) -> None:
    """Missing, empty (zero bytes) or malformed, each kind of file of a run is refused by its reader as one
    FileFormatError line that starts with the file's path and says where in it, never a parser's own exception."""
    reader, malformed, where = READERS[name]
    path = tmp_path / name
    if kind == "missing" and name == "provenance.json":
        assert reader(path) == {}
        return
    if kind != "missing":
        path.write_text({"empty": "", "malformed": malformed}[kind])
    want = {"missing": "file: missing", "malformed": where,
            "empty": EMPTY.get(name, CSV_EMPTY if name.endswith(".csv") else "line 1: empty file")}[kind]
    with pytest.raises(FileFormatError) as err:
        reader(path)
    assert type(err.value) is FileFormatError and str(err.value).startswith(f"{path}:{want}"), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("lines", "where"), [
    ([SCORES_HEAD.strip(), '{"type": "probe", "id": "p"}'], "line 2: record type 'probe' is none of item, content_free"),
    ([SCORES_HEAD.strip(), '{"type": "audit", "id": "x"}', '{"type": "audit", "id": "x"}'],
     "line 3: a second audit record with id 'x'"),
    ([SCORES_HEAD.strip(), '{"type": "item", "id": "a", "gold": 0'], "line 2: not JSON"),
    (['{"type": "header", "format": "anyjev.scores/0", "identity": {}}'], "line 1: not an anyjev.scores/1 file"),
    (['{"type": "header", "format": "anyjev.scores/1", "identity": []}'], "line 1: the header's identity is not an object"),
])
def test_a_scores_file_is_checked_record_by_record(tmp_path: Path, lines: list[str], where: str) -> None:
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(FileFormatError, match=re.escape(f"{path}:{where}")):
        read_scores(path)


def test_a_job_record_of_another_format_or_status_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"format": "anyjev.scores/1", "model": "m", "cells": {}}')
    with pytest.raises(FileFormatError, match=re.escape(f"{path}:format: is 'anyjev.scores/1', not 'anyjev.allocation/1'")):
        read_allocation(path)
    path.write_text(ALLOCATION_HEAD + '{"t": {"status": "lost"}}}')
    with pytest.raises(FileFormatError, match=re.escape(f"{path}:cells.t.status: is 'lost', not ok or failed")):
        read_allocation(path)


def test_the_viewer_command_names_a_malformed_file_in_one_line(tmp_path, capsys) -> None:
    from tests.viewer_helpers import reference_job

    broken_cell(tmp_path / "results" / "cells", "predictions.csv", "\n")  # a 1-byte CSV
    # the task path does not exist: a cell's predictions.csv is checked before its task is read
    job = reference_job({"rotten_tomatoes": "unused"}, tmp_path / "results", tmp_path / "logs", [(MODEL, "rotten_tomatoes")])
    assert main(["viewer", "--job", job.to_json(), "--out", str(tmp_path / "viewer")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("anyjev viewer: FileFormatError: ") and "predictions.csv:line 1: empty file" in err[-1]
    assert "Traceback" not in "\n".join(err)
