"""The run's tables read back, each checked against its columns: ``summary.csv`` (one row per model, task and level:
:mod:`anyjev.reports.tables` writes it), the table of published numbers a run is compared with (the config's
``published``), and ``vs_published.csv`` (the comparison). A table that is missing, empty, lacks a column or holds a
value that is not of its column's kind is one :class:`~anyjev.errors.FileFormatError` naming it (and the line).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from anyjev.rundata.checked import read_csv

if TYPE_CHECKING:
    import pandas as pd

# The metrics a table shows, in its order: each is a column of summary.csv with its interval (<metric>_lo, _hi).
TABLE_METRICS = ("acc", "macro_f1", "nll", "brier", "ece", "flip", "cov@5", "aurc")
# summary.csv's columns that every table row has, and their kinds (anyjev.rundata.checked.read_csv)
SUMMARY_COLUMNS = {"model": "text", "task": "text", "level": "text", "n": "int", "K": "text"} | {
    f"{m}{end}": "float?" for m in TABLE_METRICS for end in ("", "_lo", "_hi")}
PUBLISHED_COLUMNS = {"model": "text", "task": "text", "level": "text", "metric": "text", "value": "float"}
VS_PUBLISHED_COLUMNS = {"model": "text", "task": "text", "level": "text", "metric": "text", "ours": "float",
                        "lo": "float", "hi": "float", "published": "float"}


def read_summary(path: str | os.PathLike) -> pd.DataFrame:
    """summary.csv, checked, with K kept as text (it may be ``mixed (2-5)``)."""
    return read_csv(path, SUMMARY_COLUMNS)


def read_published(path: str | os.PathLike) -> pd.DataFrame:
    """A table of published numbers (long form: model, task, level, metric, value; ``#`` starts a comment)."""
    return read_csv(path, PUBLISHED_COLUMNS, comment="#")


def read_vs_published(path: str | os.PathLike) -> pd.DataFrame:
    """vs_published.csv, checked."""
    return read_csv(path, VS_PUBLISHED_COLUMNS)
