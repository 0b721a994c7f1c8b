"""Power: whether a task's items are enough to claim a difference, before a run (``anyjev plan``) and after it (the
differences table). Two-sided tests at ``ALPHA`` (the 95% intervals' level) with ``POWER`` (80%), normal approximations
throughout (docs/metrics.md, "Power"):

* the half-width of an accuracy's interval from n test items, in the worst case p = 1/2: ``z_{1-a/2} sqrt(p(1-p)/n)``;
* a paired accuracy difference (two models, or two levels, deciding the same n items) by McNemar's test in its normal
  approximation (Connor 1987): with the discordance ``psi = p10 + p01`` (the share of items one side gets right and the
  other wrong) and the difference ``d = p10 - p01``, the items needed are
  ``n = (z_{1-a/2} sqrt(psi) + z_{1-b} sqrt(psi - d^2))^2 / d^2``, and the smallest difference n items detect is that
  equation solved for d. The worst case is psi = 1 (every item discordant); a pilot run's decisions estimate psi;
* after a run, the smallest difference a row of the differences table could have detected, from the standard error its
  own paired interval implies: ``(z_{1-a/2} + z_{1-b}) (hi - lo) / (2 z_{1-a/2})``. A difference whose interval covers 0
  while it is smaller than that is underpowered, not absent.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from anyjev.numbers.metrics import TIE_TOL

ALPHA = 0.05  # two-sided: the 95% intervals' level
POWER = 0.80
WORST_DISCORDANCE = 1.0  # every item decided right by one side and wrong by the other


def z(q: float) -> float:
    """The standard normal quantile of Q."""
    return NormalDist().inv_cdf(q)


def accuracy_half_width(n: int, *, alpha: float = ALPHA, p: float = 0.5) -> float:
    """Half the width of an accuracy's (1 - ALPHA) normal interval from N items at accuracy P (1/2: the widest)."""
    return z(1 - alpha / 2) * math.sqrt(p * (1 - p) / n)


def items_needed(difference: float, discordance: float = WORST_DISCORDANCE, *, alpha: float = ALPHA,
                 power: float = POWER) -> int:
    """Paired items McNemar's test needs to detect DIFFERENCE (an accuracy difference) with POWER at level ALPHA, when
    a share DISCORDANCE of the items is decided differently by the two sides."""
    d, psi = abs(difference), discordance
    if not 0 < d <= psi <= 1:
        raise ValueError(f"need 0 < |difference| <= discordance <= 1, got {difference}, {discordance}")
    za, zb = z(1 - alpha / 2), z(power)
    return math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - d * d)) ** 2 / (d * d))


def detectable_difference(n: int, discordance: float = WORST_DISCORDANCE, *, alpha: float = ALPHA,
                          power: float = POWER) -> float:
    """The smallest accuracy difference N paired items detect with POWER at level ALPHA when a share DISCORDANCE of
    them is discordant: :func:`items_needed`'s equation solved for d (the larger root of
    ``(n + zb^2) d^2 - 2 za sqrt(n psi) d + (za^2 - zb^2) psi = 0``)."""
    za, zb = z(1 - alpha / 2), z(power)
    if n < 1 or not 0 < discordance <= 1:
        raise ValueError(f"need n >= 1 and 0 < discordance <= 1, got {n}, {discordance}")
    root = za * math.sqrt(n) + zb * math.sqrt(max(n - za * za + zb * zb, 0.0))
    return min(math.sqrt(discordance) * root / (n + zb * zb), math.sqrt(discordance))


def detectable_from_interval(lo: float, hi: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest difference detectable with POWER at level ALPHA by a test whose standard error is the one the
    (1 - ALPHA) interval [LO, HI] implies, ``(hi - lo) / (2 z_{1-a/2})``."""
    za = z(1 - alpha / 2)
    return (za + z(power)) * (hi - lo) / (2 * za)


def correctness(p_gold: np.ndarray, conf: np.ndarray, n_top: np.ndarray) -> np.ndarray:
    """Each decision's expected correctness under uniform tie-breaking (the metrics' accuracy), from what
    ``predictions.csv`` holds of it: 1 / n_top when gold is among the tied top options (its probability within
    TIE_TOL, in log space, of the top one's), else 0."""
    p_gold, conf = np.asarray(p_gold, dtype=float), np.asarray(conf, dtype=float)
    return np.where(p_gold >= conf * math.exp(-TIE_TOL), 1.0 / np.asarray(n_top, dtype=float), 0.0)


def discordance(a: np.ndarray, b: np.ndarray) -> float:
    """The discordance of two sides' correctness A and B on the same items: the mean squared per-item difference,
    which for right/wrong decisions is the share of items one side gets right and the other wrong."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need the same items on both sides, got {a.shape} and {b.shape}")
    return float(np.mean((a - b) ** 2))
