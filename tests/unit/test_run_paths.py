"""Where a run keeps its own records and logs (workflow/rules/common.smk). No file the workflow writes per model lies
in the folder that holds the model's cells, where a task's name (any name the schema allows, ``allocation.json`` too)
makes a cell folder; the failed-cell report reads the logs the earlier steps' rules write."""

from __future__ import annotations

import re

from tests.conftest import REPO
from tests.workflow_paths import workflow_constants


def test_no_record_of_a_model_lies_among_its_cells() -> None:
    constants = workflow_constants()
    cells_of_a_model = constants["CELL_DIR"].split("{task}")[0]  # results/cells/{model}/
    per_model = {name: path for name, path in constants.items()
                 if "{model}" in path and "{task}" not in path and name != "CELL_DIR"}
    assert "ALLOCATION" in per_model, sorted(per_model)
    inside = {name: path for name, path in per_model.items() if path.startswith(cells_of_a_model)}
    assert not inside, f"{inside} lie where a task named like them makes its cell folder ({cells_of_a_model}<task>)"


def test_the_failed_cell_report_reads_the_logs_the_earlier_steps_write() -> None:
    """A cell whose scoring never ran is explained by its earlier steps' logs (anyjev.results.CellLayout): the
    rules that make what a cell needs log to the files the layout reads."""
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    earlier = re.search(r"^EARLIER_LOGS = \(([^)]*)\)", common, re.M)
    assert earlier, "EARLIER_LOGS is not defined in common.smk"
    named = {name.strip() for name in earlier.group(1).split(",") if name.strip()}
    rules = "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    logs = dict(re.findall(r"^\s*rule (\w+):(?:(?!\n\s*rule ).)*?\n\s*log:\s*\n\s*([A-Z_]+),", rules, re.M | re.S))
    assert {logs[r] for r in ("score_model", "prepare_task", "fetch_hub_task", "prepare_model")} == named, logs
