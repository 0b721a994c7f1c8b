"""What a cell reads (:class:`ScoringOptions`, the config's ``scoring.*``) and the identity it is recorded under: a
checkpoint made under another identity (another prompt, another stopping rule, without answer mass) is never resumed,
and a finished cell is not scored again under the same one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anyjev.decision.options import PromptOptions
from anyjev.run.adaptive import rule_identity
from anyjev.run.probes import CONTENT_FREE_PROBES
from anyjev.schema import check_settings, default, setting

# The "prompt_version" every cell's identity has carried since before prompt profiles, kept as it was so that the scores
# made since are still recognised. A prompt's version is its profile's (PromptProfile.version, in "prompt_profile").
RECORDED_PROMPT_FIELD = {"prompt_version": "1.1"}


@dataclass(frozen=True)
class ScoringOptions:
    """What every cell asks the model and records per item: how its prompts are made (``prompt``), whether each item
    also reads its answer mass, full or adaptive rotations (with the stopping rule's target, confidence and round
    size), how many test items the batch audit reads again (:mod:`anyjev.run.audit`), and whether the content-free
    probes are read too (the evaluation's prior mode or levels need them)."""

    prompt: PromptOptions = field(default_factory=PromptOptions)
    answer_mass: bool = setting("scoring", "answer_mass")
    rotations: str = setting("scoring", "rotations")
    target_disagreement: float = setting("scoring", "target_disagreement")
    confidence: float = setting("scoring", "confidence")
    rotations_per_round: int = setting("scoring", "rotations_per_round")
    audit: int = setting("scoring", "audit")
    content_free: bool = False

    def __post_init__(self) -> None:
        check_settings(self)


def scoring_identity(options: ScoringOptions) -> dict[str, Any]:
    """The identity fragment for how prompts are made and what each record holds; merge it into the cell's identity.

    Settings at their defaults add nothing (a default cell's identity is what it always was); adaptive rotations add
    every setting the stopping rule depends on, so a changed target is never resumed."""
    out: dict[str, Any] = {**RECORDED_PROMPT_FIELD, **options.prompt.identity(),
                           "answer_mass": bool(options.answer_mass)}
    if options.rotations == "adaptive":
        out["rotations"] = rule_identity(options.target_disagreement, options.confidence, options.rotations_per_round)
    if options.content_free:
        out["content_free"] = list(CONTENT_FREE_PROBES)
    if options.audit != default("scoring", "audit"):  # the audit's own record changes, not the items'
        out["audit"] = options.audit
    return out
