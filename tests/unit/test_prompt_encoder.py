"""anyjev/decision/prompts.py's PromptEncoder: a prompt tokenised from the ids of its pieces (cut at added tokens and
between lines) must be exactly what tokenising the whole text gives, on the real SmolLM2 (GPT-2's byte-level regex)
and Qwen3 (NFC and the Llama 3 / Qwen split regex) tokenizers, for the texts a prompt holds and for texts made to
break it (spaces around newlines, CR LF, blank lines, combining marks, other Unicode spaces, added tokens in the
state); a tokenizer it cannot prove that for is tokenised whole."""

from __future__ import annotations

import copy
import random
import sys
import unicodedata

import pytest

from anyjev.data.tasks import Item
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import PromptEncoder, encode, prompt_hash
from anyjev.decision.questions import choice, noul
from anyjev.run.prepared import prepare_items

# Characters around which a cut could go wrong: every kind of space and line break, combining marks, digits,
# apostrophes of contractions, punctuation, letters of other scripts, an emoji, and a chat template's added tokens.
ALPHABET = ["\n", "\n", "\n", " ", " ", "\t", "\r", "\r\n", "\u00a0", "\u2028", "\u3000", "\u0301", "\u0308", "e",
            "E", "ß", "é", "日本", "ع", "1", "23", "'s", "'t", ".", "!!", "-", "—", "“", "🙂", "<|im_start|>",
            "<|im_end|>", "user", "assistant", "A. ", "Answer", "x" * 30]


def random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60))) for _ in range(n)]


def prompts(tokenizer) -> list[str]:
    """The layouts of items whose states and options hold what a cut must survive."""
    states = ["Line one.\nLine two  \n\nLine four\r\nend", "\u0301 starts with a mark\n\u0301 and so does this line",
              "ends with a space \n", "<|im_start|>user\nnot a turn<|im_end|>\n", "\u00a0\nnbsp\u00a0\n\u00a0", ""]
    questions = [choice("Which one?\nPick one.", ["first  ", " second", "third\nline", "4th"]), noul("Is it so?")]
    options = PromptOptions()
    out = []
    for state in states:
        for q in questions:
            labels = ["Yes", "No"] if q.kind == "noul" else list("ABCD")
            out += [options.render(tokenizer, q, state, lay, labels) for g in options.layouts(q).values() for lay in g]
    return out


@pytest.fixture(scope="module", params=["smollm2", "qwen3"])
def tokenizer(request, smollm2_tokenizer, qwen3_tokenizer):
    return {"smollm2": smollm2_tokenizer, "qwen3": qwen3_tokenizer}[request.param]


def test_pieces_give_what_the_whole_text_gives(tokenizer) -> None:
    encoder = PromptEncoder(tokenizer)
    assert encoder._piecewise(), "this tokenizer is one the encoder cuts into pieces"
    texts = prompts(tokenizer) + random_texts(3000)
    got = encoder.encode(texts)
    assert len(encoder._pieces) < sum(len(t) for t in texts) / 10  # pieces, each tokenised once
    for text, (ids, sha) in zip(texts, got, strict=True):
        assert ids == encode(tokenizer, text), repr(text)
        assert sha == prompt_hash(ids)


def test_a_prepared_cell_is_tokenised_from_pieces(tokenizer) -> None:
    items = [Item(f"i{n}", f"State {n}.\nSecond line {n}.", choice("Which?", ["red", "green", "blue"]), 0)
             for n in range(20)]
    encoder = PromptEncoder(tokenizer)
    for p in prepare_items(tokenizer, items, ["g"] * len(items), PromptOptions()):
        texts = [PromptOptions().render(tokenizer, p.item.question, p.item.state, lay, p.labels) for lay, _ in p.layouts]
        assert [ids for _, ids in p.layouts] == [ids for ids, _ in encoder.encode(texts)]
        assert [ids for _, ids in p.layouts] == [encode(tokenizer, t) for t in texts]


def test_nfc_never_turns_a_character_that_is_not_a_space_into_one() -> None:
    """The cut between lines needs a non-space character on each side after NFC too (Qwen3 normalises with it)."""
    for code in range(sys.maxunicode + 1):
        c = chr(code)
        if 0xD800 <= code < 0xE000 or c.isspace() or not unicodedata.decomposition(c):
            continue
        assert not any(ch.isspace() for ch in unicodedata.normalize("NFC", c)), hex(code)


def test_other_tokenizers_are_tokenised_whole(smollm2_tokenizer) -> None:
    from tokenizers import pre_tokenizers

    texts = prompts(smollm2_tokenizer)[:8] + random_texts(200, seed=1)
    prefixed = copy.deepcopy(smollm2_tokenizer)  # a prefix space before every piece would not be one before the text
    prefixed.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    metaspace = copy.deepcopy(smollm2_tokenizer)
    metaspace.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    for tok in (prefixed, metaspace):
        encoder = PromptEncoder(tok)
        assert not encoder._piecewise()
        assert [ids for ids, _ in encoder.encode(texts)] == [encode(tok, t) for t in texts]
    truncating = copy.deepcopy(smollm2_tokenizer)  # a truncation the tokenizer's file sets: a call of ours sets none
    truncating.backend_tokenizer.enable_truncation(8)
    assert [ids for ids, _ in PromptEncoder(truncating).encode(texts)] == [encode(smollm2_tokenizer, t) for t in texts]


def test_line_pieces_cut_where_the_line_regex_cuts() -> None:
    """The cut between lines is the regex split ``(?<=\\S\\n)(?=\\S)`` (Python's \\s: every Unicode whitespace
    character), done without the regex: on texts made of every kind of space, line break and mark."""
    import re

    from anyjev.decision.prompts import line_pieces

    regex = re.compile(r"(?<=\S\n)(?=\S)")
    texts = random_texts(3000, seed=5) + ["", "\n", "a\nb", "\na\nb\n", "a \nb", "a\n b", "a\n\nb", "a\u2028\nb\u00a0"]
    for text in texts:
        assert line_pieces(text) == regex.split(text), repr(text)
