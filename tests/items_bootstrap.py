"""An items-only bootstrap for the tests: the levels held fixed, only the test items resampled. The library's intervals
also refit the priors and L1's temperature in every resample (:func:`anyjev.run.evaluate.evaluate_records`); this one
is what they are compared with, built from the library's metric and interval functions."""

from __future__ import annotations

import numpy as np

from anyjev.numbers.metrics import METRICS, interval, jackknife_acceleration, metric_values, metrics_batch
from anyjev.schema import default


def bootstrap(lp: np.ndarray, gold: np.ndarray, lp_rev: np.ndarray | None = None, *,
              n_boot: int = default("evaluation", "n_boot"), seed: int = default("evaluation", "bootstrap_seed"),
              level: float = 0.95, method: str = "bca") -> dict[str, tuple[float, float]]:
    """Seeded interval ``(lo, hi)`` for every metric of the option-space log-probs LP ``(N, K)`` (and LP_REV), from
    N_BOOT resamples of the items; the same resampled items serve every metric."""
    lp, gold = np.asarray(lp, dtype=np.float64), np.asarray(gold)
    rev = None if lp_rev is None else np.asarray(lp_rev, dtype=np.float64)
    n = len(gold)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    values = metrics_batch(lp[idx], gold[idx], None if rev is None else rev[idx])
    point = metric_values(lp, gold, rev)
    loo = np.array([np.delete(np.arange(n), i) for i in range(n)])
    jack = metrics_batch(lp[loo], gold[loo], None if rev is None else rev[loo]) if method == "bca" else {}
    out = {}
    for name in METRICS:
        accel = jackknife_acceleration([jack[name]]) if name in jack else 0.0
        lo, hi, _ = interval(point[name], values[name], accel=accel, level=level, method=method)
        out[name] = (lo, hi)
    return out
