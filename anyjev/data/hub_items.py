"""The one builder that turns a hub task's declaration (:mod:`anyjev.data.declared`) and the rows of its cached hub
splits into items whose options are the label names, and the readers of a row's values that the builder of options per
row (:mod:`anyjev.data.row_options`) shares. A ``*_field`` key names a column, or with dots a path into a nested one.
Items are the rows of the item splits in hub order, with ids ``<hub split>-<row index>``. Standard library only: the
fetch step (:mod:`anyjev.data.hub`) writes the cache this builder reads.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.data.declared import HubTaskDeclaration, template_fields
from anyjev.data.taskfile import jsonl_rows
from anyjev.data.tasks import Item
from anyjev.decision.questions import MAX_CHOICE_OPTIONS, MAX_SCORE_LEVELS, Question, choice, noul, score
from anyjev.errors import TaskDataError


class CachedSplit:
    """One cached hub split: its name, its file and its rows (line number, row) in hub order."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.rows = jsonl_rows(path)


def column_value(row: dict, col: str) -> Any:
    """The value a ``*_field`` key names in ROW: the column COL, or with dots a path into nested columns (in a list of
    structs, that field of each). LookupError saying what is missing."""
    value: Any = row
    walked: list[str] = []
    for part in col.split("."):
        name = ".".join(walked)
        if isinstance(value, dict):
            if part not in value:
                raise LookupError(f"column {name!r} has no field {part!r} (its fields: {', '.join(sorted(value))})" if walked
                                  else f"missing column {part!r} (has {sorted(value)})")
            value = value[part]
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            lacking = next((v for v in value if part not in v), None)
            if lacking is not None:
                raise LookupError(f"column {name!r} has no field {part!r} (its fields: {', '.join(sorted(lacking))})")
            value = [v[part] for v in value]
        else:
            raise LookupError(f"column {name!r} = {value!r:.80} has no field {part!r} (a dot goes into a nested column)")
        walked.append(part)
    return value


def _field(row: dict, col: str, types: type | tuple[type, ...], path: Path, line: int, who: str = ""):
    """The value at COL (:func:`column_value`) of one of TYPES; TaskDataError naming the file and line, after WHO."""
    try:
        val = column_value(row, col)
    except LookupError as exc:
        raise TaskDataError(str(path), f"line {line}", f"{who}{exc}") from None
    if isinstance(val, bool) or not isinstance(val, types):
        raise TaskDataError(str(path), f"line {line}", f"{who}column {col!r} = {val!r:.80} has an unexpected type")
    return val


def whole_number(value: Any) -> Any:
    """VALUE with a float that is a whole number (0.0, 1.0: pandas' type for an integer column that has a missing value)
    as the int it is; anything else as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def not_whole(value: float) -> str:
    """Why a float label is no label id or option index: a missing value (NaN) or a fraction."""
    return "a missing value (NaN)" if math.isnan(value) else "not a whole number"


@dataclass(frozen=True)
class _Row:
    """One hub row read for its label: the item id it would get, where it is, its label and the label's name."""

    id: str
    split: str
    path: Path
    line: int
    row: dict
    key: tuple  # the label's place in label order: (0, id or index in the label names) or (1, name)
    name: str | None


class _Labels:
    """The label names of a declaration over the cached rows: the recorded ClassLabel names or the given ones (by
    id), a column of names, or the names of a few ids (``label_ids``); string labels are their own names."""

    def __init__(self, d: HubTaskDeclaration, recorded: list[str] | None, meta_path: Path) -> None:
        given = list(d.label_names) if d.label_names is not None else None
        if recorded is not None and given is not None and list(recorded) != given:
            raise TaskDataError(str(meta_path), "label_names", f"the dataset's ClassLabel {d.label_field!r} names its labels "
                                f"{list(recorded)}, but the declaration's label_names are {given}: remove label_names "
                                "(option_names shows a label under another name)")
        self.d = d
        self.names = list(recorded) if recorded is not None else given
        self.by_id: dict[int, str] = {}  # from label_text_field when there are no names
        self.ids = {i: n for n, i in (d.label_ids or {}).items()} if self.names is None else {}
        self.type: type | None = None  # ids (int) or names (str): one column holds one of them

    def read(self, split: str, index: int, path: Path, line: int, row: dict) -> _Row:
        d, names = self.d, self.names
        value = whole_number(_field(row, d.label_field, (int, str, float), path, line))
        if isinstance(value, float):
            raise TaskDataError(str(path), f"line {line}", f"label {value!r} (column {d.label_field!r}) is {not_whole(value)}, "
                                "not a label id or name")
        if self.type is not None and type(value) is not self.type:
            kinds = {int: "label ids (integers)", str: "label names (strings)"}
            raise TaskDataError(str(path), f"line {line}", f"label {value!r} (column {d.label_field!r}): the rows before "
                                f"it hold {kinds[self.type]}, this one does not")
        self.type = type(value)
        if isinstance(value, str):
            if names is not None:
                if value not in names:
                    raise TaskDataError(str(path), f"line {line}", f"label {value!r} (column {d.label_field!r}) is not one of "
                                        f"{names}")
                return _Row(f"{split}-{index}", split, path, line, row, (0, names.index(value)), value)
            return _Row(f"{split}-{index}", split, path, line, row, (1, value), value)
        if names is not None:
            if not 0 <= value < len(names):
                raise TaskDataError(str(path), f"line {line}", f"label {value} (column {d.label_field!r}) is not a label id "
                                    f"0..{len(names) - 1} of the {len(names)} label names")
            name = names[value]
            try:
                text, has_text = (column_value(row, d.label_text_field), True) if d.label_text_field else (None, False)
            except LookupError:
                text, has_text = None, False
            if has_text and text != name:
                raise TaskDataError(str(path), f"line {line}", f"label {value} is {text!r} (column {d.label_text_field!r}), "
                                    f"expected {name!r}")
            return _Row(f"{split}-{index}", split, path, line, row, (0, value), name)
        if d.label_text_field:
            text = _field(row, d.label_text_field, str, path, line)
            if self.by_id.setdefault(value, text) != text:
                raise TaskDataError(str(path), f"line {line}", f"label {value} is {text!r} here but {self.by_id[value]!r} "
                                    f"elsewhere (column {d.label_text_field!r})")
            return _Row(f"{split}-{index}", split, path, line, row, (0, value), text)
        return _Row(f"{split}-{index}", split, path, line, row, (0, value), self.ids.get(value))

    def every_label(self, rows: list[_Row]) -> dict[tuple, str | None]:
        """Every label in label order, with its name: all the label names, else the labels the rows have."""
        if self.names is not None:
            return {(0, i): n for i, n in enumerate(self.names)}
        found = {r.key: r.name for r in rows}
        return {key: found[key] for key in sorted(found)}


def row_state(d: HubTaskDeclaration, fields: list[str], row: dict, path: Path, line: int) -> str | None:
    """A row's state: its text_field, text_template (naming FIELDS) or nothing (empty), stripped and cut as declared;
    None when min_chars drops the row."""
    if d.text_template is not None:
        text = d.text_template.format_map({f: _field(row, f, str, path, line) for f in fields})
    else:
        text = _field(row, d.text_field, str, path, line) if d.text_field is not None else ""
    if d.strip:
        text = text.strip()
    if d.min_chars is not None and len(text) < d.min_chars:
        return None
    return text[:d.max_chars] if d.max_chars is not None else text


def row_who(task: str, item_id: str, d: HubTaskDeclaration, key: str) -> str:
    """What an error about a row's value begins with: the task, the row (its item id) and the declaration key."""
    return f"task {task!r}, row {item_id}: hub.{key} {getattr(d, key)!r}: "


def row_question(d: HubTaskDeclaration, row: dict, path: Path, line: int, who: str) -> str:
    """A row's question text: the declared question, or its question_field (a non-empty string)."""
    if d.question is not None:
        return d.question
    text = _field(row, str(d.question_field), str, path, line, who)
    if not text.strip():
        raise TaskDataError(str(path), f"line {line}", f"{who}the question is empty")
    return text


def option_shown(d: HubTaskDeclaration, name: str) -> str:
    """How a label name or a row's own option is shown: its option_names entry, else after option_replace."""
    if name in d.option_names:
        return d.option_names[name]
    for old, new in d.option_replace.items():
        name = name.replace(old, new)
    return name


def item_split(d: HubTaskDeclaration, hub_split: str) -> str | None:
    """The split an item from HUB_SPLIT is marked with: test or calib with test_split and calib_split, else none (the
    seeded split draws both)."""
    if d.splits is not None:
        return None
    return "test" if hub_split == d.test_split else "calib"


def _kept(d: HubTaskDeclaration, splits: dict[str, CachedSplit], rows: list[_Row]) -> set[tuple]:
    """The keys of the keep_most_frequent labels: most frequent first, a tie to the label first in label order."""
    counted = [d.frequency_split] if d.frequency_split else list(d.item_splits)
    counts = Counter(r.key for r in rows if r.split in counted)
    n = d.keep_most_frequent or 0
    if len(counts) < n:
        raise TaskDataError(str(splits[counted[0]].path), "file", f"only {len(counts)} labels in split(s) {counted}, "
                            f"keep_most_frequent needs {n}")
    return set(sorted(counts, key=lambda key: (-counts[key], key))[:n])


def build_items(d: HubTaskDeclaration, task: str, splits: dict[str, CachedSplit], recorded: list[str] | None,
                meta_path: Path) -> list[Item]:
    """The items of TASK's declaration D, whose options are its label names, from its cached hub splits (every split of
    ``d.hub_splits``). RECORDED: the label column's ClassLabel names from the cache's meta.json (META_PATH), if any.
    TaskDataError names the file and line."""
    labels = _Labels(d, recorded, meta_path)
    rows = [labels.read(s, i, splits[s].path, line, row) for s in d.hub_splits for i, (line, row) in enumerate(splits[s].rows)]
    fields = template_fields(d.text_template) if d.text_template is not None else []
    if d.kind == "noul":
        make = noul
        yes, no = set(d.yes_labels or ()), set(d.no_labels or ())
        for side, given in (("yes_labels", yes), ("no_labels", no)):
            unknown = sorted(given - set(labels.names)) if labels.names is not None else []
            if unknown:
                raise TaskDataError(str(meta_path), side, f"{unknown[0]!r} is not one of the dataset's label names {labels.names}")

        def gold(r: _Row) -> int | None:
            if r.name in yes:
                return 0
            if r.name in no:
                return 1
            return None if (yes and no) else (1 if yes else 0)
    else:
        every = labels.every_label(rows)
        keys = sorted(_kept(d, splits, rows)) if d.keep_most_frequent is not None else list(every)
        unnamed = [key for key in keys if every.get(key) is None]
        if unnamed:
            first = next(r for r in rows if r.key == unnamed[0])
            raise TaskDataError(str(first.path), f"line {first.line}", f"label {column_value(first.row, d.label_field)!r} has "
                                "no name: the options of a declared task are its label names, unless options_field names "
                                "a column of each row's own options (as MMLU's choices); give label_names, label_text_field "
                                "(a column of names), or options_field")
        most = MAX_CHOICE_OPTIONS if d.kind == "choice" else MAX_SCORE_LEVELS
        if not 2 <= len(keys) <= most:
            raise TaskDataError(str(meta_path.parent), "labels", f"{len(keys)} labels, but a {d.kind} question has 2 to {most} "
                                "options" + (": set keep_most_frequent" if d.kind == "choice" and len(keys) > most else ""))
        options = [option_shown(d, str(every[key])) for key in keys]

        def make(text: str) -> Question:
            return choice(text, options) if d.kind == "choice" else score(text, options)
        index = {key: j for j, key in enumerate(keys)}

        def gold(r: _Row) -> int | None:
            return index.get(r.key)
    fixed = make(d.question) if d.question is not None else None
    items = []
    for r in (r for s in d.item_splits for r in rows if r.split == s):
        g = gold(r)
        if g is None:
            continue
        text = row_state(d, fields, r.row, r.path, r.line)
        if text is None:
            continue
        question = fixed or make(row_question(d, r.row, r.path, r.line, row_who(task, r.id, d, "question_field")))
        items.append(Item(id=r.id, state=text, question=question, gold=g, split=item_split(d, r.split)))
    return items
