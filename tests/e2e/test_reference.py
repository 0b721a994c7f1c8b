"""The committed reduced reference: a fresh run of the reduced config reproduces its table, every decision-based
number and value to 3 decimals, and the interval bounds of the metrics that sort or bin items by confidence (ECE,
AURC, cov@5) to one item's worth, 1/n (testbed/reproduce.py, number_tolerance): another CPU's kernels move
log-probs in their 5th decimal, which can reorder two items in a bootstrap resample.

The same property, on the default config, is what README command 1 promises for results/tables/summary.csv.
Regenerate (after a deliberate change to scoring or metrics) with ANYJEV_WRITE_REFERENCE=1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testbed.reproduce import summary_differences

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference-reduced" / "summary.csv"


def test_reduced_run_reproduces_committed_reference(finished_run):
    fresh = finished_run["dir"] / "results" / "tables" / "summary.csv"
    if os.environ.get("ANYJEV_WRITE_REFERENCE") == "1":  # then compared with itself below: it passes
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fresh, REFERENCE)
        print(f"\nwrote {REFERENCE}")
    found = summary_differences(fresh, REFERENCE)
    assert found["values"] > 0 and found["beyond"] == [], "\n".join(found["beyond"])
