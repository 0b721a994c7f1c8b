"""Full reading: every layout of every item, a chunk of items at a time, each chunk checkpointed as it completes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from anyjev.backends.base import Backend
from anyjev.errors import LabelTokenError
from anyjev.run.prepared import PreparedItem
from anyjev.run.progress import Progress
from anyjev.run.records import item_record
from anyjev.run.requests import answer_masses, name_items, read_layouts, sent_counts
from anyjev.run.store import PartialScores


def score_prepared(backend: Backend, chunk: Sequence[PreparedItem], *, answer_mass: bool,
                   masses: Sequence[float] | None = None) -> list[dict]:
    """Score a chunk of items with as few prompts as possible (identical prompts are sent once); with
    ``answer_mass``, one more prompt per item (:func:`answer_masses`), unless MASSES holds them already."""
    values, _ = read_layouts(backend, [(p.label_ids, p.layouts) for p in chunk])
    if masses is None:
        masses = answer_masses(backend, chunk) if answer_mass else [None] * len(chunk)
    return [item_record(p, v, mass) for p, v, mass in zip(chunk, values, masses, strict=True)]


def score_full(backend: Backend, todo: Sequence[PreparedItem], partial: PartialScores, progress: Progress, *,
               chunk_items: int, answer_mass: bool, check_ahead: Callable[[], None] | None = None) -> int:
    """Read every layout of TODO's items, a chunk at a time, checkpointing each chunk; returns prompts sent.

    With ``answer_mass``, every item's answer mass is read first, in one window that has the server to itself
    (:func:`answer_masses`), not a window a chunk. With CHECK_AHEAD (the server check's
    :meth:`~anyjev.run.server_check.ServerGuard.start_probe`), the check before a chunk's checkpoint is sent once
    every answer of the chunk has come back, beside the next chunk's requests, and the chunk is checkpointed after
    them: no request waits alone for the check but the last chunk's."""
    masses = answer_masses(backend, todo) if answer_mass and todo else [None] * len(todo)
    prompts = 0
    held: tuple[Sequence[PreparedItem], list[dict]] | None = None  # read, waiting for the check sent after it

    def checkpoint() -> None:
        chunk, records = held
        partial.add(records)
        progress.update(len(chunk))

    for start in range(0, len(todo), chunk_items):
        chunk = todo[start : start + chunk_items]
        if held is not None and check_ahead is not None:
            check_ahead()
        try:
            records = score_prepared(backend, chunk, answer_mass=answer_mass, masses=masses[start : start + chunk_items])
        except BaseException as exc:
            if held is not None:  # the chunk read before is checkpointed still (its check was sent after it)
                checkpoint()
            if isinstance(exc, LabelTokenError):
                raise name_items(chunk, exc) from exc
            raise
        prompts += sum(sent_counts(p, answer_mass=answer_mass)[0] for p in chunk)
        if held is not None:
            checkpoint()
        held = (chunk, records)
        if check_ahead is None:
            checkpoint()
            held = None
    if held is not None:
        checkpoint()
    return prompts
