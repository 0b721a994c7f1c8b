"""What prefix reuse needs from the client side, without a server: the scorer sends an item's layouts
adjacently (its first layout, whose shared prefix the cache then holds, before the rest), items in order;
and the /metrics counters it is measured by are parsed and differenced right. The real-server check (hits
and drift) is tests/integration/test_prefix_cache_real.py."""

from __future__ import annotations

import os

import numpy as np
import pytest

from anyjev.data.synthetic import long_state_task
from anyjev.data.tasks import Item
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.decision.questions import choice
from anyjev.errors import BackendError
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.full import score_prepared
from anyjev.run.prepared import prepare_item
from anyjev.serving.metrics import parse_counters


class Recorder:
    """Records every prompt in the order a backend would send it; uniform log-probs."""

    name = "recorder"

    def __init__(self) -> None:
        self.sent: list[tuple[int, ...]] = []

    def label_logprobs(self, prompts, label_ids):
        self.sent.extend(tuple(p) for p in prompts)
        return log_softmax(np.zeros((len(prompts), len(label_ids))))


def test_an_items_layouts_are_sent_adjacently_and_share_its_prefix(smollm2_tokenizer):
    checker = LabelChecker(smollm2_tokenizer)
    q3 = choice("Which colour is the object?", ["red", "green", "blue"])
    q4 = choice("Which shape is it?", ["round", "square", "flat", "long"])  # other label ids: another bucket
    items = [Item(f"i{n}", f"A long description of object number {n}. " * 8, q, 0)
             for n, q in enumerate([q3, q4, q3, q4, q3])]
    prepared = [prepare_item(smollm2_tokenizer, checker, it, "g", PromptOptions()) for it in items]
    backend = Recorder()
    score_prepared(backend, prepared, answer_mass=False)
    position = {ids: i for i, ids in enumerate(backend.sent)}
    assert len(position) == sum(len(p.layouts) for p in prepared), "every layout sent once"
    for p in prepared:
        at = sorted(position[tuple(ids)] for _, ids in p.layouts)
        assert at == list(range(at[0], at[0] + len(at))), f"item {p.item.id}: layouts not adjacent: {at}"
        assert position[tuple(p.layouts[0][1])] == at[0], "the item's first layout goes first"
        shared = os.path.commonprefix([ids for _, ids in p.layouts])
        state_ids = smollm2_tokenizer(p.item.state, add_special_tokens=False)["input_ids"]
        assert len(shared) > len(state_ids), "every layout of an item shares the prefix up to the options"
    # items of one label set go in task order
    starts = [min(position[tuple(ids)] for _, ids in p.layouts) for p in prepared if p.item.question is q3]
    assert starts == sorted(starts)


def test_long_state_task_is_newsgroups_shaped():
    task = long_state_task(6, min_chars=600, max_chars=2000, seed=3)
    assert [it.question.k for it in task.items] == [20] * 6
    lengths = [len(it.state) for it in task.items]
    assert all(500 <= n <= 2000 for n in lengths), lengths
    assert len({it.state for it in task.items}) == 6
    assert [it.state for it in long_state_task(6, min_chars=600, max_chars=2000, seed=3).items] == \
        [it.state for it in task.items], "seeded"


METRICS = """# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 21080.0
vllm:prompt_tokens_total{engine="0",model_name="other"} 5.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 21080.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 14976.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.79e+09
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 30.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 10.0
"""


def test_counters_are_parsed_per_model_and_differenced():
    c = parse_counters(METRICS, "m")
    assert (c.prompt_tokens, c.cache_queries, c.cache_hits, c.requests_ok) == (21080, 21080, 14976, 40)
    assert c.computed_tokens == 21080 - 14976
    assert c.hit_rate == pytest.approx(14976 / 21080)
    assert parse_counters(METRICS).prompt_tokens == 21085, "no model filter: summed over models"
    d = c.minus(parse_counters(METRICS.replace("14976.0", "10000.0"), "m"))
    assert (d.prompt_tokens, d.cache_hits, d.computed_tokens) == (0, 4976, -4976)
    with pytest.raises(BackendError, match="prefix_cache_hits_total"):
        parse_counters(METRICS.replace("vllm:prefix_cache_hits_total", "vllm:other"), "m")
