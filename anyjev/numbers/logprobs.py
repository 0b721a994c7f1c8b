"""What every array of label log-probs goes through: renormalisation, and the checks that refuse arrays which would
silently give wrong numbers (rank, NaN, orders that are not permutations, gold indices, prior-group labels).

One log-softmax for the whole package (the backends' restriction to the labels, the levels, the metrics).
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Normalise log-weights over ``axis`` (a row of all -inf stays -inf instead of becoming NaN's source)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def check_gold(name: str, gold: object, n: int, k: int) -> np.ndarray:
    """Gold must be N integer option indices in 0..K-1; anything else would score the wrong option."""
    arr = np.asarray(gold)
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer option indices, got dtype {arr.dtype}")
    if ((arr < 0) | (arr >= k)).any():
        raise ValueError(f"{name}: option indices must lie in 0..{k - 1}, got min {arr.min()} max {arr.max()}")
    return arr.astype(np.intp)


def check_lp(name: str, lp: object, ndim: int) -> np.ndarray:
    """Reject arrays that would silently produce NaN levels (wrong rank, NaN, +inf)."""
    arr = np.asarray(lp, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: empty array of shape {arr.shape}")
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(f"{name}: contains NaN or +inf")
    return arr


def check_orders(name: str, orders: object, s: int, k: int, n: int | None = None) -> np.ndarray:
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


def check_labels(name: str, groups: object, n: int) -> list[Hashable]:
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
