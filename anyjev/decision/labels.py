"""Label tokens, checked in the context where the model emits them.

"A" being one token in isolation says little about what follows ``<|im_start|>assistant\\n``: BPE merges
across the boundary can turn the label into another id, or into several. So each label is appended to
the rendered prompt and must add exactly one token id, leaving the prompt's own ids untouched, and the
K ids must be distinct."""

from __future__ import annotations

import re
from collections.abc import Sequence

from anyjev.decision.questions import LETTERS, MAX_CHOICE_OPTIONS, Question
from anyjev.errors import ConfigError, LabelTokenError

# Checking depends only on how the text just before the label tokenises; the template's end (the
# generation prompt) is the same for every prompt, so results are cached on the prompt's tail.
_TAIL_CHARS = 64


def check_label_capacity(task: str, k: int, max_logprobs: int, item: str | None = None) -> None:
    """Before any server starts: a request reads all K label log-probs at once, so K must fit in
    ``server.max_logprobs``; past the 26 letters no setting helps, and that is said first."""
    which = f"item {item!r}" if item is not None else "items"
    if k > MAX_CHOICE_OPTIONS:
        raise ConfigError(f"tasks.{task}", f"{which} with {k} options: a choice has at most {MAX_CHOICE_OPTIONS} "
                          f"(labels A-Z); split the item's options into questions of at most {MAX_CHOICE_OPTIONS}")
    if k > max_logprobs:
        raise ConfigError("server.max_logprobs", f"is {max_logprobs}, but task {task!r} has {which} with {k} options: "
                          f"a request reads every label's log-prob at once; set it >= {k}")


def label_strings(question: Question, kind: str = "default") -> list[str]:
    """Letters for choice, Yes/No for noul, digits 1..K for score (or letters when ``kind='letters'``)."""
    if question.kind == "noul":
        return ["Yes", "No"]
    if question.kind == "score" and kind != "letters":
        return [str(i + 1) for i in range(question.k)]
    return list(LETTERS[: question.k])


def _decode(tokenizer, ids: Sequence[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def check_in_context(tokenizer, prompt_text: str, labels: Sequence[str]) -> list[int]:
    """Return the label ids after ``prompt_text`` or raise :class:`LabelTokenError` naming every
    offending label, the ids it tokenises to there, and the label it collides with."""
    base = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    ids: list[int | None] = []
    problems: list[str] = []
    for label in labels:
        full = tokenizer(prompt_text + label, add_special_tokens=False)["input_ids"]
        added = full[len(base) :] if full[: len(base)] == base else None
        if added is None:
            tail = full[max(0, len(base) - 2) :]
            problems.append(
                f"label {label!r} merges with the end of the prompt (prompt + label ends in ids {tail} = "
                f"{_decode(tokenizer, tail)})"
            )
            ids.append(None)
        elif len(added) != 1:
            problems.append(f"label {label!r} is {len(added)} tokens after the prompt: ids {added} = {_decode(tokenizer, added)}")
            ids.append(None)
        else:
            ids.append(added[0])
    seen: dict[int, str] = {}
    for label, tid in zip(labels, ids, strict=True):
        if tid is None:
            continue
        if tid in seen:
            problems.append(f"label {label!r} collides with label {seen[tid]!r} on token id {tid}")
        else:
            seen[tid] = label
    if problems:
        raise LabelTokenError(
            "labels are not single, distinct tokens in context: " + "; ".join(problems),
            missing_ids=[],
        )
    return [int(t) for t in ids]  # type: ignore[arg-type]


def split_tokens(tokenizer) -> re.Pattern[str] | None:
    """The added tokens a `tokenizers` tokenizer cuts every text at before it normalises or pre-tokenises anything,
    as one pattern (None: not such a tokenizer, or none). The ids of the text after such a token do not depend on the
    text before it. Left out: a token matched only as a whole word or after normalisation (its match depends on what
    is around it), and special tokens where the tokenizer is told to split them as text (``split_special_tokens``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    added = getattr(backend, "get_added_tokens_decoder", None)
    if added is None:
        return None
    split_special = bool(getattr(tokenizer, "split_special_tokens", False) or getattr(backend, "encode_special_tokens", False))
    tokens = sorted({t.content for t in added().values()
                     if t.content and not t.single_word and not t.normalized and not (t.special and split_special)},
                    key=len, reverse=True)
    return re.compile("|".join(map(re.escape, tokens))) if tokens else None


class LabelChecker:
    """Caches in-context checks per (prompt tail, labels) for one tokenizer. The tail is the text from the last added
    token (:func:`split_tokens`) in the prompt's last characters, after which the ids cannot depend on the text before
    it: a chat template's generation prompt (``<|im_start|>assistant\n``), the same for every prompt, is checked once.
    A prompt without one there (no chat template) is cached on its last characters."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._split = split_tokens(tokenizer)
        self._cache: dict[tuple[str, tuple[str, ...]], list[int] | LabelTokenError] = {}

    def tail(self, prompt_text: str) -> str:
        """What the label ids after PROMPT_TEXT are cached on."""
        tail = prompt_text[-_TAIL_CHARS:]
        if self._split is not None:
            last = None
            for last in self._split.finditer(tail):  # noqa: B007 - the last match is the one kept
                pass
            if last is not None:
                return tail[last.start():]
        return tail

    def ids(self, prompt_text: str, labels: Sequence[str]) -> list[int]:
        key = (self.tail(prompt_text), tuple(labels))
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = check_in_context(self.tokenizer, prompt_text, labels)
            except LabelTokenError as exc:
                hit = exc
            self._cache[key] = hit
        if isinstance(hit, LabelTokenError):
            raise hit
        return hit
