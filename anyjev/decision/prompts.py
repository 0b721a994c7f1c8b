"""Prompts, rendered through the model's chat template into token ids, under a named, versioned profile.

A profile is the system message plus the per-kind wording. ``anyjev`` (the default) is this project's
prompt; ``published`` is the published library's (``anyjev==0.3.0``), read at run time from the installed
package (anyjev/decision/published.py) so that its wording is not copied here. The profile's name and
version are part of every cell's identity (:func:`PromptProfile.identity`).

Prompts travel to backends as token ids, so the text whose label tokens were checked is exactly the
text that is scored (no second tokenisation on the server)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from anyjev.decision import published
from anyjev.decision.layouts import Layout
from anyjev.decision.questions import Question

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


def render_text(tokenizer, question: Question, state: str, layout: Layout, labels: Sequence[str], profile: PromptProfile) -> str:
    """Chat-template text with the generation prompt appended and thinking off where supported;
    without a template: system, blank line, user text, then ``\\nAnswer:``. PROFILE picks the wording. Callers go
    through :meth:`anyjev.decision.options.PromptOptions.render`."""
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
