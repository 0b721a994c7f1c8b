"""Calibration levels raw / L0-perm / L0-bc / L0 / L1 from position-space label log-probabilities.

Shapes used throughout:

* position-space log-probs ``(N, S, K)``: item ``i``, layout (rotation) ``s``, position ``p`` (label A first);
* ``orders`` ``(S, K)``: ``orders[s, p]`` is the option index shown at position ``p`` in layout ``s``; or
  ``(N, S, K)`` when items differ (canonical option order: each item's listing is sorted by its own texts);
* ``read`` ``(N, S)`` booleans (optional): which layouts an item read (adaptive rotations); the others hold
  placeholders and are left out of every mean (geometric mean over layouts, batch prior per layout);
* option space: ``lp_opt[..., s, orders[s, p]] = lp_pos[..., s, p]``.

Every log-prob array returned here is normalised over its last axis (logsumexp = 0). Priors are returned as
probabilities (they sum to 1 over the last axis), because the correction divides probabilities by them.

The levels follow the published method (docs/architecture.md, docs/metrics.md):

* ``raw``: layout 0 mapped to option space;
* ``L0-perm``: geometric mean over all layouts, no prior correction;
* ``L0-bc``: batch label-prior correction of layout 0 only;
* ``L0``: prior correction per layout, then geometric mean;
* ``L1``: temperature scaling on top of L0, fit on a labelled calibration split whose prior is frozen;
* ``L0-cf`` (ablation, when content-free probes were scored): L0 with the content-free prior.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from anyjev.numbers.logprobs import check_gold, log_softmax
from anyjev.settings import default

# The config schema holds these defaults (evaluation.*); the keyword defaults below are the same values.
PRIOR_STRENGTH: float = default("evaluation", "prior_strength")
PRIOR_MIN_ITEMS: int = default("evaluation", "prior_min_items")

LEVELS: tuple[str, ...] = ("raw", "L0-perm", "L0-bc", "L0", "L1")
CF_LEVEL = "L0-cf"  # ablation: L0 with the content-free prior (only when the probes were scored)
ALL_LEVELS: tuple[str, ...] = (*LEVELS, CF_LEVEL)
PRIOR_SOURCES: tuple[str, ...] = ("items", "content_free", "calibration")
GROUPS: tuple[str, ...] = ("fwd", "rev")

PRIOR_FLOOR = 1e-8  # floor on both q and the prior in the prior correction (published method)
MARGINAL_FLOOR = 1e-12  # floor on each probability before the geometric mean (published method)
LOG_T_RANGE = (-3.0, 3.0)
GOLDEN_ITERATIONS = 60


# --------------------------------------------------------------------------------------------- helpers


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


def _check_orders(name: str, orders: object, s: int, k: int, n: int | None = None) -> np.ndarray:
    """Orders must be one permutation of range(K) per layout (shared ``(S, K)``, or per item ``(N, S, K)`` when
    N is given), else the mapping to option space is wrong."""
    arr = np.asarray(orders)
    if arr.shape != (s, k) and (n is None or arr.shape != (n, s, k)):
        want = f"({s}, {k})" + ("" if n is None else f" or ({n}, {s}, {k})")
        raise ValueError(f"{name}: expected shape {want} to match the log-probs, got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer option indices, got dtype {arr.dtype}")
    if not np.array_equal(np.sort(arr, axis=-1), np.broadcast_to(np.arange(k), arr.shape)):
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


# ----------------------------------------------------------------------------------------- primitives


def _option_space(lp: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """``(..., S, K)`` position space to option space for validated ``orders`` ``(S, K)`` (or with the
    leading item axes of ``lp``, per-item orders)."""
    inverse = np.argsort(orders, axis=-1)  # inverse[..., s, option] = position showing that option
    return np.take_along_axis(lp, inverse.reshape((1,) * (lp.ndim - inverse.ndim) + inverse.shape), axis=-1)


def to_option_space(lp_pos: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Map ``(N, S, K)`` position-space log-probs to option space, so layouts can be combined per option."""
    lp = _check_lp("lp_pos", lp_pos, 3)
    return _option_space(lp, _check_orders("orders", orders, lp.shape[1], lp.shape[2], lp.shape[0]))


def _group_ids(*label_lists: list[Hashable]) -> tuple[list[np.ndarray], list[Hashable]]:
    """Integer ids shared across label lists (test and calibration), and the labels in id order."""
    index: dict[Hashable, int] = {}
    out = [np.array([index.setdefault(label, len(index)) for label in labels], dtype=np.intp) for labels in label_lists]
    return out, list(index)


def _running_prior(probs: np.ndarray, gid: np.ndarray, idx: np.ndarray, *, n_groups: int, min_items: int,
                   batch_size: int | None, read: np.ndarray | None = None) -> np.ndarray:
    """Prior per item of each resample ``idx`` ``(B, n)`` (indices into ``probs`` ``(N, S, K)``), ``(B, n, S, K)``.

    Each row is a data set scored in its row order (rows of a bootstrap are sorted, so the task file's order
    is kept and a repeated item is scored again right after itself): the item at row position ``j`` sees
    every item of its group at positions before the end of its batch (``batch_size`` consecutive positions;
    ``None``: the whole row), its own batch included. Vectorised over resamples by sorting each row by
    (group, position) and differencing one cumulative sum per row.

    With ``read`` ``(N, S)``, a layout's prior is the mean over the items that read it; a layout read by
    fewer than ``min_items`` of them falls back to the group's pooled position profile (the mean over every
    layout read), which needs ``min_items`` items. When every item read every layout this is the plain rule.
    """
    _, s, k = probs.shape
    b, n = idx.shape
    g = gid[idx]
    pos = np.broadcast_to(np.arange(n), (b, n))
    end = np.full((b, n), n) if batch_size is None else (pos // batch_size + 1) * batch_size
    stride = n + 1
    key = g * stride + pos
    order = np.argsort(key, axis=1, kind="stable")
    row_off = (np.arange(b) * (n_groups * stride))[:, None]
    flat = (np.take_along_axis(key, order, axis=1) + row_off).ravel()
    g_sorted = np.take_along_axis(g, order, axis=1)
    end_sorted = np.take_along_axis(end, order, axis=1)
    local = (np.arange(b) * n)[:, None]
    start = np.searchsorted(flat, (g_sorted * stride + row_off).ravel()).reshape(b, n) - local
    stop = np.searchsorted(flat, (g_sorted * stride + end_sorted + row_off).ravel()).reshape(b, n) - local
    rows = np.take_along_axis(idx, order, axis=1)
    cum = np.zeros((b, n + 1, s, k))
    cum[:, 1:] = np.cumsum(probs[rows] if read is None else probs[rows] * read[rows][..., None], axis=1)
    seen = stop - start
    total = (np.take_along_axis(cum, stop[:, :, None, None], axis=1)
             - np.take_along_axis(cum, start[:, :, None, None], axis=1))
    if read is None:
        active = (seen >= min_items)[:, :, None, None]
        prior_sorted = np.where(active, total / np.maximum(seen, 1)[:, :, None, None], 1.0 / k)
    else:
        cnt = np.zeros((b, n + 1, s))
        cnt[:, 1:] = np.cumsum(read[rows].astype(np.float64), axis=1)
        seen_s = np.take_along_axis(cnt, stop[:, :, None], axis=1) - np.take_along_axis(cnt, start[:, :, None], axis=1)
        per_layout = total / np.maximum(seen_s, 1)[..., None]
        pooled = total.sum(axis=2, keepdims=True) / np.maximum(seen_s.sum(axis=2), 1)[:, :, None, None]
        prior_sorted = np.where((seen_s >= min_items)[..., None], per_layout,
                                np.where((seen >= min_items)[:, :, None, None], pooled, 1.0 / k))
    inverse = np.argsort(order, axis=1)
    return np.take_along_axis(prior_sorted, inverse[:, :, None, None], axis=1)


def batch_prior(
    lp_pos: np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    *,
    min_items: int = PRIOR_MIN_ITEMS,
    batch_size: int | None = None,
) -> np.ndarray:
    """Label prior (probabilities, position space) that applies to each item, shape ``(N, S, K)``.

    The prior estimates a model's preference for each position independent of content, so that it can be
    divided out. Items are scored in the given order in consecutive batches of ``batch_size`` (``None``: one
    batch); an item's prior is the mean label distribution, per prior group and rotation, over every item of
    its group scored so far, its own batch included. While fewer than ``min_items`` items of the group have
    been seen, the prior is uniform (no correction). ``batch_size=1`` is the published "scored so far"
    (streaming) prior; ``None`` the whole split (batch).
    """
    lp = log_softmax(_check_lp("lp_pos", lp_pos, 3))
    n = lp.shape[0]
    labels = _labels("groups", groups, n)
    _check_prior_args(min_items, batch_size)
    (gid,), names = _group_ids(labels)
    return _running_prior(np.exp(lp), gid, np.arange(n)[None, :], n_groups=len(names), min_items=min_items,
                          batch_size=batch_size)[0]


def _check_prior_args(min_items: int, batch_size: int | None) -> None:
    if min_items < 1:
        raise ValueError(f"min_items: must be >= 1, got {min_items}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1 or None, got {batch_size}")


def _correct(lp: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """Prior correction on validated arrays (any leading axes)."""
    log_q = np.maximum(log_softmax(lp), math.log(PRIOR_FLOOR))
    log_prior = np.log(np.maximum(prior, PRIOR_FLOOR))
    return log_softmax(log_q - strength * log_prior)


def prior_correct(lp_pos: np.ndarray, prior: np.ndarray, strength: float = PRIOR_STRENGTH) -> np.ndarray:
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
    return _correct(lp, pr, strength)


def _marginalise(lp: np.ndarray, read: np.ndarray | None = None) -> np.ndarray:
    """Geometric mean over the layout axis (-2) on validated arrays; with ``read`` (``lp``'s shape without
    the last axis), over the layouts read only."""
    floored = np.maximum(lp, math.log(MARGINAL_FLOOR))
    if read is None:
        return log_softmax(floored.mean(axis=-2))
    return log_softmax((floored * read[..., None]).sum(axis=-2) / read.sum(axis=-1)[..., None])


def marginalise(lp_opt: np.ndarray) -> np.ndarray:
    """Geometric mean over layouts of option-space log-probs ``(N, S, K) -> (N, K)``.

    Averaging log-probabilities cancels any position bias that is additive in logits when every option
    visits every position once (cyclic rotations). Each probability is floored at 1e-12 first so a single
    zero cannot veto an option.
    """
    return _marginalise(_check_lp("lp_opt", lp_opt, 3))


def fit_log_temperature(lp: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Golden-section search on log T in [-3, 3] for each resample of ``lp`` ``(B, n, K)``, ``gold`` ``(B, n)``.

    Options padded with ``-inf`` (mixed K) stay impossible at every T, so cells of different K share one fit.
    """

    def nll(log_t: np.ndarray) -> np.ndarray:
        scaled = log_softmax(lp / np.exp(log_t)[:, None, None])
        return -np.take_along_axis(scaled, gold[..., None], axis=-1)[..., 0].mean(axis=1)

    a = np.full(lp.shape[0], LOG_T_RANGE[0])
    b = np.full(lp.shape[0], LOG_T_RANGE[1])
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    c = b - inv_phi * (b - a)
    d = a + inv_phi * (b - a)
    fc, fd = nll(c), nll(d)
    for _ in range(GOLDEN_ITERATIONS):
        left = fc < fd  # minimum in [a, d]: b <- d, d <- c, new c; else a <- c, c <- d, new d
        a, b = np.where(left, a, c), np.where(left, d, b)
        c_new = np.where(left, b - inv_phi * (b - a), d)
        d_new = np.where(left, c, a + inv_phi * (b - a))
        f_probe = nll(np.where(left, c_new, d_new))
        fc, fd = np.where(left, f_probe, fd), np.where(left, fc, f_probe)
        c, d = c_new, d_new
    return (a + b) / 2.0


def fit_temperature(lp: np.ndarray, gold: np.ndarray) -> float:
    """Temperature minimising the mean NLL of ``log_softmax(lp / T)`` on labelled items.

    Golden-section search on ``log T`` in [-3, 3], 60 iterations, as in the published method: one scalar
    fixes over- or under-confidence without changing any argmax.
    """
    arr = _check_lp("lp", lp, 2)
    g = check_gold("gold", gold, arr.shape[0], arr.shape[1])
    return math.exp(float(fit_log_temperature(arr[None], g[None])[0]))


def at_bound(temperature: float) -> bool:
    """Whether a fitted T sits on the search bound (log T within 1e-6 of -3 or 3): the fit is then clipped."""
    log_t = math.log(temperature)
    return min(abs(log_t - LOG_T_RANGE[0]), abs(log_t - LOG_T_RANGE[1])) <= 1e-6


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


@dataclass
class LevelInputs:
    """Validated arrays of one cell (one K) that every resample of :func:`levels_resampled` draws from.

    ``test[g]`` / ``calib[g]``: normalised position-space log-probs ``(N, S, K)`` per layout group; ``orders[g]``
    ``(S, K)`` or per test item ``(N, S, K)``, ``calib_orders[g]`` likewise for the calibration items;
    ``test_gid`` / ``calib_gid``: prior-group ids into ``group_names``; ``calib`` is empty without a
    calibration split (no L1). ``read[g]`` ``(N, S)``: the layouts each test item read (absent: all);
    ``cf[g]`` / ``calib_cf[g]``: content-free priors (probabilities, ``(N, S, K)``), present when scored.
    """

    test: dict[str, np.ndarray]
    orders: dict[str, np.ndarray]
    test_gid: np.ndarray
    calib: dict[str, np.ndarray]
    calib_gid: np.ndarray
    calib_gold: np.ndarray
    group_names: list[Hashable]
    calib_orders: dict[str, np.ndarray] = field(default_factory=dict)
    read: dict[str, np.ndarray] = field(default_factory=dict)
    cf: dict[str, np.ndarray] = field(default_factory=dict)
    calib_cf: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return int(self.test["fwd"].shape[2])

    @property
    def n_test(self) -> int:
        return int(self.test["fwd"].shape[0])

    @property
    def n_calib(self) -> int:
        return int(self.calib["fwd"].shape[0]) if self.calib else 0

    def size_per_resample(self) -> int:
        """Floats one resample holds in its largest arrays (to size chunks of resamples)."""
        s, k = self.test["fwd"].shape[1:]
        return (self.n_test + self.n_calib + len(self.group_names)) * s * k * len(self.test)


@dataclass
class ResampledLevels:
    """Levels of ``B`` resamples: ``levels[level][g]`` ``(B, n, K)``, ``log_t[g]`` ``(B,)``, priors."""

    levels: dict[str, dict[str, np.ndarray]]
    log_t: dict[str, np.ndarray]
    test_prior: dict[str, np.ndarray]
    calib_prior: dict[str, tuple[np.ndarray, np.ndarray]]  # (frozen prior (B, G, S, K), counts (B, G))
    # before temperature: L0 of the calibration items and of the test items under the frozen calibration prior
    calib_l0: dict[str, np.ndarray] = field(default_factory=dict)
    frozen_l0: dict[str, np.ndarray] = field(default_factory=dict)


def _frozen_priors(probs: np.ndarray, gid: np.ndarray, idx: np.ndarray, n_groups: int, min_items: int) -> tuple[np.ndarray, np.ndarray]:
    """Prior over the whole (resampled) calibration split per group, ``(B, G, S, K)``, and counts ``(B, G)``.

    This is what L1 freezes together with its temperature; a group with fewer than ``min_items`` items gets
    the uniform prior.
    """
    b, n = idx.shape
    _, s, k = probs.shape
    slot = (np.arange(b)[:, None] * n_groups + gid[idx]).ravel()
    sums = np.zeros((b * n_groups, s * k))
    np.add.at(sums, slot, probs[idx].reshape(b * n, s * k))
    counts = np.bincount(slot, minlength=b * n_groups).reshape(b, n_groups)
    mean = sums.reshape(b, n_groups, s, k) / np.maximum(counts, 1)[:, :, None, None]
    return np.where((counts >= min_items)[:, :, None, None], mean, 1.0 / k), counts


def _take_groups(prior: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Per-item prior ``(B, n, S, K)`` from per-group priors ``(B, G, S, K)`` and item group ids ``(B, n)``."""
    return np.take_along_axis(prior, gid[:, :, None, None], axis=1)


def _per_item(arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Orders of the resampled items: shared ``(S, K)`` as is, per item ``(N, S, K)`` indexed by ``idx``."""
    return arr if arr.ndim == 2 else arr[idx]


def levels_resampled(inputs: LevelInputs, idx_test: np.ndarray, idx_calib: np.ndarray | None, *,
                     strength: float = PRIOR_STRENGTH, min_items: int = PRIOR_MIN_ITEMS, batch_size: int | None = None,
                     fit: bool = True, prior_source: str = "items") -> ResampledLevels:
    """Every level for ``B`` resamples at once: rows of ``idx_test`` ``(B, n)`` / ``idx_calib`` ``(B, nc)``.

    Each resample refits everything that is fitted: the test prior (from the resampled test items, in their
    original order), the frozen calibration prior and L1's temperature (from the resampled calibration
    items). :func:`compute_levels` is the case ``B = 1`` with every index once, so point values and
    bootstrap replicates come from one piece of code. Rows of ``idx_test`` should be sorted so that the
    streaming prior sees items in their scored order. ``fit=False`` stops before the temperature (no L1;
    ``calib_l0`` and ``frozen_l0`` are filled), for a caller that fits one T over several cells (mixed K);
    without calibration items ``frozen_l0`` is L0 under the uniform prior (a group unseen in calibration).
    ``prior_source="content_free"`` takes every prior (test, and L1's frozen one) from the content-free probes;
    ``prior_source="calibration"`` corrects the test items with the calibration items' frozen prior (what an
    adaptive cell's stopping rule used, :mod:`anyjev.run.adaptive`), so L0 equals ``frozen_l0``.
    Where content-free priors are given, ``L0-cf`` is L0 under them.
    """
    if prior_source not in PRIOR_SOURCES:
        raise ValueError(f"prior_source: must be one of {PRIOR_SOURCES}, got {prior_source!r}")
    if prior_source == "content_free" and not inputs.cf:
        raise ValueError("prior_source 'content_free': the cell has no content-free probes (score it with them)")
    use_calib = bool(inputs.calib) and idx_calib is not None
    if prior_source == "calibration" and not use_calib:
        raise ValueError("prior_source 'calibration': needs calibration items (the frozen prior is theirs)")
    n_groups = len(inputs.group_names)
    levels: dict[str, dict[str, np.ndarray]] = {name: {} for name in ALL_LEVELS}
    out = ResampledLevels(levels=levels, log_t={}, test_prior={}, calib_prior={})
    gid_test = inputs.test_gid[idx_test]
    for g, lp in inputs.test.items():
        orders = _per_item(inputs.orders[g], idx_test)
        read = inputs.read.get(g)
        read_b = None if read is None else read[idx_test]
        cf = inputs.cf[g][idx_test] if g in inputs.cf else None
        if prior_source == "content_free":
            prior = cf
        elif prior_source == "calibration":
            frozen, _ = _frozen_priors(np.exp(inputs.calib[g]), inputs.calib_gid, idx_calib, n_groups, min_items)
            prior = _take_groups(frozen, gid_test)
        else:
            prior = _running_prior(np.exp(lp), inputs.test_gid, idx_test, n_groups=n_groups, min_items=min_items,
                                   batch_size=batch_size, read=read)
        out.test_prior[g] = prior
        lp_b = lp[idx_test]
        opt = _option_space(lp_b, orders)
        levels["raw"][g] = log_softmax(opt[:, :, 0, :])
        levels["L0-perm"][g] = _marginalise(opt, read_b)
        levels["L0-bc"][g] = _option_space(_correct(lp_b[:, :, :1], prior[:, :, :1], strength),
                                           orders[..., :1, :])[:, :, 0, :]
        levels["L0"][g] = _marginalise(_option_space(_correct(lp_b, prior, strength), orders), read_b)
        if cf is not None:
            levels[CF_LEVEL][g] = _marginalise(_option_space(_correct(lp_b, cf, strength), orders), read_b)
        if use_calib:
            cal = inputs.calib[g]
            cal_orders = _per_item(inputs.calib_orders.get(g, inputs.orders[g]), idx_calib)
            cal_gid = inputs.calib_gid[idx_calib]
            if prior_source == "content_free":
                frozen, counts = inputs.calib_cf[g][idx_calib], np.zeros((0,))
                cal_prior, test_frozen = frozen, cf
            else:
                frozen, counts = _frozen_priors(np.exp(cal), inputs.calib_gid, idx_calib, n_groups, min_items)
                cal_prior, test_frozen = _take_groups(frozen, cal_gid), _take_groups(frozen, gid_test)
            cal_l0 = _marginalise(_option_space(_correct(cal[idx_calib], cal_prior, strength), cal_orders))
            test_l0 = _marginalise(_option_space(_correct(lp_b, test_frozen, strength), orders), read_b)
            out.calib_prior[g] = (frozen, counts)
            out.calib_l0[g] = cal_l0
            if fit:
                log_t = fit_log_temperature(cal_l0, inputs.calib_gold[idx_calib])
                levels["L1"][g] = log_softmax(test_l0 / np.exp(log_t)[:, None, None])
                out.log_t[g] = log_t
        else:
            test_l0 = _marginalise(_option_space(_correct(lp_b, np.full(lp_b.shape, 1.0 / lp_b.shape[-1]), strength),
                                                 orders), read_b)
        out.frozen_l0[g] = test_l0
    if not (use_calib and fit):
        del levels["L1"]
    if not levels[CF_LEVEL]:
        del levels[CF_LEVEL]
    return out


def level_inputs(
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
    calib_orders_fwd: np.ndarray | None = None,
    calib_orders_rev: np.ndarray | None = None,
    read_fwd: np.ndarray | None = None,
    read_rev: np.ndarray | None = None,
    cf_fwd: np.ndarray | None = None,
    cf_rev: np.ndarray | None = None,
    calib_cf_fwd: np.ndarray | None = None,
    calib_cf_rev: np.ndarray | None = None,
) -> LevelInputs:
    """Validate the arrays of :func:`compute_levels` once (shapes, orders, groups, gold) for any number of resamples.

    Optional per group: ``calib_orders_*`` (the calibration items' own orders, when orders are per item),
    ``read_*`` ``(N, S)`` (layouts each test item read; unread entries of the log-probs are placeholders),
    ``cf_*`` / ``calib_cf_*`` (content-free priors, probabilities ``(N, S, K)``)."""
    fwd = _check_lp("test_fwd", test_fwd, 3)
    n, _, k = fwd.shape
    labels = _labels("groups_test", groups_test, n)
    if (test_rev is None) != (orders_rev is None):
        raise ValueError("orders_rev: must be given exactly when test_rev is given")
    if (calib_rev is not None) and (test_rev is None):
        raise ValueError("calib_rev: given without test_rev")

    test = {"fwd": log_softmax(fwd)}
    orders = {"fwd": _check_orders("orders_fwd", orders_fwd, fwd.shape[1], k, n)}
    if test_rev is not None:
        rev = _check_lp("test_rev", test_rev, 3)
        if rev.shape[0] != n or rev.shape[2] != k:
            raise ValueError(f"test_rev: shape {rev.shape} does not match test_fwd items and labels {fwd.shape}")
        test["rev"] = log_softmax(rev)
        orders["rev"] = _check_orders("orders_rev", orders_rev, rev.shape[1], k, n)

    calib: dict[str, np.ndarray] = {}
    cal_labels: list[Hashable] = []
    cal_gold = np.zeros(0, dtype=np.intp)
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
        cal_gold = check_gold("calib_gold", calib_gold, n_cal, k)
        for g, arr in calib.items():
            if arr.shape[0] != n_cal or arr.shape[1:] != test[g].shape[1:]:
                raise ValueError(
                    f"calib_{g}: shape {arr.shape} does not match {n_cal} items and test_{g} layouts/labels {test[g].shape[1:]}"
                )
            calib[g] = log_softmax(arr)
    elif calib_rev is not None or calib_gold is not None or calib_groups is not None:
        raise ValueError("calib_fwd: required when any other calibration argument is given")
    (test_gid, calib_gid), names = _group_ids(labels, cal_labels)
    out = LevelInputs(test=test, orders=orders, test_gid=test_gid, calib=calib, calib_gid=calib_gid,
                      calib_gold=cal_gold, group_names=names)
    n_cal = out.n_calib
    extra = {"fwd": (calib_orders_fwd, read_fwd, cf_fwd, calib_cf_fwd),
             "rev": (calib_orders_rev, read_rev, cf_rev, calib_cf_rev)}
    for g, (cal_orders, read, cf, cal_cf) in extra.items():
        if g not in test:
            if any(a is not None for a in (cal_orders, read, cf, cal_cf)):
                raise ValueError(f"{g}: per-group arrays given without test_{g}")
            continue
        s_g = test[g].shape[1]
        if cal_orders is not None:
            if not calib:
                raise ValueError(f"calib_orders_{g}: given without calibration items")
            out.calib_orders[g] = _check_orders(f"calib_orders_{g}", cal_orders, s_g, k, n_cal)
        elif orders[g].ndim == 3 and calib:
            raise ValueError(f"calib_orders_{g}: required when orders_{g} are per item")
        if read is not None:
            r = np.asarray(read)
            if r.shape != (n, s_g) or r.dtype != bool:
                raise ValueError(f"read_{g}: expected a boolean array of shape ({n}, {s_g}), got {r.dtype} {r.shape}")
            if not r[:, 0].all():
                raise ValueError(f"read_{g}: every item must read layout 0 (raw and L0-bc use it); item "
                                 f"{int(np.argmin(r[:, 0]))} did not")
            if not r.all():  # all read: the plain rule, bit for bit
                out.read[g] = r
        for name, arr, rows, store in ((f"cf_{g}", cf, n, out.cf), (f"calib_cf_{g}", cal_cf, n_cal, out.calib_cf)):
            if arr is None:
                continue
            a = np.asarray(arr, dtype=np.float64)
            if a.shape != (rows, s_g, k) or np.isnan(a).any() or (a < 0).any():
                raise ValueError(f"{name}: expected probabilities of shape ({rows}, {s_g}, {k}), got {a.shape}")
            store[g] = a
    if out.cf and set(out.cf) != set(test):
        raise ValueError(f"cf_*: content-free priors needed for every layout group {sorted(test)}, got {sorted(out.cf)}")
    if out.cf and calib and set(out.calib_cf) != set(test):
        raise ValueError("calib_cf_*: the calibration items need content-free priors too")
    return out


def compute_levels(
    *arrays: np.ndarray | Sequence[Hashable] | None,
    strength: float = PRIOR_STRENGTH,
    min_items: int = PRIOR_MIN_ITEMS,
    batch_size: int | None = None,
    prior_source: str = "items",
    **calib: np.ndarray | Sequence[Hashable] | None,
) -> LevelResult:
    """All levels for the test items, per layout group (``fwd``, and ``rev`` for the order-flip probe).

    Each group is computed from its own arrays only, so the flip probe compares two independent pipelines.
    L1 is fitted on the calibration split (its prior over the whole split, then T on ``calib_gold``) and
    applied to the test items with that frozen prior, fwd and rev calibrated separately; without
    ``calib_fwd`` there is no L1. Score questions pass ``S = 1`` and no rev (then L0-perm equals raw).
    ``batch_size=1`` gives the published streaming ("scored so far") prior, ``None`` the whole-split prior.

    ARRAYS and CALIB are :func:`level_inputs`'s: ``(test_fwd, test_rev, orders_fwd, orders_rev, groups_test)``
    and the keyword arrays (calibration, per-item orders, layouts read, content-free priors).
    ``prior_source="content_free"`` uses the content-free prior wherever the batch prior would be,
    ``"calibration"`` the calibration items' frozen prior.
    """
    inputs = level_inputs(*arrays, **calib)  # type: ignore[arg-type]
    _check_prior_args(min_items, batch_size)
    idx_calib = np.arange(inputs.n_calib)[None, :] if inputs.calib else None
    res = levels_resampled(inputs, np.arange(inputs.n_test)[None, :], idx_calib, strength=strength,
                           min_items=min_items, batch_size=batch_size, prior_source=prior_source)
    levels: dict[str, dict[str, np.ndarray | None]] = {
        name: {g: (res.levels[name][g][0] if g in res.levels[name] else None) for g in GROUPS}
        for name in res.levels
    }
    result = LevelResult(levels=levels)
    for g in inputs.test:
        result.test_prior[g] = res.test_prior[g][0]
        if g in res.log_t:
            result.temperature[g] = math.exp(float(res.log_t[g][0]))
            if prior_source == "content_free":
                continue
            frozen = res.calib_prior[g][0][0]
            seen = set(inputs.calib_gid.tolist())
            result.calib_prior[g] = {name: frozen[i] for i, name in enumerate(inputs.group_names) if i in seen}
    return result
