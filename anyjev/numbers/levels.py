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

from anyjev.numbers.logprobs import check_gold, check_labels, check_lp, check_orders, log_softmax
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.priors import correct, frozen_priors, group_ids, running_prior, take_groups
from anyjev.numbers.temperature import fit_log_temperature

LEVELS: tuple[str, ...] = ("raw", "L0-perm", "L0-bc", "L0", "L1")
CF_LEVEL = "L0-cf"  # ablation: L0 with the content-free prior (only when the probes were scored)
ALL_LEVELS: tuple[str, ...] = (*LEVELS, CF_LEVEL)
PRIOR_SOURCES: tuple[str, ...] = ("items", "content_free", "calibration")
GROUPS: tuple[str, ...] = ("fwd", "rev")
MARGINAL_FLOOR = 1e-12  # floor on each probability before the geometric mean (published method)


def _option_space(lp: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """``(..., S, K)`` position space to option space for validated ``orders`` ``(S, K)`` (or with the
    leading item axes of ``lp``, per-item orders)."""
    inverse = np.argsort(orders, axis=-1)  # inverse[..., s, option] = position showing that option
    return np.take_along_axis(lp, inverse.reshape((1,) * (lp.ndim - inverse.ndim) + inverse.shape), axis=-1)


def to_option_space(lp_pos: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Map ``(N, S, K)`` position-space log-probs to option space, so layouts can be combined per option."""
    lp = check_lp("lp_pos", lp_pos, 3)
    return _option_space(lp, check_orders("orders", orders, lp.shape[1], lp.shape[2], lp.shape[0]))


def marginalise_read(lp: np.ndarray, read: np.ndarray | None = None) -> np.ndarray:
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
    return marginalise_read(check_lp("lp_opt", lp_opt, 3))


@dataclass
class LevelResult:
    """Everything :func:`compute_levels` derives, so evaluation and reports can show how levels were made.

    * ``levels[level][group]``: option-space log-probs ``(N, K)`` for ``group`` in ``("fwd", "rev")``;
      ``levels[level]["rev"]`` is ``None`` when no reversed layout was scored. ``"L1"`` is absent (not
      ``None``) when no calibration split was given, so every array present is a real result.
    * ``temperature[group]``: the fitted L1 temperature (absent without calibration data).
    * ``test_prior[group]``: the batch prior applied to each test item, probabilities ``(N, S, K)``.
    * ``calib_prior[group]``: the frozen calibration prior per prior-group label, probabilities ``(S, K)``;
      a label with fewer than ``prior_min_items`` calibration items gets the uniform prior.

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


def _per_item(arr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Orders of the resampled items: shared ``(S, K)`` as is, per item ``(N, S, K)`` indexed by ``idx``."""
    return arr if arr.ndim == 2 else arr[idx]


@dataclass
class CalibrationResampled:
    """What the calibration items of ``B`` resamples give each layout group ``g``: ``prior[g]`` = (frozen prior, counts):
    per prior group ``(B, G, S, K)`` with the counts ``(B, G)`` it was averaged over, or, under the content-free prior,
    each calibration item's own ``(B, nc, S, K)`` (no counts); ``l0[g]`` the calibration items' L0 under it ``(B, nc, K)``;
    ``frozen[g]``: the prior per prior group that the test items are corrected with for L1 (None under the content-free
    prior: the test items' own probes)."""

    prior: dict[str, tuple[np.ndarray, np.ndarray]]
    l0: dict[str, np.ndarray]
    frozen: dict[str, np.ndarray | None]


def resampled_calibration(inputs: LevelInputs, idx_calib: np.ndarray, options: EvaluationOptions, *,
                          prior_source: str = "items") -> CalibrationResampled:
    """The frozen calibration prior and the calibration items' L0 of each resample, rows of ``idx_calib`` ``(B, nc)``
    (``nc`` may be 0: every prior group then has fewer than ``prior_min_items`` items, so its prior is uniform)."""
    out = CalibrationResampled(prior={}, l0={}, frozen={})
    n_groups = len(inputs.group_names)
    cal_gid = inputs.calib_gid[idx_calib]
    for g, cal in inputs.calib.items():
        cal_orders = _per_item(inputs.calib_orders.get(g, inputs.orders[g]), idx_calib)
        if prior_source == "content_free":
            frozen, counts = inputs.calib_cf[g][idx_calib], np.zeros((0,))
            cal_prior, out.frozen[g] = frozen, None
        else:
            frozen, counts = frozen_priors(np.exp(cal), inputs.calib_gid, idx_calib, n_groups, options.prior_min_items)
            cal_prior, out.frozen[g] = take_groups(frozen, cal_gid), frozen
        out.prior[g] = (frozen, counts)
        out.l0[g] = marginalise_read(_option_space(correct(cal[idx_calib], cal_prior, options.prior_strength),
                                                   cal_orders))
    return out


def resampled_test_levels(inputs: LevelInputs, idx_test: np.ndarray, options: EvaluationOptions, *,
                          prior_source: str = "items", calibration: dict[str, np.ndarray | None] | None = None
                          ) -> ResampledLevels:
    """Every level but L1 of the test items of ``B`` resamples, rows of ``idx_test`` ``(B, n)``, and ``frozen_l0``: their
    L0 under the frozen calibration prior CALIBRATION (:attr:`CalibrationResampled.frozen`, one row per resample; None:
    no calibration items, so the uniform prior, as for a prior group with fewer than ``prior_min_items`` of them)."""
    if prior_source == "calibration" and calibration is None:
        raise ValueError("prior_source 'calibration': needs calibration items (the frozen prior is theirs)")
    levels: dict[str, dict[str, np.ndarray]] = {name: {} for name in ALL_LEVELS}
    out = ResampledLevels(levels=levels, log_t={}, test_prior={}, calib_prior={})
    n_groups = len(inputs.group_names)
    gid_test = inputs.test_gid[idx_test]
    for g, lp in inputs.test.items():
        orders = _per_item(inputs.orders[g], idx_test)
        read = inputs.read.get(g)
        read_b = None if read is None else read[idx_test]
        cf = inputs.cf[g][idx_test] if g in inputs.cf else None
        frozen = None if calibration is None else calibration[g]
        if prior_source == "content_free":
            prior = cf
        elif prior_source == "calibration":
            prior = take_groups(frozen, gid_test)
        else:
            prior = running_prior(np.exp(lp), inputs.test_gid, idx_test, n_groups=n_groups,
                                  prior_min_items=options.prior_min_items,
                                  effective_batch_size=options.effective_batch_size, read=read)
        out.test_prior[g] = prior
        lp_b = lp[idx_test]
        opt = _option_space(lp_b, orders)
        levels["raw"][g] = log_softmax(opt[:, :, 0, :])
        levels["L0-perm"][g] = marginalise_read(opt, read_b)
        levels["L0-bc"][g] = _option_space(correct(lp_b[:, :, :1], prior[:, :, :1], options.prior_strength),
                                           orders[..., :1, :])[:, :, 0, :]
        levels["L0"][g] = marginalise_read(_option_space(correct(lp_b, prior, options.prior_strength), orders), read_b)
        if cf is not None:
            levels[CF_LEVEL][g] = marginalise_read(_option_space(correct(lp_b, cf, options.prior_strength), orders),
                                                   read_b)
        if calibration is None:
            test_frozen = np.full(lp_b.shape, 1.0 / lp_b.shape[-1])
        else:
            test_frozen = cf if prior_source == "content_free" else take_groups(frozen, gid_test)
        out.frozen_l0[g] = marginalise_read(_option_space(correct(lp_b, test_frozen, options.prior_strength), orders),
                                            read_b)
    del levels["L1"]
    if not levels[CF_LEVEL]:
        del levels[CF_LEVEL]
    return out


def levels_resampled(inputs: LevelInputs, idx_test: np.ndarray, idx_calib: np.ndarray | None,
                     options: EvaluationOptions, *, fit: bool = True, prior_source: str = "items") -> ResampledLevels:
    """Every level for ``B`` resamples at once: rows of ``idx_test`` ``(B, n)`` / ``idx_calib`` ``(B, nc)``, under
    OPTIONS' prior settings (``prior_strength``, ``prior_min_items``, and the running prior's batch size).

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
    Where content-free priors are given, ``L0-cf`` is L0 under them. The calibration half is
    :func:`resampled_calibration`, the test half :func:`resampled_test_levels`.
    """
    if prior_source not in PRIOR_SOURCES:
        raise ValueError(f"prior_source: must be one of {PRIOR_SOURCES}, got {prior_source!r}")
    if prior_source == "content_free" and not inputs.cf:
        raise ValueError("prior_source 'content_free': the cell has no content-free probes (score it with them)")
    use_calib = bool(inputs.calib) and idx_calib is not None
    cal = resampled_calibration(inputs, idx_calib, options, prior_source=prior_source) if use_calib else None
    out = resampled_test_levels(inputs, idx_test, options, prior_source=prior_source,
                                calibration=None if cal is None else cal.frozen)
    if cal is not None:
        out.calib_prior, out.calib_l0 = cal.prior, cal.l0
        if fit:
            out.levels["L1"] = {}
            for g in inputs.test:
                log_t = fit_log_temperature(cal.l0[g], inputs.calib_gold[idx_calib])
                out.levels["L1"][g] = log_softmax(out.frozen_l0[g] / np.exp(log_t)[:, None, None])
                out.log_t[g] = log_t
            out.levels = {name: out.levels[name] for name in ALL_LEVELS if name in out.levels}
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
    fwd = check_lp("test_fwd", test_fwd, 3)
    n, _, k = fwd.shape
    labels = check_labels("groups_test", groups_test, n)
    if (test_rev is None) != (orders_rev is None):
        raise ValueError("orders_rev: must be given exactly when test_rev is given")
    if (calib_rev is not None) and (test_rev is None):
        raise ValueError("calib_rev: given without test_rev")

    test = {"fwd": log_softmax(fwd)}
    orders = {"fwd": check_orders("orders_fwd", orders_fwd, fwd.shape[1], k, n)}
    if test_rev is not None:
        rev = check_lp("test_rev", test_rev, 3)
        if rev.shape[0] != n or rev.shape[2] != k:
            raise ValueError(f"test_rev: shape {rev.shape} does not match test_fwd items and labels {fwd.shape}")
        test["rev"] = log_softmax(rev)
        orders["rev"] = check_orders("orders_rev", orders_rev, rev.shape[1], k, n)

    calib: dict[str, np.ndarray] = {}
    cal_labels: list[Hashable] = []
    cal_gold = np.zeros(0, dtype=np.intp)
    if calib_fwd is not None:
        calib["fwd"] = check_lp("calib_fwd", calib_fwd, 3)
        if test_rev is not None:
            if calib_rev is None:
                raise ValueError("calib_rev: required for L1 when test_rev is given (rev is calibrated separately)")
            calib["rev"] = check_lp("calib_rev", calib_rev, 3)
        n_cal = calib["fwd"].shape[0]
        if calib_groups is None:
            raise ValueError("calib_groups: required when calib_fwd is given")
        if calib_gold is None:
            raise ValueError("calib_gold: required when calib_fwd is given")
        cal_labels = check_labels("calib_groups", calib_groups, n_cal)
        cal_gold = check_gold("calib_gold", calib_gold, n_cal, k)
        for g, arr in calib.items():
            if arr.shape[0] != n_cal or arr.shape[1:] != test[g].shape[1:]:
                raise ValueError(
                    f"calib_{g}: shape {arr.shape} does not match {n_cal} items and test_{g} layouts/labels {test[g].shape[1:]}"
                )
            calib[g] = log_softmax(arr)
    elif calib_rev is not None or calib_gold is not None or calib_groups is not None:
        raise ValueError("calib_fwd: required when any other calibration argument is given")
    (test_gid, calib_gid), names = group_ids(labels, cal_labels)
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
            out.calib_orders[g] = check_orders(f"calib_orders_{g}", cal_orders, s_g, k, n_cal)
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
    options: EvaluationOptions | None = None,
    prior_source: str = "items",
    **calib: np.ndarray | Sequence[Hashable] | None,
) -> LevelResult:
    """All levels for the test items, per layout group (``fwd``, and ``rev`` for the order-flip probe).

    Each group is computed from its own arrays only, so the flip probe compares two independent pipelines.
    L1 is fitted on the calibration split (its prior over the whole split, then T on ``calib_gold``) and
    applied to the test items with that frozen prior, fwd and rev calibrated separately; without
    ``calib_fwd`` there is no L1. Score questions pass ``S = 1`` and no rev (then L0-perm equals raw).
    OPTIONS hold the prior settings (default: the schema's, the batch prior); ``prior_mode="streaming"`` gives the
    published "scored so far" prior.

    ARRAYS and CALIB are :func:`level_inputs`'s: ``(test_fwd, test_rev, orders_fwd, orders_rev, groups_test)``
    and the keyword arrays (calibration, per-item orders, layouts read, content-free priors).
    ``prior_source="content_free"`` uses the content-free prior wherever the batch prior would be,
    ``"calibration"`` the calibration items' frozen prior.
    """
    inputs = level_inputs(*arrays, **calib)  # type: ignore[arg-type]
    idx_calib = np.arange(inputs.n_calib)[None, :] if inputs.calib else None
    res = levels_resampled(inputs, np.arange(inputs.n_test)[None, :], idx_calib, options or EvaluationOptions(),
                           prior_source=prior_source)
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
