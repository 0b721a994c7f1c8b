"""Full reading: every layout of every item, a chunk of items at a time, each chunk checkpointed as it completes."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing

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


def _chunk_reads(read: Callable[[int], list[dict]], starts: Sequence[int], in_flight: int
                 ) -> Iterator[list[dict] | LabelTokenError]:
    """READ(start) of each of STARTS, in order (a LabelTokenError in its place). At IN_FLIGHT 1 each is read when it is
    asked for, on the calling thread; above, IN_FLIGHT are read at once on threads of their own, and the next one is
    queued before one is given. Closed early (a failed or interrupted cell), the reads not yet sent are not sent."""
    if in_flight <= 1:
        for start in starts:
            try:
                yield read(start)
            except LabelTokenError as exc:
                yield exc
        return
    reader = ThreadPoolExecutor(in_flight, thread_name_prefix="chunk-read")
    reading: deque[Future[list[dict]]] = deque(reader.submit(read, s) for s in starts[:in_flight])
    try:
        for n in range(len(starts)):
            try:
                records: list[dict] | LabelTokenError = reading.popleft().result()
            except LabelTokenError as exc:
                records = exc
            if n + in_flight < len(starts):
                reading.append(reader.submit(read, starts[n + in_flight]))
            yield records
    finally:
        for future in reading:
            future.cancel()
        reader.shutdown(wait=True)


def score_full(backend: Backend, todo: Sequence[PreparedItem], partial: PartialScores, progress: Progress, *,
               chunk_items: int, answer_mass: bool, check_ahead: Callable[[], None] | None = None,
               chunks_in_flight: int = 1) -> int:
    """Read every layout of TODO's items in chunks of CHUNK_ITEMS, checkpointing each chunk; returns prompts sent.

    With ``answer_mass``, every item's answer mass is read first, in one window that has the server to itself
    (:func:`answer_masses`), not a window a chunk. CHUNKS_IN_FLIGHT chunks are read at once (at 2, the next chunk's
    requests are already queued when a chunk's last answer comes back, so the engine does not wait for the client
    between chunks; a 2-label task's chunk is a single request). Chunks are checkpointed in order, each once
    its every answer has come back; with CHECK_AHEAD (the server check's
    :meth:`~anyjev.run.server_check.ServerGuard.start_probe`), the check before a chunk's checkpoint is sent then,
    beside the chunks still being read, so no request waits alone for it. When a chunk fails, every chunk before it
    that was read and checked is checkpointed, and nothing after it."""
    masses = answer_masses(backend, todo) if answer_mass and todo else [None] * len(todo)
    starts = range(0, len(todo), chunk_items)
    prompts = 0

    def read(start: int) -> list[dict]:
        return score_prepared(backend, todo[start : start + chunk_items], answer_mass=answer_mass,
                              masses=masses[start : start + chunk_items])

    with closing(_chunk_reads(read, starts, chunks_in_flight)) as reads:
        for start, records in zip(starts, reads, strict=True):
            chunk = todo[start : start + chunk_items]
            if isinstance(records, LabelTokenError):
                raise name_items(chunk, records) from records
            if check_ahead is not None:  # with chunks in flight, after the next one is queued: the engine never idles
                check_ahead()
            partial.add(records)
            progress.update(len(chunk))
            prompts += sum(sent_counts(p, answer_mass=answer_mass)[0] for p in chunk)
    return prompts
