"""An item made ready to score: every layout rendered through the cell's :class:`PromptOptions`, tokenised, and its
labels checked in context. Every path that needs the prompts a cell scored (scoring, the context check,
``anyjev plan``, ``anyjev show``, ``anyjev export-prompts``) comes through :func:`prepare_item`."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from anyjev import collector
from anyjev.decision import published
from anyjev.decision.labels import LabelChecker, label_strings
from anyjev.decision.layouts import Layout
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import prompt_encoder
from anyjev.errors import LabelTokenError

log = logging.getLogger(__name__)
# Layouts whose prompts are tokenised in one call: a task's at a time, but a bounded batch for a large task.
BATCH_TEXTS = 2048


@dataclass
class PreparedItem:
    """An item's prompts (token ids per layout, and each prompt's :func:`~anyjev.decision.prompts.prompt_hash`) and
    the label ids checked for them."""

    item: object
    group: str
    labels: list[str]
    label_ids: list[int]
    label_kind: str
    layouts: list[tuple[Layout, list[int]]]
    prompt_shas: list[str]

    def first_layouts(self, n: int) -> PreparedItem:
        """This item reading its first N layouts only (a shorter workload with the same prompts)."""
        return dataclasses.replace(self, layouts=self.layouts[:n], prompt_shas=self.prompt_shas[:n])


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


@dataclass
class _Rendered:
    """An item's layouts rendered and its labels checked, not tokenised yet."""

    labels: list[str]
    label_ids: list[int]
    label_kind: str
    texts: list[tuple[Layout, str]]


def _render_item(tokenizer, checker: LabelChecker, item, options: PromptOptions) -> _Rendered:
    """Render every layout of ITEM as OPTIONS say and check its labels in context; score questions fall back from
    digits to letters."""
    question = item.question
    kinds = ["digits", "letters"] if question.kind == "score" else ["default"]
    last_error: LabelTokenError | None = None
    for kind in kinds:
        labels = label_strings(question, "letters" if kind == "letters" else "default")
        try:
            texts, ids = [], None
            for group_layouts in options.layouts(question).values():
                for layout in group_layouts:
                    text = options.render(tokenizer, question, item.state, layout, labels)
                    layout_ids = checker.ids(text, labels)
                    if ids is not None and layout_ids != ids:
                        raise LabelTokenError(f"label ids differ between layouts: {ids} vs {layout_ids} ({layout.name})")
                    ids = layout_ids
                    texts.append((layout, text))
        except LabelTokenError as exc:
            last_error = exc
            if kind == "digits":
                log.warning("item %s: digit labels are not single tokens here (%s); using letters", item.id, exc)
            continue
        if options.prompt_profile == "published":
            _check_published_labels(tokenizer, item, labels, ids)
        return _Rendered(labels, ids, "letters" if kind == "letters" else kind, texts)
    assert last_error is not None
    raise last_error.within(f"item {item.id!r} (question {question.key()})") from last_error  # keeps the missing ids


def prepare_item(tokenizer, checker: LabelChecker, item, group: str, options: PromptOptions) -> PreparedItem:
    """Render every layout of ITEM as OPTIONS say (wording, listing, which layouts), tokenise it, and check its
    labels in context; score questions fall back from digits to letters."""
    return prepare_items(tokenizer, [item], [group], options, checker=checker)[0]


def prepare_items(tokenizer, items: Sequence, groups: Sequence[str], options: PromptOptions, *,
                  checker: LabelChecker | None = None) -> list[PreparedItem]:
    """Every item prepared as :func:`prepare_item` prepares it, with one label checker (its in-context checks are
    cached per prompt tail; CHECKER: one shared beyond these items), the prompts of up to BATCH_TEXTS layouts
    tokenised in one call (by the tokenizer's :class:`~anyjev.decision.prompts.PromptEncoder`). The collector is
    paused meanwhile: the items' prompts are containers by the thousand, none of them in a cycle."""
    with collector.collector_paused():
        return _prepare_items(tokenizer, items, groups, options, checker or LabelChecker(tokenizer))


def _prepare_items(tokenizer, items: Sequence, groups: Sequence[str], options: PromptOptions,
                   checker: LabelChecker) -> list[PreparedItem]:
    prepared: list[PreparedItem] = []
    pending: list[tuple[object, str, _Rendered]] = []

    def tokenise() -> None:
        encoded = iter(prompt_encoder(tokenizer).encode([text for _, _, r in pending for _, text in r.texts]))
        for item, group, r in pending:
            mine = [next(encoded) for _ in r.texts]
            prepared.append(PreparedItem(item, group, r.labels, r.label_ids, r.label_kind,
                                         [(layout, ids) for (layout, _), (ids, _) in zip(r.texts, mine, strict=True)],
                                         [sha for _, sha in mine]))
        pending.clear()

    waiting = 0  # layouts rendered, not tokenised yet
    for item, group in zip(items, groups, strict=True):
        rendered = _render_item(tokenizer, checker, item, options)
        pending.append((item, group, rendered))
        waiting += len(rendered.texts)
        if waiting >= BATCH_TEXTS:
            tokenise()
            waiting = 0
    if pending:
        tokenise()
    return prepared
