"""The content-free probes (Zhao et al., 2021): each question shown with a probe text ("N/A", "", "[MASK]") as the
state, in every layout; their label distributions are the content-free prior of ``L0-cf`` and ``prior_mode:
content_free``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from anyjev.backends.base import Backend
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.run.prepared import PreparedItem, prepare_item
from anyjev.run.records import layouts_record
from anyjev.run.requests import read_layouts
from anyjev.rundata.scores import CONTENT_FREE

# The content-free probes (Zhao et al., 2021), each shown as the item's state.
CONTENT_FREE_PROBES: tuple[str, ...] = ("N/A", "", "[MASK]")


@dataclass(frozen=True)
class _Probe:
    """A content-free probe standing in for an item: the probe text is the state."""

    id: str
    state: str
    question: object


def prepare_content_free(tokenizer, prepared: Sequence[PreparedItem], options: PromptOptions
                         ) -> list[tuple[list[str], PreparedItem]]:
    """The content-free probes of PREPARED's questions: per distinct question (first seen first), each probe of
    :data:`CONTENT_FREE_PROBES` rendered in every layout as if it were the state. Questions whose probes render
    to the same prompts (under canonical order: the same option set in any listing) share one set, returned
    with every question key it serves."""
    checker = LabelChecker(tokenizer)
    out: list[tuple[list[str], PreparedItem]] = []
    served: dict[tuple, list[str]] = {}
    seen: set[str] = set()
    for p in prepared:
        key = p.item.question.key()
        if key in seen:
            continue
        seen.add(key)
        probes = [prepare_item(tokenizer, checker, _Probe(f"cf/{key}/{i}", probe, p.item.question), p.group, options)
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
    return [{"type": CONTENT_FREE, "id": p.item.id, "questions": sorted(keys), "probe": p.item.state, "labels": p.labels,
             "label_ids": p.label_ids, "layouts": layouts_record(p, v)}
            for (keys, p), v in zip(probes, values, strict=True)]
