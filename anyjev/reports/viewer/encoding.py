"""How the viewer's data files hold their values: probabilities to a few significant digits, texts as shared
lines, repeated values once, and each file as one ``anyjevViewer.load(...)`` call (a ``<script>`` works from
``file://``, where browsers refuse ``fetch()``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

DIGITS = 5  # significant digits of the probabilities in the data files (3 decimals are shown)


def sig(x: float, digits: int = DIGITS) -> float:
    """A probability rounded to DIGITS significant digits (what the data files hold)."""
    return float(f"{x:.{digits}g}")


def probs(lp: np.ndarray, k: int) -> list[float]:
    """Option-space log-probs to rounded probabilities of the item's own K options (padding dropped)."""
    return [sig(p) for p in np.exp(np.asarray(lp, dtype=np.float64)[:k]).tolist()]


def num(v: object) -> float | None:
    """A float for JSON, None for a missing value (None, NaN or pandas' NA in a frame)."""
    if v is None or isinstance(v, bool) or v is pd.NA:
        return None
    f = float(v)  # type: ignore[arg-type]
    return None if math.isnan(f) else f


class Lines:
    """Prompt texts stored as lists of indices into one table of distinct lines: a cell's prompts share most of
    their lines (the system turn, the question, every option line of every rotation when items share a question),
    so a cell of 300 items x 40 layouts stores each once. ``"\\n".join`` of the lines gives the text back exactly."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str) -> list[int]:
        ids = []
        for line in text.split("\n"):
            if line not in self.index:
                self.index[line] = len(self.rows)
                self.rows.append(line)
            ids.append(self.index[line])
        return ids

    def text(self, ids: list[int]) -> str:
        return "\n".join(self.rows[i] for i in ids)


class Table:
    """Identical values stored once: a batch prior is the same for every item of a prior group, and items of one
    question share their layouts' shape."""

    def __init__(self) -> None:
        self.rows: list = []
        self.index: dict[str, int] = {}

    def add(self, value: object) -> int | None:
        if value is None:
            return None
        key = json.dumps(value)
        if key not in self.index:
            self.index[key] = len(self.rows)
            self.rows.append(value)
        return self.index[key]


def js_data(kind: str, key: str, data: dict) -> str:
    """A data file: one call that hands DATA to the page (a ``<script>`` works from ``file://``)."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"anyjevViewer.load({json.dumps(kind)},{json.dumps(key)},{body});\n"


def safe_json(data: dict) -> str:
    """JSON to sit inside ``<script type="application/json">``: no ``</`` can end the element."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
