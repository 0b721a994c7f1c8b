"""The two checks every array of label log-probs goes through: renormalisation and gold indices.

One log-softmax for the whole package (the backends' restriction to the labels, the levels, the metrics).
"""

from __future__ import annotations

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
