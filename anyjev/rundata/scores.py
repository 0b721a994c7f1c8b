"""A cell's scores file (``scores.jsonl``): its format and its one reader.

A JSON-lines file: a header line (``type: header``, :data:`FORMAT`, the cell's ``identity``: what was read, and the
``server`` the records were scored on when known), then one record per line: the items (:data:`ITEM`) in task order,
each with its id, split, gold, prior group, K, labels and label ids, its question key, and per layout it read the
option order, the Yes/No phrasing, the prompt hash and the label log-probs in position space; then the cell's other
records, each with a unique ``id``: the content-free probes (:data:`CONTENT_FREE`), adaptive scoring's stopping
threshold (:data:`CERTIFICATE`), the batch audit (:data:`AUDIT`). Lines are split on "\\n" alone (:func:`split_lines`).
Scoring writes it (:mod:`anyjev.run.store`, :mod:`anyjev.run.records`); everything that reads one (evaluation, the
viewer, ``anyjev show``, the run reader's frames) reads it through :func:`read_scores`, which checks every record.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.errors import FileFormatError
from anyjev.rundata.checked import check_keys, check_type, read_text

FORMAT = "anyjev.scores/1"
ITEM = "item"
CONTENT_FREE = "content_free"
CERTIFICATE = "certificate"
AUDIT = "audit"
# The records a cell holds after its items, each with a unique id.
EXTRA_KINDS = (CONTENT_FREE, CERTIFICATE, AUDIT)

ITEM_KEYS = {"id": str, "gold": int, "group": str, "k": int, "labels": list, "question": str, "layouts": dict}
LAYOUT_KEYS = {"order": list, "swapped": bool, "prompt_sha": str, "lp": list}
SPLITS = (None, "test", "calib")
# What to do with a published scores file that does not read (a cell's folder under results/cells/).
WAY_BACK = ("delete it and run again: a cell scored by its model's job (score_jobs: model) is published again from its "
            "staged copy, without a server; a cell scored alone is scored again")


@dataclass(frozen=True)
class Scores:
    """A cell's ``scores.jsonl`` as read: the identity it was scored under, its item records (file order: record ``i``
    is on line ``i + 2``), its other records (content-free probes, an adaptive certificate, the batch audit) by id,
    and the server the records were scored on (None when the file does not record it)."""

    path: Path
    identity: dict[str, Any]
    items: list[dict[str, Any]]
    extras: dict[str, dict[str, Any]]
    server: dict[str, Any] | None


def split_lines(text: str) -> list[str]:
    """TEXT's lines split on "\\n" only: str.splitlines() also splits on U+2028, U+0085 and other characters that
    json.dumps(ensure_ascii=False) writes unescaped (e.g. inside an item id)."""
    found = text.split("\n")
    return found[:-1] if found and found[-1] == "" else found


def is_item(record: Mapping[str, Any]) -> bool:
    """Item records carry ``type: item`` (older files none); the other kinds are the cell's other records."""
    return record.get("type", ITEM) == ITEM


def is_test(record: Mapping[str, Any]) -> bool:
    """Whether an item record is a test item's (a record without a split is one)."""
    return record.get("split") in (None, "test")


def header_of(path: str | os.PathLike, text: str) -> dict[str, Any]:
    """The header line of TEXT (the scores file or checkpoint at PATH), refused unless it is one of :data:`FORMAT`."""
    first = split_lines(text)[0] if text else ""
    try:
        header = json.loads(first)
    except json.JSONDecodeError as exc:
        raise FileFormatError(str(path), "line 1", f"not JSON ({exc}): the file is cut short or damaged; "
                              f"{WAY_BACK}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise FileFormatError(str(path), "line 1", f"not an {FORMAT} file (header {header!r:.200})")
    if not isinstance(header.get("identity"), dict):
        raise FileFormatError(str(path), "line 1", "the header's identity is not an object")
    return header


def scored_under(path: str | os.PathLike, identity: Mapping[str, Any]) -> bool:
    """Whether PATH is a final scores file made under IDENTITY (reads its header line only; False for anything else)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return header_of(path, fh.readline()).get("identity") == identity
    except (OSError, UnicodeDecodeError, FileFormatError):
        return False


def read_scores(path: str | os.PathLike) -> Scores:
    """A cell's scores file, every record checked: each item's fields, and every layout's order and log-probs of K
    labels; each other record's kind and id. A file that is missing, empty, cut or not in the format is one
    FileFormatError naming it and the line."""
    path = Path(path)
    text = read_text(path, empty=f"empty scores file: {WAY_BACK}")
    header = header_of(path, text)
    items: list[dict[str, Any]] = []
    extras: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(split_lines(text)[1:], start=2):
        where = f"line {n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FileFormatError(str(path), where, f"not JSON ({exc}): the file is cut short or damaged; "
                                  f"{WAY_BACK}") from None
        if not isinstance(record, dict):
            raise FileFormatError(str(path), where, "not a JSON object")
        if is_item(record):
            check_item(path, where, record)
            items.append(record)
            continue
        if record.get("type") not in EXTRA_KINDS:
            raise FileFormatError(str(path), where, f"record type {record.get('type')!r} is none of "
                                  f"{', '.join((ITEM, *EXTRA_KINDS))}")
        check_type(path, f"{where}: id", record.get("id"), str)
        if record["id"] in extras:
            raise FileFormatError(str(path), where, f"a second {record['type']} record with id {record['id']!r}")
        extras[record["id"]] = record
    return Scores(path, header["identity"], items, extras, header.get("server"))


def check_item(path: str | os.PathLike, where: str, record: Mapping[str, Any]) -> None:
    """Refuse an item RECORD (at WHERE in PATH) that lacks a field, or whose layouts are not K options and their
    log-probs."""
    check_keys(path, where, record, ITEM_KEYS, "item record")
    if record.get("split") not in SPLITS:
        raise FileFormatError(str(path), where, f"split {record.get('split')!r} is none of test, calib")
    k = record["k"]
    if len(record["labels"]) != k or not 0 <= record["gold"] < k or not record["layouts"]:
        raise FileFormatError(str(path), where, f"item {record['id']!r}: K = {k} but {len(record['labels'])} labels, "
                              f"gold {record['gold']}, {len(record['layouts'])} layouts")
    for name, layout in record["layouts"].items():
        at = f"{where}: item {record['id']!r} layout {name}"
        group, _, rotation = name.partition("/r")
        if not isinstance(layout, dict) or not group or not rotation.isdigit():
            raise FileFormatError(str(path), at, "not a layout (<group>/r<rotation>: {order, swapped, prompt_sha, lp})")
        check_keys(path, at, layout, LAYOUT_KEYS, "layout")
        if sorted(layout["order"]) != list(range(k)) or len(layout["lp"]) != k or not all(
                isinstance(v, int | float) and not math.isnan(v) for v in layout["lp"]):
            raise FileFormatError(str(path), at, f"order {layout['order']} and lp {layout['lp']} are not K = {k} "
                                  "options and their log-probs")
