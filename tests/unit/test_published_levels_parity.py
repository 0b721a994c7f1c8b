"""Our L0 (prior_mode "streaming") equals the published library's L0 (anyjev 0.3.0 ``Decider``, level L0,
default settings: batch prior, strength 0.75, minimum 8, logmean over all rotations) on the same
position-space log-probs fed in the same order, to 1e-9 on every item.

A replay backend returns stored log-probs for the prompts the published Decider renders (Qwen3 tokenizer,
keyed by rendered text), so its own prompt building, label mapping and rotation bookkeeping are exercised.

Differences by design, named here:
* prior key: the published Decider pools the prior per ``Question.key``; we pool per the task's
  ``prior_group`` (``"task"``: one prior over the task; ``"question"``: per question key) and per K. The
  replay gives every item of a cell one published ``Question``, which makes the two partitions equal.
* prior mode: ours defaults to ``"batch"`` (the whole test split, chosen by measurement, docs/metrics.md);
  the published "scored so far" is our ``prior_mode="streaming"`` (``batch_size`` = items per call).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.evaluate import evaluate_records
from tests.conftest import REPO
from tests.published import require_published

MMLU = REPO / "results" / "cells" / "smollm2-135m" / "mmlu" / "scores.jsonl"


@pytest.fixture(scope="module")
def published():
    return require_published()


class ReplayBackend:
    """The published backend protocol, answering from a table {rendered prompt: {label id: log-prob}}."""

    name = "replay"

    def __init__(self, tokenizer, table: dict[str, dict[int, float]]) -> None:
        self.tokenizer, self.table = tokenizer, table

    def next_token_logprobs(self, prompts: list[str], token_ids: list[list[int]]) -> list[np.ndarray]:
        return [np.array([self.table[p][t] for t in ids]) for p, ids in zip(prompts, token_ids, strict=True)]


def replay_table(published, tok, question, states: list[str], records: list[dict]) -> dict[str, dict[int, float]]:
    """Map each (state, rotation) prompt of the published Decider to the stored position-space row."""
    from anyjev_published.calibrate.permute import cyclic_shifts
    from anyjev_published.readout import DEFAULT_SYSTEM, build_prompt, label_ids_for_perm, render_chat_parts, resolve_labels

    perms = [[0, 1], [1, 0]] if question.kind == "noul" else cyclic_shifts(question.k)
    labels, ids = resolve_labels(tok, question)
    table: dict[str, dict[int, float]] = {}
    for state, rec in zip(states, records, strict=True):
        for s, perm in enumerate(perms):
            layout = rec["layouts"][f"fwd/r{s}"]
            assert layout["order"] == list(perm), "our rotation s must show the options the published perm s shows"
            pre, suf = render_chat_parts(tok, build_prompt(state, question, list(perm), DEFAULT_SYSTEM, labels))
            table[pre + suf] = dict(zip(label_ids_for_perm(question, ids, list(perm)), layout["lp"], strict=True))
    assert len(table) == len(records) * len(perms), "every prompt distinct"
    return table


def published_l0(published, tok, question, records: list[dict], per_call: int) -> np.ndarray:
    states = [f"item {r['id']}" for r in records]
    decider = published.Decider(ReplayBackend(tok, replay_table(published, tok, question, states, records)), level="L0")
    probs = []
    for lo in range(0, len(states), per_call):
        probs += [d.probs for d in decider.decide_batch(states[lo:lo + per_call], question)]
    return np.array(probs)


def ours_l0(records: list[dict], batch_size: int) -> np.ndarray:
    ev = evaluate_records(records, EvaluationOptions(prior_mode="streaming", prior_batch_size=batch_size))
    return np.exp(ev.point["L0"]["fwd"])


@pytest.mark.parametrize("per_call", [1, 5])
def test_l0_equals_published_on_stored_mmlu_logprobs(published, qwen3_tokenizer, per_call: int) -> None:
    lines = [json.loads(x) for x in MMLU.read_text().splitlines()]
    records = [r for r in lines if r.get("type") == "item" and r["split"] == "test"]
    assert len(records) == 100 and {r["group"] for r in records} == {"mmlu"}  # prior_group "task"
    question = published.Question.choice("Which answer is correct?", ["first", "second", "third", "fourth"])
    theirs = published_l0(published, qwen3_tokenizer, question, records, per_call)
    ours = ours_l0(records, per_call)
    assert np.abs(ours - theirs).max() <= 1e-9
    # the prior acts (from the 8th item on), so this compares more than the rotation average; and the
    # whole-split prior (our default) is a different number
    batch_ev = evaluate_records(records, EvaluationOptions(prior_mode="batch"))
    assert np.abs(np.exp(batch_ev.point["L0"]["fwd"]) - theirs).max() > 1e-3  # batch mode is not theirs


def test_l0_equals_published_on_noul_phrasings(published, qwen3_tokenizer) -> None:
    rng = np.random.default_rng(0)
    orders = {"fwd": [[0, 1], [1, 0]], "rev": [[1, 0], [0, 1]]}
    records = []
    for i in range(24):
        z = 2.0 * rng.normal(size=2)
        layouts = {}
        for g, ords in orders.items():
            for s, order in enumerate(ords):
                lp = log_softmax(z[order] + np.array([0.8, 0.0]) + 0.2 * rng.normal(size=2))  # bias toward slot 0
                layouts[f"{g}/r{s}"] = {"lp": lp.tolist(), "order": order}
        records.append({"id": f"n{i}", "split": "test", "gold": int(rng.integers(0, 2)), "group": "yn", "k": 2,
                        "layouts": layouts})
    question = published.Question.noul("Is this message urgent?")
    theirs = published_l0(published, qwen3_tokenizer, question, records, per_call=1)
    ours = ours_l0(records, 1)
    assert np.abs(ours - theirs).max() <= 1e-9
