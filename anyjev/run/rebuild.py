"""The prompts a cell scored, rebuilt from its task file and verified: each item prepared by the scoring code
(:func:`anyjev.run.prepared.prepare_items`) under the cell's :class:`~anyjev.decision.options.PromptOptions`, each
layout's text rendered through those options and required to encode to the prepared ids, and each layout's ids
required to hash to the ``prompt_sha`` stored when it was scored. ``anyjev show``, ``anyjev export-prompts`` and the
viewer all show prompts through this module, so none of them can show a prompt other than the one that was scored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anyjev.data.tasks import Task
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.decision.prompts import encode_many, prompt_hash
from anyjev.errors import TaskDataError
from anyjev.run.prepared import PreparedItem, prepare_items


@dataclass
class RenderedPrompt:
    """One layout of one item as the model received it."""

    item_id: str
    layout: str
    order: list[int]
    swapped: bool
    labels: list[str]
    label_ids: list[int]
    text: str
    ids: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    @property
    def prompt_sha(self) -> str:
        return prompt_hash(self.ids)


def render_prepared(tokenizer, p: PreparedItem, options: PromptOptions, *, source: str) -> list[RenderedPrompt]:
    """The text of every layout of a prepared item, rendered through OPTIONS; its encoding must equal the prepared ids
    (the prompt that was scored), which is checked rather than assumed (a mismatch names SOURCE, the item and layout)."""
    out = []
    texts = [options.render(tokenizer, p.item.question, p.item.state, layout, p.labels) for layout, _ in p.layouts]
    for (layout, ids), text, encoded in zip(p.layouts, texts, encode_many(tokenizer, texts), strict=True):
        if encoded != ids:
            raise TaskDataError(source, f"item {p.item.id!r} layout {layout.name}", "the rendered text does not encode to "
                                "the token ids scoring sends (the tokenizer does not round-trip this prompt's text)")
        out.append(RenderedPrompt(p.item.id, layout.name, list(layout.order), layout.swapped, list(p.labels),
                                  list(p.label_ids), text, list(ids)))
    return out


def rebuild_items(task: Task, task_file: str | os.PathLike, tokenizer, options: PromptOptions, item_ids: Sequence[str],
                  *, checker: LabelChecker | None = None) -> dict[str, dict[str, RenderedPrompt]]:
    """Every layout of the items ITEM_IDS of TASK (read from TASK_FILE), prepared as scoring prepares them (their
    prompts tokenised in batches) and rendered: ``{item id: {layout: RenderedPrompt}}``."""
    index = {it.id: i for i, it in enumerate(task.items)}
    groups = task.prior_groups()
    rows = [index[item_id] for item_id in item_ids]
    prepared = prepare_items(tokenizer, [task.items[i] for i in rows], [groups[i] for i in rows], options, checker=checker)
    return {p.item.id: {r.layout: r for r in render_prepared(tokenizer, p, options, source=str(task_file))}
            for p in prepared}


def scored_prompts(scores: str | os.PathLike, records: Sequence[dict], task: Task, task_file: str | os.PathLike, tokenizer,
                   options: PromptOptions, *, keep: Callable[[dict], bool] = lambda rec: True,
                   rebuilt: dict[str, dict[str, RenderedPrompt]] | None = None, checker: LabelChecker | None = None
                   ) -> dict[str, dict[str, RenderedPrompt]]:
    """Every layout each kept item record read, rebuilt from TASK (read from TASK_FILE) with TOKENIZER under OPTIONS:
    ``{item id: {layout: RenderedPrompt}}`` in record order. RECORDS are the item records of the scores file SCORES in
    file order (record ``i`` on line ``i + 2``). A record whose item is not in the task, or a layout whose rebuilt
    prompt does not hash to the stored ``prompt_sha``, is a TaskDataError naming the line, item and layout.
    REBUILT holds the items already rebuilt from this task file, tokenizer and options, and receives the rest: cells
    of models that share a tokenizer share it, so a task is rendered once for all of them (each cell's stored
    hashes are still checked)."""
    present = {it.id for it in task.items}
    kept = []
    for n, rec in enumerate(records, start=2):
        if not keep(rec):
            continue
        if rec["id"] not in present:
            raise TaskDataError(str(scores), f"line {n}", f"item {rec['id']!r} is not in {task_file}")
        kept.append((n, rec))
    rebuilt = {} if rebuilt is None else rebuilt
    missing = list(dict.fromkeys(rec["id"] for _, rec in kept if rec["id"] not in rebuilt))
    if missing:
        rebuilt.update(rebuild_items(task, task_file, tokenizer, options, missing, checker=checker))
    out: dict[str, dict[str, RenderedPrompt]] = {}
    for n, rec in kept:
        rendered = rebuilt[rec["id"]]
        for name, lay in rec["layouts"].items():
            r = rendered.get(name)
            if r is None or r.prompt_sha != lay["prompt_sha"]:
                got = r.prompt_sha if r else "no such layout"
                raise TaskDataError(str(scores), f"line {n}", f"item {rec['id']!r} layout {name}: stored prompt hash "
                                    f"{lay['prompt_sha']} but the prompt rebuilt from {task_file} with this tokenizer "
                                    f"hashes to {got}: not the prompt that was scored; refusing it")
        out[rec["id"]] = {name: rendered[name] for name in rec["layouts"]}
    return out
