"""Looking inside a run without re-running it: the exact prompt of any item and layout, the configured
tasks with their kind, K and sizes, and the per-item scores with the prompt text beside them.

Every prompt here is rebuilt by :mod:`anyjev.run.rebuild` (the scoring code, under the cell's
:class:`~anyjev.decision.options.PromptOptions`), so the token ids shown are the ids that were scored;
:func:`export_scores_with_prompts` proves it item by item against the prompt hash stored in ``scores.jsonl`` and
refuses the export on any mismatch.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path

from anyjev.data.taskfile import load_task_file
from anyjev.data.tasks import Item, Task
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.errors import TaskDataError
from anyjev.files import file_sha256, write_text_atomic
from anyjev.run.prepared import prepare_item
from anyjev.run.rebuild import RenderedPrompt, render_prepared, scored_prompts
from anyjev.rundata.scores import read_scores

log = logging.getLogger(__name__)

EXPORT_FORMAT = "anyjev.scores_with_prompts/1"


def _find_item(task: Task, item_id: str) -> tuple[int, Item]:
    for i, it in enumerate(task.items):
        if it.id == item_id:
            return i, it
    sample = ", ".join(repr(it.id) for it in task.items[:5])
    raise TaskDataError(str(task.source.get("path", task.name)), f"item {item_id}",
                        f"no such item id in task {task.name!r} ({len(task.items)} items, e.g. {sample})")


def item_prompts(task: Task, item_id: str, tokenizer, options: PromptOptions) -> list[RenderedPrompt]:
    """Every layout of one task item, rendered for ``tokenizer`` exactly as scoring renders it under OPTIONS."""
    i, item = _find_item(task, item_id)
    p = prepare_item(tokenizer, LabelChecker(tokenizer), item, task.prior_groups()[i], options)
    return render_prepared(tokenizer, p, options, source=str(task.source.get("path", task.name)))


def show_prompt(task_file: str | os.PathLike, item_id: str, tokenizer, options: PromptOptions, layout: str = "fwd/r0", *,
                show_ids: bool = False) -> str:
    """The text ``anyjev show`` prints: a summary line per layout (``layout="all"`` for every one), then
    the exact prompt text between markers, and the token ids on request."""
    task = load_task_file(task_file)
    prompts = item_prompts(task, item_id, tokenizer, options)
    names = [r.layout for r in prompts]
    chosen = prompts if layout == "all" else [r for r in prompts if r.layout == layout]
    if not chosen:
        raise TaskDataError(str(task_file), f"item {item_id}", f"no layout {layout!r} (this item has: {', '.join(names)})")
    blocks = []
    for r in chosen:
        head = (f"# task {task.name} item {r.item_id} layout {r.layout}: order {r.order}"
                f"{' (Yes/No swapped)' if r.swapped else ''}, labels {r.labels} = token ids {r.label_ids}, "
                f"{r.n_tokens} tokens, prompt_sha {r.prompt_sha}")
        body = [head, "# ---- prompt text (exact; ends where the label token is read) ----", r.text,
                "# ---- end of prompt text ----"]
        if show_ids:
            body.append("# token ids: " + json.dumps(r.ids))
        blocks.append("\n".join(body))
    return "\n\n".join(blocks) + "\n"


# ------------------------------------------------------------------------------------------------- ls
def task_summary(task: Task) -> dict:
    """Kind(s), K (or its range) and split sizes of a loaded task."""
    kinds = Counter(it.question.kind for it in task.items)
    ks = sorted({it.question.k for it in task.items})
    splits = Counter(it.split or "-" for it in task.items)
    return {"kind": ",".join(sorted(kinds)), "K": str(ks[0]) if len(ks) == 1 else f"mixed ({ks[0]}-{ks[-1]})",
            "n_test": splits.get("test", 0), "n_calib": splits.get("calib", 0), "n_items": len(task.items),
            "questions": len({it.question.key() for it in task.items})}


def list_tasks(config: dict, tasks_dir: str | os.PathLike) -> list[dict]:
    """The configured tasks: from the prepared file ``<tasks_dir>/<name>.jsonl`` when it exists (kind, K
    and sizes as prepared), otherwise what the config asks for (kind and K unknown until prepared)."""
    rows = []
    for name, conf in (config.get("tasks") or {}).items():
        path = Path(tasks_dir) / f"{name}.jsonl"
        row = {"task": name, "source": conf.get("source", "?"), "prepared": path.is_file(), "file": str(path)}
        if path.is_file():
            row |= task_summary(load_task_file(path))
        else:
            row |= {"kind": "?", "K": "?", "n_test": conf.get("n_test", "?"), "n_calib": conf.get("n_calib", "?"),
                    "n_items": "?", "questions": "?"}
        rows.append(row)
    return rows


def tasks_table(rows: list[dict]) -> str:
    """``anyjev ls`` output: an aligned plain-text table."""
    cols = ["task", "source", "kind", "K", "n_test", "n_calib", "questions", "prepared"]
    cells = [cols] + [[("yes" if r[c] else "no") if c == "prepared" else str(r[c]) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    if any(not r["prepared"] for r in rows):
        lines.append("(kind and K of a task not prepared yet are shown as ?; sizes are the configured ones)")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- export
def export_path(scores_path: str | os.PathLike) -> Path:
    """``scores_with_prompts.jsonl`` next to ``scores.jsonl``."""
    p = Path(scores_path)
    return p.with_name(p.name.replace("scores", "scores_with_prompts", 1) if "scores" in p.name else p.stem + "_with_prompts.jsonl")


def export_scores_with_prompts(scores_path: str | os.PathLike, task_file: str | os.PathLike, tokenizer,
                               out: str | os.PathLike | None = None) -> Path:
    """Write the cell's per-item scores with each layout's prompt text and token count.

    The prompts are rebuilt from the task file with the scoring code, and each one's hash must equal
    the ``prompt_sha`` stored when it was scored: a different task file, tokenizer or prompt version is
    refused (TaskDataError naming the item and layout) instead of pairing scores with the wrong text."""
    scores = read_scores(scores_path)
    identity, records = scores.identity, scores.items
    task = load_task_file(task_file)
    want = identity.get("task_sha256")
    if want and want != (have := file_sha256(task_file)):
        # Not fatal by itself (a header's recorded origin path changes the bytes, not the items): every
        # prompt is checked against its stored hash below.
        log.warning("%s: sha256 %s differs from the task file scored (%s, in %s); checking every prompt hash",
                    task_file, have[:12], want[:12], scores_path)
    prompts = scored_prompts(scores_path, records, task, task_file, tokenizer, PromptOptions.from_identity(identity))
    lines = [json.dumps({"type": "header", "format": EXPORT_FORMAT, "identity": identity, "scores": str(scores_path),
                         "task_file": str(task_file), "tokenizer": getattr(tokenizer, "name_or_path", "")},
                        sort_keys=True, ensure_ascii=False)]
    for rec in records:
        rendered = prompts[rec["id"]]
        layouts = {name: lay | {"n_tokens": rendered[name].n_tokens, "text": rendered[name].text}
                   for name, lay in rec["layouts"].items()}
        lines.append(json.dumps(rec | {"layouts": layouts}, sort_keys=True, ensure_ascii=False))
    dest = Path(out) if out is not None else export_path(scores_path)
    return write_text_atomic(dest, "\n".join(lines) + "\n")


def ls_text(config: dict, tasks_dir: str | os.PathLike) -> str:
    """``anyjev ls``: the tasks of a config (read strictly, not validated: listing must work on a config still
    being written) with what their prepared files hold."""
    return tasks_table(list_tasks(config, tasks_dir))
