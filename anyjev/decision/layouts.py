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


def layouts_for(question: Question, *, permute: bool = True, flip: bool = True) -> dict[str, list[Layout]]:
    """The layouts an evaluation scores, by group.

    ``fwd``: the given order and (if ``permute``) its rotations; ``rev``: the same from the reversed
    order (if ``flip``). Yes/No questions swap the phrasing instead of the options; ordered (score)
    questions are never permuted and have no reversed probe.
    """
    k = question.k
    identity = tuple(range(k))
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


def orders_array(layouts: list[Layout]) -> np.ndarray:
    """(S, K) int array of the layouts' orders, as the level functions expect."""
    return np.array([lay.order for lay in layouts], dtype=int)
