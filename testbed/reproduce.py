"""Whether a run reproduces a committed summary table: the same rows, every decision and every value to 3 decimals,
and the interval bounds of the metrics that sort or bin items by confidence (ECE, AURC, cov@5) to one item's worth,
1/n: another CPU's kernels move log-probs in their 5th decimal, which can reorder two items in a bootstrap resample
(README, "Reading the results"; docs/failures.md). tests/e2e/test_reference.py checks it on the reduced config, and
bench/bench_default_run.py --reproduce records it for README command 1 on each kind of machine."""

from __future__ import annotations

from pathlib import Path

# Metrics that sort or bin the items by confidence: a log-prob that moves in its 5th decimal (prefix caching, another
# CPU's kernels) can move an item past another, or across a bin edge, in a bootstrap resample, so their interval bounds
# can move by one item's worth, 1/n; the bounds of a level-minus-raw difference of one, by that of each of its two
# terms, 2/n. Every other number agrees to 3 decimals when the decisions are the same.
ORDER_METRICS = ("ece", "aurc", "cov@5")
PLACES_TOL = 5e-4 + 1e-12  # 3 decimals
KEYS = ("model", "task", "level")
# What a run spent, not what it found (the batch audit's seconds): recorded, never compared
TIME_SUFFIX = "_seconds"


def number_tolerance(metric: str, bound: bool, n: int, terms: int = 1) -> float:
    """How far a number of two runs with the same decisions may differ (docs/failures.md); TERMS: how many metric
    values it is made of (2 for a difference of two levels)."""
    return PLACES_TOL + (terms / n if bound and metric in ORDER_METRICS else 0.0)


def summary_differences(fresh: Path, committed: Path) -> dict:
    """FRESH's summary.csv against COMMITTED's: the values compared (a time the run took apart), the largest difference
    and where it is, and each difference beyond :func:`number_tolerance` (``beyond``; [] when FRESH reproduces
    COMMITTED)."""
    import pandas as pd

    ours, ref = pd.read_csv(fresh), pd.read_csv(committed)
    if ours[list(KEYS)].values.tolist() != ref[list(KEYS)].values.tolist():
        return {"values": 0, "largest_difference": None, "largest_at": None,
                "beyond": [f"the rows differ: {len(ours)} (model, task, level) rows against {len(ref)}"]}
    values, largest, at, beyond = 0, 0.0, None, []
    for col in (c for c in ref.columns if c not in KEYS and not c.endswith(TIME_SUFFIX)):
        metric, bound = col.removesuffix("_lo").removesuffix("_hi"), col.endswith(("_lo", "_hi"))
        for i in ref.index:
            a, b = ours.at[i, col], ref.at[i, col]
            if pd.isna(a) and pd.isna(b):
                continue
            where = f"{ref.at[i, 'model']}/{ref.at[i, 'task']}/{ref.at[i, 'level']} {col}"
            values += 1
            try:
                diff = abs(float(a) - float(b))
            except (TypeError, ValueError):  # a flag written as text: equal or not
                diff = 0.0 if a == b else float("inf")
            if diff != diff:  # one of the two is missing
                diff = float("inf")
            if diff > largest or at is None:
                largest, at = diff, where
            if not diff <= number_tolerance(metric, bound, int(ref.at[i, "n"])):
                beyond.append(f"{where}: {a} != {b}")
    return {"values": values, "largest_difference": largest, "largest_at": at, "beyond": beyond}
