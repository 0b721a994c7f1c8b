"""A hub task declared as data, and the one builder that turns a declaration and the rows of its cached hub splits
into items.

A declaration says where a hub dataset is (id, config, revision; or a local folder, :mod:`anyjev.data.local`), which
splits the items come from (one or more, split into test and calibration items by the seeded split; or a test split
and a calibration split), which column holds the text (or a template over several columns) and which the label, how
the labels are named (the dataset's ``ClassLabel``, given names, or a column of names), the question (one for every
row, or a column of questions) and its kind (``choice``; ``noul`` with the labels that mean Yes or No; ``score`` with
the labels as ordered levels), and optional filters: keep the N most frequent labels, drop short texts, cut long
ones, readable option names. Or the options are each row's own (``options_field``; built by
:mod:`anyjev.data.row_options`). The config gives one under ``tasks.<name>.hub`` (``anyjev/config.schema.yaml``,
``config/README.md``); the published tasks are declared in the same format (``anyjev/data/published_tasks.yaml``).

A ``*_field`` key names a column, or with dots a path into a nested one (``choices.text``: the ``text`` of the struct
column ``choices``; in a list of structs, that field of each). Items are the rows of the item splits in hub order,
with ids ``<hub split>-<row index>``. Standard library only: the fetch step (:mod:`anyjev.data.hub`) writes the cache
this builder reads.
"""

from __future__ import annotations

import string
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from anyjev.data.local import is_local
from anyjev.data.taskfile import jsonl_rows
from anyjev.data.tasks import Item
from anyjev.decision.questions import MAX_CHOICE_OPTIONS, MAX_SCORE_LEVELS, Question, choice, noul, score
from anyjev.errors import ConfigError, TaskDataError
from anyjev.jobs import from_data
from anyjev.schema import schema_node, setting, validate


def _hub(key: str) -> Any:
    return setting("tasks", "*", "hub", key)


@dataclass(frozen=True)
class HubDataset:
    """What the fetch step downloads: a hub dataset (and config) at a revision, or a local folder (no revision), and
    the splits a task reads (in the order they are fetched)."""

    dataset: str
    config: str | None
    revision: str | None
    splits: tuple[str, ...]

    @property
    def local(self) -> bool:
        """The dataset is a local folder (pinned by its content), not a hub id (pinned by a commit)."""
        return is_local(self.dataset)


@dataclass(frozen=True)
class HubTaskDeclaration:
    """A hub task as data (``tasks.<name>.hub``; each field is the config key of the same name)."""

    dataset: str
    label_field: str
    kind: str
    revision: str | None = None  # required for a hub id, none for a local folder (check_declaration)
    question: str | None = None  # unset: question_field
    config: str | None = None  # unset: the dataset's default config
    question_field: str | None = _hub("question_field")
    options_field: str | None = _hub("options_field")
    option_labels_field: str | None = _hub("option_labels_field")
    gold: str | None = _hub("gold")
    invalid_options: str = _hub("invalid_options")
    splits: tuple[str, ...] | None = _hub("splits")
    test_split: str | None = _hub("test_split")
    calib_split: str | None = _hub("calib_split")
    text_field: str | None = _hub("text_field")
    text_template: str | None = _hub("text_template")
    strip: bool = _hub("strip")
    min_chars: int | None = _hub("min_chars")
    max_chars: int | None = _hub("max_chars")
    label_text_field: str | None = _hub("label_text_field")
    label_names: tuple[str, ...] | None = _hub("label_names")
    label_ids: dict[str, int] | None = _hub("label_ids")
    yes_labels: tuple[str, ...] | None = _hub("yes_labels")
    no_labels: tuple[str, ...] | None = _hub("no_labels")
    keep_most_frequent: int | None = _hub("keep_most_frequent")
    frequency_split: str | None = _hub("frequency_split")
    option_names: dict[str, str] = _hub("option_names")
    option_replace: dict[str, str] = _hub("option_replace")

    @property
    def item_splits(self) -> tuple[str, ...]:
        """The hub splits the items come from, in order."""
        return self.splits if self.splits is not None else (str(self.test_split), str(self.calib_split))

    @property
    def hub_splits(self) -> tuple[str, ...]:
        """Every hub split the task reads, in the order they are fetched: the frequency split, then the item splits."""
        return tuple(dict.fromkeys(([self.frequency_split] if self.frequency_split else []) + list(self.item_splits)))

    def hub_dataset(self) -> HubDataset:
        """What the fetch step downloads for this task."""
        return HubDataset(self.dataset, self.config, self.revision, self.hub_splits)

    @property
    def prior_group(self) -> str:
        """What the batch label prior is pooled over: the one question, or the task when every row asks its own."""
        return "task" if self.question_field or self.options_field else "question"

    @property
    def gold_format(self) -> str:
        """With options_field, how the label column picks a row's option (``gold``, its unset default resolved)."""
        return self.gold or ("option_label" if self.option_labels_field else "index")

    def at_revision(self, revision: str | None) -> HubTaskDeclaration:
        """The same declaration at REVISION (unchanged when None)."""
        return replace(self, revision=revision) if revision else self

    def k(self) -> tuple[int | None, str]:
        """The number of options known before the data is fetched, and where it comes from (None: unknown)."""
        if self.kind == "noul":
            return 2, "Yes/No"
        if self.options_field:
            return None, "each row gives its own options"
        n = len(self.label_names) if self.label_names is not None else None
        if self.keep_most_frequent is not None:
            return (min(n, self.keep_most_frequent) if n else self.keep_most_frequent), "keep_most_frequent"
        if n is not None:
            return n, "label_names"
        return None, "the label names come from the data"


def template_fields(template: str, where: str = "text_template") -> list[str]:
    """The column names a text template names in braces (each once, in order); ConfigError naming WHERE for anything
    else in braces (an attribute, an index, a number, a conversion or a format spec) or a template naming no column."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(where, f"{template!r:.80} is not a template ({exc}; write {{{{ and }}}} for a brace itself)") from None
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or name.isdigit() or any(c in name for c in ".[]") or spec or conversion:
            shown = "{" + (name or "") + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ConfigError(where, f"{shown} is not a column name in braces (a template names columns, e.g. "
                              f"{{title}}; write {{{{ and }}}} for a brace itself)")
        fields.append(name)
    if not fields:
        raise ConfigError(where, f"{template!r:.80} names no column in braces (use text_field for a single column)")
    return list(dict.fromkeys(fields))


# The keys that name and shape label-name options, which a row with options of its own has no use for.
LABEL_OPTION_KEYS = ("label_names", "label_text_field", "label_ids", "keep_most_frequent", "frequency_split", "option_names")
ROW_OPTION_KEYS = ("option_labels_field", "gold")


def _check_source(d: HubTaskDeclaration, where: str) -> None:
    if is_local(d.dataset):
        if d.revision is not None:
            raise ConfigError(f"{where}.revision", f"a local folder has no revision ({d.dataset!r} is pinned by the content "
                              "of its files, recorded in the lock file): remove it")
    elif d.revision is None:
        raise ConfigError(f"{where}.revision", f"required for a hub dataset ({d.dataset!r}): a commit hash pins it; a branch "
                          "(main) is resolved and recorded in the lock file. A local folder is written as a path: "
                          f"./{d.dataset}")


def _check_row_options(d: HubTaskDeclaration, where: str) -> None:
    """The keys of options in each row (options_field) and of a question in each row (question_field)."""
    if (d.question is None) == (d.question_field is None):
        raise ConfigError(f"{where}.question", "give question (one for every row) or question_field (each row's own)"
                          + ("" if d.question is None else ", not both"))
    if not d.options_field:
        for key in ROW_OPTION_KEYS:
            if getattr(d, key) is not None:
                raise ConfigError(f"{where}.{key}", "applies to options_field (options of each row's own): set options_field, "
                                  "or remove it")
        if d.invalid_options == "drop":
            raise ConfigError(f"{where}.invalid_options", "applies to options_field (options of each row's own): set "
                              "options_field, or remove it")
        return
    if d.kind != "choice":
        raise ConfigError(f"{where}.options_field", f"applies to kind choice, not {d.kind} (a row's own options are the "
                          "choices A, B, ...)")
    for key in LABEL_OPTION_KEYS:
        if getattr(d, key):
            raise ConfigError(f"{where}.{key}", "names or shapes label names as options, but each row gives its own options "
                              "here (options_field): remove it")
    if (d.gold_format == "option_label") != (d.option_labels_field is not None):
        raise ConfigError(f"{where}.option_labels_field", "is read with gold: option_label, and gold: option_label reads "
                          "it: give both, or neither")


def check_declaration(d: HubTaskDeclaration, where: str) -> HubTaskDeclaration:
    """What the schema cannot say about a declaration; ConfigError naming the key path under WHERE."""
    _check_source(d, where)
    _check_row_options(d, where)
    if d.splits is not None and (d.test_split is not None or d.calib_split is not None):
        raise ConfigError(f"{where}.splits", "give either splits (one seeded split of their items) or test_split and "
                          "calib_split (the items of two hub splits), not both")
    if d.splits is None:
        if d.test_split is None or d.calib_split is None:
            missing = "test_split" if d.test_split is None else "calib_split"
            raise ConfigError(f"{where}.{missing}" if d.test_split or d.calib_split else f"{where}.splits",
                              "required: give splits, or test_split and calib_split")
        if d.test_split == d.calib_split:
            raise ConfigError(f"{where}.calib_split", f"is the test split {d.test_split!r} too: give one split under "
                              "splits (the seeded split draws both from it), or two different splits")
    if d.text_field is not None and d.text_template is not None:
        raise ConfigError(f"{where}.text_field", "give either text_field (one column) or text_template (several columns "
                          "in braces), not both")
    if d.text_field is None and d.text_template is None and d.question_field is None and d.options_field is None:
        raise ConfigError(f"{where}.text_field", "give either text_field (one column) or text_template (several columns "
                          "in braces); the state may be empty only where each row has its own question or options "
                          "(question_field, options_field)")
    if d.text_template is not None:
        template_fields(d.text_template, f"{where}.text_template")
    if d.min_chars is not None and d.max_chars is not None and d.min_chars > d.max_chars:
        raise ConfigError(f"{where}.min_chars", f"is {d.min_chars}, more than max_chars {d.max_chars}: no text would be kept")
    if d.frequency_split is not None and d.keep_most_frequent is None:
        raise ConfigError(f"{where}.frequency_split", "is where keep_most_frequent counts the labels: set keep_most_frequent "
                          "too, or remove it")
    names = d.label_names
    if names is not None and d.label_ids is not None:
        raise ConfigError(f"{where}.label_ids", "names ids for a dataset without label names, but label_names names "
                          "them all: remove one")
    known = set(names) if names is not None else None
    for key in ("yes_labels", "no_labels"):
        given = getattr(d, key)
        if given is not None and d.kind != "noul":
            raise ConfigError(f"{where}.{key}", f"applies to kind noul, not {d.kind}")
        unknown = [n for n in given or () if known is not None and n not in known]
        if unknown:
            raise ConfigError(f"{where}.{key}", f"{unknown[0]!r} is not one of label_names {list(names or ())}")
    if d.kind == "noul":
        if d.yes_labels is None and d.no_labels is None:
            raise ConfigError(f"{where}.yes_labels", "kind noul needs the labels that mean Yes (yes_labels), or those that "
                              "mean No (no_labels), or both")
        both = set(d.yes_labels or ()) & set(d.no_labels or ())
        if both:
            raise ConfigError(f"{where}.no_labels", f"{sorted(both)[0]!r} is in yes_labels too")
        for key in ("keep_most_frequent", "option_names", "option_replace"):
            if getattr(d, key):
                raise ConfigError(f"{where}.{key}", "applies to kinds choice and score (a noul question's options are Yes "
                                  "and No)")
    if d.kind == "score" and d.keep_most_frequent is not None:
        raise ConfigError(f"{where}.keep_most_frequent", "applies to kind choice (a score question keeps all its levels)")
    k, _ = d.k()
    most = MAX_CHOICE_OPTIONS if d.kind == "choice" else MAX_SCORE_LEVELS
    if d.kind != "noul" and k is not None and k > most:
        raise ConfigError(f"{where}.label_names", f"has {k} labels, but a {d.kind} question has at most {most} options"
                          + (" (labels A-Z): keep_most_frequent keeps the most frequent" if d.kind == "choice" else ""))
    if names is not None and d.keep_most_frequent is not None and d.keep_most_frequent > len(names):
        raise ConfigError(f"{where}.keep_most_frequent", f"is {d.keep_most_frequent}, more than the {len(names)} label_names")
    if known is not None:
        unknown = [n for n in d.option_names if n not in known]
        if unknown:
            raise ConfigError(f"{where}.option_names", f"{unknown[0]!r} is not one of label_names {list(names or ())}")
    return d


def declaration_from_data(data: Any, where: str) -> HubTaskDeclaration:
    """A declaration from its mapping (as the config gives it under ``tasks.<name>.hub``): checked against the schema
    (defaults filled), typed, and checked as :func:`check_declaration` does; ConfigError naming the key path."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping, got {data!r:.80}")
    return check_declaration(from_data(HubTaskDeclaration, validate(dict(data), schema_node("tasks", "*", "hub"), where),
                                       where), where)


# ---------------------------------------------------------------------------------------------------------------------
# building


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
        value = _field(row, d.label_field, (int, str), path, line)
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
