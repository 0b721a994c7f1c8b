"""Adaptive rotations (spread order, Clopper-Pearson certificate, adaptive scoring with resume), the canonical
option order and the content-free prior, with the real Qwen3 tokenizer and a planted in-process backend."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from anyjev.data.tasks import Item
from anyjev.decision.labels import LabelChecker
from anyjev.decision.layouts import spread_order
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice, noul
from anyjev.errors import TaskDataError
from anyjev.numbers.certificate import (
    certify_margins,
    certify_threshold,
    check_points,
    clopper_pearson_upper,
    log_margin,
    running_marginals,
    stop_index,
)
from anyjev.numbers.levels import compute_levels, marginalise, to_option_space
from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.priors import prior_correct
from anyjev.run.adaptive import CERTIFICATE_ID, certify_records
from anyjev.run.evaluate import evaluate_records
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_item, prepare_items
from anyjev.run.scoring import score_cell
from anyjev.run.store import partial_path
from anyjev.rundata.scores import read_scores
from tests.conftest import QWEN3_TOKENIZER_DIR, require
from tests.waiting import HANG_GUARD

QWEN3 = QWEN3_TOKENIZER_DIR


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from PARTS."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:6], "big") / 2**48


class PlantedBackend:
    """Label log-probs computed from the rendered prompt: a content score per (state, option text), whose
    scale varies by item (some items are clear, some ambiguous), plus a position bias, plus a small
    layout-specific interaction, so the L0 structure is realistic and everything is a function of the prompt."""

    name = "planted"
    OPTION = re.compile(r"^([A-Z])\. (.*)$", re.M)

    def __init__(self, tokenizer, fail_after_calls: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.fail_after_calls = fail_after_calls
        self.calls = 0
        self.prompts = 0

    def row(self, ids, k: int) -> np.ndarray:
        text = self.tokenizer.decode(ids)
        state = text.split("State:\n", 1)[1].split("\n\nQuestion:", 1)[0]
        options = [m.group(2) for m in self.OPTION.finditer(text)][:k]
        if len(options) < k:  # Yes/No: the phrasing names the words
            options = [f"word {p} of {text[-80:]}" for p in range(k)]
        scale = 6.0 * _unit("scale", state) ** 2
        bias = np.linspace(0.8, -0.8, k)
        logits = [scale * (_unit("content", state, opt) - 0.5) + bias[p] + 0.3 * (_unit("x", text, p) - 0.5)
                  for p, opt in enumerate(options)]
        return log_softmax(np.array(logits))

    def label_logprobs(self, prompts, label_ids) -> np.ndarray:
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt(f"killed after {self.calls} calls")
        self.calls += 1
        self.prompts += len(prompts)
        return np.array([self.row(p, len(label_ids)) for p in prompts])

    def describe(self) -> dict:
        return {"backend": self.name}


# ------------------------------------------------------------------------------------------ spread order


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 10, 16, 20, 26])
def test_spread_order_is_a_permutation_starting_at_raw_and_covers_the_cycle(k: int) -> None:
    order = spread_order(k)
    assert sorted(order) == list(range(k)) and order[0] == 0
    for m in range(2, k + 1):
        chosen = sorted(order[:m])
        gaps = [b - a for a, b in zip(chosen, chosen[1:], strict=False)] + [k - chosen[-1] + chosen[0]]
        # farthest-first keeps every gap within twice the best possible (ceil(k/m)), while reading
        # rotations 0..m-1 in order leaves one gap of k-m+1
        assert max(gaps) <= 2 * math.ceil(k / m)
        assert max(gaps) <= k - m + 1
    assert spread_order(4) == [0, 2, 1, 3]
    # farthest-first: each next rotation is as far (circularly) from those already read as any unread one
    def distance(r: int, chosen: list[int]) -> int:
        return min(min((r - c) % k, (c - r) % k) for c in chosen)

    for m in range(1, k):
        unread = [r for r in range(k) if r not in order[:m]]
        assert distance(order[m], order[:m]) == max(distance(r, order[:m]) for r in unread), (k, m, order)


# ------------------------------------------------------------------------------------------- certificate


@pytest.mark.parametrize(("x", "n", "upper"), [
    # one-sided 95% Clopper-Pearson upper bounds: I_p(x+1, n-x) = 0.95 solved with mpmath (30 digits)
    (1, 10, 0.394163302436505), (1, 100, 0.0465598114535389), (3, 300, 0.0256413930826096),
    (0, 300, 0.00993608194445771), (5, 50, 0.198833002516418), (2, 200, 0.0311425994140837),
    (9, 10, 0.994883803108176),
])
def test_clopper_pearson_matches_known_values(x: int, n: int, upper: float) -> None:
    assert clopper_pearson_upper(x, n, 0.95) == pytest.approx(upper, rel=1e-10, abs=1e-13)


def test_clopper_pearson_agrees_with_the_published_bound() -> None:
    from anyjev.decision.published import PublishedPackageError, load_published

    try:
        stopping = load_published().calibrate.stopping
    except PublishedPackageError as exc:
        require("published", False, str(exc))
    for n in (20, 100, 300, 900):
        for x in (0, 1, 3, n // 10):
            assert clopper_pearson_upper(x, n, 0.95) == pytest.approx(stopping.cp_upper(x, n, 0.05), rel=1e-9, abs=1e-12)


def test_clopper_pearson_edges() -> None:
    assert clopper_pearson_upper(0, 0, 0.95) == 1.0 and clopper_pearson_upper(4, 4, 0.95) == 1.0
    assert clopper_pearson_upper(0, 299, 0.95) <= 0.01 < clopper_pearson_upper(0, 298, 0.95)
    assert clopper_pearson_upper(2, 100, 0.99) > clopper_pearson_upper(2, 100, 0.95)
    with pytest.raises(ValueError):
        clopper_pearson_upper(5, 4, 0.95)


def _planted(n_clear: int, n_tricky: int, k: int = 8) -> list[np.ndarray]:
    """Option-space log-probs (rotations in spread order) of two kinds of item, both decided for option 0 by
    all K rotations: clear items favour 0 by 6 nats in every rotation; tricky items favour option 1 by 3 nats
    in the first two rotations read, then option 0 by 1.5 in the rest (full-K: 0 wins by 6 * 1.5 - 2 * 3 = 3...)."""
    rows = []
    for _ in range(n_clear):
        lp = np.zeros((k, k))
        lp[:, 0] = 6.0
        rows.append(log_softmax(lp))
    for _ in range(n_tricky):
        lp = np.zeros((k, k))
        lp[:2, 1] = 3.0
        lp[2:, 0] = 1.5
        rows.append(log_softmax(lp))
    return rows


def test_certificate_on_planted_margins() -> None:
    rows = _planted(900, 100)
    cert = certify_threshold(rows, target=0.01, confidence=0.95, per_round=2)
    # a threshold at or below 3 stops the 100 tricky items after 2 rotations on the wrong option: it must
    # not certify; 6 stops the clear items after 2 rotations and must
    assert cert.certified and 3.0 < cert.threshold <= 6.0
    assert cert.disagreements == 0 and cert.bound <= 0.01
    assert cert.mean_read < 8 and cert.full_read == 8
    margins = [log_margin(running_marginals(r, check_points(8, 2))) for r in rows]
    winners = [np.argmax(running_marginals(r, check_points(8, 2)), axis=-1) for r in rows]
    at = stop_index(np.array(margins), 3.0)
    bad = int(np.sum(np.array(winners)[np.arange(len(rows)), at] != 0))
    assert bad == 100 and clopper_pearson_upper(bad, len(rows), 0.95) > 0.01
    # offered only thresholds <= 3 the rule falls back to reading everything (threshold inf, certified)
    low = certify_margins(margins, winners, [check_points(8, 2)] * len(rows), target=0.01, confidence=0.95, per_round=2,
                          grid=[0.0, 1.0, 2.0, 3.0])
    assert low.threshold == math.inf and low.mean_read == 8


def test_certificate_cannot_certify_with_too_few_items() -> None:
    cert = certify_threshold(_planted(200, 0), target=0.01, confidence=0.95, per_round=2)
    assert not cert.certified and cert.n == 200 and cert.disagreements == 0
    assert cert.bound == pytest.approx(1 - 0.05 ** (1 / 200))
    assert "200 items" in cert.reason and "0.01" in cert.reason and "299" in cert.reason


# ------------------------------------------------------------------------------------------ canonical order


def test_canonical_order_any_listing_gives_identical_prompts_and_probabilities(qwen3_tokenizer) -> None:
    options = ["banana", "Apple", "cherry", "apple pie"]
    checker, backend = LabelChecker(qwen3_tokenizer), PlantedBackend(qwen3_tokenizer)
    reference = None
    as_given_prompts = set()
    for perm in itertools.permutations(range(4)):
        q = choice("Which fruit is it?", [options[i] for i in perm])
        item = Item(f"i{perm}", "It is red and round.", q, gold=perm.index(1))
        p = prepare_item(qwen3_tokenizer, checker, item, "g", PromptOptions(option_order="canonical"))
        prompts = {lay.name: ids for lay, ids in p.layouts}
        lp = {g: np.array([backend.row(ids, 4) for lay, ids in p.layouts if lay.name.startswith(g)]) for g in ("fwd", "rev")}
        orders = {g: np.array([lay.order for lay, _ in p.layouts if lay.name.startswith(g)]) for g in ("fwd", "rev")}
        # option-space L0-perm in the caller's indices, mapped back to the reference listing's indices
        probs = {g: marginalise(to_option_space(lp[g][None], orders[g]))[0] for g in lp}
        back = {g: np.empty(4) for g in probs}
        for g in probs:
            back[g][list(perm)] = probs[g]
        if reference is None:
            reference = (prompts, back)
        else:
            assert prompts == reference[0]
            for g in back:
                np.testing.assert_array_equal(back[g], reference[1][g])
        as_given_prompts.add(tuple(prepare_item(qwen3_tokenizer, checker, item, "g", PromptOptions()).layouts[0][1]))
    assert len(as_given_prompts) == 24  # the caller's listing changes every as-given prompt


def test_canonical_cell_evaluates_the_same_for_any_listing(qwen3_tokenizer, tmp_path) -> None:
    """Two cells of the same items, one listing the options as written, one shuffled per item (gold follows
    the text): under canonical order every level gives the same probability to every option text."""
    rng = np.random.default_rng(5)
    texts = ["apple", "Banana", "cherry", "date"]
    plain, shuffled = [], []
    for i in range(10):
        gold = int(rng.integers(4))
        perm = [int(x) for x in rng.permutation(4)]
        q0 = choice("Which fruit is meant?", texts)
        q1 = choice("Which fruit is meant?", [texts[j] for j in perm])
        plain.append(Item(f"t{i}", f"message {i}", q0, gold=gold, split="test"))
        shuffled.append(Item(f"t{i}", f"message {i}", q1, gold=perm.index(gold), split="test"))
    results = []
    for name, items in (("plain", plain), ("shuffled", shuffled)):
        out = tmp_path / f"{name}.jsonl"
        _score(qwen3_tokenizer, out, items, ["q"] * len(items), option_order="canonical")
        records = read_scores(out).items
        results.append(evaluate_records(records, EvaluationOptions(n_boot=1000)))
    for level in ("raw", "L0-perm", "L0-bc", "L0"):
        for g in ("fwd", "rev"):
            for i, it in enumerate(shuffled):
                by_text = dict(zip(it.question.options, results[1].point[level][g][i], strict=True))
                np.testing.assert_allclose([by_text[t] for t in texts], results[0].point[level][g][i], atol=1e-12)
        for metric in ("acc", "nll", "brier", "flip"):
            assert results[0].metrics[level][metric]["value"] == pytest.approx(results[1].metrics[level][metric]["value"], abs=1e-12)


def test_canonical_order_leaves_noul_and_score_alone() -> None:
    q = noul("Is it spam?")
    assert PromptOptions(option_order="canonical").layouts(q) == PromptOptions().layouts(q)
    with pytest.raises(ValueError, match="option_order"):
        PromptOptions(option_order="sorted").layouts(q)


# ---------------------------------------------------------------------------------------- adaptive scoring


COLOURS = ["red", "green", "blue", "yellow", "purple"]


def _items(n_calib: int, n_test: int) -> list[Item]:
    q = choice("Which colour does the message name?", COLOURS)
    spam = noul("Is the message spam?")
    items = [Item(f"c{i}", f"calibration message {i}", q, gold=i % 5, split="calib") for i in range(n_calib)]
    items += [Item(f"t{i}", f"test message {i}", q, gold=(i * 3) % 5, split="test") for i in range(n_test)]
    items.append(Item("t-noul", "a noul test message", spam, gold=0, split="test"))
    return items


ADAPTIVE = {"rotations": "adaptive", "target_disagreement": 0.05, "confidence": 0.9, "rotations_per_round": 2}
RULE = {"target": 0.05, "confidence": 0.9, "per_round": 2}


def _options(**kw) -> ScoringOptions:
    """The config's flat ``scoring.*`` keys (and ``content_free``) as the ScoringOptions a score job carries."""
    prompt = {k: kw.pop(k) for k in ("prompt_profile", "option_order") if k in kw}
    return ScoringOptions(prompt=PromptOptions(**prompt), **kw)


def _identity(**kw) -> dict:
    return {"task": "planted", "model": {"backend": "planted"}, **scoring_identity(_options(**kw))}


def _score(tokenizer, out: Path, items: list[Item], groups: list[str], backend=None, chunk_items: int = 7, **kw) -> dict:
    """Score ITEMS as a cell with the flat scoring settings KW does."""
    options = _options(**kw)
    return score_cell(backend or PlantedBackend(tokenizer), tokenizer, prepare_items(tokenizer, items, groups, options.prompt),
                      str(out), _identity(**kw), options=options, chunk_items=chunk_items)


def _run(tokenizer, out: Path, items: list[Item], backend=None, **kw) -> dict:
    return _score(tokenizer, out, items, ["q"] * len(items), backend, **kw)


@pytest.fixture(scope="module")
def adaptive_cell(qwen3_tokenizer, tmp_path_factory) -> tuple[Path, list[Item], dict]:
    items = _items(60, 30)
    out = tmp_path_factory.mktemp("adaptive") / "scores.jsonl"
    counts = _run(qwen3_tokenizer, out, items, **ADAPTIVE)
    return out, items, counts


def test_adaptive_cell_certifies_on_calibration_items_and_stops_test_items(adaptive_cell) -> None:
    out, items, counts = adaptive_cell
    read = read_scores(out)
    identity, records, extras = read.identity, read.items, read.extras
    assert identity["rotations"]["mode"] == "adaptive" and identity["rotations"]["target_disagreement"] == 0.05
    cert = extras[CERTIFICATE_ID]["groups"]
    assert set(cert) == {"fwd", "rev"}
    assert all(c["n"] == 60 and c["threshold"] is not None for c in cert.values())
    by_id = {r["id"]: r for r in records}
    for it in items:
        rec = by_id[it.id]
        if it.split == "calib" or it.question.kind == "noul":
            assert "adaptive" not in rec and len(rec["layouts"]) == (10 if it.split == "calib" else 4)
            continue
        summ = rec["adaptive"]
        for g in ("fwd", "rev"):
            read = sorted(int(n.split("/r")[1]) for n in rec["layouts"] if n.startswith(g))
            assert read == sorted(spread_order(5)[: summ["read"][g]])  # a prefix of the spread order
            assert summ["read"][g] in (2, 4, 5) and summ["stopped"][g] == (summ["read"][g] < 5)
    test = [r for r in records if "adaptive" in r]
    reads = [r["adaptive"]["read"]["fwd"] + r["adaptive"]["read"]["rev"] for r in test]
    assert min(reads) < 10, "no test item stopped early: the planted backend no longer exercises the rule"
    assert counts["prompts"] == sum(len({lay["prompt_sha"] for lay in r["layouts"].values()}) for r in records)


def test_adaptive_decisions_agree_with_full_reading(qwen3_tokenizer, adaptive_cell, tmp_path) -> None:
    """The stopped decision (L0 under the frozen calibration prior, the rule's statistic) agrees with full K."""
    out, items, _ = adaptive_cell
    full_out = tmp_path / "full.jsonl"
    _run(qwen3_tokenizer, full_out, items)
    full_records = read_scores(full_out).items
    records = read_scores(out).items
    full = {r["id"]: r for r in full_records}
    rule = certify_records([r for r in full_records if r["split"] == "calib"], **RULE)
    disagree, stopped = 0, 0
    for rec in (r for r in records if "adaptive" in r):
        for name, lay in rec["layouts"].items():  # what was read is exactly what full reading read
            assert lay["lp"] == full[rec["id"]]["layouts"][name]["lp"]
        for g in ("fwd", "rev"):
            decisions = []
            for source in (rec, full[rec["id"]]):
                read = spread_order(5)[: len([n for n in source["layouts"] if n.startswith(g)])]
                lp = np.array([source["layouts"][f"{g}/r{s}"]["lp"] for s in read])
                orders = np.array([source["layouts"][f"{g}/r{s}"]["order"] for s in read])
                decisions.append(int(np.argmax(running_marginals(rule.corrected(g, "q", lp, orders, read), [len(read)]))))
            disagree += decisions[0] != decisions[1]
            stopped += rec["adaptive"]["stopped"][g]
    # the rule's own decision (L0 under the frozen calibration prior) of the stopped items vs all K rotations:
    # certified at 5% (90% confidence) on the 60 calibration items; 0 of the 62 (item, group) pairs here
    assert stopped > 0 and disagree == 0


@pytest.mark.parametrize("fail_after", [1, 5, 12, 16])
def test_adaptive_resume_equals_uninterrupted(qwen3_tokenizer, adaptive_cell, tmp_path, fail_after: int) -> None:
    """Killed mid-cell (during calibration, right after, or among the test items), then resumed: the same bytes."""
    out_ref, items, _ = adaptive_cell
    out = tmp_path / "scores.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(qwen3_tokenizer, out, items, backend=PlantedBackend(qwen3_tokenizer, fail_after_calls=fail_after), **ADAPTIVE)
    # a checkpoint holds what was read (a kill before the first record leaves none)
    assert partial_path(out).exists() == (fail_after > 1) and not out.exists()
    counts = _run(qwen3_tokenizer, out, items, **ADAPTIVE)
    assert counts["resumed"] > 0 or fail_after == 1
    assert out.read_bytes() == out_ref.read_bytes()


KILL_SCRIPT = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_adaptive as t
from transformers import AutoTokenizer

class Killed(t.PlantedBackend):
    def label_logprobs(self, prompts, label_ids):
        if self.calls >= {after}:
            os.kill(os.getpid(), signal.SIGKILL)  # no finally, no flush: as a killed job
        return super().label_logprobs(prompts, label_ids)

tok = AutoTokenizer.from_pretrained(str(t.QWEN3))
t._run(tok, Path({out!r}), t._items(60, 30), backend=Killed(tok), **t.ADAPTIVE)
"""


def test_adaptive_resume_after_sigkill_equals_uninterrupted(qwen3_tokenizer, adaptive_cell, tmp_path) -> None:
    """A process killed with SIGKILL among the test items (after its certificate), then resumed: the same bytes."""
    import os
    import signal
    import subprocess
    import sys

    out_ref, items, _ = adaptive_cell
    out = tmp_path / "scores.jsonl"
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), after=14, out=str(out))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=HANG_GUARD)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    lines = partial_path(out).read_text().splitlines()
    assert any('"type":"certificate"' in line for line in lines) and not out.exists()
    counts = _run(qwen3_tokenizer, out, items, **ADAPTIVE)
    assert counts["resumed"] > 60
    assert out.read_bytes() == out_ref.read_bytes()


def test_adaptive_without_enough_calibration_items_reads_everything(qwen3_tokenizer, tmp_path) -> None:
    out = tmp_path / "few.jsonl"
    counts = _run(qwen3_tokenizer, out, _items(10, 6), **(ADAPTIVE | {"target_disagreement": 0.01, "confidence": 0.95}))
    read = read_scores(out)
    records, extras = read.items, read.extras
    cert = extras[CERTIFICATE_ID]["groups"]["fwd"]
    assert cert["threshold"] is None and cert["n"] == 10 and "cannot certify" in cert["reason"]
    assert counts["certificate"]["fwd"]["threshold"] is None
    for rec in (r for r in records if "adaptive" in r):
        assert len(rec["layouts"]) == 10 and rec["adaptive"]["stopped"] == {"fwd": False, "rev": False}
        assert rec["adaptive"]["threshold"] == {"fwd": None, "rev": None}


def test_adaptive_canonical_content_free_together(qwen3_tokenizer, tmp_path) -> None:
    """All three options at once: the cell scores, resumes its identity, and evaluates with every level."""
    rng = np.random.default_rng(9)
    items = []
    for it in _items(60, 20)[:-1]:
        perm = [int(x) for x in rng.permutation(5)]
        q = choice(it.question.text, [it.question.options[j] for j in perm])
        items.append(Item(it.id, it.state, q, gold=perm.index(it.gold), split=it.split))
    kw = ADAPTIVE | {"option_order": "canonical", "content_free": True}
    out = tmp_path / "all.jsonl"
    _score(qwen3_tokenizer, out, items, [it.question.key() for it in items], **kw)
    read = read_scores(out)
    identity, records, extras = read.identity, read.items, read.extras
    assert identity["option_order"] == "canonical" and identity["content_free"] == ["N/A", "", "[MASK]"]
    probes = [e for e in extras.values() if e["type"] == "content_free"]
    assert len(probes) == 3  # one option set: every listing shares its probes under canonical order
    assert set(probes[0]["questions"]) == {it.question.key() for it in items}
    res = evaluate_records(records, EvaluationOptions(n_boot=1000, prior_mode="content_free"), extras=extras)
    assert {"raw", "L0-perm", "L0-bc", "L0", "L1", "L0-cf"} <= set(res.levels)
    assert all(math.isfinite(res.metrics[lv]["nll"]["value"]) for lv in res.levels)


def test_changed_target_is_not_resumed(qwen3_tokenizer, tmp_path) -> None:
    assert _identity(**ADAPTIVE) != _identity(**(ADAPTIVE | {"target_disagreement": 0.02}))
    assert "rotations" not in _identity() and "option_order" not in _identity()  # defaults: identity unchanged


# --------------------------------------------------------------------------------- levels from layouts read


def _full_records(rng: np.random.Generator, n: int, k: int, split: str) -> list[dict]:
    recs = []
    for i in range(n):
        layouts = {}
        for g, base in (("fwd", list(range(k))), ("rev", list(range(k))[::-1])):
            for s in range(k):
                order = [base[(p + s) % k] for p in range(k)]
                layouts[f"{g}/r{s}"] = {"order": order, "swapped": False, "prompt_sha": "x",
                                        "lp": log_softmax(rng.normal(size=k) * 2).tolist()}
        recs.append({"type": "item", "id": f"{split}{i}", "split": split, "gold": int(rng.integers(k)), "group": "q",
                     "k": k, "labels": list("ABCDE"[:k]), "question": "q", "layouts": layouts})
    return recs


def _arrays_of(records: list[dict], g: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    names = [f"{g}/r{s}" for s in range(k)]
    return (np.array([[r["layouts"][n]["lp"] for n in names] for r in records]),
            np.array([records[0]["layouts"][n]["order"] for n in names]))


def test_adaptive_cell_read_in_full_is_full_l0_under_the_calibration_prior() -> None:
    """Every rotation read, an adaptive cell's levels are the full computation, with the calibration items'
    frozen prior in place of the test items' batch prior (prior-free levels unchanged, bit for bit)."""
    rng = np.random.default_rng(3)
    test, calib = _full_records(rng, 30, 5, "test"), _full_records(rng, 20, 5, "calib")
    settings = EvaluationOptions(n_boot=1000)
    full = evaluate_records(test + calib, settings)
    marked = [dict(r, adaptive={"read": {"fwd": 5, "rev": 5}}) for r in test] + calib
    again = evaluate_records(marked, settings)
    assert full.settings["prior_source"] == "items" and again.settings["prior_source"] == "calibration"
    for level in ("raw", "L0-perm"):
        assert json.dumps(full.metrics[level], sort_keys=True) == json.dumps(again.metrics[level], sort_keys=True)
    args = {}
    for g in ("fwd", "rev"):
        args[f"test_{g}"], args[f"orders_{g}"] = _arrays_of(test, g, 5)
        args[f"calib_{g}"], _ = _arrays_of(calib, g, 5)
    expected = compute_levels(args["test_fwd"], args["test_rev"], args["orders_fwd"], args["orders_rev"], ["q"] * 30,
                              calib_fwd=args["calib_fwd"], calib_rev=args["calib_rev"], calib_groups=["q"] * 20,
                              calib_gold=np.array([r["gold"] for r in calib]), prior_source="calibration")
    batch = compute_levels(args["test_fwd"], args["test_rev"], args["orders_fwd"], args["orders_rev"], ["q"] * 30)
    for g in ("fwd", "rev"):
        np.testing.assert_allclose(again.point["L0"][g], expected["L0"][g], atol=1e-12)
        np.testing.assert_allclose(again.point["L1"][g], expected["L1"][g], atol=1e-12)
        assert np.abs(expected["L0"][g] - batch["L0"][g]).max() > 1e-3  # the prior did change


def test_adaptive_cell_evaluates_the_decision_the_rule_certified(qwen3_tokenizer, adaptive_cell) -> None:
    """An adaptive cell's evaluated L0 is the stopping rule's own statistic (L0 over the rotations read under the
    calibration items' frozen prior), so the reported decision is the certified one."""
    out, _, _ = adaptive_cell
    records = read_scores(out).items
    rule = certify_records([r for r in records if r["split"] == "calib"], **RULE)
    res = evaluate_records(records, EvaluationOptions(n_boot=1000))
    # the Yes/No item (K = 2) read every layout and keeps the test items' own prior
    assert {g["k"]: g["prior_source"] for g in res.k_groups} == {2: "items", 5: "calibration"}
    test = [r for r in records if r["split"] == "test"]
    checked = 0
    for i, rec in enumerate(test):
        if "adaptive" not in rec:
            continue
        for g in ("fwd", "rev"):
            read = spread_order(5)[: rec["adaptive"]["read"][g]]
            lp = np.array([rec["layouts"][f"{g}/r{s}"]["lp"] for s in read])
            orders = np.array([rec["layouts"][f"{g}/r{s}"]["order"] for s in read])
            statistic = running_marginals(rule.corrected(g, "q", log_softmax(lp), orders, read), [len(read)])[0]
            np.testing.assert_allclose(res.point["L0"][g][i], statistic, atol=1e-9)
            checked += 1
    assert checked >= 40


def test_adaptive_records_without_calibration_items_are_refused() -> None:
    rng = np.random.default_rng(6)
    marked = [dict(r, adaptive={}) for r in _full_records(rng, 10, 5, "test")]
    with pytest.raises(TaskDataError, match="calibration items"):
        evaluate_records(marked, EvaluationOptions(n_boot=1000), source="cell.jsonl")


def test_levels_from_partial_rotations_use_only_the_layouts_read() -> None:
    rng = np.random.default_rng(4)
    k, n = 5, 12
    records = _full_records(rng, n, k, "test")
    order = spread_order(k)
    partial = []
    for i, r in enumerate(records):
        m = 2 if i % 2 else k
        keep = {f"{g}/r{s}" for g in ("fwd", "rev") for s in order[:m]}
        partial.append(dict(r, layouts={name: v for name, v in r["layouts"].items() if name in keep}, adaptive={}))
    calib = _full_records(rng, 10, k, "calib")
    res = evaluate_records(partial + calib, EvaluationOptions(n_boot=1000, prior_min_items=20))  # uniform prior
    for i, r in enumerate(partial):
        names = sorted((n_ for n_ in r["layouts"] if n_.startswith("fwd/")), key=lambda x: int(x.split("/r")[1]))
        lp = np.array([[r["layouts"][n_]["lp"] for n_ in names]])
        orders = np.array([r["layouts"][n_]["order"] for n_ in names])
        expected = marginalise(to_option_space(lp, orders))[0]
        np.testing.assert_allclose(res.point["L0-perm"]["fwd"][i], expected, atol=1e-12)
        np.testing.assert_allclose(res.point["L0"]["fwd"][i], expected, atol=1e-12)  # uniform prior: L0 = L0-perm
    # a batch prior per rotation from the items that read it, pooled profile where too few did
    both = compute_levels(np.array([[r["layouts"][f"fwd/r{s}"]["lp"] for s in range(k)] for r in records]), None,
                          np.array([records[0]["layouts"][f"fwd/r{s}"]["order"] for s in range(k)]), None, ["q"] * n,
                          read_fwd=np.ones((n, k), dtype=bool), options=EvaluationOptions(prior_min_items=3))
    plain = compute_levels(np.array([[r["layouts"][f"fwd/r{s}"]["lp"] for s in range(k)] for r in records]), None,
                           np.array([records[0]["layouts"][f"fwd/r{s}"]["order"] for s in range(k)]), None, ["q"] * n,
                           options=EvaluationOptions(prior_min_items=3))
    np.testing.assert_array_equal(both["L0"]["fwd"], plain["L0"]["fwd"])


# ------------------------------------------------------------------------------------- content-free prior


def test_content_free_prior_mode(qwen3_tokenizer, tmp_path) -> None:
    items = _items(10, 12)[:-1]  # choice items only
    out = tmp_path / "cf.jsonl"
    _run(qwen3_tokenizer, out, items, content_free=True)
    read = read_scores(out)
    records, extras = read.items, read.extras
    probes = [e for e in extras.values() if e["type"] == "content_free"]
    assert sorted(p["probe"] for p in probes) == ["", "N/A", "[MASK]"]  # one question: three probes
    assert all(set(p["layouts"]) == set(records[0]["layouts"]) for p in probes)
    settings = EvaluationOptions(n_boot=1000)
    default = evaluate_records(records, settings, extras=extras)
    cf_mode = evaluate_records(records, EvaluationOptions(n_boot=1000, prior_mode="content_free"), extras=extras)
    assert "L0-cf" in default.levels and "L0-cf" in cf_mode.levels
    np.testing.assert_allclose(cf_mode.point["L0"]["fwd"], default.point["L0-cf"]["fwd"], atol=1e-12)
    assert not np.allclose(default.point["L0"]["fwd"], default.point["L0-cf"]["fwd"])
    # by hand: the prior per layout is the mean of the probes' label probabilities
    test = [r for r in records if r["split"] == "test"]
    names = [f"fwd/r{s}" for s in range(5)]
    prior = np.mean([[np.exp(p["layouts"][n]["lp"]) for n in names] for p in probes], axis=0)
    lp = np.array([[r["layouts"][n]["lp"] for n in names] for r in test])
    orders = np.array([test[0]["layouts"][n]["order"] for n in names])
    expected = marginalise(to_option_space(prior_correct(lp, prior[None], 0.75), orders))
    np.testing.assert_allclose(cf_mode.point["L0"]["fwd"], expected, atol=1e-12)
    # without probes the default cell has no L0-cf and content_free mode names the problem
    plain = tmp_path / "plain.jsonl"
    _run(qwen3_tokenizer, plain, items)
    read = read_scores(plain)
    rec2, ext2 = read.items, read.extras
    assert ext2 == {} and "L0-cf" not in evaluate_records(rec2, settings).levels
    with pytest.raises(Exception, match="content-free probes"):
        evaluate_records(rec2, EvaluationOptions(n_boot=1000, prior_mode="content_free"), extras=ext2)


# ------------------------------------------------------------------------------------------------ plumbing


def test_config_keys_reach_the_score_job() -> None:
    """The scoring keys travel in the score job (through its JSON argument); content-free probes are asked for only
    when the prior mode or a listed level needs them (the default config's jobs are unchanged)."""
    from anyjev.config import check_config_file
    from anyjev.run.cell import ScoreJob
    from anyjev.settings import Settings
    from tests.conftest import DEFAULT_CONFIG

    def job(config) -> ScoreJob:
        built = Settings.from_config(config).score_job("smollm2-135m", "mmlu", models_dir="resources/models",
                                                       server_log="s.log", state_dir="state")
        return ScoreJob.from_json(built.to_json())

    config = check_config_file(DEFAULT_CONFIG)
    default_job = job(config)
    assert default_job.scoring.content_free is False
    assert default_job.scoring.rotations == "full" and default_job.scoring.prompt.option_order == "as_given"
    changed = dict(config, levels=[*config["levels"], "L0-cf"],
                   scoring=dict(config["scoring"], rotations="adaptive", rotations_per_round=3, option_order="canonical"))
    options = job(changed).scoring
    assert options.content_free is True
    assert (options.rotations, options.rotations_per_round, options.prompt.option_order) == ("adaptive", 3, "canonical")
    assert options.target_disagreement == 0.01
    cf_mode = dict(config, evaluation=dict(config["evaluation"], prior_mode="content_free"))
    assert job(cf_mode).scoring.content_free is True
