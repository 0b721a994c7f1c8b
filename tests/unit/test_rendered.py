"""anyjev/run/rendered.py: a model job's prompts rendered ahead (``render_prompts: ahead``), and read by its scoring job.

Checked: a rendered cell is what the scoring job would prepare (items and content-free probes); it is taken only under
the cell's own identity (another task file, definition or tokenizer: the job renders the cell itself); a file that is
not one is named; and the scoring job of a cell rendered ahead loads no tokenizer and writes the same scores, byte for
byte, as the job that renders its prompts itself. The workflow's render_prompts rule runs in
tests/e2e/test_score_jobs.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
from pathlib import Path

import pytest
import yaml

from anyjev.data.taskfile import load_task_file
from anyjev.decision import tokenizer as tokenizer_module
from anyjev.errors import FileFormatError
from anyjev.run import rendered
from anyjev.run.cell import score_job
from anyjev.run.prepared import prepare_items
from anyjev.run.probes import prepare_content_free
from anyjev.settings import Settings
from tests.stub_http import StubCompletions

ROWS = {
    "colours": [{"task": "colours"},
                {"id": "c1", "state": "A red apple.", "question": "Which colour is the fruit?",
                 "options": ["red", "Blue", "green"], "gold": "red", "split": "test"},
                {"id": "c2", "state": "The sky at noon.", "question": "Which colour is the sky?",
                 "options": ["Blue", "red", "green"], "gold": "Blue", "split": "calib"},
                {"id": "c3", "state": "Grass.", "question": "Which colour is it?",
                 "options": ["green", "red", "Blue", "amber"], "gold": "green", "split": "test"}],
    "spam": [{"task": "spam"},
             {"id": "n1", "state": "WIN A FREE PHONE", "question": "Is this message spam?", "kind": "noul", "gold": "Yes",
              "split": "test"},
             {"id": "n2", "state": "Lunch at noon?", "question": "Is this message spam?", "kind": "noul", "gold": "No",
              "split": "calib"}],
}


def _cells(root: Path, model: dict, **top) -> dict:
    """The model job's cells (as the workflow builds them) of a config of both tasks under ROOT."""
    root.mkdir(parents=True, exist_ok=True)
    for task, rows in ROWS.items():
        (root / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({
        "models": {"m": model},
        "tasks": {t: {"source": "file", "path": str(root / f"{t}.jsonl"), "n_test": 2, "n_calib": 1} for t in ROWS},
        "levels": ["raw", "L0", "L0-cf"], "published": None, **top}))
    return Settings.load(config).model_cells(
        "m", models_dir="unused", server_log=str(root / "server.log"), state_dir=str(root / "state"),
        task_file=str(root / "{task}.jsonl"), staged=str(root / "staged/{task}"), hub_cache="hub", lock_record="lock.yaml")


def _rendered(cells: dict, out: Path, task: str) -> rendered.RenderedCell | None:
    cell = cells[task]
    return rendered.RenderedPrompts(out).cell(task, cell.definition, cell.task_file, cell.job.tokenizer)


def test_a_rendered_cell_is_what_its_job_would_prepare(tmp_path, smollm2_dir, smollm2_tokenizer):
    cells = _cells(tmp_path, {"source": "local", "path": str(smollm2_dir)})
    out = tmp_path / "prompts.pickle"
    assert rendered.render_cells(cells, out) == {"colours": "rendered", "spam": "rendered"}
    for task, cell in cells.items():
        task_data = load_task_file(cell.task_file)
        options = cell.job.scoring
        assert options.content_free, "L0-cf reads the content-free probes: they are rendered too"
        prepared = prepare_items(smollm2_tokenizer, task_data.items, task_data.prior_groups(), options.prompt)
        ahead = _rendered(cells, out, task)
        assert ahead is not None and ahead.prepared == prepared
        assert ahead.probes == prepare_content_free(smollm2_tokenizer, prepared, options.prompt) and ahead.probes


def test_a_rendered_cell_is_taken_only_under_its_own_identity(tmp_path, smollm2_dir, caplog):
    cells = _cells(tmp_path, {"source": "local", "path": str(smollm2_dir)})
    out = tmp_path / "prompts.pickle"
    rendered.render_cells(cells, out)
    caplog.set_level(logging.WARNING, logger="anyjev.run.rendered")
    colours = cells["colours"]
    prompts = rendered.RenderedPrompts(out)
    assert prompts.cell("colours", "another definition", colours.task_file, colours.job.tokenizer) is None
    assert "rendered from another definition than this job's" in caplog.text
    caplog.clear()
    other_tokenizer = tmp_path / "tokenizer"
    other_tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (other_tokenizer / name).write_bytes((smollm2_dir / name).read_bytes())
    (other_tokenizer / "tokenizer_config.json").write_text(
        json.dumps(json.loads((smollm2_dir / "tokenizer_config.json").read_text()) | {"chat_template": "{{ 1 }}"}))
    assert prompts.cell("colours", colours.definition, colours.task_file, str(other_tokenizer)) is None
    assert "another rendering than this job's" in caplog.text
    caplog.clear()
    with open(colours.task_file, "a") as fh:  # the task file built again, with another item
        fh.write(json.dumps({"id": "c4", "state": "Snow.", "question": "Which colour?", "options": ["white", "red"],
                             "gold": "white", "split": "test"}) + "\n")
    assert prompts.cell("colours", colours.definition, colours.task_file, colours.job.tokenizer) is None
    assert "another task_sha256 than this job's" in caplog.text
    assert prompts.cell("spam", cells["spam"].definition, cells["spam"].task_file, cells["spam"].job.tokenizer)
    assert prompts.cell("absent", "d", colours.task_file, colours.job.tokenizer) is None
    assert "holds no prompts of cell absent" in caplog.text
    Path(colours.task_file).unlink()  # the job's own reading of it names the file
    assert prompts.cell("colours", colours.definition, colours.task_file, colours.job.tokenizer) is None
    assert f"the prompts of cell colours are not read ([Errno 2] No such file or directory: '{colours.task_file}')" \
        in caplog.text


def test_a_cell_that_cannot_be_rendered_is_left_to_its_job(tmp_path, smollm2_dir, caplog):
    cells = _cells(tmp_path, {"source": "local", "path": str(smollm2_dir)})
    Path(cells["spam"].task_file).write_text("not a task file\n")
    out = tmp_path / "prompts.pickle"
    outcomes = rendered.render_cells(cells, out)
    assert outcomes == {"colours": "rendered", "spam": "left to the scoring job: TaskDataError"}
    assert _rendered(cells, out, "spam") is None and _rendered(cells, out, "colours") is not None


def test_a_file_that_holds_no_rendered_prompts_is_named(tmp_path):
    bad = tmp_path / "prompts.pickle"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(FileFormatError, match=rf"{bad}:file: not a file of rendered prompts"):
        rendered.RenderedPrompts(bad)
    bad.write_bytes(pickle.dumps({"format": "anyjev-rendered-prompts/0", "cells": {}}))
    with pytest.raises(FileFormatError, match=":format: rendered prompts of format 'anyjev-rendered-prompts/0', not"):
        rendered.RenderedPrompts(bad)


def test_a_job_reading_rendered_prompts_loads_no_tokenizer_and_writes_the_same_scores(tmp_path, smollm2_dir,
                                                                                    monkeypatch):
    """The same cells scored from the same stub server, once rendering their prompts and once reading them rendered
    ahead: the same scores files, byte for byte, and the second job never loads a tokenizer."""
    with StubCompletions() as stub:
        stub.served_names = ["m"]
        model = {"source": "url", "url": stub.url, "tokenizer": str(smollm2_dir)}
        scores: dict[str, dict[str, bytes]] = {}
        for how in ("job", "ahead"):
            cells = _cells(tmp_path / how, model)
            ahead = None
            if how == "ahead":
                rendered.render_cells(cells, tmp_path / "prompts.pickle")
                ahead = rendered.RenderedPrompts(tmp_path / "prompts.pickle")

                def refused(*args, **kwargs):
                    raise AssertionError("the scoring job loaded a tokenizer")

                monkeypatch.setattr(tokenizer_module, "load_tokenizer", refused)
            scores[how] = {}
            for task, cell in cells.items():
                given = ahead.cell(task, cell.definition, cell.task_file, cell.job.tokenizer) if ahead else None
                assert (given is not None) == (how == "ahead")
                out = tmp_path / how / f"{task}.scores.jsonl"
                counts = score_job(dataclasses.replace(cell.job), cell.task_file, out, None, owner_pid=1, rendered=given)
                assert counts["scored"] == counts["items"] > 0
                scores[how][task] = out.read_bytes()
    assert {t: _timeless(s) for t, s in scores["ahead"].items()} == {t: _timeless(s) for t, s in scores["job"].items()}


def _timeless(scores: bytes) -> bytes:
    """A scores file with the batch audit's seconds (how long its requests took) left out: every other byte is kept."""
    lines = scores.splitlines(keepends=True)
    audit = [n for n, line in enumerate(lines) if b'"type":"audit"' in line]
    assert len(audit) == 1, "the cell's batch audit record"
    record = json.loads(lines[audit[0]])
    del record["cost"]["seconds"]
    return b"".join(lines[:audit[0]]) + json.dumps(record).encode() + b"".join(lines[audit[0] + 1:])
