"""Scoring a (model, task) cell: render every layout of every item, check the labels in context before
any request is sent, send the prompts in chunks, and checkpoint items as they complete."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anyjev.backends.base import Backend
from anyjev.decision import published
from anyjev.decision.labels import LabelChecker, label_strings
from anyjev.decision.layouts import OPTION_ORDERS, Layout, layouts_for
from anyjev.decision.prompts import DEFAULT_PROFILE, PROMPT_SYSTEM_VERSION, PromptProfile, encode, get_profile, prompt_hash, render_text
from anyjev.errors import BackendError, ConfigError, LabelTokenError
from anyjev.run.store import PartialScores
from anyjev.settings import ScoringSettings

log = logging.getLogger(__name__)

# Bump when the prompt text or layout scheme changes: partial scores made under another version are
# not resumed.
PROMPT_VERSION = "1"
ROTATIONS = ("full", "adaptive")
# The content-free probes (Zhao et al., 2021), each shown as the item's state.
CONTENT_FREE_PROBES: tuple[str, ...] = ("N/A", "", "[MASK]")


@dataclass
class PreparedItem:
    """An item's prompts (token ids per layout) and the label ids checked for them."""

    item: object
    group: str
    labels: list[str]
    label_ids: list[int]
    label_kind: str
    layouts: list[tuple[Layout, list[int]]]


def scoring_identity(options: ScoringSettings | None = None, *, content_free: bool = False) -> dict:
    """The identity fragment for how prompts are made and what each record holds (OPTIONS, the config's
    ``scoring.*``; default: the schema's): merge it into the cell identity, so a checkpoint made under another
    profile (or without answer mass) is not resumed.

    Settings at their defaults add nothing (a default cell's identity is what it always was); adaptive
    rotations add every setting the stopping rule depends on, so a changed target is never resumed."""
    o = options or ScoringSettings()
    out = {
        "prompt_version": f"{PROMPT_VERSION}.{PROMPT_SYSTEM_VERSION}",
        "prompt_profile": get_profile(o.prompt_profile).identity(),
        "answer_mass": bool(o.answer_mass),
    }
    if o.rotations not in ROTATIONS:
        raise ConfigError("scoring.rotations", f"must be one of {', '.join(ROTATIONS)}, got {o.rotations!r}")
    if o.option_order not in OPTION_ORDERS:
        raise ConfigError("scoring.option_order", f"must be one of {', '.join(OPTION_ORDERS)}, got {o.option_order!r}")
    if o.rotations == "adaptive":
        from anyjev.run.adaptive import rule_identity

        out["rotations"] = rule_identity(o.target_disagreement, o.confidence, o.rotations_per_round)
    if o.option_order != "as_given":
        out["option_order"] = o.option_order
    if content_free:
        out["content_free"] = list(CONTENT_FREE_PROBES)
    return out


def _check_published_labels(tokenizer, item, labels: list[str], ids: list[int]) -> None:
    """Under the published profile the published library must read the same label tokens we do: its
    ``resolve_labels`` (isolation encoding) has to agree with our in-context check, or the cell fails."""
    theirs, their_ids = published.resolve_labels(tokenizer, item.question)
    if (theirs, their_ids) != (labels, ids):
        raise LabelTokenError(
            f"item {item.id!r}: the published library resolves labels {theirs} to ids {their_ids}, we check "
            f"{labels} -> {ids} in context; the 'published' profile would not read the tokens it shows",
            missing_ids=[i for i in their_ids if i not in ids],
        )


def prepare_item(
    tokenizer,
    checker: LabelChecker,
    item,
    group: str,
    *,
    permute: bool = True,
    flip: bool = True,
    profile: str | PromptProfile = DEFAULT_PROFILE,
    option_order: str = "as_given",
) -> PreparedItem:
    """Render every layout (in PROFILE's wording, rotating the OPTION_ORDER listing) and check its labels;
    score questions fall back from digits to letters."""
    profile = get_profile(profile)
    question = item.question
    kinds = ["digits", "letters"] if question.kind == "score" else ["default"]
    last_error: LabelTokenError | None = None
    for kind in kinds:
        labels = label_strings(question, "letters" if kind == "letters" else "default")
        try:
            layouts, ids = [], None
            for group_layouts in layouts_for(question, permute=permute, flip=flip, option_order=option_order).values():
                for layout in group_layouts:
                    text = render_text(tokenizer, question, item.state, layout, labels, profile)
                    layout_ids = checker.ids(text, labels)
                    if ids is not None and layout_ids != ids:
                        raise LabelTokenError(f"label ids differ between layouts: {ids} vs {layout_ids} ({layout.name})")
                    ids = layout_ids
                    layouts.append((layout, encode(tokenizer, text)))
        except LabelTokenError as exc:
            last_error = exc
            if kind == "digits":
                log.warning("item %s: digit labels are not single tokens here (%s); using letters", item.id, exc)
            continue
        if profile.name == "published":
            _check_published_labels(tokenizer, item, labels, ids)
        return PreparedItem(item, group, labels, ids, "letters" if kind == "letters" else kind, layouts)
    raise LabelTokenError(f"item {item.id!r} (question {question.key()}): {last_error}") from last_error


def layouts_record(p: PreparedItem, values: dict[str, list[float]]) -> dict:
    """The ``layouts`` field of a record: the layouts that were read (the keys of VALUES), each with its
    order (caller's option indices by position), phrasing, prompt hash and label log-probs."""
    return {lay.name: {"order": list(lay.order), "swapped": lay.swapped, "prompt_sha": prompt_hash(ids), "lp": values[lay.name]}
            for lay, ids in p.layouts if lay.name in values}


def item_record(p: PreparedItem, values: dict[str, list[float]], answer_mass: float | None = None) -> dict:
    """An item's record; only the layouts named in VALUES (those read) are stored."""
    record = {
        "type": "item",
        "id": p.item.id,
        "split": p.item.split,
        "gold": p.item.gold,
        "group": p.group,
        "k": len(p.labels),
        "labels": p.labels,
        "label_ids": p.label_ids,
        "label_kind": p.label_kind,
        "question": p.item.question.key(),
        "layouts": layouts_record(p, values),
    }
    if answer_mass is not None:
        record["answer_mass"] = answer_mass
    return record


def answer_masses(backend: Backend, chunk: Sequence[PreparedItem]) -> list[float]:
    """Per item, the probability the model puts on its label tokens at all (full vocabulary), read from
    the raw layout (fwd/r0): one more prompt per item, from the same backend."""
    vocab = getattr(backend, "vocab_logprobs", None)
    if vocab is None:
        raise BackendError(f"backend {backend.name!r} cannot read full-vocabulary log-probs; answer_mass needs one that can")
    out: list[float] = [math.nan] * len(chunk)
    by_labels: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(chunk):
        by_labels.setdefault(tuple(p.label_ids), []).append(i)
    for key, members in by_labels.items():
        values = vocab([chunk[i].layouts[0][1] for i in members], list(key))
        for i, row in zip(members, values, strict=True):
            out[i] = float(math.exp(float(np.logaddexp.reduce(row))))
    return out


def read_layouts(backend: Backend, requests: Sequence[tuple[Sequence[int], Sequence[tuple[Layout, list[int]]]]]
                 ) -> tuple[list[dict[str, list[float]]], int]:
    """Label log-probs of each request's layouts, as ``{layout name: lp}`` per request, and the number of
    prompts sent: one backend call per label set, identical prompts sent once. A request is
    ``(label ids, [(layout, prompt ids), ...])``."""
    by_labels: dict[tuple[int, ...], list[list[int]]] = {}
    index: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for label_ids, layouts in requests:
        key = tuple(label_ids)
        bucket = by_labels.setdefault(key, [])
        for _, ids in layouts:
            k = (key, tuple(ids))
            if k not in index:
                index[k] = len(bucket)
                bucket.append(ids)
    results = {key: backend.label_logprobs(prompts, list(key)) for key, prompts in by_labels.items()}
    out = []
    for label_ids, layouts in requests:
        key = tuple(label_ids)
        out.append({lay.name: results[key][index[(key, tuple(ids))]].tolist() for lay, ids in layouts})
    return out, len(index)


def score_prepared(backend: Backend, chunk: Sequence[PreparedItem], *, answer_mass: bool = False) -> list[dict]:
    """Score a chunk of items with as few prompts as possible (identical prompts are sent once); with
    ``answer_mass``, one more prompt per item (:func:`answer_masses`)."""
    values, _ = read_layouts(backend, [(p.label_ids, p.layouts) for p in chunk])
    masses = answer_masses(backend, chunk) if answer_mass else [None] * len(chunk)
    return [item_record(p, v, mass) for p, v, mass in zip(chunk, values, masses, strict=True)]


@dataclass(frozen=True)
class _Probe:
    """A content-free probe standing in for an item: the probe text is the state."""

    id: str
    state: str
    question: object


def prepare_content_free(tokenizer, checker: LabelChecker, prepared: Sequence[PreparedItem], *, permute: bool = True,
                         flip: bool = True, profile: str | PromptProfile = DEFAULT_PROFILE,
                         option_order: str = "as_given") -> list[tuple[list[str], PreparedItem]]:
    """The content-free probes of PREPARED's questions: per distinct question (first seen first), each probe of
    :data:`CONTENT_FREE_PROBES` rendered in every layout as if it were the state. Questions whose probes render
    to the same prompts (under canonical order: the same option set in any listing) share one set, returned
    with every question key it serves."""
    out: list[tuple[list[str], PreparedItem]] = []
    served: dict[tuple, list[str]] = {}
    seen: set[str] = set()
    for p in prepared:
        key = p.item.question.key()
        if key in seen:
            continue
        seen.add(key)
        probes = [prepare_item(tokenizer, checker, _Probe(f"cf/{key}/{i}", probe, p.item.question), p.group,
                               permute=permute, flip=flip, profile=profile, option_order=option_order)
                  for i, probe in enumerate(CONTENT_FREE_PROBES)]
        fingerprint = tuple((lay.name, tuple(ids)) for q in probes for lay, ids in q.layouts)
        if fingerprint in served:
            served[fingerprint].append(key)
            continue
        served[fingerprint] = keys = [key]
        out.extend((keys, q) for q in probes)
    return out


def score_content_free(backend: Backend, probes: Sequence[tuple[list[str], PreparedItem]]) -> list[dict]:
    """Records (``type: content_free``) of the probes: the question keys served, the probe, every layout's
    log-probs (position space: the prior of a layout does not depend on which listing it came from)."""
    values, _ = read_layouts(backend, [(p.label_ids, p.layouts) for _, p in probes])
    return [{"type": "content_free", "id": p.item.id, "questions": sorted(keys), "probe": p.item.state, "labels": p.labels,
             "label_ids": p.label_ids, "layouts": layouts_record(p, v)}
            for (keys, p), v in zip(probes, values, strict=True)]


class Progress:
    """Periodic log lines (a progress bar would flood Snakemake's job logs)."""

    def __init__(self, total: int, done: int, every: float = 10.0) -> None:
        self.total, self.done, self.every = total, done, every
        self.start = self.last = time.monotonic()
        self.start_done = done

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            rate = (self.done - self.start_done) / max(now - self.start, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            log.info("scored %d/%d items (%.0f%%), %.2f items/s, eta %.0f s", self.done, self.total,
                     100 * self.done / max(self.total, 1), rate, eta)
            self.last = now


def sent_counts(p: PreparedItem, *, answer_mass: bool = False) -> tuple[int, int]:
    """(prompts, prompt tokens) an item costs: its distinct token-id prompts (layouts that render the same ids
    are sent once), plus its raw layout again for the answer mass. What a cell's counts and `anyjev plan` add up."""
    distinct = {tuple(ids) for _, ids in p.layouts}
    extra = len(p.layouts[0][1]) if answer_mass else 0
    return len(distinct) + int(answer_mass), sum(map(len, distinct)) + extra


def canary(backend: Backend, p: PreparedItem, *, answer_mass: bool = False) -> None:
    """One prompt first: proves the server returns exactly the label ids, renormalised over them (or
    raises LabelTokenError naming the missing ids) before the cell's real work starts."""
    try:
        backend.label_logprobs([p.layouts[0][1]], p.label_ids)
        if answer_mass:  # the server must also name every label's full-vocabulary value (logprob_token_ids)
            answer_masses(backend, [p])
    except LabelTokenError as exc:
        raise LabelTokenError(f"canary request (item {p.item.id!r}) failed: {exc}", missing_ids=exc.missing_ids,
                              returned_ids=exc.returned_ids) from exc
    log.info("canary ok: the server returned exactly the label ids %s, summing to one", p.label_ids)


def score_cell(
    backend: Backend,
    tokenizer,
    items: Sequence,
    groups: Sequence[str],
    out: str,
    identity: dict,
    *,
    chunk_items: int = 16,
    permute: bool = True,
    flip: bool = True,
    options: ScoringSettings | None = None,
    content_free: bool = False,
) -> dict:
    """Score ``items`` into ``out`` (resuming a checkpoint made under the same ``identity``).

    Every item's labels are checked before the first request, so a tokenizer that cannot emit a label
    as one token fails the cell at once. OPTIONS are the config's ``scoring.*`` (default: the schema's; merge
    :func:`scoring_identity` of the same options into ``identity``): ``prompt_profile`` is the wording,
    ``answer_mass`` adds each item's answer mass to its record (one more prompt per item),
    ``rotations="adaptive"`` reads the test items' rotations a round at a time and stops at a threshold
    certified on the calibration items (:mod:`anyjev.run.adaptive`), ``option_order="canonical"`` rotates the
    options sorted by text. ``content_free`` also scores the content-free probes of every question. Returns
    counts: items, scored now, resumed, prompts sent (the canary prompt not counted), the prompt tokens of a
    full-rotation cell (:func:`sent_counts`; none for an adaptive one) and, adaptive, the certificate per
    layout group.
    """
    o = options or ScoringSettings()
    if o.rotations not in ROTATIONS:
        raise ConfigError("scoring.rotations", f"must be one of {', '.join(ROTATIONS)}, got {o.rotations!r}")
    profile, answer_mass, option_order = o.prompt_profile, o.answer_mass, o.option_order
    checker = LabelChecker(tokenizer)
    prepared = [prepare_item(tokenizer, checker, it, g, permute=permute, flip=flip, profile=profile,
                             option_order=option_order)
                for it, g in zip(items, groups, strict=True)]
    probes = (prepare_content_free(tokenizer, checker, prepared, permute=permute, flip=flip, profile=profile,
                                   option_order=option_order) if content_free else [])
    partial = PartialScores(out, identity)
    todo = [p for p in prepared if p.item.id not in partial.records]
    probes = [(keys, p) for keys, p in probes if p.item.id not in partial.extras]
    resumed = len(prepared) - len(todo)
    progress = Progress(len(prepared), resumed)
    log.info("%d items, %d layouts each at most, %d to score (%d resumed)", len(prepared),
             max((len(p.layouts) for p in prepared), default=0), len(todo), resumed)
    prompts = 0
    certificate: dict | None = None
    if todo:
        canary(backend, todo[0], answer_mass=answer_mass)
    try:
        for start in range(0, len(probes), chunk_items):
            part = probes[start : start + chunk_items]
            partial.add(score_content_free(backend, part))
            prompts += sum(sent_counts(p)[0] for _, p in part)
        if o.rotations == "adaptive":
            from anyjev.run.adaptive import score_adaptive

            sent, certificate = score_adaptive(backend, prepared, partial, progress, chunk_items=chunk_items,
                                               answer_mass=answer_mass, target=o.target_disagreement,
                                               confidence=o.confidence, per_round=o.rotations_per_round)
            prompts += sent
        else:
            prompts += score_full(backend, todo, partial, progress, chunk_items=chunk_items, answer_mass=answer_mass)
    finally:
        partial.close()
    partial.finalise(out, [p.item.id for p in prepared])
    counts = {"items": len(prepared), "scored": len(todo), "resumed": resumed, "prompts": prompts}
    if certificate is not None:
        counts["certificate"] = certificate
    else:  # every layout of every item scored now was sent: what `anyjev plan` counts
        counts["prompt_tokens"] = (sum(sent_counts(p, answer_mass=answer_mass)[1] for p in todo)
                                   + sum(sent_counts(p)[1] for _, p in probes))
    return counts


def _named(chunk: Sequence[PreparedItem], exc: LabelTokenError) -> LabelTokenError:
    ids = ", ".join(repr(p.item.id) for p in chunk[:5])
    return LabelTokenError(f"scoring items {ids}{'...' if len(chunk) > 5 else ''}: {exc}",
                           missing_ids=exc.missing_ids, returned_ids=exc.returned_ids)


def score_full(backend: Backend, todo: Sequence[PreparedItem], partial: PartialScores, progress: Progress, *,
               chunk_items: int, answer_mass: bool) -> int:
    """Read every layout of TODO's items, a chunk at a time, checkpointing each chunk; returns prompts sent."""
    prompts = 0
    for start in range(0, len(todo), chunk_items):
        chunk = todo[start : start + chunk_items]
        try:
            records = score_prepared(backend, chunk, answer_mass=answer_mass)
        except LabelTokenError as exc:
            raise _named(chunk, exc) from exc
        partial.add(records)
        prompts += sum(sent_counts(p, answer_mass=answer_mass)[0] for p in chunk)
        progress.update(len(chunk))
    return prompts
