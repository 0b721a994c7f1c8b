"""Scoring a (model, task) cell from its prepared items (every layout rendered and its labels checked in context
before any request is sent: :mod:`anyjev.run.prepared`): prove the server with a canary, read the content-free probes
when asked, then read the items in full or adaptively, a chunk at a time, checkpointing items as they complete, and
finalise the scores file, after the batch audit has read a few of its items again (:mod:`anyjev.run.audit`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from anyjev.backends.base import Backend
from anyjev.run.adaptive import score_adaptive
from anyjev.run.audit import AUDIT_ID, BatchAudit
from anyjev.run.canary import canary
from anyjev.run.full import score_full
from anyjev.run.identity import ScoringOptions
from anyjev.run.prepared import PreparedItem
from anyjev.run.probes import prepare_content_free, score_content_free
from anyjev.run.progress import Progress
from anyjev.run.requests import sent_counts
from anyjev.run.server_check import ServerGuard
from anyjev.run.store import PartialScores

log = logging.getLogger(__name__)

# A cell's content-free probes, each with the question keys it serves (:func:`prepare_content_free`).
Probes = Sequence[tuple[list[str], PreparedItem]]


def cell_probes(tokenizer, prepared: Sequence[PreparedItem], options: ScoringOptions, probes: Probes | None) -> list:
    """The content-free probes the cell reads: PROBES when they were prepared ahead, else prepared from TOKENIZER (none
    when ``options.content_free`` is off)."""
    if probes is not None:
        return list(probes)
    return prepare_content_free(tokenizer, prepared, options.prompt) if options.content_free else []


def finish_from_checkpoint(tokenizer, prepared: Sequence[PreparedItem], out: str, identity: dict, *,
                           options: ScoringOptions, probes: Probes | None = None
                           ) -> tuple[dict[str, Any], dict | None] | None:
    """A checkpoint under IDENTITY that holds every item (and every content-free probe the cell reads) finalised as
    OUT without a request (its final write failed before: a folder that could not be written): the counts and the
    server the items were scored on, or None when something is left to read (an adaptive cell asks its server, and so
    does a batch audit the checkpoint does not hold yet). PROBES: as :func:`score_cell` takes them."""
    if options.rotations == "adaptive":
        return None
    partial = PartialScores(out, identity)
    probes = cell_probes(tokenizer, prepared, options, probes)
    if any(p.item.id not in partial.records for p in prepared) or any(p.item.id not in partial.extras for _, p in probes):
        return None
    if options.audit and AUDIT_ID not in partial.extras:
        return None
    server = partial.recorded_server
    partial.finalise(out, [p.item.id for p in prepared])
    n = len(prepared)
    return {"items": n, "scored": 0, "resumed": n, "prompts": 0, "canary": {"prompts": 0, "prompt_tokens": 0},
            "prompt_tokens": 0}, server


def score_cell(backend: Backend, tokenizer, prepared: Sequence[PreparedItem], out: str, identity: dict, *,
               options: ScoringOptions, chunk_items: int, guard: ServerGuard | None = None,
               audit: BatchAudit | None = None, chunks_in_flight: int = 1, probes: Probes | None = None) -> dict[str, Any]:
    """Score the PREPARED items (:func:`anyjev.run.prepared.prepare_items` under ``options.prompt``) into OUT,
    resuming a checkpoint made under the same IDENTITY (which must hold :func:`anyjev.run.identity.scoring_identity`
    of the same OPTIONS).

    Returns counts: items, scored now, resumed, prompts sent (the canary not counted; its prompts and tokens apart),
    the prompt tokens of a
    full-rotation cell (:func:`anyjev.run.requests.sent_counts`; none for an adaptive one) and, adaptive, the
    certificate per layout group. With AUDIT (a server's cell), the batch audit's record is added after the items
    (once: a resumed cell keeps the one its checkpoint holds), its prompts counted apart (``audit``). CHUNKS_IN_FLIGHT:
    the chunks of items read at once (:func:`anyjev.run.full.score_full`; the client's ``chunks_in_flight``). PROBES:
    the cell's content-free probes prepared ahead (:mod:`anyjev.run.rendered`; TOKENIZER is then not used), or None:
    prepared here from TOKENIZER when ``options.content_free`` asks for them.
    """
    probes = cell_probes(tokenizer, prepared, options, probes)
    partial = PartialScores(out, identity)
    todo = [p for p in prepared if p.item.id not in partial.records]
    probes = [(keys, p) for keys, p in probes if p.item.id not in partial.extras]
    resumed = len(prepared) - len(todo)
    progress = Progress(len(prepared), resumed)
    log.info("%d items, %d layouts each at most, %d to score (%d resumed)", len(prepared),
             max((len(p.layouts) for p in prepared), default=0), len(todo), resumed)
    prompts = 0
    certificate: dict | None = None
    canary_counts = {"prompts": 0, "prompt_tokens": 0}
    if todo:
        canary(backend, todo[0], answer_mass=options.answer_mass)
        n_mass = int(options.answer_mass)  # the canary's answer-mass prompt is its label prompt again
        canary_counts = {"prompts": 1 + n_mass, "prompt_tokens": (1 + n_mass) * len(todo[0].layouts[0][1])}
    audit_due = audit is not None and AUDIT_ID not in partial.extras
    if guard is not None and (todo or probes or audit_due):
        # Before the first new record: the server must be the one the checkpointed records were scored on.
        guard.reference = partial.bind_server(guard.read(), verify=guard.verify)
    try:
        for start in range(0, len(probes), chunk_items):
            part = probes[start : start + chunk_items]
            partial.add(score_content_free(backend, part))
            prompts += sum(sent_counts(p, answer_mass=False)[0] for _, p in part)
        if options.rotations == "adaptive":
            sent, certificate = score_adaptive(backend, prepared, partial, progress, chunk_items=chunk_items,
                                               answer_mass=options.answer_mass, target=options.target_disagreement,
                                               confidence=options.confidence, per_round=options.rotations_per_round)
            prompts += sent
        else:
            prompts += score_full(backend, todo, partial, progress, chunk_items=chunk_items, answer_mass=options.answer_mass,
                                  check_ahead=guard.start_probe if guard is not None else None,
                                  chunks_in_flight=chunks_in_flight)
        if audit_due:
            assert audit is not None
            partial.add([audit.run(prepared, partial.records)])
    finally:
        partial.close()
        if guard is not None:
            guard.close()
    partial.finalise(out, [p.item.id for p in prepared])
    counts: dict[str, Any] = {"items": len(prepared), "scored": len(todo), "resumed": resumed, "prompts": prompts,
                              "canary": canary_counts}
    if audit_due:
        cost = partial.extras[AUDIT_ID]["cost"]
        counts["audit"] = {"prompts": cost["prompts"], "prompt_tokens": cost["prompt_tokens"]}
    if guard is not None:
        counts["server_check"] = {"prompts": guard.prompts_sent, "prompt_tokens": guard.tokens_sent}
    if certificate is not None:
        counts["certificate"] = certificate
    else:  # every layout of every item scored now was sent: what `anyjev plan` counts
        counts["prompt_tokens"] = (sum(sent_counts(p, answer_mass=options.answer_mass)[1] for p in todo)
                                   + sum(sent_counts(p, answer_mass=False)[1] for _, p in probes))
    return counts
