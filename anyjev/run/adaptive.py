"""Adaptive rotations: read a test item's rotations a round at a time and stop at a certified margin.

Order of work in an adaptive cell (:func:`score_adaptive`, called by :func:`anyjev.run.scoring.score_cell`):

1. The calibration items read every layout, as in a full cell. They are the unlabelled certification set:
   their gold labels are never used here.
2. The stopping rule is certified from their records (:func:`certify_records`) and written to the checkpoint
   as a ``certificate`` record before any test item is read; a resumed cell reads it back instead of
   certifying again, so the threshold an interrupted cell used is the one it keeps.
3. Each test item of a choice question with K >= 3 reads its rotations in
   :func:`~anyjev.decision.layouts.spread_order`, ``per_round`` per round, in both layout groups; each group
   (fwd, rev) has its own certified threshold and stops on its own once the log-odds margin of its running
   L0 marginal reaches it. Other items (Yes/No, ordered levels, K = 2) read every layout.

The stopping statistic is the L0 marginal of the rotations read: each rotation corrected by the frozen
batch prior of the calibration items (per layout group, option count, prior group and rotation, at the
schema's default ``evaluation.prior_strength`` and ``prior_min_items``; uniform for a prior group with fewer
calibration items), then their geometric mean. The test items' own batch prior cannot be used: it is not
known until every test item is read. So the certificate bounds disagreement with the full-K L0 decision
under that frozen prior, and evaluation uses the same prior for an adaptive cell's L0
(:func:`anyjev.run.records.prior_source_for`), so the reported decision is the certified one.
Every test item's reading depends only on its own log-probs and the certificate, so the cell's final file
does not depend on chunking or on where a run was interrupted.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable, Sequence

import numpy as np

from anyjev.backends.base import Backend
from anyjev.decision.layouts import GROUPS, Layout, spread_order
from anyjev.errors import ConfigError, LabelTokenError
from anyjev.numbers.certificate import Certificate, certify_threshold, check_points, log_margin, running_marginals
from anyjev.numbers.levels import to_option_space
from anyjev.numbers.priors import PRIOR_MIN_ITEMS, PRIOR_STRENGTH, batch_prior, prior_correct
from anyjev.run.full import score_full
from anyjev.run.prepared import PreparedItem
from anyjev.run.progress import Progress
from anyjev.run.records import item_record
from anyjev.run.requests import answer_masses, name_items, read_layouts
from anyjev.run.store import PartialScores
from anyjev.rundata.scores import CERTIFICATE

log = logging.getLogger(__name__)

CERTIFICATE_ID = "certificate"
STATISTIC = "log-odds margin of the running L0 marginal under the calibration items' frozen batch prior"


def rule_identity(target: float, confidence: float, per_round: int) -> dict:
    """What the stopping rule depends on (part of an adaptive cell's identity)."""
    if not 0.0 < target < 1.0:
        raise ConfigError("scoring.target_disagreement", f"must lie in (0, 1), got {target}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError("scoring.confidence", f"must lie in (0, 1), got {confidence}")
    if per_round < 1:
        raise ConfigError("scoring.rotations_per_round", f"must be >= 1, got {per_round}")
    return {"mode": "adaptive", "target_disagreement": target, "confidence": confidence, "rotations_per_round": per_round,
            "order": "spread", "statistic": STATISTIC, "prior_strength": PRIOR_STRENGTH, "prior_min_items": PRIOR_MIN_ITEMS}


def adaptive_eligible(p: PreparedItem) -> bool:
    """Only unordered choice questions with K >= 3 read fewer rotations (Yes/No has two phrasings, score one)."""
    q = p.item.question
    return q.kind == "choice" and q.k >= 3 and len(p.layouts) >= q.k


def _rotations(layouts: Sequence[Layout], group: str) -> list[Layout]:
    """The group's rotations indexed by rotation number (names ``<group>/r<s>``)."""
    rows = [lay for lay in layouts if lay.name.startswith(group + "/")]
    return sorted(rows, key=lambda lay: int(lay.name.split("/r")[1]))


class StopRule:
    """The frozen calibration prior and the certified threshold per layout group."""

    def __init__(self, priors: dict[tuple[str, int, Hashable], np.ndarray], certificates: dict[str, Certificate]) -> None:
        self.priors = priors  # (layout group, K, prior group) -> (K rotations, K positions) probabilities
        self.certificates = certificates

    def prior(self, group: str, k: int, prior_group: Hashable) -> np.ndarray:
        hit = self.priors.get((group, k, prior_group))
        return hit if hit is not None else np.full((k, k), 1.0 / k)

    def threshold(self, group: str) -> float | None:
        cert = self.certificates.get(group)
        return cert.threshold if cert is not None else None

    def corrected(self, group: str, prior_group: Hashable, lp_pos: np.ndarray, orders: np.ndarray,
                  rotations: Sequence[int]) -> np.ndarray:
        """Option-space, prior-corrected log-probs ``(m, K)`` of the rotations read (rows in reading order)."""
        k = lp_pos.shape[-1]
        prior = self.prior(group, k, prior_group)[list(rotations)]
        return to_option_space(prior_correct(lp_pos[None], prior[None], PRIOR_STRENGTH), orders)[0]


def _calibration_arrays(records: Sequence[dict], group: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Position-space log-probs ``(N, K, K)`` and orders ``(N, K, K)`` of K-option records, rotations in order."""
    names = [f"{group}/r{s}" for s in range(k)]
    lp = np.array([[rec["layouts"][n]["lp"] for n in names] for rec in records], dtype=np.float64)
    orders = np.array([[rec["layouts"][n]["order"] for n in names] for rec in records], dtype=int)
    return lp, orders


def certify_records(calib: Sequence[dict], *, target: float, confidence: float, per_round: int) -> StopRule:
    """The stop rule from fully read calibration records (choice, K >= 3): the frozen prior per (layout group,
    K, prior group) and, per layout group, the certificate pooled over every K."""
    priors: dict[tuple[str, int, Hashable], np.ndarray] = {}
    certificates: dict[str, Certificate] = {}
    eligible = [r for r in calib if int(r["k"]) >= 3 and f"fwd/r{int(r['k']) - 1}" in r["layouts"]]
    for group in GROUPS:
        members = [r for r in eligible if f"{group}/r0" in r["layouts"]]
        rows: list[np.ndarray] = []
        for k in sorted({int(r["k"]) for r in members}):
            recs = [r for r in members if int(r["k"]) == k]
            lp, orders = _calibration_arrays(recs, group, k)
            labels = [r["group"] for r in recs]
            per_item = batch_prior(lp, labels, prior_min_items=PRIOR_MIN_ITEMS)
            for label, prior in zip(labels, per_item, strict=True):
                priors.setdefault((group, k, label), prior)
        rule = StopRule(priors, {})
        for r in members:
            k = int(r["k"])
            lp, orders = _calibration_arrays([r], group, k)
            read = spread_order(k)
            rows.append(rule.corrected(group, r["group"], lp[0][read], orders[0][read], read))
        if members or group == "fwd":
            certificates[group] = certify_threshold(rows, target=target, confidence=confidence, per_round=per_round)
    return StopRule(priors, certificates)


def certificate_record(rule: StopRule) -> dict:
    return {"type": CERTIFICATE, "id": CERTIFICATE_ID, "statistic": STATISTIC,
            "groups": {g: c.to_dict() for g, c in rule.certificates.items()}}


def read_adaptive(backend: Backend, chunk: Sequence[PreparedItem], rule: StopRule, per_round: int
                  ) -> tuple[list[dict[str, list[float]]], list[dict], int]:
    """Read CHUNK's rotations round by round until each (item, layout group) stops; returns per item the
    log-probs of the layouts read, its ``adaptive`` summary, and the prompts sent."""
    values: list[dict[str, list[float]]] = [{} for _ in chunk]
    summary: list[dict] = [{"threshold": {}, "read": {}, "stopped": {}} for _ in chunk]
    state = []  # (item index, group, rotations, reading order, check points, position in order, done)
    for i, p in enumerate(chunk):
        k = p.item.question.k
        for group in GROUPS:
            rots = _rotations([lay for lay, _ in p.layouts], group)
            if not rots:
                continue
            thr = rule.threshold(group)
            summary[i]["threshold"][group] = None if thr is None else ("inf" if math.isinf(thr) else thr)
            state.append({"i": i, "group": group, "rots": rots, "order": spread_order(k),
                          "points": check_points(k, per_round), "round": 0, "done": False})
    prompts = 0
    ids_of = [{lay.name: ids for lay, ids in p.layouts} for p in chunk]
    while any(not st["done"] for st in state):
        active = [st for st in state if not st["done"]]
        requests = []
        for st in active:
            lo = st["points"][st["round"] - 1] if st["round"] else 0
            new = [st["rots"][s] for s in st["order"][lo : st["points"][st["round"]]]]
            requests.append((chunk[st["i"]].label_ids, [(lay, ids_of[st["i"]][lay.name]) for lay in new]))
        got, sent = read_layouts(backend, requests)
        prompts += sent
        for st, v in zip(active, got, strict=True):
            i, group = st["i"], st["group"]
            values[i].update(v)
            m = st["points"][st["round"]]
            read = st["order"][:m]
            names = [st["rots"][s].name for s in read]
            lp = np.array([values[i][n] for n in names], dtype=np.float64)
            orders = np.array([st["rots"][s].order for s in read], dtype=int)
            lp_opt = rule.corrected(group, chunk[i].group, lp, orders, read)
            margin = float(log_margin(running_marginals(lp_opt, [m]))[0])
            thr = rule.threshold(group)
            last = st["round"] == len(st["points"]) - 1
            stop = thr is not None and margin >= thr and not last
            if stop or last:
                st["done"] = True
                summary[i]["read"][group] = m
                summary[i]["stopped"][group] = bool(stop)
            st["round"] += 1
    return values, summary, prompts


def score_adaptive(backend: Backend, prepared: Sequence[PreparedItem], partial: PartialScores, progress: Progress, *,
                   chunk_items: int, answer_mass: bool, target: float, confidence: float, per_round: int
                   ) -> tuple[int, dict]:
    """Score an adaptive cell into PARTIAL (calibration items in full, certificate, then test items
    adaptively); returns the prompts sent (answer-mass prompts included) and the certificate per layout group."""
    rule_identity(target, confidence, per_round)
    calib = [p for p in prepared if p.item.split == "calib"]
    test = [p for p in prepared if p.item.split != "calib"]
    prompts = score_full(backend, [p for p in calib if p.item.id not in partial.records], partial, progress,
                         chunk_items=chunk_items, answer_mass=answer_mass)
    stored = partial.extras.get(CERTIFICATE_ID)
    rule = certify_records([partial.records[p.item.id] for p in calib], target=target, confidence=confidence,
                           per_round=per_round)
    if stored is not None:  # a resumed cell keeps the certificate it wrote before its first test item
        rule.certificates = {g: Certificate.from_dict(c) for g, c in stored["groups"].items()}
    else:
        partial.add([certificate_record(rule)])
    for g, c in rule.certificates.items():
        if c.certified:
            log.info("adaptive %s: threshold %s certified on %d calibration items (%d disagreements, bound %.4f <= %g "
                     "at %.0f%%), %.2f of %.2f rotations read there", g, c.threshold, c.n, c.disagreements, c.bound,
                     c.target, 100 * c.confidence, c.mean_read, c.full_read)
        else:
            log.warning("adaptive %s: %s", g, c.reason)
    todo = [p for p in test if p.item.id not in partial.records]
    # every test item's answer mass in one window that has the server to itself, as a full cell reads them
    all_masses = answer_masses(backend, todo) if answer_mass and todo else [None] * len(todo)
    for start in range(0, len(todo), chunk_items):
        chunk = todo[start : start + chunk_items]
        masses = all_masses[start : start + chunk_items]
        try:
            adaptive = [p for p in chunk if adaptive_eligible(p)]
            full_values, sent = read_layouts(backend, [(p.label_ids, p.layouts) for p in chunk if not adaptive_eligible(p)])
            prompts += sent
            ad_values, summaries, sent = read_adaptive(backend, adaptive, rule, per_round)
            prompts += sent
        except LabelTokenError as exc:
            raise name_items(chunk, exc) from exc
        prompts += len(chunk) if answer_mass else 0
        full_iter, ad_iter = iter(full_values), iter(zip(ad_values, summaries, strict=True))
        records = []
        for p, mass in zip(chunk, masses, strict=True):
            if adaptive_eligible(p):
                v, summ = next(ad_iter)
                rec = item_record(p, v, mass)
                rec["adaptive"] = summ
            else:
                rec = item_record(p, next(full_iter), mass)
            records.append(rec)
        partial.add(records)
        progress.update(len(chunk))
    return prompts, {g: c.to_dict() for g, c in rule.certificates.items()}
