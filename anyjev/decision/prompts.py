"""Prompts, rendered through the model's chat template into token ids, under a named, versioned profile.

A profile is the system message plus the per-kind wording. ``anyjev`` (the default) is this project's
prompt; ``published`` is the published library's (``anyjev==0.3.0``), read at run time from the installed
package (anyjev/decision/published.py) so that its wording is not copied here. The profile's name and
version are part of every cell's identity (:func:`PromptProfile.identity`). The chat template the text goes through
is the model's setting (:class:`ChatTemplate`: the tokenizer's, none, or a Jinja file), recorded there too.

Prompts travel to backends as token ids, so the text whose label tokens were checked is exactly the
text that is scored (no second tokenisation on the server)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from anyjev.decision import published
from anyjev.decision.layouts import Layout
from anyjev.decision.questions import Question
from anyjev.errors import ArgumentError, ConfigError
from anyjev.schema import check_settings, setting

SYSTEM_PROMPT = (
    "You are a decision function. Read the state and the question, then reply with the label of your "
    "answer only: no explanation, no punctuation."
)


def user_message(question: Question, state: str, layout: Layout, labels: Sequence[str]) -> str:
    """The user turn: a State block, the question, then the options in the layout's order."""
    lines = ["State:", state if state.strip() else "(empty)", "", f"Question: {question.text}"]
    if question.kind == "noul":
        lines.append("Answer No or Yes." if layout.swapped else "Answer Yes or No.")
        return "\n".join(lines)
    if question.kind == "score":
        if question.scale is not None:
            lo, hi = question.scale
            lines.append(f"Levels (ordered, over the scale {lo:g} to {hi:g}):")
        else:
            lines.append("Levels (ordered from first to last):")
    else:
        lines.append("Options:")
    for pos, opt_index in enumerate(layout.order):
        lines.append(f"{labels[pos]}. {question.options[opt_index]}")
    digits = question.kind == "score" and labels[0].isdigit()
    lines.append("Answer with the number only." if digits else "Answer with the letter only.")
    return "\n".join(lines)


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


# The values of models.<name>.chat_template that are not a file.
AUTO, NONE = "auto", "none"


@dataclass(frozen=True)
class ChatTemplate:
    """How a prompt's system and user text become the text the model reads (``models.<name>.chat_template``): ``auto``,
    the tokenizer's chat template where it has one; ``none``, the plain prompt (the published method's layout without
    a template); otherwise ``name`` is the path of a Jinja file as configured and ``text`` its content
    (:meth:`read`), which replaces the tokenizer's template."""

    name: str = setting("models", "*", "chat_template")
    text: str | None = None

    def __post_init__(self) -> None:
        check_settings(self)
        if (self.text is None) != (self.name in (AUTO, NONE)):
            raise ValueError(f"chat template {self.name!r}: a file's template needs its text, auto and none take none")

    @classmethod
    def read(cls, name: str, *, key: str, workdir: str | os.PathLike[str] = ".") -> ChatTemplate:
        """The template NAME says: auto, none, or the Jinja file NAME (relative to WORKDIR) read as UTF-8 text. A
        file that is missing, a folder or not text is a ConfigError naming KEY."""
        if name in (AUTO, NONE):
            return cls(name)
        path = Path(workdir) / name
        if path.is_dir():
            raise ConfigError(key, f"{name!r} is a folder: name the Jinja file of the chat template (or auto, none)")
        if not path.is_file():
            raise ConfigError(key, f"{name!r} is neither auto, none nor a file (looked in {path.resolve().parent})")
        try:
            return cls(name, path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(key, f"{name!r} is not UTF-8 text (byte {exc.start}): a chat template is a Jinja file") from None

    @property
    def sha256(self) -> str | None:
        """The file's template's content hash (None for auto and none)."""
        return None if self.text is None else hashlib.sha256(self.text.encode()).hexdigest()

    def identity(self) -> str | dict[str, Any] | None:
        """What a cell's identity records (None for auto, which leaves a default cell's identity as it was): ``none``,
        or the file as configured with its sha256 and text (so an edited file is a new identity, and the prompts can
        be rebuilt from the scores alone)."""
        if self.name == AUTO:
            return None
        if self.text is None:
            return self.name
        return {"file": self.name, "sha256": self.sha256, "text": self.text}

    @classmethod
    def from_identity(cls, recorded: str | dict[str, Any] | None) -> ChatTemplate:
        """The template a cell's identity records (:meth:`identity`); a file's text must still hash to its sha256."""
        if recorded is None:
            return cls()
        if isinstance(recorded, str):
            return cls(recorded)
        template = cls(recorded["file"], recorded["text"])
        if template.sha256 != recorded["sha256"]:
            raise ValueError(f"the chat template {recorded['file']!r} recorded in a cell's identity does not hash to "
                             f"its recorded sha256 {recorded['sha256']}")
        return template

    def applied(self, tokenizer):
        """TOKENIZER as both profiles' renderers see it under this template (None stays None: no tokenizer)."""
        if tokenizer is None or self.name == AUTO:
            return tokenizer
        return _Templated(tokenizer, self)


class _Templated:
    """A tokenizer whose ``chat_template`` is a configured one (None: none) and whose ``apply_chat_template`` renders
    with it; everything else is the tokenizer's. The published library's renderer reads ``chat_template`` and calls
    ``apply_chat_template`` itself, so both profiles go through this."""

    def __init__(self, tokenizer, template: ChatTemplate) -> None:
        self._tokenizer, self._template = tokenizer, template
        self.chat_template = template.text

    def apply_chat_template(self, conversation, **kwargs):
        import jinja2  # transformers' template engine, there whenever transformers renders

        if self.chat_template is None:
            raise TypeError("no chat template: the plain prompt is rendered without one")
        try:
            return self._tokenizer.apply_chat_template(conversation, chat_template=self.chat_template, **kwargs)
        except jinja2.TemplateError as exc:
            line = f", line {exc.lineno}" if getattr(exc, "lineno", None) else ""
            raise ArgumentError(f"chat template {self._template.name!r}{line}",
                                f"{type(exc).__name__}: {exc.message or exc}") from None

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)


@dataclass(frozen=True)
class PromptProfile:
    """A named, versioned prompt wording. ``version`` changes whenever the tokens sent would: it is the one version of
    a prompt, recorded in every cell's identity."""

    name: str
    version: str

    def identity(self) -> dict:
        """The profile as recorded in a cell's identity and provenance."""
        data = {"name": self.name, "version": self.version}
        if self.name == "published":
            data["readout_sha256"] = published.source_sha256()
        return data


# The profiles by name: the values of the config key scoring.prompt_profile (the schema's enum; a test keeps them equal).
PROFILES: dict[str, PromptProfile] = {
    "anyjev": PromptProfile("anyjev", "1"),
    "published": PromptProfile("published", f"anyjev=={published.PUBLISHED_VERSION}"),
}


def render_text(tokenizer, question: Question, state: str, layout: Layout, labels: Sequence[str], profile: PromptProfile,
                template: ChatTemplate) -> str:
    """Chat-template text with the generation prompt appended and thinking off where supported;
    without a template: system, blank line, user text, then ``\\nAnswer:``. PROFILE picks the wording, TEMPLATE the
    chat template (the tokenizer's, none, or a file's). Callers go through
    :meth:`anyjev.decision.options.PromptOptions.render`."""
    tokenizer = template.applied(tokenizer)
    if profile.name == "published":
        return published.render_text(tokenizer, question, state, layout, labels)
    user = user_message(question, state, layout, labels)
    if not has_chat_template(tokenizer):
        return f"{SYSTEM_PROMPT}\n\n{user}\nAnswer:"
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    # Templates that know `enable_thinking` (Qwen3) emit an empty think block; others ignore the kwarg.
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of a rendered prompt; the template already holds any special tokens it wants."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_many(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each of TEXTS, as :func:`encode` gives them (from the ids of their pieces where that is the same:
    :class:`PromptEncoder`)."""
    return [ids for ids, _ in prompt_encoder(tokenizer).encode(texts)]


def prompt_hash(ids: Sequence[int]) -> str:
    """Short identity of a tokenised prompt, stored with every score."""
    return _sha(",".join(map(str, ids)))


def _sha(joined_ids: str) -> str:
    return hashlib.sha256(joined_ids.encode()).hexdigest()[:16]


# The pre-tokenizers after which a text cut right after a newline that has a non-space character on each side
# tokenises as its two halves do: GPT-2's byte-level regex, and the Split regex of Llama 3's and Qwen 2's and 3's
# tokenizers (then a byte-level step without its regex). In each, no match that holds a newline holds a non-space
# character after it, and a match that holds the character before a newline ends there or takes the newline with it,
# whatever follows; a text is matched from left to right without looking behind.
SPLIT_PATTERNS = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False}


def line_pieces(text: str) -> list[str]:
    """TEXT cut between lines: right after each newline that has a non-space character (``str.isspace``: every Unicode
    whitespace character, as the regex ``\\s`` says it) before and after it. The pieces, joined, are TEXT. (What the
    regex split ``(?<=\\S\\n)(?=\\S)`` gives, without trying a pattern at every character: every layout's prompt
    is cut.)"""
    lines = text.split("\n")
    pieces, current = [], lines[0]
    for line in lines[1:]:
        if current and line and not current[-1].isspace() and not line[0].isspace():
            pieces.append(current + "\n")
            current = line
        else:
            current += "\n" + line
    pieces.append(current)
    return pieces


def _state(component) -> dict | None:
    """A `tokenizers` component's settings (its serialised form), None when it has none."""
    return None if component is None else json.loads(component.__getstate__())


def _cuts_like_pieces(backend) -> bool:
    """Whether BACKEND (a `tokenizers` Tokenizer) tokenises a text as the concatenation of its pieces: cut at its added
    tokens (where every such tokenizer cuts a text first) and between lines (:func:`line_pieces`). It must normalise with
    NFC or not at all (a newline is a character NFC never joins to another), pre-tokenise with one of the
    pre-tokenizers of :data:`SPLIT_PATTERNS` without a prefix space, read its pieces with BPE without dropout, and match
    every added token as it is written (not stripping the spaces around it, not only as a whole word, not after
    normalising)."""
    from tokenizers.models import BPE

    if not isinstance(backend.model, BPE) or backend.model.dropout not in (None, 0.0):
        return False
    if _state(backend.normalizer) not in (None, {"type": "NFC"}):
        return False
    pre = _state(backend.pre_tokenizer) or {}
    byte_level = {k: pre.get(k) for k in BYTE_LEVEL} == BYTE_LEVEL
    if not (byte_level and pre.get("use_regex") is True):
        steps = pre.get("pretokenizers") or []
        if pre.get("type") != "Sequence" or len(steps) != 2:
            return False
        split, last = steps
        if (split.get("type"), split.get("pattern"), split.get("behavior"), split.get("invert")) not in [
                ("Split", {"Regex": pattern}, "Isolated", False) for pattern in SPLIT_PATTERNS]:
            return False
        if {k: last.get(k) for k in BYTE_LEVEL} != BYTE_LEVEL or last.get("use_regex") is not False:
            return False
    return all(not (t.lstrip or t.rstrip or t.single_word or t.normalized)
               for t in backend.get_added_tokens_decoder().values())


class PromptEncoder:
    """Token ids of rendered prompts, each as tokenising the whole text gives them (:func:`encode`), and each prompt's
    :func:`prompt_hash`. Where the tokenizer provably tokenises a text as the concatenation of its pieces
    (:func:`_cuts_like_pieces`: the tokenizers of GPT-2, Llama 3, Qwen 2 and 3, SmolLM), a prompt is cut at its added
    tokens and between its lines, and each distinct piece is tokenised once: the layouts of an item share its state's
    lines and its options' lines, every prompt the template's. Any other tokenizer tokenises every whole text."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = backend if backend is not None and _cuts_like_pieces(backend) else None
        self._added = None
        if self._backend is not None:
            added = sorted({t.content for t in self._backend.get_added_tokens_decoder().values()}, key=len, reverse=True)
            # leftmost first, the longest there first: as the tokenizer matches them
            self._added = re.compile("|".join(map(re.escape, added))) if added else None
        self._pieces: dict[str, tuple[list[int], str]] = {}  # piece -> (its ids, the ids joined by ",")

    def _piecewise(self) -> bool:
        """Whether the backend can be called as it is: the settings a transformers call would set for these prompts
        (no truncation, no padding, special tokens read as such) are its own."""
        b = self._backend
        return (b is not None and b.truncation is None and b.padding is None and not b.encode_special_tokens
                and not getattr(self.tokenizer, "split_special_tokens", False))

    def _cut(self, text: str) -> list[str]:
        pieces, start = [], 0
        for m in self._added.finditer(text) if self._added is not None else ():
            pieces += line_pieces(text[start:m.start()])
            pieces.append(m.group())
            start = m.end()
        pieces += line_pieces(text[start:])
        return [p for p in pieces if p]

    def encode(self, texts: Sequence[str]) -> list[tuple[list[int], str]]:
        """Each text's token ids and prompt hash."""
        if not texts:
            return []
        if not self._piecewise():
            encoded = [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
            return [(ids, prompt_hash(ids)) for ids in encoded]
        cut = [self._cut(text) for text in texts]
        known = self._pieces
        new = [p for p in dict.fromkeys(chain.from_iterable(cut)) if p not in known]
        if new:
            for piece, encoding in zip(new, self._backend.encode_batch_fast(new, add_special_tokens=False), strict=True):
                ids = encoding.ids
                known[piece] = (ids, ",".join(map(str, ids)))
        out = []
        for pieces in cut:
            entries = [known[p] for p in pieces]
            ids = list(chain.from_iterable([piece_ids for piece_ids, _ in entries]))
            out.append((ids, _sha(",".join([joined for piece_ids, joined in entries if piece_ids]))))
        return out


_ENCODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prompt_encoder(tokenizer) -> PromptEncoder:
    """TOKENIZER's one :class:`PromptEncoder` (its pieces' ids kept while the tokenizer lives)."""
    encoder = _ENCODERS.get(tokenizer)
    if encoder is None:
        encoder = _ENCODERS[tokenizer] = PromptEncoder(tokenizer)
    return encoder
