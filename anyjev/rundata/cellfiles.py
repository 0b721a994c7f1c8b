"""A finished cell's files beside its scores, each read back and checked against its format: ``metrics.json`` and
``predictions.csv`` (what the evaluate step writes: :mod:`anyjev.run.evaluate`), ``provenance.json`` (what the score
step records). A file that is missing, empty or not in its format is one :class:`~anyjev.errors.FileFormatError` naming
the file and where in it. pandas is imported when ``predictions.csv`` is read, not with this module: the evaluate step
writes the columns defined here without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyjev.errors import FileFormatError
from anyjev.numbers.options import EvaluationOptions
from anyjev.rundata.checked import check_type, read_csv, read_json

if TYPE_CHECKING:
    import pandas as pd

# What metrics.json holds (anyjev.run.evaluate.evaluate_cell) that a reader relies on, and its JSON type.
METRICS_KEYS = {"n": int, "n_calib": int, "k": (int, str), "levels": list, "metrics": dict, "settings": dict,
                "identity": dict, "notes": list}
# Beside the EvaluationOptions it was made with, what metrics.json's settings record of how it was made.
SETTINGS_KEYS = ("prior_source", "interval", "resampled")
# predictions.csv's columns, in order, and what each holds (anyjev.rundata.checked.read_csv's kinds).
PREDICTION_COLUMNS = {"item_id": "text", "level": "text", "group": "text", "gold": "int", "pred": "int", "conf": "float",
                      "p_gold": "float", "n_top": "int"}


def _is_scalar(value: object) -> bool:
    """A number, a flag or null: what a metrics.json entry's fields hold (``widened``, ``at_bound`` are flags)."""
    return value is None or isinstance(value, int | float)


def read_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """A cell's ``metrics.json``: its counts, levels, every level's entries (each a number or an object of numbers:
    value, lo, hi, ...), and the settings it was made with."""
    path = Path(path)
    data = read_json(path)
    for key, kind in METRICS_KEYS.items():
        if key not in data:
            raise FileFormatError(str(path), key, "missing: not a metrics.json written by `anyjev evaluate`")
        check_type(path, key, data[key], kind)
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
            check_type(path, key, data[key], dict)
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


def read_predictions(path: str | os.PathLike) -> pd.DataFrame:
    """A cell's ``predictions.csv``: one row per (test item, level, layout group)."""
    frame = read_csv(path, PREDICTION_COLUMNS)
    if frame.empty:
        raise FileFormatError(str(path), "line 2", "no rows: a cell has at least one test item")
    return frame[list(PREDICTION_COLUMNS)]


def read_provenance(path: str | os.PathLike) -> dict[str, Any]:
    """A cell's ``provenance.json``; an empty record for a cell scored without one (outside the workflow)."""
    return read_json(path) if Path(path).exists() else {}
