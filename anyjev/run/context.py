"""Every prompt against the model's context length, before any server starts.

A prompt longer than the context fails only at the server (HTTP 400, after the start-up and the canary)
and without the item's id or line. The check reads the prompts the cell will send, prepared once for both
(:func:`anyjev.run.prepared.prepare_items`), so the count checked is the count sent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from anyjev.data.taskfile import find_item_line, user_file_line
from anyjev.errors import TaskDataError
from anyjev.run.prepared import PreparedItem

# Scoring asks for one generated token (the label); vLLM refuses prompt + max_tokens > max_model_len.
ANSWER_TOKENS = 1


def check_prompt_lengths(prepared: Sequence[PreparedItem], max_model_len: int, *, source: str | os.PathLike,
                         model: str = "<name>", origin: dict | None = None, limit_name: str | None = None) -> int:
    """Raise :class:`TaskDataError` when an item's longest prompt plus the answer token exceeds
    ``max_model_len``; return the longest prompt's token count.

    PREPARED are the cell's items as it will send them; ``source`` is the task file they were read from (the
    item's line is looked up there, only on failure) and ``origin`` its recorded origin: when that is the user's task
    file, unchanged since, the message cites the item's line there; ``model`` names the config key
    ``models.<model>.max_model_len`` in the message, or LIMIT_NAME says where the limit comes from instead (a ``url``
    model's server). The error names the longest offending item, its line, its
    token count and the limit, and counts the other offending items.
    """
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1:
        raise ValueError(f"max_model_len must be a positive integer, got {max_model_len!r}")
    longest = 0
    too_long: list[tuple[int, str, object]] = []  # (tokens, layout name, item)
    for p in prepared:
        layout, ids = max(p.layouts, key=lambda pair: len(pair[1]))
        longest = max(longest, len(ids))
        if len(ids) + ANSWER_TOKENS > max_model_len:
            too_long.append((len(ids), layout.name, p.item))
    if not too_long:
        return longest
    n_tokens, layout_name, item = max(too_long, key=lambda t: t[0])
    line = find_item_line(source, item.id)
    path, where = str(source), f"line {line}" if line is not None else "file"
    users = user_file_line(origin, item.id)
    if users is not None:  # the line the user edits; the prepared file's line after it
        path, where = users[0], f"line {users[1]} (prepared as {source}:{where})"
    key = f"models.{model}.max_model_len"
    limit = f"the model's context length ({key})" if limit_name is None else limit_name
    fix = f"Raise {key} (up to what the model supports)" if limit_name is None else "Serve the model with a longer context"
    others = [it.id for _, _, it in too_long if it is not item]
    more = ""
    if others:
        shown = ", ".join(ascii(i) for i in others[:5]) + (", ..." if len(others) > 5 else "")
        more = f" {len(others)} other item(s) are too long as well: {shown}."
    raise TaskDataError(
        path,
        where,
        f"item {ascii(item.id)}: its longest prompt (layout {layout_name}) is {n_tokens} tokens; with the "
        f"{ANSWER_TOKENS} answer token that is {n_tokens + ANSWER_TOKENS} > {max_model_len}, {limit}.{more} {fix} "
        f"or shorten the item's state ({len(item.state)} characters).",
    )
