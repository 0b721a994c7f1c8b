"""A requested L1 never vanishes: a task file whose own splits leave no calibration item is refused by the prepare
step, naming the file and the fix, when levels lists L1 (and when the config is checked: test_bad_input_refused.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyjev.config import validate_config
from anyjev.data.prepare import PrepareJob, prepare_task
from anyjev.errors import TaskDataError
from anyjev.settings import Settings


def task_file(tmp_path: Path, splits: list[str]) -> Path:
    path = tmp_path / "all-test.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "state": f"State {i}.", "question": "Which colour?",
                                        "options": ["red", "green", "blue"], "gold": i % 3, "split": split}) + "\n"
                            for i, split in enumerate(splits)))
    return path


def job(path: Path, fits_temperature: bool) -> PrepareJob:
    return PrepareJob(name="colours", source="file", dataset="colours", path=str(path), hub=None, n_test=4, n_calib=2,
                      allow_fewer=True, split_seed=0, hub_cache="resources/hub", fits_temperature=fits_temperature)


def test_no_calibration_item_with_l1_is_refused_naming_the_file(tmp_path, fault_seen) -> None:
    path = task_file(tmp_path, ["test"] * 6)
    with pytest.raises(TaskDataError) as info:
        prepare_task(job(path, fits_temperature=True), tmp_path / "out.jsonl")
    fault_seen(info.value)
    message = str(info.value)
    assert message.startswith(f"{path}:split: no calibration items after the split (4 test items")
    assert 'every item says "split": "test"' in message and "levels lists L1" in message
    assert "tasks.colours.n_calib" in message
    assert not (tmp_path / "out.jsonl").exists()


def test_without_l1_or_with_a_calibration_item_the_task_is_prepared(tmp_path) -> None:
    prepare_task(job(task_file(tmp_path, ["test"] * 6), fits_temperature=False), tmp_path / "a.jsonl")
    written = prepare_task(job(task_file(tmp_path, ["test"] * 5 + ["calib"]), fits_temperature=True), tmp_path / "b.jsonl")
    assert [it.split for it in written.items].count("calib") == 1


@pytest.mark.parametrize(("levels", "expected"), [(["raw", "L0", "L1"], True), (["raw", "L0"], False)])
def test_the_prepare_job_knows_whether_l1_is_asked(levels: list[str], expected: bool) -> None:
    config = {"models": {"m": {"source": "smollm2"}}, "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}},
              "levels": levels}
    assert Settings.from_config(validate_config(config)).prepare_job("t", hub_cache="resources/hub").fits_temperature is expected
