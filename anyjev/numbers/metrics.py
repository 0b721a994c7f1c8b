"""Decision metrics (accuracy, macro-F1, NLL, Brier, ECE, flip, cov@5%, AURC, tie rate) and their bootstrap intervals
(:func:`interval`, from replicates the bootstrap engine computes: :mod:`anyjev.numbers.bootstrap`).

Inputs are option-space log-probs ``lp`` ``(N, K)``, gold option indices ``gold`` ``(N,)`` and, for the
order-flip probe, the log-probs of the reversed layout ``lp_rev`` ``(N, K)``. A padded option (mixed K) has
log-prob ``-inf``.

Every metric is implemented once, on a batch of resamples ``(B, N, K)``; the scalar functions call the same code
with ``B = 1``. The bootstrap therefore computes exactly the published definitions on each resample, and is
fast because nothing loops over resamples in Python.

No silent ties (docs/metrics.md): labels whose log-prob lies within :data:`TIE_TOL` of an item's top log-prob
are tied for the top, and every metric that depends on the argmax is the expectation under breaking that tie
uniformly at random (``np.argmax`` would give it to the lowest index, i.e. position A in the raw layout).
Items whose top confidences are equal within the same tolerance are likewise ranked as a block, never by
their index.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from anyjev.numbers.logprobs import check_gold, log_softmax

METRICS: tuple[str, ...] = ("acc", "macro_f1", "nll", "brier", "ece", "flip", "cov@5", "aurc", "tie_rate")
NLL_CLIP = 1e-12
ECE_BINS = 15
COVERAGE_RISK = 0.05
# Two log-probs closer than this are tied: p_k >= p_top * exp(-1e-12), a relative difference of 1e-12 in
# probability. bf16 label log-probs come in steps of 0.125 nat, float64 noise after renormalising is ~1e-15.
TIE_TOL = 1e-12
INTERVAL_METHODS = ("bca", "percentile")


# ---------------------------------------------------------------------------------------------- checks


def _check_lp(name: str, lp: object) -> np.ndarray:
    """Log-probs must be a non-empty (N, K) array without NaN/+inf; renormalised defensively."""
    arr = np.asarray(lp, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty (N, K) array, got shape {arr.shape}")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"{name}: contains NaN or +inf")
    m = arr.max(axis=1, keepdims=True)
    if not np.isfinite(m).all():
        raise ValueError(f"{name}: a row has no finite log-probability")
    return log_softmax(arr, axis=1)


def _check_inputs(lp: object, gold: object, lp_rev: object | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate the (lp, gold, lp_rev) triple shared by every entry point."""
    arr = _check_lp("lp", lp)
    g = check_gold("gold", gold, *arr.shape)
    rev = None
    if lp_rev is not None:
        rev = _check_lp("lp_rev", lp_rev)
        if rev.shape != arr.shape:
            raise ValueError(f"lp_rev: shape {rev.shape} does not match lp {arr.shape}")
    return arr, g, rev


def _check_conf(conf: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """Confidence and (expected) correctness must be paired 1-d arrays of the same non-zero length."""
    c = np.asarray(conf, dtype=np.float64)
    ok = np.asarray(correct)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"conf: expected a non-empty 1-d array, got shape {c.shape}")
    if np.isnan(c).any() or (c < 0).any():
        raise ValueError("conf: contains NaN or negative values")
    if ok.shape != c.shape:
        raise ValueError(f"correct: shape {ok.shape} does not match conf {c.shape}")
    if ok.dtype.kind not in "biuf" or np.isnan(ok.astype(np.float64)).any() or ((ok < 0) | (ok > 1)).any():
        raise ValueError("correct: expected booleans or expected correctness in [0, 1]")
    return c[None, :], ok.astype(np.float64)[None, :]


# ------------------------------------------------------------------------------------------------ ties


def tie_weights(lp: np.ndarray) -> np.ndarray:
    """Probability that uniform tie-breaking picks each label as the argmax: 1/m on the m tied top labels."""
    lp = np.asarray(lp, dtype=np.float64)
    tied = lp >= lp.max(axis=-1, keepdims=True) - TIE_TOL
    return tied / tied.sum(axis=-1, keepdims=True)


def top_choice(lp: np.ndarray, gold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per item of option-space log-probs LP ``(N, K)``: the predicted option (the lowest-index top one), its
    probability (the confidence), the probability of the GOLD option, and how many options tie at the top (the
    metrics weigh each tied option 1/n_top)."""
    p = np.exp(lp)
    rows = np.arange(len(p))
    pred = np.argmax(p, axis=1)
    n_top = (lp >= lp.max(axis=1, keepdims=True) - TIE_TOL).sum(axis=1)
    return pred, p[rows, pred], p[rows, gold], n_top


def _block_mean(log_conf_sorted: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Average ``values`` over runs of equal (within TIE_TOL) sorted confidence, per row of ``(B, n)``.

    Items of equal confidence have no order among them; replacing their correctness by the run's mean is the
    expectation under a uniformly random order, so ranking-based metrics do not depend on item positions.
    """
    b, n = values.shape
    pos = np.broadcast_to(np.arange(n), (b, n))
    new = np.ones((b, n), dtype=bool)
    gap = np.abs(np.diff(log_conf_sorted, axis=1))
    new[:, 1:] = ~(gap <= TIE_TOL)  # -inf == -inf gives NaN gaps: treated as a new block
    new[:, 1:] &= ~(log_conf_sorted[:, 1:] == log_conf_sorted[:, :-1])
    last = np.ones((b, n), dtype=bool)
    last[:, :-1] = new[:, 1:]
    start = np.maximum.accumulate(np.where(new, pos, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]
    cum = np.zeros((b, n + 1))
    cum[:, 1:] = np.cumsum(values, axis=1)
    rows = np.arange(b)[:, None]
    return (cum[rows, end + 1] - cum[rows, start]) / (end - start + 1)


def _sorted_by_conf(log_conf: np.ndarray, correct: np.ndarray, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sort (B, n) by confidence and average correctness within confidence ties."""
    order = np.argsort(-log_conf if descending else log_conf, axis=1, kind="stable")
    lc = np.take_along_axis(log_conf, order, axis=1)
    ok = _block_mean(lc, np.take_along_axis(correct, order, axis=1))
    return lc, ok


# ---------------------------------------------------------------------------- batched metric kernels
# Each takes arrays with a leading resample axis B and returns (B,) values.


def _macro_f1_b(weights: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Macro-F1 of the expected confusion matrix: F1_c = 2 E[tp_c] / (E[#pred_c] + #gold_c).

    ``weights`` ``(B, n, K)`` are the tie-breaking probabilities; without ties they are one-hot predictions and
    this is the ordinary macro-F1 over the classes present in gold or prediction.
    """
    onehot = gold[..., None] == np.arange(weights.shape[-1])
    tp = np.sum(weights * onehot, axis=1)
    n_gold = onehot.sum(axis=1)
    n_pred = weights.sum(axis=1)
    denom = n_gold + n_pred
    present = denom > 0
    f1 = np.where(present, 2.0 * tp / np.where(present, denom, 1.0), 0.0)
    return f1.sum(axis=1) / present.sum(axis=1)


def _ece_from_sorted(conf: np.ndarray, ok: np.ndarray, n_bins: int) -> np.ndarray:
    n = conf.shape[1]
    sizes = [len(chunk) for chunk in np.array_split(np.arange(n), min(n_bins, n))]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gap = np.add.reduceat(conf, starts, axis=1) - np.add.reduceat(ok, starts, axis=1)
    # (|b|/n) * |mean conf_b - acc_b| == |sum conf_b - sum correct_b| / n
    return np.abs(gap).sum(axis=1) / n


def _ece_b(log_conf: np.ndarray, correct: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-mass ECE: sort by confidence, min(n_bins, n) consecutive chunks (np.array_split sizes)."""
    lc, ok = _sorted_by_conf(log_conf, correct, descending=False)
    return _ece_from_sorted(np.exp(lc), ok, n_bins)


def _risk_curve_b(log_conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Expected error rate of the k most confident items, k = 1..n, shape (B, n)."""
    n = log_conf.shape[1]
    _, ok = _sorted_by_conf(log_conf, correct, descending=True)
    return np.cumsum(1.0 - ok, axis=1) / np.arange(1, n + 1)


def _coverage_b(log_conf: np.ndarray, correct: np.ndarray, risk: float) -> np.ndarray:
    """Largest k/n whose k most confident items have (expected) error rate <= risk (0 if none)."""
    curve = _risk_curve_b(log_conf, correct)
    n = curve.shape[1]
    within = curve <= risk + 1e-12  # a 5% error rate must not fail by float rounding
    last = n - 1 - np.argmax(within[:, ::-1], axis=1)
    return np.where(within.any(axis=1), (last + 1) / n, 0.0)


def _aurc_b(log_conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Area under the risk-coverage curve: mean over k of the error rate of the k most confident items."""
    return _risk_curve_b(log_conf, correct).mean(axis=1)


def metrics_batch(lp: np.ndarray, gold: np.ndarray, lp_rev: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every metric on each resample of ``lp`` ``(B, n, K)``, ``gold`` ``(B, n)`` (validated, normalised inputs)."""
    weights = tie_weights(lp)
    log_conf = lp.max(axis=2)
    correct = np.take_along_axis(weights, gold[..., None], axis=2)[..., 0]
    lp_gold = np.take_along_axis(lp, gold[..., None], axis=2)[..., 0]
    p = np.exp(lp)
    brier_items = np.sum(p * p, axis=2) - 2.0 * np.exp(lp_gold) + 1.0
    out = {
        "acc": correct.mean(axis=1),
        "macro_f1": _macro_f1_b(weights, gold),
        "nll": (-np.log(np.maximum(np.exp(lp_gold), NLL_CLIP))).mean(axis=1),
        "brier": brier_items.mean(axis=1),
        "ece": _ece_b(log_conf, correct, ECE_BINS),
        "flip": np.full(lp.shape[0], np.nan),
        "cov@5": _coverage_b(log_conf, correct, COVERAGE_RISK),
        "aurc": _aurc_b(log_conf, correct),
        "tie_rate": (weights.max(axis=2) < 1.0).mean(axis=1),
    }
    if lp_rev is not None:
        same = np.sum(weights * tie_weights(lp_rev), axis=2)  # P(both tie-broken argmaxes agree)
        out["flip"] = (1.0 - same).mean(axis=1)
    return out


# ------------------------------------------------------------------------------------- scalar metrics


def _one(lp: object, gold: object, lp_rev: object | None = None) -> dict[str, float]:
    arr, g, rev = _check_inputs(lp, gold, lp_rev)
    values = metrics_batch(arr[None], g[None], None if rev is None else rev[None])
    return {name: float(values[name][0]) for name in METRICS}


def accuracy(lp: np.ndarray, gold: np.ndarray) -> float:
    """Expected share of items whose (uniformly tie-broken) argmax is the gold option."""
    return _one(lp, gold)["acc"]


def macro_f1(lp: np.ndarray, gold: np.ndarray) -> float:
    """Unweighted mean F1 over classes in gold or predictions, so rare classes count as much as common ones."""
    return _one(lp, gold)["macro_f1"]


def nll(lp: np.ndarray, gold: np.ndarray) -> float:
    """Mean -log p(gold), p clipped at 1e-12 so one impossible gold cannot make the mean infinite."""
    return _one(lp, gold)["nll"]


def brier(lp: np.ndarray, gold: np.ndarray) -> float:
    """Multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2."""
    return _one(lp, gold)["brier"]


def tie_rate(lp: np.ndarray) -> float:
    """Share of items whose top probability is shared by two or more labels (within :data:`TIE_TOL`)."""
    arr = _check_lp("lp", lp)
    return float(np.mean(tie_weights(arr).max(axis=1) < 1.0))


def _log_conf(conf: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(conf)


def ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error of top-1 confidence with equal-mass bins (robust for small n)."""
    if n_bins < 1:
        raise ValueError(f"n_bins: must be >= 1, got {n_bins}")
    c, ok = _check_conf(conf, correct)
    return float(_ece_b(_log_conf(c), ok, n_bins)[0])


def reliability_bins(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The equal-mass bins ECE is computed on: mean confidence, accuracy and size per bin (for plots)."""
    c, ok = _check_conf(conf, correct)
    lc, ok_sorted = _sorted_by_conf(_log_conf(c), ok, descending=False)
    chunks = np.array_split(np.arange(c.shape[1]), min(n_bins, c.shape[1]))
    conf_sorted = np.exp(lc[0])
    return (np.array([conf_sorted[i].mean() for i in chunks]), np.array([ok_sorted[0, i].mean() for i in chunks]),
            np.array([len(i) for i in chunks]))


def flip(lp: np.ndarray, lp_rev: np.ndarray) -> float:
    """Expected share of items whose (tie-broken) argmax changes when the option order is reversed."""
    arr = _check_lp("lp", lp)
    rev = _check_lp("lp_rev", lp_rev)
    if rev.shape != arr.shape:
        raise ValueError(f"lp_rev: shape {rev.shape} does not match lp {arr.shape}")
    return float(np.mean(1.0 - np.sum(tie_weights(arr) * tie_weights(rev), axis=1)))


def coverage_at_risk(conf: np.ndarray, correct: np.ndarray, risk: float = COVERAGE_RISK) -> float:
    """Largest share of items that can be answered automatically while keeping the error rate <= risk."""
    c, ok = _check_conf(conf, correct)
    return float(_coverage_b(_log_conf(c), ok, risk)[0])


def aurc(conf: np.ndarray, correct: np.ndarray) -> float:
    """Area under the risk-coverage curve (lower is better): rewards confidence that ranks errors last."""
    c, ok = _check_conf(conf, correct)
    return float(_aurc_b(_log_conf(c), ok)[0])


def metric_values(lp: np.ndarray, gold: np.ndarray, lp_rev: np.ndarray | None = None) -> dict[str, float]:
    """Every metric in :data:`METRICS` on the given items; ``flip`` is NaN without ``lp_rev``."""
    return _one(lp, gold, lp_rev)


# ------------------------------------------------------------------------------------------ intervals


def jackknife_acceleration(jackknife: list[np.ndarray]) -> float:
    """BCa acceleration from leave-one-out values, one array per stratum (Davison & Hinkley 1997, 3.3).

    ``l_hi = (n_h - 1) (mean_h - theta_(hi))`` are the empirical influence values of stratum ``h``;
    ``a = sum_h n_h^-3 sum_i l_hi^3 / (6 (sum_h n_h^-2 sum_i l_hi^2)^1.5)``. Strata of fewer than 2 items add
    nothing. Returns 0 when every influence is 0 (a statistic that does not move).
    """
    num = den = 0.0
    for theta in jackknife:
        theta = np.asarray(theta, dtype=np.float64)
        n = theta.size
        if n < 2:
            continue
        infl = (n - 1) * (theta.mean() - theta)
        num += float(np.sum(infl**3)) / n**3
        den += float(np.sum(infl**2)) / n**2
    if not math.isfinite(num) or not math.isfinite(den) or den <= 0.0:
        return 0.0
    return num / (6.0 * den**1.5)


def interval(point: float, boot: np.ndarray, *, accel: float = 0.0, level: float = 0.95,
             method: str = "bca") -> tuple[float, float, bool]:
    """Bootstrap interval ``(lo, hi, widened)`` for one statistic.

    ``bca``: bias-corrected and accelerated percentiles (Efron 1987); the bias correction counts resamples
    equal to the point as half below. ``percentile``: plain percentiles. Where the point still falls outside
    (a degenerate bootstrap distribution), the interval is widened to include it and ``widened`` is True.
    """
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method: must be one of {INTERVAL_METHODS}, got {method!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must lie strictly between 0 and 1, got {level}")
    v = np.asarray(boot, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0 or math.isnan(point):
        return math.nan, math.nan, False
    tail = (1.0 - level) / 2.0
    if method == "percentile":
        q = (tail, 1.0 - tail)
    else:
        nd = NormalDist()
        eps = 1e-12 * max(1.0, abs(point))
        below = float(np.sum(v < point - eps)) + 0.5 * float(np.sum(np.abs(v - point) <= eps))
        share = min(max(below / v.size, 0.5 / v.size), 1.0 - 0.5 / v.size)
        z0 = nd.inv_cdf(share)
        q_list = []
        for z in (nd.inv_cdf(tail), nd.inv_cdf(1.0 - tail)):
            denom = 1.0 - accel * (z0 + z)
            q_list.append(nd.cdf(z0 + (z0 + z) / denom) if denom > 0 else (0.0 if z < 0 else 1.0))
        q = (q_list[0], q_list[1])
    lo, hi = (float(x) for x in np.quantile(v, q))
    widened = False
    if point < lo:
        lo, widened = point, True
    if point > hi:
        hi, widened = point, True
    return lo, hi, widened

