"""Which option is shown at which position: cyclic rotations (L0), the reversed order (order-flip probe)
and, for Yes/No questions, the swapped phrasing. Scores are stored per layout in position space."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anyjev.decision.questions import Question

GROUPS = ("fwd", "rev")


@dataclass(frozen=True)
class Layout:
    """``order[p]`` is the option index shown at position ``p``; ``swapped`` = noul asks "No or Yes"."""

    name: str
    order: tuple[int, ...]
    swapped: bool = False


def rotations(base: tuple[int, ...], group: str) -> list[Layout]:
    """All K cyclic rotations of ``base``: rotation s shows ``base[(p + s) mod K]`` at position p."""
    k = len(base)
    return [Layout(f"{group}/r{s}", tuple(base[(p + s) % k] for p in range(k))) for s in range(k)]


def canonical_order(question: Question) -> tuple[int, ...]:
    """The caller's option indices sorted by (casefolded text, text): a total order on a valid option set
    (options that differ only after stripping are rejected as duplicates), so any listing of the same
    options yields the same tuple of option texts."""
    return tuple(sorted(range(question.k), key=lambda i: (question.options[i].casefold(), question.options[i])))


def base_order(question: Question, option_order: str) -> tuple[int, ...]:
    """The listing the rotations start from: the caller's (``as_given``) or :func:`canonical_order`
    (``canonical``, choice questions only: Yes/No phrasing and ordered levels keep their own order). OPTION_ORDER is
    the config's ``scoring.option_order``, checked against the schema by :class:`~anyjev.decision.options.PromptOptions`,
    through which every caller comes."""
    if option_order == "canonical" and question.kind == "choice":
        return canonical_order(question)
    return tuple(range(question.k))


def layouts_for(question: Question, *, permute: bool, flip: bool, option_order: str) -> dict[str, list[Layout]]:
    """The layouts an evaluation scores, by group (callers go through
    :meth:`anyjev.decision.options.PromptOptions.layouts`).

    ``fwd``: the base listing (:func:`base_order`) and (if ``permute``) its rotations; ``rev``: the same
    from the reversed listing (if ``flip``). Orders always name the caller's option indices, so scores map
    back to them. Yes/No questions swap the phrasing instead of the options; ordered (score) questions are
    never permuted and have no reversed probe.
    """
    identity = base_order(question, option_order)
    if question.kind == "noul":
        plain, swapped = Layout("fwd/r0", identity), Layout("fwd/r1", identity, swapped=True)
        out = {"fwd": [plain, swapped] if permute else [plain]}
        if flip:
            out["rev"] = [Layout("rev/r0", identity, True), Layout("rev/r1", identity)] if permute else [
                Layout("rev/r0", identity, True)
            ]
        return out
    if question.ordered:
        return {"fwd": [Layout("fwd/r0", identity)]}
    out = {"fwd": rotations(identity, "fwd") if permute else [Layout("fwd/r0", identity)]}
    if flip:
        rev = tuple(reversed(identity))
        out["rev"] = rotations(rev, "rev") if permute else [Layout("rev/r0", rev)]
    return out


def spread_order(k: int) -> list[int]:
    """The order in which adaptive scoring reads the K rotations: 0 first, then each time the rotation
    farthest (circular distance) from every rotation already read, the smallest such index on a tie.

    Rotation s moves every option s positions along the cycle. Consecutive rotations put each option in
    neighbouring positions, so a short prefix of 0, 1, 2, ... averages the position bias over one corner of
    the list only; a farthest-first prefix spreads each option's positions over the whole cycle, so the
    marginal over any prefix is as close to the full-K average as that many rotations can be. Rotation 0
    (the raw layout) is always read.
    """
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    order = [0]
    gap = [min(s, k - s) for s in range(k)]  # circular distance of each rotation to the nearest one read
    while len(order) < k:
        nxt = max(range(k), key=lambda s: (gap[s], -s))
        order.append(nxt)
        gap = [min(gap[s], abs(s - nxt), k - abs(s - nxt)) for s in range(k)]
    return order


def orders_array(layouts: list[Layout]) -> np.ndarray:
    """(S, K) int array of the layouts' orders, as the level functions expect."""
    return np.array([lay.order for lay in layouts], dtype=int)
