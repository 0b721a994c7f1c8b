"""Calibration levels raw / L0-perm / L0-bc / L0 / L1 from position-space label log-probabilities.

Shapes used throughout:

* position-space log-probs ``(N, S, K)``: item ``i``, layout (rotation) ``s``, position ``p`` (label A first);
* ``orders`` ``(S, K)``: ``orders[s, p]`` is the option index shown at position ``p`` in layout ``s``;
* option space: ``lp_opt[..., s, orders[s, p]] = lp_pos[..., s, p]``.

Every log-prob array returned here is normalised over its last axis (logsumexp = 0). Priors are returned as
probabilities (they sum to 1 over the last axis), because the correction divides probabilities by them.

The levels follow the published method (docs/architecture.md, reference/method.md "Levels"):

* ``raw``: layout 0 mapped to option space;
* ``L0-perm``: geometric mean over all layouts, no prior correction;
* ``L0-bc``: batch label-prior correction of layout 0 only;
* ``L0``: prior correction per layout, then geometric mean;
* ``L1``: temperature scaling on top of L0, fit on a labelled calibration split whose prior is frozen.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

LEVELS: tuple[str, ...] = ("raw", "L0-perm", "L0-bc", "L0", "L1")
GROUPS: tuple[str, ...] = ("fwd", "rev")

PRIOR_FLOOR = 1e-8  # floor on both q and the prior in the prior correction (published method)
MARGINAL_FLOOR = 1e-12  # floor on each probability before the geometric mean (published method)
LOG_T_RANGE = (-3.0, 3.0)
GOLDEN_ITERATIONS = 60


# --------------------------------------------------------------------------------------------- helpers


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Normalise log-weights over ``axis``; the single place where renormalisation happens."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _check_lp(name: str, lp: object, ndim: int) -> np.ndarray:
    """Reject arrays that would silently produce NaN levels (wrong rank, NaN, +inf)."""
    arr = np.asarray(lp, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: empty array of shape {arr.shape}")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"{name}: contains NaN or +inf")
    return arr


def _check_orders(name: str, orders: object, s: int, k: int) -> np.ndarray:
    """Orders must be one permutation of range(K) per layout, else the mapping to option space is wrong."""
    arr = np.asarray(orders)
    if arr.shape != (s, k):
        raise ValueError(f"{name}: expected shape ({s}, {k}) to match the log-probs, got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer option indices, got dtype {arr.dtype}")
    if not np.array_equal(np.sort(arr, axis=1), np.broadcast_to(np.arange(k), (s, k))):
        raise ValueError(f"{name}: every row must be a permutation of 0..{k - 1}, got {arr.tolist()}")
    return arr.astype(np.intp)


def _labels(name: str, groups: object, n: int) -> list[Hashable]:
    """Prior-group labels as plain Python values (numpy scalars become str/int, so dict keys are clean)."""
    if isinstance(groups, np.ndarray):
        if groups.ndim != 1:
            raise ValueError(f"{name}: expected a 1-d array of labels, got shape {groups.shape}")
        labels = groups.tolist()
    else:
        labels = list(groups)  # type: ignore[call-overload]
    if len(labels) != n:
        raise ValueError(f"{name}: expected {n} labels (one per item), got {len(labels)}")
    return labels


def _check_gold(name: str, gold: object, n: int, k: int) -> np.ndarray:
    """Gold must be option indices in range; anything else would index the wrong probability."""
    arr = np.asarray(gold)
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer option indices, got dtype {arr.dtype}")
    if ((arr < 0) | (arr >= k)).any():
        raise ValueError(f"{name}: option indices must lie in 0..{k - 1}, got min {arr.min()} max {arr.max()}")
    return arr.astype(np.intp)


# ----------------------------------------------------------------------------------------- primitives


def to_option_space(lp_pos: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Map ``(N, S, K)`` position-space log-probs to option space, so layouts can be combined per option."""
    lp = _check_lp("lp_pos", lp_pos, 3)
    order = _check_orders("orders", orders, lp.shape[1], lp.shape[2])
    inverse = np.argsort(order, axis=1)  # inverse[s, option] = position showing that option
    return np.take_along_axis(lp, inverse[None, :, :], axis=2)


def batch_prior(
    lp_pos: np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    *,
    min_items: int = 8,
    batch_size: int | None = None,
) -> np.ndarray:
    """Label prior (probabilities, position space) that applies to each item, shape ``(N, S, K)``.

    The prior estimates a model's preference for each position independent of content, so that it can be
    divided out. Items are scored in the given order in consecutive batches of ``batch_size`` (``None``: one
    batch); an item's prior is the mean label distribution, per prior group and rotation, over every item of
    its group scored so far, its own batch included. While fewer than ``min_items`` items of the group have
    been seen, the prior is uniform (no correction).
    """
    lp = log_softmax(_check_lp("lp_pos", lp_pos, 3))
    n, s, k = lp.shape
    labels = _labels("groups", groups, n)
    if min_items < 1:
        raise ValueError(f"min_items: must be >= 1, got {min_items}")
    if batch_size is None:
        batch_size = n
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1 or None, got {batch_size}")

    probs = np.exp(lp)
    prior = np.full((n, s, k), 1.0 / k)
    members: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    for idx_list in members.values():
        idx = np.asarray(idx_list, dtype=np.intp)
        cum = np.cumsum(probs[idx], axis=0)  # cum[j] = sum over the group's first j+1 items
        batch_end = (idx // batch_size + 1) * batch_size  # first index after each item's batch
        seen = np.searchsorted(idx, batch_end, side="left")  # group items with index < batch end
        active = seen >= min_items
        if active.any():
            prior[idx[active]] = cum[seen[active] - 1] / seen[active][:, None, None]
    return prior


def prior_correct(lp_pos: np.ndarray, prior: np.ndarray, strength: float = 0.75) -> np.ndarray:
    """Divide position-space probabilities by ``prior**strength`` and renormalise (log-probs out).

    This removes a content-independent preference for some labels. Both ``q`` and the prior are floored at
    1e-8 as in the published method, so a label the model never picks cannot blow up the division.
    """
    lp = _check_lp("lp_pos", lp_pos, 3)
    pr = np.asarray(prior, dtype=np.float64)
    try:
        np.broadcast_shapes(pr.shape, lp.shape)
    except ValueError:
        raise ValueError(f"prior: shape {pr.shape} does not broadcast to lp_pos shape {lp.shape}") from None
    if np.isnan(pr).any() or (pr < 0).any():
        raise ValueError("prior: contains NaN or negative probabilities")
    log_q = np.maximum(log_softmax(lp), math.log(PRIOR_FLOOR))
    log_prior = np.log(np.maximum(pr, PRIOR_FLOOR))
    return log_softmax(log_q - strength * log_prior)


def marginalise(lp_opt: np.ndarray) -> np.ndarray:
    """Geometric mean over layouts of option-space log-probs ``(N, S, K) -> (N, K)``.

    Averaging log-probabilities cancels any position bias that is additive in logits when every option
    visits every position once (cyclic rotations). Each probability is floored at 1e-12 first so a single
    zero cannot veto an option.
    """
    lp = _check_lp("lp_opt", lp_opt, 3)
    floored = np.maximum(lp, math.log(MARGINAL_FLOOR))
    return log_softmax(floored.mean(axis=1))


def _mean_nll(lp: np.ndarray, gold: np.ndarray, temperature: float) -> float:
    """Mean NLL of the tempered distribution: the objective temperature scaling minimises."""
    scaled = log_softmax(lp / temperature)
    return float(-np.mean(scaled[np.arange(len(gold)), gold]))


def fit_temperature(lp: np.ndarray, gold: np.ndarray) -> float:
    """Temperature minimising the mean NLL of ``log_softmax(lp / T)`` on labelled items.

    Golden-section search on ``log T`` in [-3, 3], 60 iterations, as in the published method: one scalar
    fixes over- or under-confidence without changing any argmax.
    """
    arr = _check_lp("lp", lp, 2)
    g = _check_gold("gold", gold, arr.shape[0], arr.shape[1])
    a, b = LOG_T_RANGE
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    c = b - inv_phi * (b - a)
    d = a + inv_phi * (b - a)
    fc = _mean_nll(arr, g, math.exp(c))
    fd = _mean_nll(arr, g, math.exp(d))
    for _ in range(GOLDEN_ITERATIONS):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = _mean_nll(arr, g, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = _mean_nll(arr, g, math.exp(d))
    return math.exp((a + b) / 2.0)


def apply_temperature(lp: np.ndarray, temperature: float) -> np.ndarray:
    """``log_softmax(lp / T)``: the calibrated distribution; argmax is unchanged for any T > 0."""
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature: must be a finite positive number, got {temperature}")
    return log_softmax(np.asarray(lp, dtype=np.float64) / temperature)


# ------------------------------------------------------------------------------------------------ levels


@dataclass
class LevelResult:
    """Everything :func:`compute_levels` derives, so evaluation and reports can show how levels were made.

    * ``levels[level][group]``: option-space log-probs ``(N, K)`` for ``group`` in ``("fwd", "rev")``;
      ``levels[level]["rev"]`` is ``None`` when no reversed layout was scored. ``"L1"`` is absent (not
      ``None``) when no calibration split was given, so every array present is a real result.
    * ``temperature[group]``: the fitted L1 temperature (absent without calibration data).
    * ``test_prior[group]``: the batch prior applied to each test item, probabilities ``(N, S, K)``.
    * ``calib_prior[group]``: the frozen calibration prior per prior-group label, probabilities ``(S, K)``;
      a label with fewer than ``min_items`` calibration items gets the uniform prior.

    ``result[level]`` is a shortcut for ``result.levels[level]``.
    """

    levels: dict[str, dict[str, np.ndarray | None]]
    temperature: dict[str, float] = field(default_factory=dict)
    test_prior: dict[str, np.ndarray] = field(default_factory=dict)
    calib_prior: dict[str, dict[Hashable, np.ndarray]] = field(default_factory=dict)

    def __getitem__(self, level: str) -> dict[str, np.ndarray | None]:
        return self.levels[level]

    def __contains__(self, level: object) -> bool:
        return level in self.levels


def _calibration_prior(lp_pos: np.ndarray, labels: list[Hashable], min_items: int) -> dict[Hashable, np.ndarray]:
    """Prior over the whole calibration split per label: what L1 freezes together with its temperature."""
    _, s, k = lp_pos.shape
    probs = np.exp(log_softmax(lp_pos))
    members: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    out: dict[Hashable, np.ndarray] = {}
    for label, idx in members.items():
        out[label] = probs[idx].mean(axis=0) if len(idx) >= min_items else np.full((s, k), 1.0 / k)
    return out


def _frozen_prior(priors: dict[Hashable, np.ndarray], labels: list[Hashable], s: int, k: int) -> np.ndarray:
    """Per-item prior from the frozen calibration priors; a label unseen in calibration gets no correction."""
    uniform = np.full((s, k), 1.0 / k)
    return np.stack([priors.get(label, uniform) for label in labels])


def _l0(lp_pos: np.ndarray, prior: np.ndarray, orders: np.ndarray, strength: float) -> np.ndarray:
    """L0 from a given prior: correct each layout, map to option space, take the geometric mean."""
    return marginalise(to_option_space(prior_correct(lp_pos, prior, strength), orders))


def compute_levels(
    test_fwd: np.ndarray,
    test_rev: np.ndarray | None,
    orders_fwd: np.ndarray,
    orders_rev: np.ndarray | None,
    groups_test: Sequence[Hashable] | np.ndarray,
    *,
    calib_fwd: np.ndarray | None = None,
    calib_rev: np.ndarray | None = None,
    calib_groups: Sequence[Hashable] | np.ndarray | None = None,
    calib_gold: np.ndarray | None = None,
    strength: float = 0.75,
    min_items: int = 8,
    batch_size: int | None = None,
) -> LevelResult:
    """All levels for the test items, per layout group (``fwd``, and ``rev`` for the order-flip probe).

    Each group is computed from its own arrays only, so the flip probe compares two independent pipelines.
    L1 is fitted on the calibration split (its prior over the whole split, then T on ``calib_gold``) and
    applied to the test items with that frozen prior, fwd and rev calibrated separately; without
    ``calib_fwd`` there is no L1. Score questions pass ``S = 1`` and no rev (then L0-perm equals raw).
    """
    fwd = _check_lp("test_fwd", test_fwd, 3)
    n, _, k = fwd.shape
    labels = _labels("groups_test", groups_test, n)
    if (test_rev is None) != (orders_rev is None):
        raise ValueError("orders_rev: must be given exactly when test_rev is given")
    if (calib_rev is not None) and (test_rev is None):
        raise ValueError("calib_rev: given without test_rev")

    inputs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    inputs["fwd"] = (fwd, _check_orders("orders_fwd", orders_fwd, fwd.shape[1], k))
    if test_rev is not None:
        rev = _check_lp("test_rev", test_rev, 3)
        if rev.shape[0] != n or rev.shape[2] != k:
            raise ValueError(f"test_rev: shape {rev.shape} does not match test_fwd items and labels {fwd.shape}")
        inputs["rev"] = (rev, _check_orders("orders_rev", orders_rev, rev.shape[1], k))

    calib: dict[str, np.ndarray] = {}
    if calib_fwd is not None:
        calib["fwd"] = _check_lp("calib_fwd", calib_fwd, 3)
        if test_rev is not None:
            if calib_rev is None:
                raise ValueError("calib_rev: required for L1 when test_rev is given (rev is calibrated separately)")
            calib["rev"] = _check_lp("calib_rev", calib_rev, 3)
        n_cal = calib["fwd"].shape[0]
        if calib_groups is None:
            raise ValueError("calib_groups: required when calib_fwd is given")
        if calib_gold is None:
            raise ValueError("calib_gold: required when calib_fwd is given")
        cal_labels = _labels("calib_groups", calib_groups, n_cal)
        cal_gold = _check_gold("calib_gold", calib_gold, n_cal, k)
        for g, arr in calib.items():
            if arr.shape[0] != n_cal or arr.shape[1:] != inputs[g][0].shape[1:]:
                raise ValueError(
                    f"calib_{g}: shape {arr.shape} does not match {n_cal} items and test_{g} layouts/labels {inputs[g][0].shape[1:]}"
                )
    elif calib_rev is not None or calib_gold is not None or calib_groups is not None:
        raise ValueError("calib_fwd: required when any other calibration argument is given")

    levels: dict[str, dict[str, np.ndarray | None]] = {name: {"fwd": None, "rev": None} for name in LEVELS}
    result = LevelResult(levels=levels)
    for g, (lp, orders) in inputs.items():
        prior = batch_prior(lp, labels, min_items=min_items, batch_size=batch_size)
        result.test_prior[g] = prior
        opt = to_option_space(lp, orders)
        levels["raw"][g] = log_softmax(opt[:, 0, :])
        levels["L0-perm"][g] = marginalise(opt)
        levels["L0-bc"][g] = to_option_space(prior_correct(lp[:, :1], prior[:, :1], strength), orders[:1])[:, 0, :]
        levels["L0"][g] = marginalise(to_option_space(prior_correct(lp, prior, strength), orders))
        if g in calib:
            s = lp.shape[1]
            cal_prior = _calibration_prior(calib[g], cal_labels, min_items)
            cal_l0 = _l0(calib[g], _frozen_prior(cal_prior, cal_labels, s, k), orders, strength)
            temperature = fit_temperature(cal_l0, cal_gold)
            test_l0 = _l0(lp, _frozen_prior(cal_prior, labels, s, k), orders, strength)
            levels["L1"][g] = apply_temperature(test_l0, temperature)
            result.temperature[g] = temperature
            result.calib_prior[g] = cal_prior
    if not calib:
        del levels["L1"]
    return result
