"""A run's own records cannot take a cell's place: no file the workflow writes per model lies in the folder that holds
the model's cells, where a task's name (any name the schema allows, ``allocation.json`` too) makes a cell folder."""

from __future__ import annotations

from tests.workflow_paths import workflow_constants


def test_no_record_of_a_model_lies_among_its_cells() -> None:
    constants = workflow_constants()
    cells_of_a_model = constants["CELL_DIR"].split("{task}")[0]  # results/cells/{model}/
    per_model = {name: path for name, path in constants.items()
                 if "{model}" in path and "{task}" not in path and name != "CELL_DIR"}
    assert "ALLOCATION" in per_model, sorted(per_model)
    inside = {name: path for name, path in per_model.items() if path.startswith(cells_of_a_model)}
    assert not inside, f"{inside} lie where a task named like them makes its cell folder ({cells_of_a_model}<task>)"
