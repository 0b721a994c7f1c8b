"""One model minus another on the same items: every metric of every level both cells have, as the difference of the
two cells' values with the BCa interval of the paired difference.

Both cells are resampled jointly: each bootstrap resample draws the same test and calibration items for both
(:func:`anyjev.numbers.bootstrap.resample_index`; the rows each cell's own evaluation draws when both resample the same
splits, i.e. unless one was read with adaptive rotations and the other not), refits each cell's priors and L1's
temperature on them (:func:`anyjev.numbers.evaluation.cell_replicates`), and the difference of the two metric values is
one replicate; the jackknife leaves the same item out of both. The point of a difference is the difference of the two
cells' own ``metrics.json`` values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anyjev.numbers.bootstrap import KGroup, calib_rows
from anyjev.numbers.evaluation import cell_replicates, paired_difference, with_calibration
from anyjev.numbers.levels import ALL_LEVELS
from anyjev.numbers.metrics import METRICS
from anyjev.numbers.options import EvaluationOptions


def check_same_items(a: list[KGroup], b: list[KGroup]) -> None:
    """Refuse two cells whose items are not the same: per option count K, the same test positions and gold and the
    same calibration gold (the caller checks the ids, which K groups do not hold)."""
    if [g.k for g in a] != [g.k for g in b]:
        raise ValueError(f"the cells hold different option counts: K {[g.k for g in a]} vs {[g.k for g in b]}")
    for ga, gb in zip(a, b, strict=True):
        same = (np.array_equal(ga.test_pos, gb.test_pos) and np.array_equal(ga.gold, gb.gold)
                and np.array_equal(ga.inputs.calib_gold, gb.inputs.calib_gold))
        if not same:
            raise ValueError(f"the cells' items with K={ga.k} differ (positions, gold or calibration gold)")


def model_minus_model(a: list[KGroup], b: list[KGroup], options: EvaluationOptions,
                      level: float = 0.95) -> dict[str, dict[str, dict[str, Any]]]:
    """Cell A minus cell B (their K groups, read from the same items): ``{level: {metric: {"value", "lo", "hi",
    "widened"}}}`` for every level both cells have, the value being A's metric minus B's and the interval the BCa
    interval of the paired difference (both resampled on OPTIONS' rows)."""
    check_same_items(a, b)
    with_l1 = with_calibration(a)
    calib = [x or y for x, y in zip(calib_rows(a, with_l1), calib_rows(b, with_l1), strict=True)]
    ra, rb = cell_replicates(a, options, calib), cell_replicates(b, options, calib)
    return {name: {m: paired_difference(ra, name, rb, name, m, level) for m in METRICS}
            for name in ALL_LEVELS if name in ra.point and name in rb.point}
