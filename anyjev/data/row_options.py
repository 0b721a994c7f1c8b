"""A declared hub task whose rows give their own options (``tasks.<name>.hub.options_field``): each row becomes a
choice among its options, its gold read from ``label_field`` as ``gold`` says.

The options are a list of strings at ``options_field`` (a column, or a path into a nested one: ARC's
``choices.text``); rows may differ in their number of options (2-26). The gold is the option's 0-based ``index`` (an
integer or a string of digits, HellaSwag's ``"0"``), its ``letter`` (A first), one of the row's own ``option_label``s
(``option_labels_field``: ARC's ``choices.label`` against ``answerKey``), ``marks`` (a 0/1 list with one 1:
TruthfulQA's ``mc1_targets.labels``), or the option ``text`` itself. The question is ``question`` or the row's
``question_field``; the state ``text_field``, ``text_template`` or empty.

Every error is one line naming the cached file and line, the task, the row (its item id) and the declaration key. A
row whose options cannot make a choice question (too few or too many, an empty or repeated option, a line break) is
an error, or with ``invalid_options: drop`` left out and listed; a gold that is not among the row's options is always
an error (the declaration reads the wrong column, or the data is wrong).
"""

from __future__ import annotations

from typing import Any

from anyjev.data.declared import HubTaskDeclaration, template_fields
from anyjev.data.hub_items import (
    CachedSplit,
    column_value,
    item_split,
    not_whole,
    option_shown,
    row_question,
    row_state,
    row_who,
    whole_number,
)
from anyjev.data.tasks import Item, option_line_break
from anyjev.decision.questions import MAX_CHOICE_OPTIONS, choice
from anyjev.errors import QuestionError, TaskDataError


class _RowError(Exception):
    """What is wrong with one value of a row, and the declaration key that names it."""

    def __init__(self, key: str, why: str) -> None:
        self.key = key
        super().__init__(why)


def _value(row: dict, d: HubTaskDeclaration, key: str) -> Any:
    try:
        return column_value(row, getattr(d, key))
    except LookupError as exc:
        raise _RowError(key, str(exc)) from None


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _RowError(key, f"{value!r:.80} is not a list of strings")
    return value


def _gold(d: HubTaskDeclaration, row: dict, options: list[str]) -> int:
    """The index of the row's correct option, read from label_field as d.gold_format says."""
    k, how = len(options), d.gold_format
    value = _value(row, d, "label_field")
    if how == "index":
        value = whole_number(value)
        if isinstance(value, float):
            raise _RowError("label_field", f"{value!r} is {not_whole(value)}, not an option index")
        digits = isinstance(value, str) and value.strip().isdigit()
        if isinstance(value, bool) or not (isinstance(value, int) or digits):
            raise _RowError("label_field", f"{value!r:.80} is not an option index (an integer, or a string of digits)")
        if not 0 <= int(value) < k:
            raise _RowError("label_field", f"index {int(value)} is not among the row's {k} options (0-{k - 1})")
        return int(value)
    if how == "letter":
        letter = value.strip() if isinstance(value, str) else None
        if letter is None or len(letter) != 1 or not "A" <= letter <= chr(ord("A") + k - 1):
            raise _RowError("label_field", f"{value!r:.80} is not the letter of one of the row's {k} options "
                            f"(A-{chr(ord('A') + k - 1)})")
        return ord(letter) - ord("A")
    if how == "option_label":
        labels = _value(row, d, "option_labels_field")
        if not isinstance(labels, list) or len(labels) != k:
            count = f"{len(labels)} labels" if isinstance(labels, list) else f"{labels!r:.80}, not a list of labels,"
            raise _RowError("option_labels_field", f"{count} for the row's {k} options")
        if len(set(map(str, labels))) != k:
            raise _RowError("option_labels_field", f"{labels!r:.120} repeats a label")
        if isinstance(value, bool) or str(value) not in map(str, labels):
            raise _RowError("label_field", f"{value!r:.80} is not among the row's option labels {labels!r:.120} "
                            f"(hub.option_labels_field {d.option_labels_field!r})")
        return [str(x) for x in labels].index(str(value))
    if how == "marks":
        if not isinstance(value, list) or len(value) != k or not all(v in (0, 1) for v in value):
            raise _RowError("label_field", f"{value!r:.80} is not a list of 0/1 marks, one per option ({k})")
        if sum(value) != 1:
            raise _RowError("label_field", f"{value!r:.80} marks {sum(value)} options: marks hold exactly one 1 (the "
                            "correct option)")
        return list(value).index(1)
    if not isinstance(value, str) or value not in options:
        raise _RowError("label_field", f"{value!r:.80} is not among the row's options {options!r:.160}")
    return options.index(value)


def _invalid(options: list[str]) -> str | None:
    """Why a row's options (as shown) cannot be a choice question, or None."""
    if not 2 <= len(options) <= MAX_CHOICE_OPTIONS:
        return f"{len(options)} options (a choice has 2 to {MAX_CHOICE_OPTIONS})"
    try:
        choice("?", options)
    except QuestionError as exc:
        return str(exc)
    return option_line_break(options)


def row_items(d: HubTaskDeclaration, task: str, splits: dict[str, CachedSplit]) -> tuple[list[Item], list[dict]]:
    """The items of TASK's declaration D (with options_field) from its cached item splits, and the rows dropped for
    options that cannot make a question (``invalid_options: drop``: id, split, line, why)."""
    fields = template_fields(d.text_template) if d.text_template is not None else []
    items: list[Item] = []
    dropped: list[dict] = []
    for split in d.item_splits:
        path = splits[split].path
        for index, (line, row) in enumerate(splits[split].rows):
            item_id = f"{split}-{index}"
            try:
                raw = _strings(_value(row, d, "options_field"), "options_field")
                options = [option_shown(d, o) for o in raw]
                why = _invalid(options)
                if why is not None:
                    if d.invalid_options == "drop":
                        dropped.append({"id": item_id, "split": split, "line": line, "why": why})
                        continue
                    raise _RowError("options_field", f"{why}; invalid_options: drop leaves such rows out")
                gold = _gold(d, row, raw)
            except _RowError as exc:
                raise TaskDataError(str(path), f"line {line}", f"{row_who(task, item_id, d, exc.key)}{exc}") from None
            state = row_state(d, fields, row, path, line)
            if state is None:
                continue
            question = choice(row_question(d, row, path, line, row_who(task, item_id, d, "question_field")), options)
            items.append(Item(id=item_id, state=state, question=question, gold=gold, split=item_split(d, split)))
    return items, dropped
