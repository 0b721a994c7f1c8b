"""Evaluate a cell's levels: every metric of every level with its bootstrap interval, every level's difference from
raw with the interval of the difference, L1's temperatures and the answer mass, from the cell's arrays held per option
count K (:class:`~anyjev.numbers.bootstrap.KGroup`).

The interval carries the fit: every bootstrap resample redraws the test items and the calibration items (each split
from all of its items, whatever their K: a split's size is fixed by the design, its count of each K is not),
recomputes the test prior, the frozen calibration prior and L1's temperature from the redrawn items, and then every
metric (:mod:`anyjev.numbers.bootstrap`). The interval is BCa (bias-corrected, with the acceleration of a jackknife
that leaves each item of each split out once); where the point still falls outside its interval the
interval is widened to include it, and that is recorded. A difference (a level minus raw; one model minus another,
:mod:`anyjev.numbers.compare`) is paired: its replicates are the differences of the two sides on the same resamples and
the same jackknife rows. Reading a scored cell into K groups is the store's (:mod:`anyjev.run.records`); writing
``metrics.json`` is the evaluate job's (:mod:`anyjev.run.evaluate`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anyjev.decision.layouts import GROUPS
from anyjev.numbers.bootstrap import (
    KGroup,
    calib_rows,
    cell_order,
    identity_rows,
    jackknife_rows,
    metric_replicates,
    replicates,
    resample_rows,
)
from anyjev.numbers.levels import ALL_LEVELS, resampled_calibration, resampled_test_levels
from anyjev.numbers.metrics import METRICS, TIE_TOL, interval, jackknife_acceleration, metrics_batch
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.priors import take_groups
from anyjev.numbers.temperature import at_bound

log = logging.getLogger(__name__)

RESAMPLED = ("test and calibration items (each split resampled from all of its items, whatever their option count K); "
             "test prior, calibration prior and L1 temperature refit in every resample")
BASELINE = "raw"  # the level every other level is compared with (level_minus_raw)


@dataclass
class PointLevels:
    """Point levels in cell order: ``point[level][group]`` is ``(N, Kmax)`` (``-inf`` on padded options), or None
    for a layout group the cell did not read."""

    levels: dict[str, dict[str, np.ndarray]]
    temperature: dict[str, float]

    def __getitem__(self, level: str) -> dict[Hashable, np.ndarray | None]:
        return {g: (self.levels[level][g][0] if g in self.levels[level] else None) for g in GROUPS}

    def __contains__(self, level: object) -> bool:
        return level in self.levels


@dataclass
class Evaluation:
    """A cell's evaluation: what ``metrics.json`` holds (:meth:`to_json`), the point levels per item, and the
    bootstrap replicates its intervals were made from (kept as ``replicates.npz``: :mod:`anyjev.run.replicates`)."""

    n: int
    n_calib: int
    k: int | str
    k_groups: list[dict[str, Any]]
    notes: list[dict[str, str | None]]  # what a reader must know: {"level": the level it is about (None: the cell), "text"}
    levels: list[str]
    metrics: dict[str, dict[str, dict[str, Any]]]
    level_minus_raw: dict[str, dict[str, dict[str, Any]]]
    temperature: dict[str, dict[str, Any]]
    answer_mass: dict[str, Any] | None
    intervals_widened: int
    settings: dict[str, Any]
    point: PointLevels
    gold: np.ndarray
    ids: list[str]
    replicates: MetricReplicates

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready summary (every field but the per-item arrays and the replicates)."""
        arrays = ("point", "gold", "ids", "replicates")
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in arrays}
        if out["answer_mass"] is None:
            del out["answer_mass"]
        return out


@dataclass
class MetricReplicates:
    """Every metric of every level of a cell at the point, on each bootstrap resample (``boot[level][metric]``
    ``(n_boot,)``) and on each jackknife row (one entry per stratum): all a difference's interval is made from.
    CALIB marks the K groups whose calibration items were resampled (:func:`cell_replicates`)."""

    point: dict[str, dict[str, float]]
    boot: dict[str, dict[str, np.ndarray]]
    jack: list[dict[str, dict[str, np.ndarray]]]
    calib: tuple[bool, ...]


@dataclass
class CellReplicates(MetricReplicates):
    """A cell's metric replicates with its levels at the point (cell order), gold, and L1's log temperature at the
    point (``log_t``) and on each resample (``boot_t``)."""

    levels: dict[str, dict[str, np.ndarray]]
    gold: np.ndarray
    log_t: dict[str, np.ndarray]
    boot_t: dict[str, np.ndarray]


def with_calibration(groups: list[KGroup], options: EvaluationOptions) -> bool:
    """Whether the cell has L1: at least OPTIONS' ``min_calib_items`` calibration items, of any K (one temperature per
    layout group is fitted on all of them; a K without calibration items of its own takes it)."""
    return sum(g.inputs.n_calib for g in groups) >= options.min_calib_items


def l1_notes(groups: list[KGroup], options: EvaluationOptions, n_calib_items: int) -> list[str]:
    """What a reader of the cell's L1 must know, in words: why the cell has none, or which K take the temperature
    fitted on the other K's calibration items. N_CALIB_ITEMS: the calibration items the cell holds (some may have a K
    no test item has, and are not used)."""
    n_calib = sum(g.inputs.n_calib for g in groups)
    if not with_calibration(groups, options):
        if not n_calib:
            stray = f" ({n_calib_items} of another K than every test item's)" if n_calib_items else ""
            return [f"no L1: no calibration items{stray} to fit its temperature on"]
        return [l1_refused(n_calib, options.min_calib_items)]
    pooled = [g for g in groups if not g.inputs.n_calib]
    if not pooled:
        return []
    ks = ", ".join(str(g.k) for g in pooled)
    n_test = sum(g.inputs.n_test for g in pooled)
    return [f"L1 of K={ks} ({n_test} test item{'s' * (n_test != 1)}) takes the temperature fitted on the {n_calib} "
            f"calibration items of the other K (none has K={ks}; their frozen prior is the uniform one)"]


def l1_refused(n_calib: int, min_calib_items: int) -> str:
    """Why a cell of N_CALIB calibration items has no L1 (fewer than MIN_CALIB_ITEMS)."""
    return (f"no L1: {n_calib} calibration item{'s' * (n_calib != 1)}, fewer than evaluation.min_calib_items = "
            f"{min_calib_items}")


def cell_replicates(groups: list[KGroup], options: EvaluationOptions, calib: list[bool] | None = None) -> CellReplicates:
    """Every level and metric of the cell held in GROUPS at the point, on OPTIONS' bootstrap resamples and on the
    jackknife rows. CALIB marks the K groups whose calibration items are resampled (default: those whose levels use
    them); a comparison of two cells passes the same marks for both, so both are resampled on the same rows."""
    with_l1 = with_calibration(groups, options)
    calib = calib_rows(groups, with_l1) if calib is None else calib
    levels, gold, log_t = replicates(groups, identity_rows(groups, calib), with_l1, options)
    order = cell_order(groups)
    levels = {name: {g: v[:, order] for g, v in lv.items()} for name, lv in levels.items()}
    gold = gold[:, order]
    point = {name: {m: float(v[0]) for m, v in metrics_batch(lv["fwd"], gold, lv.get("rev")).items()}
             for name, lv in levels.items()}
    boot, boot_t = metric_replicates(groups, resample_rows(groups, calib, options), with_l1, options)
    jack = [metric_replicates(groups, rows, with_l1, options)[0] for rows in jackknife_rows(groups, calib)]
    return CellReplicates(point=point, boot=boot, jack=jack, calib=tuple(calib), levels=levels, gold=gold, log_t=log_t,
                          boot_t=boot_t)


def summary(value: float, boot: np.ndarray, jack: list[np.ndarray], level: float) -> dict[str, Any]:
    """A statistic's point VALUE with its BCa interval from its bootstrap replicates BOOT and its jackknife values
    JACK (one array per stratum): ``{"value", "lo", "hi", "widened"}``."""
    lo, hi, wide = interval(value, boot, accel=jackknife_acceleration(jack), level=level, method="bca")
    return {"value": value, "lo": lo, "hi": hi, "widened": wide}


def paired_difference(a: MetricReplicates, level_a: str, b: MetricReplicates, level_b: str, metric: str,
                      level: float) -> dict[str, Any]:
    """METRIC of A's LEVEL_A minus that of B's LEVEL_B, with the BCa interval of the difference: A and B were
    resampled on the same rows, so each replicate is the difference on one resample (jackknife row) of both."""
    return summary(a.point[level_a][metric] - b.point[level_b][metric],
                   a.boot[level_a][metric] - b.boot[level_b][metric],
                   [x[level_a][metric] - y[level_b][metric] for x, y in zip(a.jack, b.jack, strict=True)], level)


def evaluate(groups: list[KGroup], options: EvaluationOptions, *, ids: Sequence[str], n_calib_items: int,
             answer_masses: Sequence[float | None], level: float = 0.95, source: str = "<cell>") -> Evaluation:
    """Levels and metrics of the test items held in GROUPS (one per K; cell order is restored from their
    positions), with L1 fitted on their calibration items and refit-BCa intervals, and each level minus raw with
    the interval of the paired difference. IDS are the test items' ids in cell order; N_CALIB_ITEMS the calibration
    items the cell holds; ANSWER_MASSES each test item's answer mass (None where the cell did not read it)."""
    if not groups:
        raise ValueError("no K group to evaluate")
    prior_source = "/".join(sorted({g.prior_source for g in groups}))
    with_l1 = with_calibration(groups, options)
    notes = l1_notes(groups, options, n_calib_items)
    for note in notes:  # a cell without calibration items is one whose config asks for none
        log.log(logging.WARNING if n_calib_items else logging.INFO, "%s: %s", source, note)

    cell = cell_replicates(groups, options)
    names = [name for name in ALL_LEVELS if name in cell.point]
    metrics: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        metrics[name] = {m: summary(cell.point[name][m], cell.boot[name][m], [s[name][m] for s in cell.jack], level)
                         for m in METRICS}
    minus_raw = {name: {m: paired_difference(cell, name, cell, BASELINE, m, level) for m in METRICS}
                 for name in names if name != BASELINE}

    temperature: dict[str, dict[str, Any]] = {}
    for g, lt in cell.log_t.items():
        t = math.exp(float(lt[0]))
        lo, hi = np.percentile(np.exp(cell.boot_t[g]), [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
        temperature[g] = {"T": t, "log_T": float(lt[0]), "at_bound": at_bound(t), "lo": float(lo), "hi": float(hi)}
        if temperature[g]["at_bound"]:
            log.warning("%s: L1 temperature (%s layouts) T = %.4g (log T = %.6f) is at the search bound [-3, 3]: "
                        "the fit is clipped and L1 is %s", source, g, t, math.log(t),
                        "nearly uniform" if t > 1 else "nearly one-hot")
    ks = sorted(g.k for g in groups)
    return Evaluation(
        n=len(ids),
        n_calib=sum(g.inputs.n_calib for g in groups) if with_l1 else n_calib_items,
        k=ks[0] if len(ks) == 1 else f"mixed ({ks[0]}-{ks[-1]})",
        k_groups=[{"k": g.k, "n": g.inputs.n_test, "n_calib": g.inputs.n_calib, "prior_source": g.prior_source}
                  for g in groups],
        notes=[{"level": "L1", "text": note} for note in notes],
        levels=names,
        metrics=metrics,
        level_minus_raw=minus_raw,
        temperature=temperature,
        answer_mass=answer_mass_summary(answer_masses, options, level=level),
        intervals_widened=sum(v["widened"] for per in metrics.values() for v in per.values()),
        settings={**dataclasses.asdict(options), "effective_batch_size": options.effective_batch_size,
                  "prior_source": prior_source, "interval": f"BCa {level:.0%}", "interval_level": level,
                  "resampled": RESAMPLED, "tie_tolerance": TIE_TOL},
        point=PointLevels(cell.levels, {g: math.exp(float(v[0])) for g, v in cell.log_t.items()}),
        gold=cell.gold[0],
        ids=list(ids),
        replicates=cell,
    )


def answer_mass_summary(values: Sequence[float | None], options: EvaluationOptions, *,
                        level: float) -> dict[str, Any] | None:
    """Mean answer mass of the test items (the probability on the label tokens at all, read with
    ``scoring.answer_mass``) with its BCa interval over resampled items (OPTIONS' ``n_boot`` and ``bootstrap_seed``);
    None when the cell did not read it."""
    if not values or any(v is None for v in values):
        return None
    arr = np.asarray(values, dtype=np.float64)
    n = arr.size
    rows = np.random.default_rng(options.bootstrap_seed).integers(0, n, size=(options.n_boot, n))
    jack = (arr.sum() - arr) / (n - 1) if n > 1 else arr
    return summary(float(arr.mean()), arr[rows].mean(axis=1), [jack], level)


@dataclass
class ItemLevels:
    """The point levels of a cell's test items (cell order) with what made them, to look at single items.

    * ``ids``, ``gold`` ``(N,)``, ``k`` ``(N,)``: the test items as :func:`evaluate` orders them;
    * ``levels[level][group]``: option-space log-probs ``(N, Kmax)`` (``-inf`` on padded options), the arrays
      :func:`evaluate` computes its point metrics from;
    * ``temperature[group]``: L1's fitted T (absent without calibration items);
    * ``test_prior[group][i]``: the prior divided out of test item ``i`` for L0 (L0-bc: its row 0), probabilities
      ``(S, K_i)`` in position space (rows: the group's layouts r0, r1, ...; columns: labels);
    * ``l1_prior[group][i]``: the prior under which L1's temperature is applied to item ``i`` (the calibration
      items' frozen prior of its prior group, or its content-free prior), same shape; absent without L1;
    * ``prior_source``: ``items``, ``calibration`` or ``content_free`` (``/``-joined when K groups differ).
    """

    ids: list[str]
    gold: np.ndarray
    k: np.ndarray
    levels: dict[str, dict[str, np.ndarray]]
    temperature: dict[str, float]
    test_prior: dict[str, list[np.ndarray]]
    l1_prior: dict[str, list[np.ndarray]]
    prior_source: str


def item_levels(groups: list[KGroup], options: EvaluationOptions, ids: Sequence[str]) -> ItemLevels:
    """Every level of every test item at the point (no bootstrap), by the code :func:`evaluate` uses for its point
    values, with the per-item priors and L1's temperature."""
    with_l1 = with_calibration(groups, options)
    marks = calib_rows(groups, with_l1)
    levels, gold, log_t = replicates(groups, identity_rows(groups, marks), with_l1, options)
    order = cell_order(groups)
    n = len(ids)
    test_prior: dict[str, list] = {}
    l1_prior: dict[str, list] = {}
    for grp, mark in zip(groups, marks, strict=True):
        cal = (resampled_calibration(grp.inputs, np.arange(grp.inputs.n_calib)[None], options,
                                     prior_source=grp.prior_source) if mark and grp.inputs.n_calib else None)
        res = resampled_test_levels(grp.inputs, np.arange(grp.inputs.n_test)[None], options,
                                    prior_source=grp.prior_source, calibration=None if cal is None else cal.frozen)
        for g, prior in res.test_prior.items():
            test_prior.setdefault(g, [None] * n)
            frozen = None
            if with_l1 and grp.prior_source == "content_free":
                frozen = prior[0]
            elif with_l1 and cal is None:  # no calibration items of this K: the uniform prior
                frozen = np.full(prior[0].shape, 1.0 / grp.k)
            elif with_l1:
                frozen = take_groups(cal.frozen[g], grp.inputs.test_gid[None])[0]
            for j, pos in enumerate(grp.test_pos):
                test_prior[g][pos] = prior[0, j]
                if frozen is not None:
                    l1_prior.setdefault(g, [None] * n)[pos] = frozen[j]
    return ItemLevels(ids=list(ids), gold=gold[0, order], k=np.array([g.k for g in groups for _ in g.test_pos])[order],
                      levels={name: {g: v[0, order] for g, v in lv.items()} for name, lv in levels.items()},
                      temperature={g: math.exp(float(v[0])) for g, v in log_t.items()},
                      test_prior=test_prior, l1_prior=l1_prior,
                      prior_source="/".join(sorted({g.prior_source for g in groups})))
