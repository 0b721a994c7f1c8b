"""A run's files read back, each checked against its format: a cell's ``metrics.json``, ``predictions.csv``,
``scores.jsonl`` and ``provenance.json``, and the CSV tables made from them. A file that is missing, empty or not in
its format is one :class:`~anyjev.errors.FileFormatError` naming the file and where in it (never a parser's
traceback, never a default filled in for a key the format requires).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from anyjev.errors import FileFormatError, TaskDataError
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.evaluate import PREDICTION_COLUMNS
from anyjev.run.store import read_cell

# What metrics.json holds (anyjev.run.evaluate.evaluate_cell) that a reader relies on, and its JSON type.
METRICS_KEYS = {"n": int, "n_calib": int, "k": (int, str), "levels": list, "metrics": dict, "settings": dict,
                "identity": dict, "notes": list}
# Beside the EvaluationOptions it was made with, what metrics.json's settings record of how it was made.
SETTINGS_KEYS = ("prior_source", "interval", "resampled")
ITEM_KEYS = {"id": str, "gold": int, "group": str, "k": int, "labels": list, "question": str, "layouts": dict}
LAYOUT_KEYS = {"order": list, "swapped": bool, "prompt_sha": str, "lp": list}
SPLITS = (None, "test", "calib")


def _missing(path: Path) -> FileFormatError:
    return FileFormatError(str(path), "file", "missing")


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON object from PATH."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise FileFormatError(str(path), "line 1", "empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(str(path), f"line {exc.lineno}", f"not JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise FileFormatError(str(path), "line 1", f"a JSON {type(data).__name__}, not an object")
    return data


def _check_type(path: Path, where: str, value: object, kind: type | tuple[type, ...]) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = any(isinstance(value, k) and not (k is int and isinstance(value, bool)) for k in kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise FileFormatError(str(path), where, f"is {json.dumps(value)[:60]}, not a {names}")


def _is_scalar(value: object) -> bool:
    """A number, a flag or null: what a metrics.json entry's fields hold (``widened``, ``at_bound`` are flags)."""
    return value is None or isinstance(value, int | float)


def load_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """A cell's ``metrics.json``: its counts, levels, every level's entries (each a number or an object of numbers:
    value, lo, hi, ...), and the settings it was made with."""
    path = Path(path)
    data = read_json(path)
    for key, kind in METRICS_KEYS.items():
        if key not in data:
            raise FileFormatError(str(path), key, "missing: not a metrics.json written by `anyjev evaluate`")
        _check_type(path, key, data[key], kind)
    for level in data["levels"]:
        entries = data["metrics"].get(level)
        if not isinstance(entries, dict):
            raise FileFormatError(str(path), f"metrics.{level}", "missing, though levels lists it")
        for name, entry in entries.items():
            values = entry.values() if isinstance(entry, dict) else [entry]
            if not all(_is_scalar(v) or isinstance(v, dict) for v in values):
                raise FileFormatError(str(path), f"metrics.{level}.{name}", f"is {json.dumps(entry)[:80]}, not numbers")
    evaluation_options(data, path)
    for key in SETTINGS_KEYS:
        if key not in data["settings"]:
            raise FileFormatError(str(path), f"settings.{key}", "missing")
    for key in ("temperature", "answer_mass", "audit"):
        if key in data:
            _check_type(path, key, data[key], dict)
    for i, note in enumerate(data["notes"]):
        if not (isinstance(note, dict) and isinstance(note.get("text"), str) and isinstance(note.get("level"), str | None)):
            raise FileFormatError(str(path), f"notes[{i}]", f"is {json.dumps(note)[:80]}, not a level and a text")
    return data


def evaluation_options(metrics: Mapping[str, Any], path: str | os.PathLike) -> EvaluationOptions:
    """The evaluation options a ``metrics.json`` (read from PATH) was made with: every one is recorded."""
    settings = metrics["settings"]
    fields = [f.name for f in dataclasses.fields(EvaluationOptions)]
    absent = [f for f in fields if f not in settings]
    if absent:
        raise FileFormatError(str(path), "settings", f"lacks {', '.join(absent)}: made by another version of anyjev "
                              "evaluate; evaluate the cell again")
    try:
        return EvaluationOptions(**{f: settings[f] for f in fields})
    except (TypeError, ValueError) as exc:
        raise FileFormatError(str(path), "settings", str(exc)) from None


def read_csv(path: str | os.PathLike, columns: Mapping[str, str], *, comment: str | None = None) -> pd.DataFrame:
    """A CSV file with at least COLUMNS, each of its kind: ``text`` (kept as written), ``int`` or ``float`` (a number
    on every row), ``float?`` (a number or empty). Other columns are kept as pandas reads them (numbers, True/False,
    empty as NaN). COMMENT starts a comment line."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    text_columns = [c for c, kind in columns.items() if kind == "text"]
    try:
        header = pd.read_csv(path, nrows=0, comment=comment).columns
        # text as written (an item id "NA" stays "NA"); an empty number is missing (NaN)
        frame = pd.read_csv(path, dtype=dict.fromkeys(text_columns, str), keep_default_na=False,
                            na_values={c: [""] for c in header if c not in text_columns}, comment=comment)
    except pd.errors.EmptyDataError:
        raise FileFormatError(str(path), "line 1", f"empty file (no header line; expected columns {', '.join(columns)})") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise FileFormatError(str(path), "file", f"not a CSV table ({str(exc).splitlines()[0]})") from None
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise FileFormatError(str(path), "line 1", f"the header lacks column(s) {', '.join(absent)} (it has "
                              f"{', '.join(map(str, frame.columns))})")
    for column, kind in columns.items():
        if kind == "text":
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = numbers.isna() & (frame[column].notna() if kind == "float?" else True)
        bad |= (numbers != numbers.round()) if kind == "int" else False
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise FileFormatError(str(path), f"line {row + 2}", f"column {column} is {str(frame[column].iloc[row])!r:.40}, "
                                  f"not {'an integer' if kind == 'int' else 'a number'}")
        frame[column] = numbers.astype("int64" if kind == "int" else "float64")
    return frame


def load_predictions(path: str | os.PathLike) -> pd.DataFrame:
    """A cell's ``predictions.csv``: one row per (test item, level, layout group)."""
    frame = read_csv(path, PREDICTION_COLUMNS)
    if frame.empty:
        raise FileFormatError(str(path), "line 2", "no rows: a cell has at least one test item")
    return frame[list(PREDICTION_COLUMNS)]


def load_provenance(path: str | os.PathLike) -> dict[str, Any]:
    """A cell's ``provenance.json``; an empty record for a cell scored without one (outside the workflow)."""
    return read_json(path) if Path(path).exists() else {}


@dataclass
class Scores:
    """A cell's ``scores.jsonl``: the identity it was scored under, its item records (file order: record ``i`` is
    on line ``i + 2``) and its other records (content-free probes, an adaptive certificate) by id."""

    path: Path
    identity: dict[str, Any]
    items: list[dict[str, Any]]
    extras: dict[str, dict[str, Any]]


def is_test(record: Mapping[str, Any]) -> bool:
    """Whether an item record is a test item's (a record without a split is one)."""
    return record.get("split") in (None, "test")


def load_scores(path: str | os.PathLike) -> Scores:
    """A cell's ``scores.jsonl``, each item record checked (its fields, and every layout's order and log-probs of K
    labels)."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    try:
        identity, items, extras = read_cell(path)
    except FileFormatError:
        raise
    except TaskDataError as exc:
        raise FileFormatError(exc.path, exc.where, str(exc).removeprefix(f"{exc.path}:{exc.where}: ")) from None
    except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
        raise FileFormatError(str(path), "line 1", f"not a scores file's header ({type(exc).__name__}: {exc})") from None
    if not isinstance(identity, dict):
        raise FileFormatError(str(path), "line 1", "the header's identity is not an object")
    for i, rec in enumerate(items):
        _check_item(path, f"line {i + 2}", rec)
    return Scores(path, identity, items, extras)


def _check_item(path: Path, where: str, rec: object) -> None:
    if not isinstance(rec, dict):
        raise FileFormatError(str(path), where, "not a JSON object")
    for key, kind in ITEM_KEYS.items():
        if key not in rec:
            raise FileFormatError(str(path), where, f"item record lacks {key!r}")
        _check_type(path, f"{where}: {key}", rec[key], kind)
    if rec.get("split") not in SPLITS:
        raise FileFormatError(str(path), where, f"split {rec.get('split')!r} is none of test, calib")
    k = rec["k"]
    if len(rec["labels"]) != k or not 0 <= rec["gold"] < k or not rec["layouts"]:
        raise FileFormatError(str(path), where, f"item {rec['id']!r}: K = {k} but {len(rec['labels'])} labels, gold "
                              f"{rec['gold']}, {len(rec['layouts'])} layouts")
    for name, lay in rec["layouts"].items():
        at = f"{where}: item {rec['id']!r} layout {name}"
        group, _, rotation = name.partition("/r")
        if not isinstance(lay, dict) or not group or not rotation.isdigit():
            raise FileFormatError(str(path), at, "not a layout (<group>/r<rotation>: {order, swapped, prompt_sha, lp})")
        for key, kind in LAYOUT_KEYS.items():
            if key not in lay:
                raise FileFormatError(str(path), at, f"lacks {key!r}")
            _check_type(path, f"{at}: {key}", lay[key], kind)
        if sorted(lay["order"]) != list(range(k)) or len(lay["lp"]) != k or not all(
                isinstance(v, int | float) and not math.isnan(v) for v in lay["lp"]):
            raise FileFormatError(str(path), at, f"order {lay['order']} and lp {lay['lp']} are not K = {k} options and "
                                  "their log-probs")
