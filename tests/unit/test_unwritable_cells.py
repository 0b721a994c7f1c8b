"""A cell whose folder cannot be written (issue 46, 4): found before its server is asked anything, in one line naming
the folder; when the folder stops being writable while the cell is scored, the final write fails in one line, every
item stays checkpointed, and once the folder is writable again the next run writes the cell without a server.

The server is the in-process stub of vLLM (tests/stub_http.py); the folder is made unwritable by refusing the
permission check and the final write where the test says, as the suite runs as root (which every chmod lets write).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from anyjev import files
from anyjev.errors import NotWritableError
from anyjev.run import allocation
from anyjev.run.allocation import ScoreModelJob, score_model_job
from anyjev.run.cell import score_job
from anyjev.run.store import partial_path
from anyjev.settings import Settings
from tests.unit import test_server_check
from tests.unit.test_server_check import MODEL, N_ITEMS, url_job

stub = test_server_check.stub  # the fixture: an in-process stub serving MODEL


def test_a_cell_folder_that_cannot_be_written_fails_the_cell_before_any_request(tmp_path, stub, qwen3_tokenizer,
                                                                                monkeypatch):
    url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))  # the config and the task file
    cells = Settings.load(tmp_path / "config.yaml").model_cells(
        MODEL, models_dir="unused", server_log=str(tmp_path / "s.log"), state_dir=str(tmp_path / "state"),
        task_file=str(tmp_path / "t.jsonl"), staged=str(tmp_path / "cells/m/{task}/staged"), hub_cache="unused",
        lock_record="unused")
    staged = tmp_path / "cells/m/t/staged"
    staged.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: Path(p) != staged and real(p, mode))
    record = score_model_job(ScoreModelJob(MODEL, cells), tmp_path / "record.json", owner_pid=0)
    outcome = record["cells"]["t"]
    assert outcome["status"] == "failed" and outcome["error"] == "NotWritableError", outcome
    assert outcome["message"] == (f"{staged} cannot be written (Permission denied): make it writable (chmod u+w {staged}) "
                                  "and run again; items already checkpointed are kept")
    assert stub.requests == [], "no request before the folder is found unwritable"
    assert allocation.NotWritableError in allocation.CELL_ERRORS


def test_a_final_write_that_fails_keeps_every_item_and_the_rerun_needs_no_server(tmp_path, stub, qwen3_tokenizer,
                                                                                 monkeypatch):
    job, task_file = url_job(tmp_path, stub.url, Path(qwen3_tokenizer.name_or_path))
    out, provenance = tmp_path / "cell/scores.jsonl", tmp_path / "cell/provenance.json"
    mkstemp = tempfile.mkstemp

    def read_only_final(prefix="", suffix="", dir=None):
        if prefix.startswith(f".{out.name}."):
            raise PermissionError(13, "Permission denied")
        return mkstemp(prefix=prefix, suffix=suffix, dir=dir)

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only_final)
    with pytest.raises(NotWritableError) as exc:
        score_job(job, task_file, out, provenance, owner_pid=0)
    assert str(exc.value).startswith(f"{out.parent} cannot be written (Permission denied)") and "\n" not in str(exc.value)
    lines = partial_path(out).read_text().splitlines()
    assert sum('"type":"item"' in line for line in lines) == N_ITEMS, "every item stays checkpointed"
    assert '"type":"audit"' in lines[-1], "and the batch audit read after them"
    assert not out.exists()

    monkeypatch.setattr(files.tempfile, "mkstemp", mkstemp)  # the folder is writable again
    sent = len(stub.requests)
    counts = score_job(job, task_file, out, provenance, owner_pid=0)
    assert len(stub.requests) == sent, "the rerun sent nothing: the cell is written from its checkpoint"
    assert counts["scored"] == 0 and counts["resumed"] == N_ITEMS and not partial_path(out).exists()
    assert json.loads(provenance.read_text())["server"]["from_checkpoint"] is True
    fresh = tmp_path / "fresh/scores.jsonl"
    score_job(job, task_file, fresh, None, owner_pid=0)
    ours, theirs = out.read_text().splitlines(), fresh.read_text().splitlines()
    assert ours[:-1] == theirs[:-1], "the same item lines as a cell scored in one go"
    assert [{k: v for k, v in json.loads(line).items() if k != "cost"} for line in (ours[-1], theirs[-1])] == [
        {k: v for k, v in json.loads(theirs[-1]).items() if k != "cost"}] * 2, "and the same audit, but for its cost"
