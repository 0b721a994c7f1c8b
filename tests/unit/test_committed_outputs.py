"""The committed reference run is tied to its committed scores: each cell's scores.jsonl, evaluated again with the
default config's evaluation settings, gives the committed metrics.json and predictions.csv, and those metrics give
the committed summary tables (CSV, Markdown, LaTeX) and the README's table. No server: it evaluates only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyjev.outputs.tables import read_summary, readme_block, readme_markdown, write_summary
from anyjev.run.evaluate import evaluate_cell
from anyjev.settings import Settings
from tests.conftest import DEFAULT_CONFIG, REPO

CELLS = sorted((REPO / "results" / "cells").glob("*/*/scores.jsonl"))
TABLES = REPO / "results" / "tables"


@pytest.fixture(scope="module")
def reevaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every committed cell evaluated again into a scratch folder: {model/task: its metrics.json}."""
    assert len(CELLS) == 3, CELLS
    settings = Settings.load(DEFAULT_CONFIG, workdir=REPO)
    out = tmp_path_factory.mktemp("reevaluated")
    metrics = {}
    for scores in CELLS:
        cell = f"{scores.parent.parent.name}/{scores.parent.name}"
        (out / cell).mkdir(parents=True)
        evaluate_cell(settings.evaluate_job(), str(scores), str(out / cell / "metrics.json"),
                      str(out / cell / "predictions.csv"))
        metrics[cell] = out / cell / "metrics.json"
    return metrics


def test_committed_metrics_and_predictions_are_those_of_the_committed_scores(reevaluated) -> None:
    for cell, path in reevaluated.items():
        committed = REPO / "results" / "cells" / cell
        assert json.loads(path.read_text()) == json.loads((committed / "metrics.json").read_text()), cell
        assert (path.parent / "predictions.csv").read_text() == (committed / "predictions.csv").read_text(), cell


def test_committed_tables_and_readme_table_are_those_of_the_reevaluated_metrics(reevaluated, tmp_path) -> None:
    settings = Settings.load(DEFAULT_CONFIG, workdir=REPO)
    out = {ext: tmp_path / f"summary.{ext}" for ext in ("csv", "md", "tex")}
    in_config_order = [str(reevaluated[f"{m}/{t}"]) for m, t in settings.cells]  # as the workflow lists them
    write_summary(in_config_order, settings.levels, out["csv"], out["md"], out["tex"])
    for ext, path in out.items():
        assert path.read_text() == (TABLES / f"summary.{ext}").read_text(), f"results/tables/summary.{ext}"
    block = readme_block((REPO / "README.md").read_text(encoding="utf-8"))
    assert block is not None, "README.md lost the markers around its results table"
    assert block.strip() == readme_markdown(read_summary(out["csv"])).strip()
