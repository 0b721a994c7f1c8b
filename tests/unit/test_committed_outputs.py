"""The committed reference run is tied to its committed scores: each cell's scores.jsonl, evaluated again with the
default config's evaluation settings, gives the committed metrics.json, predictions.csv and replicates.npz, and those metrics give
the committed summary tables (CSV, Markdown, LaTeX) and the README's table. No server: it evaluates only.

Numbers are compared to 1e-6 relative: the bootstrap and L1's fit run through numpy and BLAS kernels whose last
bits differ between CPUs (AVX2, AVX-512); every decision, count and printed table is compared exactly."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anyjev.paths import REPLICATES
from anyjev.reports.tables import readme_markdown, write_summary
from anyjev.run.evaluate import evaluate_cell
from anyjev.rundata import read_cells
from anyjev.rundata.replicates import read_replicates, replicates_for
from anyjev.rundata.summary import read_summary
from anyjev.settings import Settings
from tests.conftest import DEFAULT_CONFIG, REPO
from tests.readme_table import readme_block

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
                      str(out / cell / "predictions.csv"), str(out / cell / REPLICATES))
        metrics[cell] = out / cell / "metrics.json"
    return metrics


REL = 1e-6  # numbers: the last bits of numpy/BLAS results differ between CPUs
DECISIONS = ["item_id", "level", "group", "gold", "pred", "n_top"]


def close(a: float, b: float) -> bool:
    """Equal but for the last bits (REL), NaN equal to NaN."""
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def differences(ours: object, theirs: object, path: str = "", *, same_float: Callable[[float, float], bool] = close
                ) -> list[str]:
    """Where two JSON trees differ (metrics.json, a viewer's data): keys, types, strings and integers exactly,
    floats as SAME_FLOAT says (by default beyond REL)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if ours.keys() != theirs.keys():
            return [f"{path}: keys {sorted(ours)} != {sorted(theirs)}"]
        return [d for k in ours for d in differences(ours[k], theirs[k], f"{path}.{k}", same_float=same_float)]
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} items != {len(theirs)}"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for d in differences(a, b, f"{path}[{i}]", same_float=same_float)]
    if isinstance(ours, float) and isinstance(theirs, float):
        return [] if same_float(ours, theirs) else [f"{path}: {ours!r} != {theirs!r}"]
    return [] if (type(ours), ours) == (type(theirs), theirs) else [f"{path}: {ours!r} != {theirs!r}"]


def test_differences_catch_a_changed_number_but_not_the_last_bits() -> None:
    assert differences({"a": [0.1, 2]}, {"a": [0.1 + 1e-16, 2]}) == []
    assert differences({"a": [0.1, 2]}, {"a": [0.1001, 2]}) == [".a[0]: 0.1 != 0.1001"]
    assert differences({"a": 1}, {"a": 1.0}) and differences({"a": 1}, {"b": 1})


def test_committed_metrics_and_predictions_are_those_of_the_committed_scores(reevaluated) -> None:
    for cell, path in reevaluated.items():
        committed = REPO / "results" / "cells" / cell
        assert differences(json.loads(path.read_text()), json.loads((committed / "metrics.json").read_text())) == [], cell
        ours, theirs = (pd.read_csv(d / "predictions.csv") for d in (path.parent, committed))
        assert list(ours.columns) == list(theirs.columns), cell
        assert ours[DECISIONS].equals(theirs[DECISIONS]), f"{cell}: a decision differs"
        numbers = [c for c in ours.columns if c not in DECISIONS]
        pd.testing.assert_frame_equal(ours[numbers], theirs[numbers], check_exact=False, rtol=REL, obj=cell)


def test_committed_replicates_are_those_of_the_committed_scores_and_the_differences_table_uses_them(reevaluated
                                                                                                     ) -> None:
    settings = Settings.load(DEFAULT_CONFIG, workdir=REPO)
    for cell, path in reevaluated.items():
        committed = REPO / "results" / "cells" / cell
        (about, ours), (their_about, theirs) = (read_replicates(d / REPLICATES) for d in (path.parent, committed))
        assert about == their_about, cell
        assert ours.calib == theirs.calib, cell
        for level, per_metric in ours.boot.items():
            for metric, boot in per_metric.items():
                assert close(ours.point[level][metric], theirs.point[level][metric]), (cell, level, metric)
                np.testing.assert_allclose(boot, theirs.boot[level][metric], rtol=REL, atol=1e-12, err_msg=cell)
                for mine, other in zip(ours.jack, theirs.jack, strict=True):
                    np.testing.assert_allclose(mine[level][metric], other[level][metric], rtol=REL, atol=1e-12)
        # made from the committed scores under the default settings: the differences table pairs them as they are
        assert replicates_for(committed / REPLICATES, committed / "scores.jsonl", settings.evaluation) is not None, cell


def test_committed_tables_and_readme_table_are_those_of_the_reevaluated_metrics(reevaluated, tmp_path) -> None:
    settings = Settings.load(DEFAULT_CONFIG, workdir=REPO)
    out = {ext: tmp_path / f"summary.{ext}" for ext in ("csv", "md", "tex")}
    in_config_order = [reevaluated[f"{m}/{t}"].parent for m, t in settings.cells]  # as the workflow lists them
    write_summary(read_cells(in_config_order), settings.levels, out["csv"], out["md"], out["tex"])
    for ext, path in out.items():
        assert path.read_text() == (TABLES / f"summary.{ext}").read_text(), f"results/tables/summary.{ext}"
    block = readme_block((REPO / "README.md").read_text(encoding="utf-8"))
    assert block is not None, "README.md lost the markers around its results table"
    assert block.strip() == readme_markdown(read_summary(out["csv"])).strip()
