"""Requests for a chunk of prepared items: each label set's prompts in one backend call (identical prompts sent
once), the answer-mass prompts apart, and what an item costs (the prompts and prompt tokens it sends)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from anyjev.backends.base import Backend
from anyjev.decision.layouts import Layout
from anyjev.errors import LabelTokenError
from anyjev.run.prepared import PreparedItem


def answer_masses(backend: Backend, items: Sequence[PreparedItem]) -> list[float]:
    """Per item, the probability the model puts on its label tokens at all (full vocabulary), read from
    the raw layout (fwd/r0): one more prompt per item, from the same backend, every item's in one window that has the
    server to itself (:meth:`~anyjev.backends.base.Backend.exclusive`; a cell reads all its items' at once). A label
    error names the items of the label set whose request failed."""
    out: list[float] = [math.nan] * len(items)
    by_labels: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(items):
        by_labels.setdefault(tuple(p.label_ids), []).append(i)
    with backend.exclusive():
        for key, members in by_labels.items():
            try:
                values = backend.vocab_logprobs([items[i].layouts[0][1] for i in members], list(key))
            except LabelTokenError as exc:
                raise name_items([items[i] for i in members], exc) from exc
            for i, row in zip(members, values, strict=True):
                out[i] = float(math.exp(float(np.logaddexp.reduce(row))))
    return out


def read_layouts(backend: Backend, requests: Sequence[tuple[Sequence[int], Sequence[tuple[Layout, list[int]]]]]
                 ) -> tuple[list[dict[str, list[float]]], int]:
    """Label log-probs of each request's layouts, as ``{layout name: lp}`` per request, and the number of
    prompts sent: one backend call per label set, identical prompts sent once. A request is
    ``(label ids, [(layout, prompt ids), ...])``."""
    by_labels: dict[tuple[int, ...], list[Sequence[int]]] = {}
    index: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    where: list[tuple[tuple[int, ...], list[tuple[str, int]]]] = []  # per request: its label set, (layout, row) each
    for label_ids, layouts in requests:
        key = tuple(label_ids)
        bucket = by_labels.setdefault(key, [])
        rows = []
        for layout, ids in layouts:
            k = (key, tuple(ids))
            row = index.get(k)
            if row is None:
                row = index[k] = len(bucket)
                bucket.append(ids)
            rows.append((layout.name, row))
        where.append((key, rows))
    results = {key: backend.label_logprobs(prompts, list(key)).tolist() for key, prompts in by_labels.items()}
    out = [{name: list(results[key][row]) for name, row in rows} for key, rows in where]
    return out, len(index)


def sent_counts(p: PreparedItem, *, answer_mass: bool) -> tuple[int, int]:
    """(prompts, prompt tokens) an item costs: its distinct token-id prompts (layouts that render the same ids
    are sent once), plus its raw layout again for the answer mass. What a cell's counts and `anyjev plan` add up."""
    distinct = dict(zip(p.prompt_shas, (len(ids) for _, ids in p.layouts), strict=True))  # one hash, one token list
    extra = len(p.layouts[0][1]) if answer_mass else 0
    return len(distinct) + int(answer_mass), sum(distinct.values()) + extra


def name_items(chunk: Sequence[PreparedItem], exc: LabelTokenError) -> LabelTokenError:
    ids = ", ".join(repr(p.item.id) for p in chunk[:5])
    return exc.within(f"scoring items {ids}{'...' if len(chunk) > 5 else ''}")
