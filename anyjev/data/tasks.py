"""Tasks: labelled items (a state, a typed question about it, the gold option), how the batch label prior is
grouped, and where the data came from. A task is stored in one plain file format (:mod:`anyjev.data.taskfile`) and
split into test and calibration items by :mod:`anyjev.data.split`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from anyjev.decision.questions import Question
from anyjev.errors import TaskDataError

SPLITS = ("test", "calib")
PRIOR_GROUPS = ("question", "task")
# Every character str.splitlines() breaks on: inside an option it would start a fake prompt line.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile("[" + re.escape(LINE_BREAKS) + "]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Item:
    """One labelled decision: the state shown to the model, the question, the gold option index."""

    id: str
    state: str
    question: Question
    gold: int
    split: str | None = None


@dataclass
class Task:
    """A named list of items (one K, or mixed K), with its prior grouping and provenance."""

    name: str
    items: list[Item]
    prior_group: str = "question"
    source: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def _where(self) -> str:
        if self.source.get("path"):
            return str(self.source["path"])
        if self.source.get("package"):  # a built-in task: the data file inside its package
            return f"{self.source['package']}:{self.source.get('file')}"
        return f"<task {self.name}>"

    def validate(self) -> None:
        """Check the invariants later stages rely on; raise TaskDataError naming the item id."""
        where = self._where()
        if not isinstance(self.name, str) or not self.name:
            raise TaskDataError(where, "task", f"task name must be a non-empty string, got {self.name!r}")
        if self.prior_group not in PRIOR_GROUPS:
            raise TaskDataError(where, "task", f"prior_group {self.prior_group!r} must be one of {PRIOR_GROUPS}")
        if not self.items:
            raise TaskDataError(where, "task", f"task {self.name!r} has no items")
        seen: set[str] = set()
        for it in self.items:
            if not isinstance(it, Item):
                raise TaskDataError(where, "task", f"items must be Item, got {type(it).__name__}")
            if it.id in seen:
                raise TaskDataError(where, f"item {it.id}", "duplicate item id")
            seen.add(it.id)
            if not isinstance(it.state, str):
                raise TaskDataError(where, f"item {it.id}", f"state must be a string, got {type(it.state).__name__}")
            problem = surrogate_problem(_item_strings(it)) or option_line_break(it.question.options)
            if problem:
                raise TaskDataError(where, f"item {ascii(it.id)}", problem)
            if isinstance(it.gold, bool) or not isinstance(it.gold, int) or not 0 <= it.gold < it.question.k:
                raise TaskDataError(where, f"item {it.id}", f"gold {it.gold!r} is not an option index 0..{it.question.k - 1}")
            if it.split is not None and it.split not in SPLITS:
                raise TaskDataError(where, f"item {it.id}", f"split {it.split!r} must be one of {SPLITS} or None")

    @property
    def k_range(self) -> tuple[int, int]:
        """Smallest and largest number of options over the items (equal unless K is mixed)."""
        ks = [it.question.k for it in self.items]
        return min(ks), max(ks)

    @property
    def k(self) -> int | str:
        """The number of options K, or ``"mixed (lo-hi)"`` when items differ (evaluation groups them by K)."""
        lo, hi = self.k_range
        return lo if lo == hi else f"mixed ({lo}-{hi})"

    def prior_groups(self) -> list[str]:
        """Per item, the key the batch label prior is pooled over (question key, or the task name)."""
        if self.prior_group == "task":
            return [self.name] * len(self.items)
        return [it.question.key() for it in self.items]


# ---------------------------------------------------------------------------------------------------
# strings a prompt or a UTF-8 file cannot hold


def json_strings(value: object, field: str = "") -> Iterator[tuple[str, str]]:
    """(what, string) for every string in a parsed JSON value, object keys included; ``what`` names
    the field as a user finds it (``field 'options[1]'``, ``key '...' of 'origin'``)."""
    if isinstance(value, str):
        yield f"field {field!r}", value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield f"key {ascii(k)}" + (f" of {field!r}" if field else ""), k
            yield from json_strings(v, f"{field}.{k}" if field else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_strings(v, f"{field}[{i}]")


def _item_strings(item: Item) -> Iterator[tuple[str, str]]:
    q = item.question
    yield "field 'id'", item.id
    yield "field 'state'", item.state
    yield "field 'question'", q.text
    for i, o in enumerate(q.options):
        yield f"field 'options[{i}]'", o
    if q.name is not None:
        yield "field 'name'", q.name


def surrogate_problem(strings: Iterator[tuple[str, str]]) -> str | None:
    """Why the first string holding a lone surrogate cannot be used (it cannot be encoded as UTF-8)."""
    for what, text in strings:
        m = _SURROGATE.search(text)
        if m:
            return (
                f"{what} holds a lone UTF-16 surrogate {ascii(m.group())} at character {m.start()} "
                f"(around {ascii(text[max(0, m.start() - 20) : m.start() + 20])}): it is half of a surrogate pair, "
                "not a character, and cannot be written as UTF-8. Write the character itself, or both halves "
                "of its pair (in JSON, e.g. \\ud83d\\ude00 for U+1F600)"
            )
    return None


def option_line_break(options: Sequence[str]) -> str | None:
    """Why an option holding a line break cannot be shown: each option is one prompt line."""
    for i, o in enumerate(options):
        m = _LINE_BREAK.search(o)
        if m:
            return (
                f"field 'options[{i}]' = {ascii(o)} holds a line break ({ascii(m.group())}): each option is shown on "
                "its own prompt line, so the rest would read as another line of the prompt (a fake option). "
                "Put each option on one line (replace the line break with a space)"
            )
    return None
