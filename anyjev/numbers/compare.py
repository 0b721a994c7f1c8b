"""One model minus another on the same items: every metric of every level both cells have, as the difference of the
two cells' values with the BCa interval of the paired difference.

Both cells are resampled jointly: each bootstrap resample draws the same test and calibration items for both
(:func:`anyjev.numbers.bootstrap.resample_rows`; the rows each cell's own evaluation draws when both resample the same
splits, i.e. unless one was read with adaptive rotations and the other not), refits each cell's priors and L1's
temperature on them (:func:`anyjev.numbers.evaluation.cell_replicates`), and the difference of the two metric values is
one replicate; the jackknife leaves the same item out of both. The point of a difference is the difference of the two
cells' own ``metrics.json`` values.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from anyjev.numbers.bootstrap import KGroup, calib_rows
from anyjev.numbers.evaluation import MetricReplicates, cell_replicates, paired_difference, with_calibration
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


def models_minus_models(cells: Sequence[list[KGroup]], options: EvaluationOptions, level: float = 0.95, *,
                        known: Sequence[MetricReplicates | None] = ()
                        ) -> dict[tuple[int, int], dict[str, dict[str, dict[str, Any]]]]:
    """Each earlier cell of CELLS (their K groups, read from the same items) minus each later one, as
    :func:`model_minus_model` gives it, keyed by the two cells' positions. Each cell is resampled once for all the pairs
    it is in (once per set of resampled calibration rows, which pairs of cells of one task share): a task of M models
    costs M cells' resamples, not two for each of M(M-1)/2 pairs; the resamples are seeded, so a pair's numbers are
    those of :func:`model_minus_model`.

    KNOWN: each cell's replicates as its own evaluation computed them under OPTIONS (None where not known). A pair
    that resamples a cell's calibration rows as its evaluation did (``calib``, the usual case: both cells mark the
    same K groups) uses them instead of resampling the cell again; they are the same numbers."""
    for other in cells[1:]:
        check_same_items(cells[0], other)
    resampled: dict[tuple[int, tuple[bool, ...]], MetricReplicates] = {
        (i, r.calib): r for i, r in enumerate(known) if r is not None}

    def replicates(i: int, calib: list[bool]) -> MetricReplicates:
        key = (i, tuple(calib))
        if key not in resampled:
            resampled[key] = cell_replicates(cells[i], options, calib)
        return resampled[key]

    out = {}
    for i, j in itertools.combinations(range(len(cells)), 2):
        a, b = cells[i], cells[j]
        with_l1 = with_calibration(a, options)
        calib = [x or y for x, y in zip(calib_rows(a, with_l1), calib_rows(b, with_l1), strict=True)]
        ra, rb = replicates(i, calib), replicates(j, calib)
        out[(i, j)] = {name: {m: paired_difference(ra, name, rb, name, m, level) for m in METRICS}
                       for name in ALL_LEVELS if name in ra.point and name in rb.point}
    return out


def model_minus_model(a: list[KGroup], b: list[KGroup], options: EvaluationOptions,
                      level: float = 0.95) -> dict[str, dict[str, dict[str, Any]]]:
    """Cell A minus cell B (their K groups, read from the same items): ``{level: {metric: {"value", "lo", "hi",
    "widened"}}}`` for every level both cells have, the value being A's metric minus B's and the interval the BCa
    interval of the paired difference (both resampled on OPTIONS' rows)."""
    return models_minus_models([a, b], options, level)[(0, 1)]
