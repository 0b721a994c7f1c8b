"""The label prior L0 divides out: a model's content-independent preference for each position, estimated per prior
group and rotation from the items scored so far (streaming), the whole split (batch) or the calibration split
(frozen with L1's temperature), and the correction that divides it out."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from anyjev.numbers.logprobs import check_labels, check_lp, log_softmax
from anyjev.schema import default

# The config schema holds these defaults (evaluation.*): the stand-alone functions below default to them.
PRIOR_STRENGTH: float = default("evaluation", "prior_strength")
PRIOR_MIN_ITEMS: int = default("evaluation", "prior_min_items")
PRIOR_FLOOR = 1e-8  # floor on both q and the prior in the prior correction (published method)


def group_ids(*label_lists: list[Hashable]) -> tuple[list[np.ndarray], list[Hashable]]:
    """Integer ids shared across label lists (test and calibration), and the labels in id order."""
    index: dict[Hashable, int] = {}
    out = [np.array([index.setdefault(label, len(index)) for label in labels], dtype=np.intp) for labels in label_lists]
    return out, list(index)


def running_prior(probs: np.ndarray, gid: np.ndarray, idx: np.ndarray, *, n_groups: int, prior_min_items: int,
                   effective_batch_size: int | None, read: np.ndarray | None = None) -> np.ndarray:
    """Prior per item of each resample ``idx`` ``(B, n)`` (indices into ``probs`` ``(N, S, K)``), ``(B, n, S, K)``.

    Each row is a data set scored in its row order (rows of a bootstrap are sorted, so the task file's order
    is kept and a repeated item is scored again right after itself): the item at row position ``j`` sees
    every item of its group at positions before the end of its batch (``effective_batch_size`` consecutive
    positions; ``None``: the whole row), its own batch included. Vectorised over resamples by sorting each row by
    (group, position) and differencing one cumulative sum per row.

    With ``read`` ``(N, S)``, a layout's prior is the mean over the items that read it; a layout read by
    fewer than ``prior_min_items`` of them falls back to the group's pooled position profile (the mean over every
    layout read), which needs ``prior_min_items`` items. When every item read every layout this is the plain rule.
    """
    _, s, k = probs.shape
    b, n = idx.shape
    g = gid[idx]
    pos = np.broadcast_to(np.arange(n), (b, n))
    step = effective_batch_size
    end = np.full((b, n), n) if step is None else (pos // step + 1) * step
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
        active = (seen >= prior_min_items)[:, :, None, None]
        prior_sorted = np.where(active, total / np.maximum(seen, 1)[:, :, None, None], 1.0 / k)
    else:
        cnt = np.zeros((b, n + 1, s))
        cnt[:, 1:] = np.cumsum(read[rows].astype(np.float64), axis=1)
        seen_s = np.take_along_axis(cnt, stop[:, :, None], axis=1) - np.take_along_axis(cnt, start[:, :, None], axis=1)
        per_layout = total / np.maximum(seen_s, 1)[..., None]
        pooled = total.sum(axis=2, keepdims=True) / np.maximum(seen_s.sum(axis=2), 1)[:, :, None, None]
        prior_sorted = np.where((seen_s >= prior_min_items)[..., None], per_layout,
                                np.where((seen >= prior_min_items)[:, :, None, None], pooled, 1.0 / k))
    inverse = np.argsort(order, axis=1)
    return np.take_along_axis(prior_sorted, inverse[:, :, None, None], axis=1)


def batch_prior(
    lp_pos: np.ndarray,
    groups: Sequence[Hashable] | np.ndarray,
    *,
    prior_min_items: int = PRIOR_MIN_ITEMS,
    effective_batch_size: int | None = None,
) -> np.ndarray:
    """Label prior (probabilities, position space) that applies to each item, shape ``(N, S, K)``.

    The prior estimates a model's preference for each position independent of content, so that it can be
    divided out. Items are scored in the given order in consecutive batches of ``effective_batch_size`` (``None``:
    one batch); an item's prior is the mean label distribution, per prior group and rotation, over every item of
    its group scored so far, its own batch included. While fewer than ``prior_min_items`` items of the group have
    been seen, the prior is uniform (no correction). ``effective_batch_size=1`` is the published "scored so far"
    (streaming) prior; ``None`` the whole split (batch).
    """
    lp = log_softmax(check_lp("lp_pos", lp_pos, 3))
    n = lp.shape[0]
    labels = check_labels("groups", groups, n)
    if prior_min_items < 1:
        raise ValueError(f"prior_min_items: must be >= 1, got {prior_min_items}")
    if effective_batch_size is not None and effective_batch_size < 1:
        raise ValueError(f"effective_batch_size: must be >= 1 or None, got {effective_batch_size}")
    (gid,), names = group_ids(labels)
    return running_prior(np.exp(lp), gid, np.arange(n)[None, :], n_groups=len(names), prior_min_items=prior_min_items,
                          effective_batch_size=effective_batch_size)[0]


def correct(lp: np.ndarray, prior: np.ndarray, prior_strength: float) -> np.ndarray:
    """Prior correction on validated arrays (any leading axes)."""
    log_q = np.maximum(log_softmax(lp), math.log(PRIOR_FLOOR))
    log_prior = np.log(np.maximum(prior, PRIOR_FLOOR))
    return log_softmax(log_q - prior_strength * log_prior)


def prior_correct(lp_pos: np.ndarray, prior: np.ndarray, prior_strength: float = PRIOR_STRENGTH) -> np.ndarray:
    """Divide position-space probabilities by ``prior**prior_strength`` and renormalise (log-probs out).

    This removes a content-independent preference for some labels. Both ``q`` and the prior are floored at
    1e-8 as in the published method, so a label the model never picks cannot blow up the division.
    """
    lp = check_lp("lp_pos", lp_pos, 3)
    pr = np.asarray(prior, dtype=np.float64)
    try:
        np.broadcast_shapes(pr.shape, lp.shape)
    except ValueError:
        raise ValueError(f"prior: shape {pr.shape} does not broadcast to lp_pos shape {lp.shape}") from None
    if np.isnan(pr).any() or (pr < 0).any():
        raise ValueError("prior: contains NaN or negative probabilities")
    return correct(lp, pr, prior_strength)


def frozen_priors(probs: np.ndarray, gid: np.ndarray, idx: np.ndarray, n_groups: int, prior_min_items: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Prior over the whole (resampled) calibration split per group, ``(B, G, S, K)``, and counts ``(B, G)``.

    This is what L1 freezes together with its temperature; a group with fewer than ``prior_min_items`` items gets
    the uniform prior.
    """
    b, n = idx.shape
    _, s, k = probs.shape
    slot = (np.arange(b)[:, None] * n_groups + gid[idx]).ravel()
    sums = np.zeros((b * n_groups, s * k))
    np.add.at(sums, slot, probs[idx].reshape(b * n, s * k))
    counts = np.bincount(slot, minlength=b * n_groups).reshape(b, n_groups)
    mean = sums.reshape(b, n_groups, s, k) / np.maximum(counts, 1)[:, :, None, None]
    return np.where((counts >= prior_min_items)[:, :, None, None], mean, 1.0 / k), counts


def take_groups(prior: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Per-item prior ``(B, n, S, K)`` from per-group priors ``(B, G, S, K)`` and item group ids ``(B, n)``."""
    return np.take_along_axis(prior, gid[:, :, None, None], axis=1)
