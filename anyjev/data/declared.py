"""A hub task declared as data: what it says, checked (the items are built from it by :mod:`anyjev.data.hub_items`,
or, with options per row, :mod:`anyjev.data.row_options`).

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
with ids ``<hub split>-<row index>``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace
from typing import Any

from anyjev.data.local import is_local
from anyjev.decision.questions import MAX_CHOICE_OPTIONS, MAX_SCORE_LEVELS
from anyjev.errors import ConfigError
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
