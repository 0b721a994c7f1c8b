"""The viewer's generator (anyjev/reports/viewer/) and the finished/failed cells helper (anyjev/rundata/layout.py):
the committed results/viewer is what the generator writes from the committed cells, per-item levels are the
library's, a predictions file or a prompt that does not follow from the scores is refused, failed cells name
their error and log. The page itself is tested in a real browser: tests/e2e/test_viewer_browser.py."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from anyjev.cli import main
from anyjev.errors import TaskDataError
from anyjev.numbers.options import EvaluationOptions
from anyjev.reports.viewer import write_viewer
from anyjev.reports.viewer.encoding import Lines, js_data
from anyjev.run.evaluate import evaluate_records, item_levels
from anyjev.rundata.layout import error_line
from tests.unit.test_committed_outputs import differences
from tests.unit.test_evaluation import levels_of, make_records
from tests.viewer_helpers import (
    FAILED_ERROR,
    MODEL,
    RESULTS,
    failed_run,
    layout,
    reference_job,
    reference_tasks,
    run_data,
)

COMMITTED = RESULTS / "viewer"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, str]:
    return reference_tasks(tmp_path_factory.mktemp("tasks"))


@pytest.fixture(scope="module")
def generated(tasks, smollm2_tokenizer, tmp_path_factory) -> Path:
    """The reference run's viewer, written now from the committed cells."""
    out = tmp_path_factory.mktemp("viewer") / "viewer"
    write_viewer(reference_job(tasks), out, tokenizers={MODEL: smollm2_tokenizer})
    return out


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".snakemake_timestamp"}


RUN_SCRIPT = '<script type="application/json" id="anyjev-run">'


def viewer_file(path: Path) -> tuple[str, object]:
    """A viewer file as (its text outside the data, its data): a data file's ``anyjevViewer.load(kind, key, data)``
    arguments, or index.html with its inline run data cut out."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".js":
        head = "anyjevViewer.load("
        assert text.startswith(head) and text.endswith(");\n"), f"{path} is not one anyjevViewer.load(...) call"
        return head, json.loads("[" + text[len(head): -3] + "]")
    start = text.index(RUN_SCRIPT) + len(RUN_SCRIPT)
    end = text.index("</script>", start)
    return text[:start] + text[end:], run_data(path)


def last_digit_apart(a: float, b: float, digits: int = 5) -> bool:
    """A and B differ by at most one unit in the last of DIGITS significant digits: the same value rounded on
    either side of a boundary (a fit's or exp's last bits differ between BLAS builds and SIMD paths)."""
    scale = max(abs(a), abs(b))
    return a == b or abs(a - b) <= 10 ** (math.floor(math.log10(scale)) - digits + 1) * (1 + 1e-9)


def data_differences(want: object, have: object) -> list[str]:
    """Where HAVE differs from WANT: any key, length, string, int or bool, or a float by more than one unit in its
    last stored digit."""
    return differences(want, have, same_float=last_digit_apart)


# ------------------------------------------------------------------------------------------- committed
def test_committed_viewer_is_what_the_generator_writes(generated) -> None:
    """results/viewer cannot go stale: regenerate it with `python -m anyjev viewer` after the cells change."""
    want, have = files(generated), files(COMMITTED)
    assert sorted(have) == sorted(want)
    stale = {}
    for name in (n for n in want if want[n] != have[n]):
        (want_text, want_data), (have_text, have_data) = viewer_file(generated / name), viewer_file(COMMITTED / name)
        found = data_differences(want_data, have_data) if want_text == have_text else ["the text outside the data"]
        if found:
            stale[name] = found[:3]
    assert not stale, f"results/viewer differs from the generator's output: {stale}; run `python -m anyjev viewer`"


def test_committed_viewer_check_allows_a_rounding_boundary_and_nothing_more() -> None:
    """A value rounded on either side of its last stored digit passes (0.30025 / 0.30026: an L1 fit's last bits
    differ between BLAS builds); a value one further, a changed string or a missing entry does not."""
    assert data_differences({"L1": [0.30025, 0.5]}, {"L1": [0.30026, 0.5]}) == []
    assert data_differences({"T": 0.716639}, {"T": 0.71664}) == []
    assert data_differences({"L1": [0.30025]}, {"L1": [0.30027]}) == [".L1[0]: 0.30025 != 0.30027"]
    assert data_differences({"a": 1e-7}, {"a": 1.2e-7}) == [".a: 1e-07 != 1.2e-07"]
    assert data_differences({"a": "x", "n": 3}, {"a": "y", "n": 3}) == [".a: 'x' != 'y'"]
    assert data_differences({"n": 3}, {"n": 3.0}) == [".n: 3 != 3.0"]
    assert data_differences({"l": [1, 2]}, {"l": [1]}) == [".l: 2 items != 1"]
    assert data_differences({"a": 1, "b": 2}, {"a": 1}) == [": keys ['a', 'b'] != ['a']"]


def test_each_finished_cell_has_its_own_data_files_and_the_page_only_run_data(generated) -> None:
    run = run_data(generated / "index.html")
    assert [c["key"] for c in run["cells"]] == [f"{MODEL}/{t}" for t in ("mmlu", "socialiqa", "rotten_tomatoes")]
    for cell in run["cells"]:
        assert cell["status"] == "done"
        for kind, path in cell["files"].items():
            text = (generated / path).read_text()
            assert text.startswith(f'anyjevViewer.load("{kind}","{cell["key"]}",')
    page = (generated / "index.html").read_text()
    assert "mmlu-0105" not in page  # item data is loaded with the cell, not with the page
    assert "http://" not in page and "https://" not in page  # nothing to fetch from a network


# ------------------------------------------------------------------------------------------- the levels
@pytest.mark.parametrize("mode", ["batch", "streaming"])
def test_item_levels_are_the_levels_evaluate_records_scores(mode) -> None:
    rng = np.random.default_rng(3)
    records = make_records(rng, 24, 16, 4) + [r | {"id": f"k3-{r['id']}"} for r in make_records(rng, 20, 12, 3)]
    settings = EvaluationOptions(prior_mode=mode)
    ours = item_levels(records, settings)
    theirs = evaluate_records(records, settings)
    assert ours.ids == theirs.ids
    assert np.array_equal(ours.gold, theirs.gold)
    for level, groups in theirs.point.levels.items():
        for g, lp in groups.items():
            np.testing.assert_array_equal(ours.levels[level][g], lp[0])
    assert ours.temperature == theirs.point.temperature
    assert [p.shape for p in ours.test_prior["fwd"][:2]] == [(4, 4), (4, 4)]
    assert ours.test_prior["fwd"][-1].shape == (3, 3)


def test_item_levels_priors_are_compute_levels_priors() -> None:
    records = make_records(np.random.default_rng(5), 30, 20, 4)
    ours = item_levels(records)
    ref = levels_of(records, None)
    for g in ("fwd", "rev"):
        np.testing.assert_allclose(np.array(ours.test_prior[g]), ref.test_prior[g], rtol=0, atol=1e-15)
        for prior in ours.l1_prior[g]:
            np.testing.assert_allclose(prior, ref.calib_prior[g]["task"], rtol=0, atol=1e-15)
        assert ours.temperature[g] == pytest.approx(ref.temperature[g], rel=1e-12)


# ------------------------------------------------------------------------------------------- refusals
def one_cell(tmp_path: Path, tasks: dict[str, str], task: str = "rotten_tomatoes") -> dict:
    shutil.copytree(RESULTS / "cells" / MODEL / task, tmp_path / "results" / "cells" / MODEL / task)
    return reference_job(tasks, tmp_path / "results", tmp_path / "logs", [(MODEL, task)])


def test_a_predictions_file_that_does_not_follow_from_the_scores_is_refused(tmp_path, tasks, smollm2_tokenizer) -> None:
    job = one_cell(tmp_path, tasks)
    path = tmp_path / "results" / "cells" / MODEL / "rotten_tomatoes" / "predictions.csv"
    rows = list(csv.DictReader(path.open()))
    rows[7]["pred"] = str(1 - int(rows[7]["pred"]))
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(TaskDataError, match=rf"predictions.csv.*line 9.*{rows[7]['item_id']}.*not made from these scores"):
        write_viewer(job, tmp_path / "viewer", tokenizers={MODEL: smollm2_tokenizer})
    assert not (tmp_path / "viewer").exists()


def test_a_prompt_that_is_not_the_scored_one_is_refused(tmp_path, tasks, smollm2_tokenizer) -> None:
    job = one_cell(tmp_path, tasks)
    lines = Path(tasks["rotten_tomatoes"]).read_text().splitlines()
    item = json.loads(lines[1])
    lines[1] = json.dumps(item | {"state": item["state"] + " (edited)"})
    edited = tmp_path / "rotten_tomatoes.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    job = dataclasses.replace(job, tasks={"rotten_tomatoes": str(edited)})
    with pytest.raises(TaskDataError, match=rf"item '{item['id']}'.*stored prompt hash .* not the prompt that was scored"):
        write_viewer(job, tmp_path / "viewer", tokenizers={MODEL: smollm2_tokenizer})


def test_a_cells_notes_are_shown_by_the_viewer_and_the_tables(tmp_path, tasks, smollm2_tokenizer) -> None:
    """A cell whose evaluation refused L1 (here: fewer calibration items than evaluation.min_calib_items asks) says why
    on its card and cell page, in the run page's notes, in summary.md and as a comment of summary.tex; a table that
    does not show L1 leaves that note out."""
    from anyjev.reports.tables import write_summary
    from anyjev.run.evaluate import EvaluateJob, evaluate_cell
    from anyjev.rundata import read_cells

    job = one_cell(tmp_path, tasks)
    cell = tmp_path / "results" / "cells" / MODEL / "rotten_tomatoes"
    evaluate_cell(EvaluateJob(EvaluationOptions(min_calib_items=100)), str(cell / "scores.jsonl"), str(cell / "metrics.json"),
                  str(cell / "predictions.csv"), task_file=tasks["rotten_tomatoes"])
    note = "no L1: 60 calibration items, fewer than evaluation.min_calib_items = 100"
    index = write_viewer(job, tmp_path / "viewer", tokenizers={MODEL: smollm2_tokenizer})
    [data] = run_data(index)["cells"]
    assert data["notes"] == [note] and "L1" not in data["levels"]
    out = {ext: tmp_path / f"summary.{ext}" for ext in ("csv", "md", "tex")}
    write_summary(read_cells([cell]), job.levels, out["csv"], out["md"], out["tex"])
    assert f"**Read with these notes** (each cell's metrics.json):\n\n| model | task | note |\n|---|---|---|\n| {MODEL} | " \
           f"rotten_tomatoes | {note} |" in out["md"].read_text()
    assert f"% {MODEL}/rotten\\_tomatoes: {note}" in out["tex"].read_text()
    write_summary(read_cells([cell]), ["raw", "L0"], out["csv"], out["md"], out["tex"])
    assert "notes" not in out["md"].read_text() and note not in out["tex"].read_text()


# ------------------------------------------------------------------------------------------- failed cells
def test_a_failed_cell_is_shown_with_its_error_line_and_log(tmp_path, tasks, smollm2_tokenizer) -> None:
    job = failed_run(tmp_path, tasks)
    index = write_viewer(job, tmp_path / "viewer", tokenizers={MODEL: smollm2_tokenizer})
    cells = {c["key"]: c for c in run_data(index)["cells"]}
    assert [k for k, c in cells.items() if c["status"] == "done"] == [f"{MODEL}/socialiqa", f"{MODEL}/rotten_tomatoes"]
    assert cells[f"{MODEL}/mmlu"] == {"model": MODEL, "task": "mmlu", "key": f"{MODEL}/mmlu", "status": "failed",
                                      "error": FAILED_ERROR, "log": str(tmp_path / "logs" / "score" / MODEL / "mmlu.log")}
    assert cells["never-ran/mmlu"]["status"] == "failed" and "has not run" in cells["never-ran/mmlu"]["error"]
    assert not (tmp_path / "viewer" / "cells" / MODEL / "mmlu.js").exists()


def test_which_cells_a_rule_waits_for(tmp_path) -> None:
    results, logs = tmp_path / "results", tmp_path / "logs"
    cells = [("m", "done"), ("m", "score-failed"), ("m", "eval-failed"), ("m", "new")]
    (results / "cells" / "m" / "done").mkdir(parents=True)
    (results / "cells" / "m" / "done" / "metrics.json").write_text("{}")
    (results / "cells" / "m" / "eval-failed").mkdir(parents=True)
    (results / "cells" / "m" / "eval-failed" / "scores.jsonl").write_text("")
    for step, task in (("score", "score-failed"), ("evaluate", "eval-failed"), ("score", "eval-failed"), ("score", "done")):
        (logs / step / "m").mkdir(parents=True, exist_ok=True)
        (logs / step / "m" / f"{task}.log").write_text("Traceback (most recent call last):\n  ...\nValueError: bad\n")
    cells_of = layout(results, logs)
    assert [c for c in cells if not cells_of.failed(*c)] == [("m", "done"), ("m", "new")]
    assert cells_of.finished(cells) == [("m", "done")]
    assert cells_of.failure("m", "eval-failed") == {"error": "ValueError: bad", "log": str(logs / "evaluate" / "m" / "eval-failed.log")}
    assert cells_of.paths([("m", "done")], ["metrics.json"]) == [str(results / "cells/m/done/metrics.json")]


@pytest.mark.parametrize(("log", "line"), [
    ("INFO start\nanyjev evaluate: TaskDataError: x:item 'a': bad\n  more\n", "anyjev evaluate: TaskDataError: x:item 'a': bad"),
    ("Traceback (most recent call last):\n  File x\nKeyError: 'k'\nduring handling\nRuntimeError: boom\n", "RuntimeError: boom"),
    ("INFO a\nKilled\n", "Killed"),
    ("", None),
    ("anyjev score: ServerError: " + "x" * 400, "anyjev score: ServerError: " + "x" * 400),  # whole: ids are not cut
])
def test_the_first_line_of_the_error_a_log_ends_with(log, line) -> None:
    assert error_line(log) == line


# ------------------------------------------------------------------------------------------- encoding
def test_prompts_are_stored_exactly_as_lines_shared_by_the_cell() -> None:
    texts = ["Options:\nA. red 🙂\nB. blue\nAnswer.", "Options:\nA. blue\nB. red 🙂\nAnswer.", "", "\n\nx\r\n", "Answer.\n"]
    lines = Lines()
    ids = [lines.add(t) for t in texts]
    assert [lines.text(i) for i in ids] == texts
    assert len(lines.rows) == len({line for t in texts for line in t.split("\n")})


def test_data_files_cannot_break_out_of_their_call() -> None:
    text = js_data("cell", 'm/"t"', {"state": "</script><script>alert(1)</script>\u2028"})
    assert text.startswith('anyjevViewer.load("cell","m/\\"t\\"",{') and text.endswith(");\n")
    assert json.loads(text[text.index("{"): -3]) == {"state": "</script><script>alert(1)</script>\u2028"}


def test_cli_writes_the_viewer_from_the_workflow_settings(tmp_path, tasks, smollm2_dir) -> None:
    job = one_cell(tmp_path, tasks)
    assert main(["viewer", "--job", job.to_json(), "--out", str(tmp_path / "viewer")]) == 0
    assert [c["status"] for c in run_data(tmp_path / "viewer" / "index.html")["cells"]] == ["done"]
    assert (tmp_path / "viewer" / "cells" / MODEL / "rotten_tomatoes.items.js").is_file()


def test_the_docs_figures_are_generated_from_the_committed_benchmark() -> None:
    import importlib.util
    import sys

    repo = RESULTS.parent
    spec = importlib.util.spec_from_file_location("bench_viewer", repo / "bench" / "bench_viewer.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    report = json.loads((repo / "results" / "bench" / "viewer.json").read_text())
    docs = (repo / "docs" / "viewer.md").read_text()
    block = docs[docs.index("<!-- viewer-bench:start"): docs.index("<!-- viewer-bench:end -->")]
    assert bench.markdown(report).strip() in block, "docs/viewer.md's figures differ from their JSON (`python -m bench.report`)"
    assert report["grid"]["n_test"] == 300 and len(report["grid"]["models"]) * len(report["grid"]["tasks"]) == 9
    assert all(row["console_errors"] == 0 and row["requests_off_disk"] == 0 for row in report["browser"].values())


def test_an_adaptive_item_shows_the_rotations_it_did_not_read_as_not_read() -> None:
    from anyjev.reports.viewer.items_page import layout_names, matrix

    lp = [-0.5, -1.5, -2.0, -2.5]
    p = np.exp(lp).tolist()
    layouts = {"fwd/r0": {"p": p, "order": [0, 1, 2, 3], "swapped": False},
               "fwd/r2": {"p": p, "order": [2, 3, 0, 1], "swapped": False}}
    names = layout_names(layouts, 4, True, "fwd")
    assert names == ["fwd/r0", "fwd/r1", "fwd/r2", "fwd/r3"]
    rows, shape = matrix(layouts, 4, "fwd", names)
    assert rows[1] is None and rows[3] is None
    assert shape["order"] == [[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2]]
    np.testing.assert_allclose(rows[2], np.exp([lp[2], lp[3], lp[0], lp[1]]), rtol=1e-4)  # option j was at position order.index(j)


# ------------------------------------------------------------------------------------------- details
def test_a_prior_group_is_named_as_a_person_reads_it() -> None:
    """A declared hub task's prior group is its question's key (a hash): the page shows the question's text,
    shortened, or the task's name when every item shares the question."""
    from anyjev.data.tasks import Item, Task
    from anyjev.decision.questions import choice, noul
    from anyjev.reports.viewer.items_page import prior_group_names

    long = "Which of the following statements about the sentence above is the one a careful reader would pick first?"
    q1, q2 = choice(long, ["a", "b"]), noul("Is it spam?")
    task = Task("mixed", [Item(id=f"i{i}", state="s", question=q, gold=0) for i, q in enumerate([q1, q2, q1])])
    names = prior_group_names(task)
    assert names[q2.key()] == "Is it spam?"
    assert names[q1.key()].startswith("Which of the following") and names[q1.key()].endswith(" …")
    assert len(names[q1.key()]) <= 60 < len(long)
    shared = Task("spam", [Item(id=f"i{i}", state="s", question=q2, gold=0) for i in range(3)])
    assert prior_group_names(shared)[q2.key()] == "spam"
    assert prior_group_names(Task("whole", task.items, prior_group="task"))["whole"] == "whole"


def test_a_damaged_page_template_is_one_error_naming_it(tmp_path, monkeypatch) -> None:
    from anyjev.errors import FileFormatError
    from anyjev.reports.viewer import page

    template = tmp_path / "index.html"
    template.write_text(page.TEMPLATE.read_text().replace("/*RUN*/", ""))
    monkeypatch.setattr(page, "TEMPLATE", template)
    with pytest.raises(FileFormatError, match=rf"{template}:marker /\*RUN\*/: occurs 0 times, must occur once"):
        page.index_html({})


def test_a_prompt_whose_text_does_not_encode_to_the_scored_ids_names_its_item_and_layout(tasks, smollm2_tokenizer,
                                                                                      monkeypatch) -> None:
    from anyjev.data.taskfile import load_task_file
    from anyjev.decision.labels import LabelChecker
    from anyjev.decision.options import PromptOptions
    from anyjev.run import rebuild
    from anyjev.run.prepared import prepare_item

    task = load_task_file(tasks["rotten_tomatoes"])
    item = task.items[0]
    options = PromptOptions()
    prepared = prepare_item(smollm2_tokenizer, LabelChecker(smollm2_tokenizer), item, "g", options)
    monkeypatch.setattr(rebuild, "encode_many", lambda tokenizer, texts: [[0]] * len(texts))
    with pytest.raises(TaskDataError, match=rf"x.jsonl:item '{item.id}' layout fwd/r0: the rendered text does not encode"):
        rebuild.render_prepared(smollm2_tokenizer, prepared, options, source="x.jsonl")


def test_models_sharing_a_tokenizer_rebuild_each_task_once_and_every_cell_is_checked(tasks, tmp_path, monkeypatch) -> None:
    """Two models whose tokenizer folder is the same: each task's test items are rendered and tokenised once for
    both, both get the same prompts, and a cell whose stored hash is not its prompt's is still refused."""
    from anyjev.run import rebuild
    from anyjev.rundata.scores import is_test, read_scores
    from tests.viewer_helpers import TASKS

    results, logs = tmp_path / "results", tmp_path / "logs"
    for model in (MODEL, "twin"):
        for task in TASKS:
            shutil.copytree(RESULTS / "cells" / MODEL / task, results / "cells" / model / task)
    job = reference_job(tasks, results, logs, [(m, t) for m in (MODEL, "twin") for t in TASKS])
    assert job.tokenizers["twin"] == job.tokenizers[MODEL]
    built: list[str] = []
    prepare = rebuild.prepare_items
    monkeypatch.setattr(rebuild, "prepare_items",
                        lambda tok, items, *a, **kw: (built.extend(it.id for it in items), prepare(tok, items, *a, **kw))[1])
    write_viewer(job, tmp_path / "viewer")

    test_ids = [rec["id"] for task in TASKS
                for rec in read_scores(RESULTS / "cells" / MODEL / task / "scores.jsonl").items if is_test(rec)]
    assert sorted(built) == sorted(test_ids)  # once each, not once per model
    for task in TASKS:
        ours, twins = (viewer_file(tmp_path / "viewer" / "cells" / m / f"{task}.items.js")[1][2] for m in (MODEL, "twin"))
        assert [i["prompts"] for i in ours["items"].values()] == [i["prompts"] for i in twins["items"].values()]
        assert ours["lines"] == twins["lines"]

    scores = results / "cells" / "twin" / "socialiqa" / "scores.jsonl"
    lines = scores.read_text().splitlines(keepends=True)
    record = json.loads(lines[1])
    layout_name = next(iter(record["layouts"]))
    record["layouts"][layout_name]["prompt_sha"] = "0" * 16
    scores.write_text(lines[0] + json.dumps(record) + "\n" + "".join(lines[2:]))
    with pytest.raises(TaskDataError, match=rf"{scores}:line 2: item '{record['id']}' layout {layout_name}: stored prompt "
                                            rf"hash 0{{16}}"):
        write_viewer(job, tmp_path / "viewer")
