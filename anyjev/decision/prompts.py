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
import os
from collections.abc import Sequence
from dataclasses import dataclass
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
    """Token ids of each of TEXTS, as :func:`encode` gives them, in one call: a fast tokenizer encodes a batch on
    every core, and pays its per-call overhead once."""
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def prompt_hash(ids: Sequence[int]) -> str:
    """Short identity of a tokenised prompt, stored with every score."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]
