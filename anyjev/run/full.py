"""Full reading: every layout of every item, a chunk of items at a time, each chunk checkpointed as it completes."""

from __future__ import annotations

from collections.abc import Sequence

from anyjev.backends.base import Backend
from anyjev.errors import LabelTokenError
from anyjev.run.prepared import PreparedItem
from anyjev.run.progress import Progress
from anyjev.run.records import item_record
from anyjev.run.requests import answer_masses, name_items, read_layouts, sent_counts
from anyjev.run.store import PartialScores


def score_prepared(backend: Backend, chunk: Sequence[PreparedItem], *, answer_mass: bool) -> list[dict]:
    """Score a chunk of items with as few prompts as possible (identical prompts are sent once); with
    ``answer_mass``, one more prompt per item (:func:`answer_masses`)."""
    values, _ = read_layouts(backend, [(p.label_ids, p.layouts) for p in chunk])
    masses = answer_masses(backend, chunk) if answer_mass else [None] * len(chunk)
    return [item_record(p, v, mass) for p, v, mass in zip(chunk, values, masses, strict=True)]


def score_full(backend: Backend, todo: Sequence[PreparedItem], partial: PartialScores, progress: Progress, *,
               chunk_items: int, answer_mass: bool) -> int:
    """Read every layout of TODO's items, a chunk at a time, checkpointing each chunk; returns prompts sent."""
    prompts = 0
    for start in range(0, len(todo), chunk_items):
        chunk = todo[start : start + chunk_items]
        try:
            records = score_prepared(backend, chunk, answer_mass=answer_mass)
        except LabelTokenError as exc:
            raise name_items(chunk, exc) from exc
        partial.add(records)
        prompts += sum(sent_counts(p, answer_mass=answer_mass)[0] for p in chunk)
        progress.update(len(chunk))
    return prompts
