"""Typed decisions: `choice`, `noul` (Yes/No) and `score` (ordered levels), with stable identity keys.

A question is the decision being asked, independent of the item (state) it is asked about and of the
order in which its options are shown. Its identity key hashes what changes the decision's meaning:
kind, text, options in order, scale and centers. A display name is not part of the key.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field

from anyjev.errors import QuestionError
from anyjev.schema import allowed

# The kinds of question: the values a declared hub task's kind may take (the schema's), in a task file as in a config.
KINDS: tuple[str, ...] = allowed("tasks", "*", "hub", "kind")
LETTERS = string.ascii_uppercase
NOUL_OPTIONS = ("Yes", "No")
MAX_CHOICE_OPTIONS = 26
MAX_SCORE_LEVELS = 10


@dataclass(frozen=True)
class Question:
    """One typed decision. Build it with :func:`choice`, :func:`noul` or :func:`score`."""

    kind: str
    text: str
    options: tuple[str, ...]
    scale: tuple[float, float] | None = None
    centers: tuple[float, ...] | None = None
    name: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def k(self) -> int:
        """Number of options (labels)."""
        return len(self.options)

    @property
    def ordered(self) -> bool:
        """Ordered options (score levels) are never permuted."""
        return self.kind == "score"

    def canonical(self) -> dict:
        """The fields that define the decision, in a JSON-ready form (sorted keys when dumped)."""
        return {
            "kind": self.kind,
            "text": self.text,
            "options": list(self.options),
            "scale": list(self.scale) if self.scale is not None else None,
            "centers": list(self.centers) if self.centers is not None else None,
        }

    def key(self) -> str:
        """Stable identity: the first 16 hex digits of SHA-256 over the canonical, sorted-key JSON."""
        blob = json.dumps(self.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def to_dict(self) -> dict:
        d = self.canonical()
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Question:
        """Inverse of :meth:`to_dict`; validation errors name the field."""
        kind = d.get("kind")
        if kind == "noul":
            return noul(d.get("text", ""), name=d.get("name"))
        if kind == "choice":
            return choice(d.get("text", ""), d.get("options", ()), name=d.get("name"))
        if kind == "score":
            return score(
                d.get("text", ""), d.get("options", ()), scale=d.get("scale"), centers=d.get("centers"), name=d.get("name")
            )
        raise QuestionError("kind", kind, f"must be one of {', '.join(KINDS)}")


def validate(q: Question) -> None:
    """Raise :class:`QuestionError` naming the first invalid field."""
    if q.kind not in KINDS:
        raise QuestionError("kind", q.kind, f"must be one of {', '.join(KINDS)}")
    if not isinstance(q.text, str) or not q.text.strip():
        raise QuestionError("text", q.text, "must be a non-empty string")
    opts = q.options
    for i, o in enumerate(opts):
        if not isinstance(o, str) or not o.strip():
            raise QuestionError(f"options[{i}]", o, "options must be non-empty strings")
    seen: dict[str, int] = {}
    for i, o in enumerate(opts):
        norm = o.strip()
        if norm in seen:
            raise QuestionError(f"options[{i}]", o, f"duplicates options[{seen[norm]}]")
        seen[norm] = i
    if q.kind == "noul":
        if tuple(opts) != NOUL_OPTIONS:
            raise QuestionError("options", opts, "a noul question's options are fixed to ('Yes', 'No')")
    elif q.kind == "choice":
        if not 2 <= len(opts) <= MAX_CHOICE_OPTIONS:
            raise QuestionError("options", f"{len(opts)} options", f"choice needs 2..{MAX_CHOICE_OPTIONS} options")
    else:
        if not 2 <= len(opts) <= MAX_SCORE_LEVELS:
            raise QuestionError("options", f"{len(opts)} levels", f"score needs 2..{MAX_SCORE_LEVELS} levels")
        if q.scale is not None:
            if len(q.scale) != 2 or not q.scale[0] < q.scale[1]:
                raise QuestionError("scale", q.scale, "must be (low, high) with low < high")
        if q.centers is not None and len(q.centers) != len(opts):
            raise QuestionError("centers", q.centers, f"needs one center per level ({len(opts)})")
    if q.kind != "score" and (q.scale is not None or q.centers is not None):
        raise QuestionError("scale", q.scale, "only score questions have a scale or centers")


def choice(text: str, options, name: str | None = None) -> Question:
    """A choice among 2–26 distinct, non-empty options (labels A, B, C, ...)."""
    if isinstance(options, str):
        raise QuestionError("options", options, "must be a list of strings, not one string")
    return Question("choice", text, tuple(options), name=name)


def noul(text: str, name: str | None = None) -> Question:
    """A Yes/No question; option 0 means yes."""
    return Question("noul", text, NOUL_OPTIONS, name=name)


def score(text: str, levels, scale=None, centers=None, name: str | None = None) -> Question:
    """2–10 ordered levels (labels 1..K), optionally bins over a numeric ``scale`` (low, high)."""
    if isinstance(levels, str):
        raise QuestionError("options", levels, "must be a list of strings, not one string")
    return Question(
        "score",
        text,
        tuple(levels),
        scale=tuple(float(x) for x in scale) if scale is not None else None,
        centers=tuple(float(x) for x in centers) if centers is not None else None,
        name=name,
    )
