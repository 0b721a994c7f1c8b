"""L1: one temperature per layout group, fitted on the calibration split by golden-section search on log T (the
published method); argmax never changes."""

from __future__ import annotations

import math

import numpy as np

from anyjev.numbers.logprobs import check_gold, check_lp, log_softmax

LOG_T_RANGE = (-3.0, 3.0)
GOLDEN_ITERATIONS = 60


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
    arr = check_lp("lp", lp, 2)
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
