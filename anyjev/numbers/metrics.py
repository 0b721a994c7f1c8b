"""Decision metrics (accuracy, macro-F1, NLL, Brier, ECE, flip, cov@5%, AURC) with bootstrap intervals.

Inputs are option-space log-probs ``lp`` ``(N, K)``, gold option indices ``gold`` ``(N,)`` and, for the
order-flip probe, the log-probs of the reversed layout ``lp_rev`` ``(N, K)``.

Every metric is implemented once, on a batch of resamples ``(B, N)``; the scalar functions call the same code
with ``B = 1``. The bootstrap therefore computes exactly the published definitions on each resample, and is
fast because nothing loops over resamples in Python.
"""

from __future__ import annotations

import math

import numpy as np

METRICS: tuple[str, ...] = ("acc", "macro_f1", "nll", "brier", "ece", "flip", "cov@5", "aurc")
NLL_CLIP = 1e-12
ECE_BINS = 15
COVERAGE_RISK = 0.05
MIN_BOOT = 1000


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
    shifted = arr - m
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _check_gold(gold: object, n: int, k: int) -> np.ndarray:
    """Gold must be N integer option indices in 0..K-1; anything else would score the wrong option."""
    arr = np.asarray(gold)
    if arr.shape != (n,):
        raise ValueError(f"gold: expected shape ({n},) to match lp, got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"gold: expected integer option indices, got dtype {arr.dtype}")
    if ((arr < 0) | (arr >= k)).any():
        raise ValueError(f"gold: option indices must lie in 0..{k - 1}, got min {arr.min()} max {arr.max()}")
    return arr.astype(np.intp)


def _check_inputs(lp: object, gold: object, lp_rev: object | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Validate the (lp, gold, lp_rev) triple shared by every entry point."""
    arr = _check_lp("lp", lp)
    g = _check_gold(gold, *arr.shape)
    rev = None
    if lp_rev is not None:
        rev = _check_lp("lp_rev", lp_rev)
        if rev.shape != arr.shape:
            raise ValueError(f"lp_rev: shape {rev.shape} does not match lp {arr.shape}")
    return arr, g, rev


def _check_conf(conf: object, correct: object) -> tuple[np.ndarray, np.ndarray]:
    """Confidence and correctness must be paired 1-d arrays of the same non-zero length."""
    c = np.asarray(conf, dtype=np.float64)
    ok = np.asarray(correct)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"conf: expected a non-empty 1-d array, got shape {c.shape}")
    if np.isnan(c).any():
        raise ValueError("conf: contains NaN")
    if ok.shape != c.shape:
        raise ValueError(f"correct: shape {ok.shape} does not match conf {c.shape}")
    if ok.dtype.kind not in "biuf" or not np.isin(ok, (0, 1)).all():
        raise ValueError("correct: expected booleans (or 0/1)")
    return c[None, :], ok.astype(np.float64)[None, :]


# ---------------------------------------------------------------------------- batched metric kernels
# Each takes arrays with a leading resample axis B and returns (B,) values.


def _macro_f1_b(pred: np.ndarray, gold: np.ndarray, k: int) -> np.ndarray:
    """Macro-F1 over the classes present in gold or prediction: F1_c = 2 tp / (#pred_c + #gold_c)."""
    b = pred.shape[0]
    offset = (np.arange(b) * k)[:, None]
    size = b * k
    hit = pred == gold
    tp = np.bincount((offset + gold)[hit], minlength=size).reshape(b, k)
    n_gold = np.bincount((offset + gold).ravel(), minlength=size).reshape(b, k)
    n_pred = np.bincount((offset + pred).ravel(), minlength=size).reshape(b, k)
    denom = n_gold + n_pred
    present = denom > 0
    f1 = np.where(present, 2.0 * tp / np.maximum(denom, 1), 0.0)
    return f1.sum(axis=1) / present.sum(axis=1)


def _ece_b(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-mass ECE: stable sort by confidence, min(n_bins, n) consecutive chunks (np.array_split sizes)."""
    n = conf.shape[1]
    order = np.argsort(conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, axis=1)
    ok = np.take_along_axis(correct, order, axis=1)
    sizes = [len(chunk) for chunk in np.array_split(np.arange(n), min(n_bins, n))]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gap = np.add.reduceat(c, starts, axis=1) - np.add.reduceat(ok, starts, axis=1)
    # (|b|/n) * |mean conf_b - acc_b| == |sum conf_b - sum correct_b| / n
    return np.abs(gap).sum(axis=1) / n


def _risk_curve_b(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Error rate of the k most confident items, k = 1..n (stable descending sort), shape (B, n)."""
    n = conf.shape[1]
    order = np.argsort(-conf, axis=1, kind="stable")
    errors = 1.0 - np.take_along_axis(correct, order, axis=1)
    return np.cumsum(errors, axis=1) / np.arange(1, n + 1)


def _coverage_b(conf: np.ndarray, correct: np.ndarray, risk: float) -> np.ndarray:
    """Largest k/n whose k most confident items have error rate <= risk (0 if none)."""
    curve = _risk_curve_b(conf, correct)
    n = curve.shape[1]
    within = curve <= risk
    # index of the last True per row; rows without any True get coverage 0
    last = n - 1 - np.argmax(within[:, ::-1], axis=1)
    return np.where(within.any(axis=1), (last + 1) / n, 0.0)


def _aurc_b(conf: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Area under the risk-coverage curve: mean over k of the error rate of the k most confident items."""
    return _risk_curve_b(conf, correct).mean(axis=1)


# ------------------------------------------------------------------------------------- scalar metrics


def accuracy(lp: np.ndarray, gold: np.ndarray) -> float:
    """Share of items whose argmax is the gold option."""
    arr, g, _ = _check_inputs(lp, gold, None)
    return float(np.mean(arr.argmax(axis=1) == g))


def macro_f1(lp: np.ndarray, gold: np.ndarray) -> float:
    """Unweighted mean F1 over classes in gold or predictions, so rare classes count as much as common ones."""
    arr, g, _ = _check_inputs(lp, gold, None)
    return float(_macro_f1_b(arr.argmax(axis=1)[None], g[None], arr.shape[1])[0])


def nll(lp: np.ndarray, gold: np.ndarray) -> float:
    """Mean -log p(gold), p clipped at 1e-12 so one impossible gold cannot make the mean infinite."""
    arr, g, _ = _check_inputs(lp, gold, None)
    return float(np.mean(_item_nll(arr, g)))


def brier(lp: np.ndarray, gold: np.ndarray) -> float:
    """Multi-class Brier score: mean over items of sum_k (p_k - 1[k = gold])^2."""
    arr, g, _ = _check_inputs(lp, gold, None)
    return float(np.mean(_item_brier(arr, g)))


def ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error of top-1 confidence with equal-mass bins (robust for small n)."""
    if n_bins < 1:
        raise ValueError(f"n_bins: must be >= 1, got {n_bins}")
    c, ok = _check_conf(conf, correct)
    return float(_ece_b(c, ok, n_bins)[0])


def reliability_bins(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The equal-mass bins ECE is computed on: mean confidence, accuracy and size per bin (for plots)."""
    c, ok = _check_conf(conf, correct)
    c, ok = c[0], ok[0]
    order = np.argsort(c, kind="stable")
    chunks = np.array_split(order, min(n_bins, len(c)))
    return (np.array([c[i].mean() for i in chunks]), np.array([ok[i].mean() for i in chunks]),
            np.array([len(i) for i in chunks]))


def flip(lp: np.ndarray, lp_rev: np.ndarray) -> float:
    """Share of items whose argmax changes when the option order is reversed (order sensitivity)."""
    arr = _check_lp("lp", lp)
    rev = _check_lp("lp_rev", lp_rev)
    if rev.shape != arr.shape:
        raise ValueError(f"lp_rev: shape {rev.shape} does not match lp {arr.shape}")
    return float(np.mean(arr.argmax(axis=1) != rev.argmax(axis=1)))


def coverage_at_risk(conf: np.ndarray, correct: np.ndarray, risk: float = COVERAGE_RISK) -> float:
    """Largest share of items that can be answered automatically while keeping the error rate <= risk."""
    c, ok = _check_conf(conf, correct)
    return float(_coverage_b(c, ok, risk)[0])


def aurc(conf: np.ndarray, correct: np.ndarray) -> float:
    """Area under the risk-coverage curve (lower is better): rewards confidence that ranks errors last."""
    c, ok = _check_conf(conf, correct)
    return float(_aurc_b(c, ok)[0])


# ------------------------------------------------------------------------------------ all metrics


def _item_nll(lp: np.ndarray, gold: np.ndarray) -> np.ndarray:
    p_gold = np.exp(lp[np.arange(len(gold)), gold])
    return -np.log(np.maximum(p_gold, NLL_CLIP))


def _item_brier(lp: np.ndarray, gold: np.ndarray) -> np.ndarray:
    p = np.exp(lp)
    p[np.arange(len(gold)), gold] -= 1.0
    return np.sum(p * p, axis=1)


def _all_metrics(lp: np.ndarray, gold: np.ndarray, lp_rev: np.ndarray | None, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric on each row of resampled item indices ``idx`` (B, N); validated inputs only."""
    k = lp.shape[1]
    pred = lp.argmax(axis=1)
    conf = np.exp(lp.max(axis=1))
    correct = (pred == gold).astype(np.float64)
    c_b, ok_b = conf[idx], correct[idx]
    out = {
        "acc": ok_b.mean(axis=1),
        "macro_f1": _macro_f1_b(pred[idx], gold[idx], k),
        "nll": _item_nll(lp, gold)[idx].mean(axis=1),
        "brier": _item_brier(lp, gold)[idx].mean(axis=1),
        "ece": _ece_b(c_b, ok_b, ECE_BINS),
        "flip": np.full(idx.shape[0], np.nan),
        "cov@5": _coverage_b(c_b, ok_b, COVERAGE_RISK),
        "aurc": _aurc_b(c_b, ok_b),
    }
    if lp_rev is not None:
        out["flip"] = (pred != lp_rev.argmax(axis=1)).astype(np.float64)[idx].mean(axis=1)
    return out


def metric_values(lp: np.ndarray, gold: np.ndarray, lp_rev: np.ndarray | None = None) -> dict[str, float]:
    """Every metric in :data:`METRICS` on the given items; ``flip`` is NaN without ``lp_rev``."""
    arr, g, rev = _check_inputs(lp, gold, lp_rev)
    values = _all_metrics(arr, g, rev, np.arange(len(g))[None, :])
    return {name: float(values[name][0]) for name in METRICS}


def bootstrap(
    lp: np.ndarray,
    gold: np.ndarray,
    lp_rev: np.ndarray | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, tuple[float, float]]:
    """Seeded percentile bootstrap interval for every metric, resampling items with replacement.

    The same resampled item indices serve all metrics (and ``lp_rev``), so intervals are comparable across
    metrics. ``n_boot`` below 1000 is refused: the project promises at least 1000 resamples.
    """
    if n_boot < MIN_BOOT:
        raise ValueError(f"n_boot: must be >= {MIN_BOOT}, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must lie strictly between 0 and 1, got {level}")
    arr, g, rev = _check_inputs(lp, gold, lp_rev)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(g), size=(n_boot, len(g)))
    values = _all_metrics(arr, g, rev, idx)
    tail = (1.0 - level) / 2.0 * 100.0
    out: dict[str, tuple[float, float]] = {}
    for name in METRICS:
        v = values[name]
        if np.isnan(v).all():
            out[name] = (math.nan, math.nan)
        else:
            lo, hi = np.percentile(v, [tail, 100.0 - tail])
            out[name] = (float(lo), float(hi))
    return out


def summarise(
    lp: np.ndarray,
    gold: np.ndarray,
    lp_rev: np.ndarray | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Point value and 95% bootstrap interval per metric: ``{metric: {"value", "lo", "hi"}}``."""
    values = metric_values(lp, gold, lp_rev)
    intervals = bootstrap(lp, gold, lp_rev, n_boot=n_boot, seed=seed)
    return {name: {"value": values[name], "lo": intervals[name][0], "hi": intervals[name][1]} for name in METRICS}
