"""The committed reduced reference: a fresh run of the reduced config reproduces its table to 3 decimals.

The same property, on the default config, is what README command 1 promises for results/tables/summary.csv.
Regenerate (after a deliberate change to scoring or metrics) with ANYJEV_WRITE_REFERENCE=1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-reduced" / "summary.csv"


def test_reduced_run_reproduces_committed_reference(finished_run):
    fresh = finished_run["dir"] / "results" / "tables" / "summary.csv"
    if os.environ.get("ANYJEV_WRITE_REFERENCE") == "1":
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fresh, REFERENCE)
        pytest.skip(f"wrote {REFERENCE}")
    ours, ref = pd.read_csv(fresh), pd.read_csv(REFERENCE)
    keys = ["model", "task", "level"]
    assert ours[keys].values.tolist() == ref[keys].values.tolist()
    numeric = [c for c in ref.columns if c not in keys]
    diff = (ours[numeric] - ref[numeric]).abs()
    both_nan = ours[numeric].isna() & ref[numeric].isna()
    worst = diff.where(~both_nan, 0).max().max()
    assert ((diff <= 5e-4 + 1e-12) | both_nan).all().all(), f"differs beyond 3 decimals (max {worst:.2e}):\n{diff.max()}"
