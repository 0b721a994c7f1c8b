"""Where a run keeps its own records and logs (anyjev/paths.py, the rules' paths). No file the workflow writes per
model lies in the folder that holds the model's cells, where a task's name (any name the schema allows,
``allocation.json`` too) makes a cell folder; the failed-cell report reads the logs the earlier steps' rules write."""

from __future__ import annotations

import re

from anyjev.paths import RunPaths
from anyjev.rundata import CellLayout
from tests.workflow_rules import workflow_rules, written_paths


def plain(pattern: str) -> str:
    """A rule's path as written, without the wildcard constraints Snakemake adds (``{model,smollm2\\-135m}``)."""
    return re.sub(r"\{(\w+),[^{}]*\}", r"{\1}", pattern)


def test_no_record_of_a_model_lies_among_its_cells() -> None:
    paths = RunPaths()
    cells_of_a_model = paths.cell_dir.split("{task}")[0]  # results/cells/{model}/
    per_model = {plain(path): rules for path, rules in written_paths().items()
                 if "{model" in path and "{task" not in path}
    assert paths.allocation in per_model, sorted(per_model)
    inside = {path: rules for path, rules in per_model.items() if path.startswith(cells_of_a_model)}
    assert not inside, f"{inside} lie where a task named like them makes its cell folder ({cells_of_a_model}<task>)"


def test_the_failed_cell_report_reads_the_logs_the_earlier_steps_write() -> None:
    """A cell whose scoring never ran is explained by its earlier steps' logs (anyjev.rundata.CellLayout): the
    rules that make what a cell needs log to the files the workflow's layout reads, nearest first."""
    rules = workflow_rules("model")
    written = [[plain(log) for log in rules[name]["log"]] for name in ("score_model", "prepare_task", "fetch_hub_task", "prepare_model")]
    assert all(len(logs) == 1 for logs in written), written
    assert CellLayout.of_paths(RunPaths()).earlier_logs == tuple(logs[0] for logs in written)
