"""A run read as data: every file of a run is read through this package, checked as it is read, and a run is given
back as tidy pandas frames (docs/results.md).

    from anyjev.rundata import read_run
    run = read_run("results", "logs")      # or read_cells([...cell folders...])
    run.cells, run.metrics, run.predictions, run.items, run.probabilities, run.failed

Each file has one module that holds its format and its reader: a cell's ``scores.jsonl`` (:mod:`.scores`), its
``metrics.json``, ``predictions.csv`` and ``provenance.json`` (:mod:`.cellfiles`), its ``replicates.npz``
(:mod:`.replicates`), a model's job records (:mod:`.allocations`), the summary, published and vs_published tables
(:mod:`.summary`); a missing, empty or malformed file is one :class:`~anyjev.errors.FileFormatError` naming it
(:mod:`.checked`). The package stands below the run's steps (:mod:`anyjev.run` writes these files and reads them back
through it) and above the numbers; it imports nothing from :mod:`anyjev.run` or :mod:`anyjev.reports`.

The names below are imported when first used (PEP 562), not with the package: a step that reads one file (publishing a
cell, evaluating one) does not load pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyjev.rundata.cell import Cell
    from anyjev.rundata.layout import CellLayout
    from anyjev.rundata.run import Run, read_cells, read_layout, read_run

__all__ = ["Cell", "CellLayout", "Run", "read_cells", "read_layout", "read_run"]

_MODULES = {"Cell": "cell", "CellLayout": "layout", "Run": "run", "read_cells": "run", "read_layout": "run",
            "read_run": "run"}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
