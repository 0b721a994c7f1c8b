"""An item made ready to score: every layout rendered through the cell's :class:`PromptOptions`, tokenised, and its
labels checked in context. Every path that needs the prompts a cell scored (scoring, the context check,
``anyjev plan``, ``anyjev show``, ``anyjev export-prompts``) comes through :func:`prepare_item`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from anyjev.decision import published
from anyjev.decision.labels import LabelChecker, label_strings
from anyjev.decision.layouts import Layout
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import encode
from anyjev.errors import LabelTokenError

log = logging.getLogger(__name__)


@dataclass
class PreparedItem:
    """An item's prompts (token ids per layout) and the label ids checked for them."""

    item: object
    group: str
    labels: list[str]
    label_ids: list[int]
    label_kind: str
    layouts: list[tuple[Layout, list[int]]]


def _check_published_labels(tokenizer, item, labels: list[str], ids: list[int]) -> None:
    """Under the published profile the published library must read the same label tokens we do: its
    ``resolve_labels`` (isolation encoding) has to agree with our in-context check, or the cell fails."""
    theirs, their_ids = published.resolve_labels(tokenizer, item.question)
    if (theirs, their_ids) != (labels, ids):
        raise LabelTokenError(
            f"item {item.id!r}: the published library resolves labels {theirs} to ids {their_ids}, we check "
            f"{labels} -> {ids} in context; the 'published' profile would not read the tokens it shows",
            missing_ids=[i for i in their_ids if i not in ids],
        )


def prepare_item(tokenizer, checker: LabelChecker, item, group: str, options: PromptOptions) -> PreparedItem:
    """Render every layout of ITEM as OPTIONS say (wording, listing, which layouts), tokenise it, and check its
    labels in context; score questions fall back from digits to letters."""
    question = item.question
    kinds = ["digits", "letters"] if question.kind == "score" else ["default"]
    last_error: LabelTokenError | None = None
    for kind in kinds:
        labels = label_strings(question, "letters" if kind == "letters" else "default")
        try:
            layouts, ids = [], None
            for group_layouts in options.layouts(question).values():
                for layout in group_layouts:
                    text = options.render(tokenizer, question, item.state, layout, labels)
                    layout_ids = checker.ids(text, labels)
                    if ids is not None and layout_ids != ids:
                        raise LabelTokenError(f"label ids differ between layouts: {ids} vs {layout_ids} ({layout.name})")
                    ids = layout_ids
                    layouts.append((layout, encode(tokenizer, text)))
        except LabelTokenError as exc:
            last_error = exc
            if kind == "digits":
                log.warning("item %s: digit labels are not single tokens here (%s); using letters", item.id, exc)
            continue
        if options.prompt_profile == "published":
            _check_published_labels(tokenizer, item, labels, ids)
        return PreparedItem(item, group, labels, ids, "letters" if kind == "letters" else kind, layouts)
    raise LabelTokenError(f"item {item.id!r} (question {question.key()}): {last_error}") from last_error


def prepare_items(tokenizer, items: Sequence, groups: Sequence[str], options: PromptOptions) -> list[PreparedItem]:
    """Every item prepared with one label checker (its in-context checks are cached per prompt tail)."""
    checker = LabelChecker(tokenizer)
    return [prepare_item(tokenizer, checker, it, g, options) for it, g in zip(items, groups, strict=True)]
