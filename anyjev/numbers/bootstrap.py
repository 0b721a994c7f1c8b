"""The bootstrap engine: every level and metric of a cell for many resamples at once, each resample redrawing the
test items and the calibration items (each split from all of its items, whatever their option count K) and refitting
what is fitted (the test prior, the frozen calibration prior, L1's temperature); and the jackknife (every item of a
split left out once) that gives BCa its acceleration.

A cell may mix option counts: its items are held per K (:class:`KGroup`), levels are computed per K, padded to the
largest K with ``-inf`` and placed side by side; L1 fits one temperature per layout group on all K groups together.
A split's size is what the design fixes, not how many of its items have each K: a resample draws as many items as the
split holds from all of them, so the number of items of each K varies from one resample to the next (a K of one item
is drawn 0, 1, 2, ... times, as a direct bootstrap over the items draws it). The levels of one K group are computed
once per count the resamples drew of it (:func:`replicates`). A K group that draws no calibration items in a resample
has the uniform frozen prior there, as any prior group with fewer than ``prior_min_items`` calibration items has
(:func:`anyjev.numbers.priors.frozen_priors`); its L1 is still scaled by the temperature fitted on the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from anyjev.numbers.levels import LevelInputs, resampled_calibration, resampled_test_levels
from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.metrics import metrics_batch
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.temperature import fit_log_temperature

CHUNK_FLOATS = 3_000_000  # floats per array in one chunk of resamples (memory bound, ~24 MB)


@dataclass
class KGroup:
    """The test and calibration items of one option count K, with the positions of its test items."""

    k: int
    inputs: LevelInputs
    test_pos: np.ndarray
    gold: np.ndarray
    prior_source: str = "items"

    def uses_calib(self, with_l1: bool) -> bool:
        """Whether this K's calibration items enter its levels (L1, or the frozen prior of an adaptive cell)."""
        return with_l1 or self.prior_source == "calibration"


@dataclass(frozen=True)
class Rows:
    """B rows of drawn items: ``test`` ``(B, m)``, positions in the cell's test items as the K groups hold them one
    after the other; ``calib`` ``(B, mc)``, positions in the calibration items of the K groups MARKS marks, likewise
    (None: the calibration items are not resampled). Each row is sorted, so every K group's items keep their file
    order (the streaming prior's scored order) and sit together."""

    test: np.ndarray
    calib: np.ndarray | None
    marks: tuple[bool, ...]

    def __len__(self) -> int:
        return int(self.test.shape[0])

    def part(self, lo: int, hi: int) -> Rows:
        """Rows LO to HI."""
        return Rows(self.test[lo:hi], None if self.calib is None else self.calib[lo:hi], self.marks)


def _starts(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.intp)])


def _split_sizes(groups: list[KGroup], marks: tuple[bool, ...] | list[bool]) -> tuple[list[int], list[int]]:
    """Per K group, its test items and its calibration items in the resampled calibration split (0 unless marked)."""
    return ([g.inputs.n_test for g in groups],
            [g.inputs.n_calib if mark else 0 for g, mark in zip(groups, marks, strict=True)])


def _buckets(draws: np.ndarray, lo: int, hi: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows of DRAWS ``(B, m)`` (sorted) grouped by how many of their draws fall in ``[lo, hi)`` (one K group's
    items): per count c, ``(rows, local indices (rows, c) into the group, slots (rows, c) in the row)``."""
    below = (draws < lo).sum(axis=1)
    counts = (draws < hi).sum(axis=1) - below
    for c in np.unique(counts):
        rows = np.flatnonzero(counts == c)
        slots = below[rows, None] + np.arange(c)
        yield rows, np.take_along_axis(draws[rows], slots, axis=1) - lo, slots


def _place(out: np.ndarray, rows: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
    """Put VALUES ``(rows, c, K)`` at SLOTS of ROWS of OUT ``(B, m, Kmax)`` (the options past K stay ``-inf``)."""
    out[rows[:, None], slots, : values.shape[-1]] = values


def replicates(groups: list[KGroup], rows: Rows, with_l1: bool,
               options: EvaluationOptions) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, dict[str, np.ndarray]]:
    """Levels of every row of ROWS, K groups padded and side by side: ``{level: {g: (B, m, Kmax)}}``, gold ``(B, m)``,
    and ``log T`` per layout group ``(B,)``. One temperature per layout group is fitted on all K groups.

    Each K group's levels are computed once per count of its items the rows drew (the rows that drew that many, as
    one batch), then put where its items sit in each row."""
    kmax = max(g.k for g in groups)
    b, m = rows.test.shape
    layout_groups = list(groups[0].inputs.test)
    test_sizes, calib_sizes = _split_sizes(groups, rows.marks)
    t_start, c_start = _starts(test_sizes), _starts(calib_sizes)
    mc = 0 if rows.calib is None else rows.calib.shape[1]
    levels: dict[str, dict[str, np.ndarray]] = {}
    gold = np.zeros((b, m), dtype=np.intp)
    frozen_l0 = {g: np.full((b, m, kmax), -np.inf) for g in layout_groups}
    cal_l0 = {g: np.full((b, mc, kmax), -np.inf) for g in layout_groups}
    cal_gold = np.zeros((b, mc), dtype=np.intp)
    for j, grp in enumerate(groups):
        frozen: dict[str, np.ndarray | None] | None = None
        if rows.calib is not None and calib_sizes[j]:
            frozen = {}
            for r, local, slots in _buckets(rows.calib, int(c_start[j]), int(c_start[j + 1])):
                cal = resampled_calibration(grp.inputs, local, options, prior_source=grp.prior_source)
                for g in layout_groups:
                    prior = cal.frozen[g]
                    if prior is None:
                        frozen[g] = None
                    else:
                        frozen.setdefault(g, np.empty((b, *prior.shape[1:])))[r] = prior  # type: ignore[index]
                    _place(cal_l0[g], r, slots, cal.l0[g])
                cal_gold[r[:, None], slots] = grp.inputs.calib_gold[local]
        for r, local, slots in _buckets(rows.test, int(t_start[j]), int(t_start[j + 1])):
            if not local.shape[1]:
                continue
            mine = None if frozen is None else {g: (None if v is None else v[r]) for g, v in frozen.items()}
            res = resampled_test_levels(grp.inputs, local, options, prior_source=grp.prior_source, calibration=mine)
            for name, per in res.levels.items():
                for g, v in per.items():
                    _place(levels.setdefault(name, {}).setdefault(g, np.full((b, m, kmax), -np.inf)), r, slots, v)
            for g in layout_groups:
                _place(frozen_l0[g], r, slots, res.frozen_l0[g])
            gold[r[:, None], slots] = grp.gold[local]
    log_t: dict[str, np.ndarray] = {}
    if with_l1:
        if not mc:
            raise ValueError("L1: no calibration items resampled to fit its temperature on")
        levels["L1"] = {}
        for g in layout_groups:
            log_t[g] = fit_log_temperature(cal_l0[g], cal_gold)
            levels["L1"][g] = log_softmax(frozen_l0[g] / np.exp(log_t[g])[:, None, None])
    return levels, gold, log_t


def metric_replicates(groups: list[KGroup], rows: Rows, with_l1: bool,
                      options: EvaluationOptions) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Every metric of every level for each row of ROWS (chunked over rows to bound memory)."""
    per_resample = sum(g.inputs.size_per_resample() for g in groups)
    chunk = max(1, CHUNK_FLOATS // max(per_resample, 1))
    values: dict[str, dict[str, list[np.ndarray]]] = {}
    temps: dict[str, list[np.ndarray]] = {}
    for lo in range(0, len(rows), chunk):
        levels, gold, log_t = replicates(groups, rows.part(lo, lo + chunk), with_l1, options)
        for name, lv in levels.items():
            m = metrics_batch(lv["fwd"], gold, lv.get("rev"))
            for metric, v in m.items():
                values.setdefault(name, {}).setdefault(metric, []).append(v)
        for g, v in log_t.items():
            temps.setdefault(g, []).append(v)
    return ({name: {m: np.concatenate(v) for m, v in d.items()} for name, d in values.items()},
            {g: np.concatenate(v) for g, v in temps.items()})


def calib_rows(groups: list[KGroup], with_l1: bool) -> list[bool]:
    """Per K group, whether its calibration items are resampled (they enter its levels: :meth:`KGroup.uses_calib`)."""
    return [grp.uses_calib(with_l1) for grp in groups]


def identity_rows(groups: list[KGroup], calib: list[bool] | tuple[bool, ...], rows: int = 1) -> Rows:
    """Every item once, in the K groups' order (the point), ROWS times; the calibration items of the groups CALIB
    marks."""
    test_sizes, calib_sizes = _split_sizes(groups, calib)
    n, nc = sum(test_sizes), sum(calib_sizes)
    return Rows(np.broadcast_to(np.arange(n), (rows, n)),
                np.broadcast_to(np.arange(nc), (rows, nc)) if nc else None, tuple(calib))


def _leave_one_out(n: int) -> np.ndarray:
    """``(n, n - 1)``: row i holds every position but i, in order."""
    return np.array([np.delete(np.arange(n), i) for i in range(n)])


def jackknife_rows(groups: list[KGroup], calib: list[bool] | tuple[bool, ...]) -> list[Rows]:
    """Leave-one-out rows, one stratum per split of at least 2 items (the test items; the calibration items of the
    groups CALIB marks): the stratum's rows leave each of its items out once, whatever its K (a K group of one item is
    then empty in one row), and keep every item of the other split."""
    whole = identity_rows(groups, calib)
    n = whole.test.shape[1]
    nc = 0 if whole.calib is None else whole.calib.shape[1]
    strata = []
    if n >= 2:
        strata.append(Rows(_leave_one_out(n), None if whole.calib is None else np.broadcast_to(whole.calib[0], (n, nc)),
                           whole.marks))
    if nc >= 2:
        strata.append(Rows(np.broadcast_to(whole.test[0], (nc, n)), _leave_one_out(nc), whole.marks))
    return strata


def cell_order(groups: list[KGroup]) -> np.ndarray:
    """Permutation that puts K-group-concatenated test items back into cell order."""
    return np.argsort(np.concatenate([g.test_pos for g in groups]), kind="stable")


def resample_rows(groups: list[KGroup], calib: list[bool] | tuple[bool, ...], options: EvaluationOptions) -> Rows:
    """Bootstrap rows (``options.n_boot`` of them, seeded by ``options.bootstrap_seed``): each draws as many test items
    as the cell holds from all of them (positions in the K groups' order), then as many calibration items as the groups
    CALIB mark hold from all of those; rows sorted so the streaming prior keeps the scored order. With one K group these
    are the draws of a bootstrap within the group."""
    rng = np.random.default_rng(options.bootstrap_seed)
    test_sizes, calib_sizes = _split_sizes(groups, calib)
    n, nc = sum(test_sizes), sum(calib_sizes)
    test = np.sort(rng.integers(0, n, size=(options.n_boot, n)), axis=1)
    rows_calib = np.sort(rng.integers(0, nc, size=(options.n_boot, nc)), axis=1) if nc else None
    return Rows(test, rows_calib, tuple(calib))
