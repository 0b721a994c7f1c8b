"""A stopping threshold for adaptive rotations, certified without labels.

Adaptive scoring reads an item's rotations a round at a time (in :func:`anyjev.decision.layouts.spread_order`)
and stops once the log-odds margin of the running marginal (top option minus runner-up, in log probability)
reaches a threshold. What the user states is how often the stopped decision may differ from the decision
all K rotations would have given (``target``, e.g. 1%), at a confidence (e.g. 95%). That rate can be
measured on unlabelled items: read every rotation once, replay the stopping rule on them, count the items
whose stopped decision differs from their own full-K decision. The count is binomial in the number of
items, so an exact (Clopper-Pearson) upper bound on the rate turns it into a certificate.

Thresholds are tested in a fixed grid from the largest down (fixed-sequence testing: Bauer 1991; used for
risk control by Angelopoulos et al., "Learn then Test", 2021). The chosen threshold is the smallest one
such that it and every larger threshold in the grid certify; stopping at the first failure is what keeps
the confidence at the stated level without a correction for the number of thresholds looked at. The
largest "threshold" is +inf (never stop early): it always agrees with full K, and if even that does not
certify (too few items: 0 disagreements in n items bound the rate at 1 - (1 - confidence)^(1/n), which
is 1.49% at n = 200 and 95%, 0.99% at n = 300) the result says so and every rotation is read.

The exact bound is computed by bisection on the binomial CDF in log space (no SciPy in the client
environment: one more heavy dependency for twenty lines); tests check it against closed forms and
tabulated values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from anyjev.numbers.levels import MARGINAL_FLOOR, marginalise_read

# evaluation grid of log-odds thresholds (nats); +inf (read everything) is always the last candidate
DEFAULT_GRID: tuple[float, ...] = tuple(float(x) for x in np.arange(0.0, 30.0001, 0.25))


def min_certification_items(target: float, confidence: float) -> int:
    """The fewest unlabelled items that can certify TARGET at CONFIDENCE at all: with 0 disagreements in n items
    the exact bound is 1 - (1 - confidence)^(1/n), which is <= target from this n on (299 at 1% and 95%)."""
    return math.ceil(math.log(1 - confidence) / math.log(1 - target))


def binomial_cdf(x: int, n: int, p: float) -> float:
    """P[X <= x] for X ~ Binomial(n, p), summed in log space (exact up to float rounding)."""
    if x < 0:
        return 0.0
    if x >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(x + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def clopper_pearson_upper(x: int, n: int, confidence: float) -> float:
    """One-sided exact upper confidence bound on a binomial rate after ``x`` events in ``n`` trials: the
    rate p at which seeing at most ``x`` events has probability ``1 - confidence`` (1.0 when x = n)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: must lie in (0, 1), got {confidence}")
    if n < 0 or not 0 <= x <= max(n, 0):
        raise ValueError(f"need 0 <= x <= n, got x={x}, n={n}")
    if n == 0 or x == n:
        return 1.0
    alpha = 1.0 - confidence
    if x == 0:
        return -math.expm1(math.log(alpha) / n)  # closed form 1 - alpha**(1/n)
    lo, hi = x / n, 1.0  # the CDF falls from above alpha at p = x/n to 0 at p = 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if binomial_cdf(x, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return hi


def check_points(k: int, per_round: int) -> list[int]:
    """Numbers of rotations read after each round (the points where the stopping rule looks): r, 2r, ..., K."""
    if per_round < 1:
        raise ValueError(f"rotations_per_round: must be >= 1, got {per_round}")
    return sorted({min(k, j) for j in range(per_round, k + per_round, per_round)})


def log_margin(lp: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 log-probability over the last axis (floored like the geometric mean)."""
    top2 = np.sort(np.maximum(np.asarray(lp, dtype=np.float64), math.log(MARGINAL_FLOOR)), axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def running_marginals(lp_opt: np.ndarray, points: Sequence[int]) -> np.ndarray:
    """``lp_opt`` ``(..., S, K)``: option-space log-probs of the rotations *in reading order*; returns the
    marginal of the first ``m`` rotations (L0's geometric mean, :func:`anyjev.numbers.levels.marginalise`'s
    rule) for each ``m`` in ``points``, ``(..., P, K)``."""
    lp = np.asarray(lp_opt, dtype=np.float64)
    return np.stack([marginalise_read(lp[..., :m, :]) for m in points], axis=-2)


def stop_index(margins: np.ndarray, threshold: float) -> np.ndarray:
    """Per item (rows of ``margins`` ``(N, P)``), the index of the check point where the rule stops: the
    first whose margin reaches ``threshold``, else the last (every rotation read)."""
    reached = np.asarray(margins) >= threshold
    reached[:, -1] = True
    return np.argmax(reached, axis=1)


@dataclass(frozen=True)
class Certificate:
    """What :func:`certify_threshold` found. ``threshold`` is None when nothing certifies (then every
    rotation is read); ``disagreements`` and ``bound`` are those of the chosen threshold, or of the last
    threshold tried when none certifies; ``mean_read`` the rotations the rule would read per item on
    these items."""

    threshold: float | None
    target: float
    confidence: float
    n: int
    disagreements: int
    bound: float
    mean_read: float
    full_read: float
    per_round: int
    reason: str = ""

    @property
    def certified(self) -> bool:
        return self.threshold is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.threshold is not None and math.isinf(self.threshold):
            d["threshold"] = "inf"  # JSON has no infinity
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Certificate:
        data = dict(d)
        if data.get("threshold") == "inf":
            data["threshold"] = math.inf
        return cls(**data)


def certify_margins(margins: Sequence[np.ndarray], winners: Sequence[np.ndarray], reads: Sequence[Sequence[int]], *,
                    target: float, confidence: float, per_round: int, grid: Sequence[float] = DEFAULT_GRID) -> Certificate:
    """Certify from running statistics: per item ``margins[i]`` and ``winners[i]`` at each check point
    (``reads[i]`` rotations read there; the last point is all K rotations, whose winner is the reference)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"target_disagreement: must lie in (0, 1), got {target}")
    n = len(margins)
    full = float(np.mean([r[-1] for r in reads])) if n else 0.0
    if n == 0:
        return Certificate(None, target, confidence, 0, 0, 1.0, full, full, per_round,
                           reason="no unlabelled items with K >= 3 to certify on: every rotation is read")
    width = max(len(m) for m in margins)
    # pad to one (N, P) array; padded points repeat the last (full-K) one, which always "reaches" and agrees
    m = np.array([np.pad(a, (0, width - len(a)), mode="edge") for a in margins])
    w = np.array([np.pad(a, (0, width - len(a)), mode="edge") for a in winners])
    r = np.array([np.pad(np.asarray(a, dtype=float), (0, width - len(a)), mode="edge") for a in reads])
    ref = w[np.arange(n), [len(a) - 1 for a in margins]]
    best: tuple[float, int, float, float] | None = None
    last = (math.inf, 0, clopper_pearson_upper(0, n, confidence), full)
    for thr in [math.inf, *sorted(grid, reverse=True)]:
        at = stop_index(m, thr)
        bad = int(np.sum(w[np.arange(n), at] != ref))
        bound = clopper_pearson_upper(bad, n, confidence)
        last = (thr, bad, bound, float(r[np.arange(n), at].mean()))
        if bound > target:
            break
        best = last
    if best is None:
        thr, bad, bound, _ = last
        return Certificate(None, target, confidence, n, bad, bound, full, full, per_round,
                           reason=f"cannot certify: even reading every rotation, {n} items bound the disagreement "
                                  f"at {bound:.4g} > target {target:g} ({confidence:.0%} confidence); about "
                                  f"{min_certification_items(target, confidence)} items are needed")
    thr, bad, bound, mean_read = best
    return Certificate(thr, target, confidence, n, bad, bound, mean_read, full, per_round)


def certify_threshold(lp_opt: Sequence[np.ndarray], *, target: float, confidence: float, per_round: int,
                      grid: Sequence[float] = DEFAULT_GRID) -> Certificate:
    """The smallest log-odds margin threshold whose exact upper bound on disagreement with the full-K
    decision is at most ``target`` (see the module docstring for the procedure).

    ``lp_opt[i]``: item i's option-space log-probs ``(K_i, K_i)`` of every rotation, rows in reading order
    (spread order), already prior-corrected if the rule uses a prior: exactly what the stopping rule sees.
    No gold label is used. A result with ``threshold=None`` names n, the disagreements and the bound.
    """
    margins, winners, reads = [], [], []
    for lp in lp_opt:
        lp = np.asarray(lp, dtype=np.float64)
        points = check_points(lp.shape[-2], per_round)
        marg = running_marginals(lp, points)
        margins.append(log_margin(marg))
        winners.append(np.argmax(marg, axis=-1))
        reads.append(points)
    return certify_margins(margins, winners, reads, target=target, confidence=confidence, per_round=per_round,
                           grid=grid)
