"""The batch audit: would a cell's numbers change under another batch?

A server's log-probs can depend on what else shares the engine batch and on which prefix-cache blocks a prompt
reuses (vLLM computes a cached prefix once, in another batch, and a GPU's kernels reduce in an order that depends on
the batch). After a cell is scored, the audit reads a seeded draw of its test items again under another batch
composition: every distinct prompt its record holds, one prompt per request, one request in flight, in the reverse of
the order scoring sent them, each request with a prefix-cache salt of its own (vLLM's ``cache_salt``: no block cached
before, by scoring or by another audit request, is reused). The values it reads are kept in the scores file, in one
record of type ``audit`` after the items (:mod:`anyjev.rundata.scores`), with what the audit cost; the item records are
as they were.

The evaluation then compares (:func:`audit_summary`): the largest absolute change of a label log-prob, and, at each
level, the audited items whose decision (their top options, ties included) changes when their own values are replaced
by the audit's, every other item as scored. ``metrics.json`` records both (``audit``).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anyjev.numbers.evaluation import item_levels
from anyjev.numbers.metrics import TIE_TOL
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.prepared import PreparedItem
from anyjev.run.records import cell_groups
from anyjev.rundata.scores import AUDIT

log = logging.getLogger(__name__)

AUDIT_ID = "audit"  # the audit record's id among a cell's other records
AUDIT_SEED = 0  # the draw of the audited test items
HOW = ("the audited items' prompts read again one prompt per request, one request in flight, in reverse order, "
       "each request with a prefix-cache salt of its own (no cached block reused)")


def audited(splits: Sequence[str | None], n: int) -> list[int]:
    """The positions of the N test items the audit reads again among items of SPLITS (every test item when there are
    N or fewer): a draw seeded with AUDIT_SEED from the test items, in cell order. ``anyjev plan`` counts them too."""
    test = [i for i, split in enumerate(splits) if split in (None, "test")]
    if n >= len(test):
        return test
    return [test[i] for i in sorted(random.Random(AUDIT_SEED).sample(range(len(test)), n))]


def audited_items(prepared: Sequence[PreparedItem], n: int) -> list[PreparedItem]:
    """The PREPARED items the audit reads again (:func:`audited`)."""
    return [prepared[i] for i in audited([p.item.split for p in prepared], n)]


class BatchAudit:
    """Reads a cell's audited items again through BACKEND (a :class:`anyjev.backends.vllm.VLLMBackend`: the audit
    needs its per-request ``cache_salt``)."""

    def __init__(self, backend, n: int) -> None:
        self.backend = backend
        self.n = n

    def run(self, prepared: Sequence[PreparedItem], records: Mapping[str, dict]) -> dict[str, Any]:
        """The audit record of the cell whose items are PREPARED and whose item RECORDS (by id) are scored: every
        layout each audited item's record holds, read again."""
        items = audited_items(prepared, self.n)
        reads: list[tuple[str, list[str], list[int], list[int]]] = []  # (item, layouts, prompt, labels), sent order
        for p in items:
            held = records[p.item.id]["layouts"]
            by_prompt: dict[tuple[int, ...], list[str]] = {}
            for layout, ids in p.layouts:
                if layout.name in held:
                    by_prompt.setdefault(tuple(ids), []).append(layout.name)
            reads += [(p.item.id, names, list(ids), list(p.label_ids)) for ids, names in by_prompt.items()]
        values: dict[str, dict[str, list[float]]] = {p.item.id: {} for p in items}
        requests, t0 = self.backend.requests_sent, time.monotonic()
        for item, names, ids, labels in reversed(reads):
            [row] = self.backend.label_logprobs([ids], labels, cache_salt=uuid.uuid4().hex).tolist()
            for name in names:
                values[item][name] = row
        cost = {"requests": self.backend.requests_sent - requests, "prompts": len(reads),
                "prompt_tokens": sum(len(ids) for _, _, ids, _ in reads), "seconds": round(time.monotonic() - t0, 3)}
        log.info("batch audit: %d items, %d prompts read again in %.1f s", len(items), len(reads), cost["seconds"])
        return {"type": AUDIT, "id": AUDIT_ID, "how": HOW, "seed": AUDIT_SEED, "items": values, "cost": cost}


def with_audited_values(records: Sequence[dict], audit: Mapping[str, Any]) -> list[dict]:
    """RECORDS with each audited item's label log-probs replaced by the audit's (the others as they are)."""
    read = audit["items"]
    return [rec if rec["id"] not in read else
            rec | {"layouts": {name: lay | {"lp": read[rec["id"]].get(name, lay["lp"])}
                               for name, lay in rec["layouts"].items()}}
            for rec in records]


def top_options(lp: np.ndarray) -> list[frozenset[int]]:
    """Per row of option-space log-probs ``(N, K)``, its top options, ties included (the decision the metrics count)."""
    top = lp >= lp.max(axis=1, keepdims=True) - TIE_TOL
    return [frozenset(np.flatnonzero(row).tolist()) for row in top]


def audit_summary(records: Sequence[dict], extras: Mapping[str, dict] | None, options: EvaluationOptions,
                  source: str) -> dict[str, Any] | None:
    """What ``metrics.json`` records of a cell's audit (None when the cell holds none): the audited items, the largest
    absolute change of a label log-prob, per level the number (and ids) of audited test items whose decision changes,
    and what the audit cost."""
    audit = (extras or {}).get(AUDIT_ID)
    if audit is None:
        return None
    by_id = {rec["id"]: rec for rec in records}
    gaps = [abs(a - b) for item, layouts in audit["items"].items() for name, lp in layouts.items()
            for a, b in zip(lp, by_id[item]["layouts"][name]["lp"], strict=True)]
    scored = cell_groups(list(records), extras, options.prior_mode, source)
    again = cell_groups(with_audited_values(records, audit), extras, options.prior_mode, source)
    before = item_levels(scored.groups, options, scored.ids)
    after = item_levels(again.groups, options, again.ids)
    rows = [i for i, item in enumerate(before.ids) if item in audit["items"]]
    changed: dict[str, list[str]] = {}
    for level, groups in before.levels.items():
        was, now = top_options(groups["fwd"][rows]), top_options(after.levels[level]["fwd"][rows])
        changed[level] = [before.ids[i] for i, a, b in zip(rows, was, now, strict=True) if a != b]
    summary = {"items": len(audit["items"]), "how": audit["how"], "max_abs_logprob_diff": float(max(gaps, default=0.0)),
               "changed": {level: len(ids) for level, ids in changed.items()},
               "changed_items": {level: ids for level, ids in changed.items() if ids}, "cost": dict(audit["cost"])}
    if summary["changed_items"]:
        log.warning("%s: the batch audit changes decisions: %s", source,
                    ", ".join(f"{level} {n}" for level, n in summary["changed"].items() if n))
    return summary
