"""Everything that shapes a prompt, in one object: every path that renders a prompt (scoring, the context check,
``anyjev plan``, ``anyjev show``, ``anyjev export-prompts``) goes through the same :class:`PromptOptions`, so none of
them can render a prompt other than the one that was scored."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from anyjev.decision.layouts import Layout, layouts_for
from anyjev.decision.prompts import PROFILES, ChatTemplate, PromptProfile, render_text
from anyjev.decision.questions import Question
from anyjev.schema import check_settings, default, setting

# A cell scored before profiles and option orders existed used this project's prompt and the given order.
LEGACY_PROFILE = "anyjev"


@dataclass(frozen=True)
class PromptOptions:
    """The wording (``prompt_profile``), the listing the rotations start from (``option_order``), which layouts
    an item is shown in: every cyclic rotation of its options (``permute``; L0's average) and the reversed listing
    (``flip``; the order-flip probe), and the chat template the text goes through (``chat_template``). The first two
    are the config's ``scoring.*`` keys, the last the model's ``models.<name>.chat_template``; the workflow always
    shows every rotation of both listings."""

    prompt_profile: str = setting("scoring", "prompt_profile")
    option_order: str = setting("scoring", "option_order")
    permute: bool = True
    flip: bool = True
    chat_template: ChatTemplate = field(default_factory=ChatTemplate)

    def __post_init__(self) -> None:
        check_settings(self)

    @property
    def profile(self) -> PromptProfile:
        return PROFILES[self.prompt_profile]

    def layouts(self, question: Question) -> dict[str, list[Layout]]:
        """The layouts an item of QUESTION is shown in, by group (``fwd``, ``rev``)."""
        return layouts_for(question, permute=self.permute, flip=self.flip, option_order=self.option_order)

    def render(self, tokenizer, question: Question, state: str, layout: Layout, labels: Sequence[str]) -> str:
        """The exact prompt text of one layout (chat template applied, generation prompt appended); without a
        TOKENIZER (None), the profile's text without a chat template (what ``anyjev plan`` compares when the model's
        tokenizer is not prepared)."""
        return render_text(tokenizer, question, state, layout, labels, self.profile, self.chat_template)

    def identity(self) -> dict[str, Any]:
        """What a cell's identity records of how its prompts were made (so a checkpoint made otherwise is not
        resumed, and ``anyjev export-prompts`` can rebuild them: :meth:`from_identity`)."""
        out: dict[str, Any] = {"prompt_profile": self.profile.identity(), "layouts": {"permute": self.permute, "flip": self.flip}}
        if self.option_order != default("scoring", "option_order"):  # a default cell's identity is what it always was
            out["option_order"] = self.option_order
        if (template := self.chat_template.identity()) is not None:  # likewise: auto records nothing
            out["chat_template"] = template
        return out

    @classmethod
    def from_identity(cls, identity: dict[str, Any]) -> PromptOptions:
        """The options a scored cell's prompts were made with, read back from its identity (an option order or chat
        template it does not record is the default, which :meth:`identity` leaves out)."""
        layouts = identity.get("layouts") or {}
        recorded = {"option_order": identity["option_order"]} if "option_order" in identity else {}
        return cls(prompt_profile=(identity.get("prompt_profile") or {}).get("name", LEGACY_PROFILE),
                   permute=layouts.get("permute", True), flip=layouts.get("flip", True),
                   chat_template=ChatTemplate.from_identity(identity.get("chat_template")), **recorded)
