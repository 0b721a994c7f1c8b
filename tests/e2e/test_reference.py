"""The committed reduced reference: a fresh run of the reduced config reproduces its table, every decision-based
number and value to 3 decimals, and the interval bounds of the metrics that sort or bin items by confidence (ECE,
AURC, cov@5) to one item's worth, 1/n (tests/e2e/workflow_helpers.py, number_tolerance): another CPU's kernels move
log-probs in their 5th decimal, which can reorder two items in a bootstrap resample.

The same property, on the default config, is what README command 1 promises for results/tables/summary.csv.
Regenerate (after a deliberate change to scoring or metrics) with ANYJEV_WRITE_REFERENCE=1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.e2e.workflow_helpers import number_tolerance

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-reduced" / "summary.csv"


def test_reduced_run_reproduces_committed_reference(finished_run):
    fresh = finished_run["dir"] / "results" / "tables" / "summary.csv"
    if os.environ.get("ANYJEV_WRITE_REFERENCE") == "1":  # then compared with itself below: it passes
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fresh, REFERENCE)
        print(f"\nwrote {REFERENCE}")
    ours, ref = pd.read_csv(fresh), pd.read_csv(REFERENCE)
    keys = ["model", "task", "level"]
    assert ours[keys].values.tolist() == ref[keys].values.tolist()
    numeric = [c for c in ref.columns if c not in keys]
    too_far = []
    for col in numeric:
        metric, bound = col.removesuffix("_lo").removesuffix("_hi"), col.endswith(("_lo", "_hi"))
        for i in ref.index:
            a, b = ours.at[i, col], ref.at[i, col]
            if pd.isna(a) and pd.isna(b):
                continue
            if not abs(a - b) <= number_tolerance(metric, bound, int(ref.at[i, "n"])):
                too_far.append(f"{ref.at[i, 'task']}/{ref.at[i, 'level']} {col}: {a} != {b}")
    assert too_far == [], "\n".join(too_far)
