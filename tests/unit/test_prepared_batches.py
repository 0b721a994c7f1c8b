"""A task's prompts are tokenised in batches (anyjev/run/prepared.py): every layout's ids must be what tokenising its
prompt alone gives, in the item's own order, whatever the batch boundaries; and a label that fails in context fails
the same item, with or without batching."""

from __future__ import annotations

import pytest

from anyjev.data.tasks import Item
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import encode, prompt_hash
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import LabelTokenError
from anyjev.run import prepared as prepared_module
from anyjev.run.prepared import prepare_item, prepare_items

STATES = ["A red apple on the table.", "The sky at noon, cloudless and wide.", "WIN A FREE PHONE NOW!!!",
          "The report was long.\n\nIt had two parts.", "Short."]


def mixed_items() -> list[Item]:
    """Choice questions of K 2 to 6, Yes/No, and a 10-level score (two-digit labels: it falls back to letters)."""
    items = []
    for i, state in enumerate(STATES * 3):
        k = 2 + i % 5
        if i % 4 == 1:
            q = noul("Is this about food?")
        elif i % 7 == 3:
            q = score("How long is the text?", [f"level {n}" for n in range(1, 11)])
        else:
            q = choice("Which colour fits best?", ["red", "blue", "green", "amber", "violet", "grey"][:k])
        items.append(Item(f"i{i:02d}", state, q, 0))
    return items


class Counting:
    """A prompt encoder that records how many texts each call hands it."""

    def __init__(self, encoder, calls: list[int]) -> None:
        self.encoder, self.calls = encoder, calls

    def encode(self, texts):
        self.calls.append(len(texts))
        return self.encoder.encode(texts)


@pytest.mark.parametrize("batch_texts", [1, 5, 7, 2048])
def test_batched_prompts_equal_each_prompt_tokenised_alone(smollm2_tokenizer, monkeypatch, batch_texts: int) -> None:
    monkeypatch.setattr(prepared_module, "BATCH_TEXTS", batch_texts)
    calls = []
    real = prepared_module.prompt_encoder
    monkeypatch.setattr(prepared_module, "prompt_encoder", lambda tok: Counting(real(tok), calls))
    items = mixed_items()
    options = PromptOptions()
    groups = [f"g{i % 3}" for i in range(len(items))]
    got = prepare_items(smollm2_tokenizer, items, groups, options)
    batches = list(calls)

    assert [(p.item.id, p.group) for p in got] == [(it.id, g) for it, g in zip(items, groups, strict=True)]
    assert any(p.label_kind == "letters" for p in got), "the score item should fall back to letters"
    for p in got:
        assert [layout.name for layout, _ in p.layouts] == [
            lay.name for group in options.layouts(p.item.question).values() for lay in group]
        for layout, ids in p.layouts:
            text = options.render(smollm2_tokenizer, p.item.question, p.item.state, layout, p.labels)
            assert ids == encode(smollm2_tokenizer, text), (p.item.id, layout.name)
        assert p.prompt_shas == [prompt_hash(ids) for _, ids in p.layouts]
        assert p == prepare_item(smollm2_tokenizer, LabelChecker(smollm2_tokenizer), p.item, p.group, options)
    # Batches hold whole items, and each call but the last reaches the limit.
    assert sum(batches) == sum(len(p.layouts) for p in got)
    assert all(n >= batch_texts for n in batches[:-1])
    if batch_texts == 1:
        assert len(batches) == len(items)
    if batch_texts == 2048:
        assert len(batches) == 1


def test_a_label_that_fails_in_context_names_its_item_before_anything_is_tokenised(smollm2_tokenizer, monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(prepared_module, "prompt_encoder", lambda tok: Counting(None, calls))
    bad = Item("bad", "State.", choice("Which?", ["x", "y"]), 0)
    monkeypatch.setattr(LabelChecker, "ids", lambda self, text, labels: (_ for _ in ()).throw(
        LabelTokenError("label 'A' is not one token here", missing_ids=[32])))
    with pytest.raises(LabelTokenError, match=r"item 'bad'.*label 'A' is not one token here") as exc:
        prepare_items(smollm2_tokenizer, [bad], ["g"], PromptOptions())
    assert calls == []
    assert exc.value.missing_ids == [32]
