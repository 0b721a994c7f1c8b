"""A model's job records (``results/allocations/<model>/<job>.json``): what one scoring job of a model's cells
(``score_jobs: model``, :mod:`anyjev.run.allocation`) recorded for each cell, and their one reader.

A record is a JSON object: :data:`FORMAT`, the ``model``, where and when the job ran, and ``cells``: per task its
outcome, ``status`` ``ok`` (the staged ``scores`` and ``provenance`` it is published from, its counts, the definition
it was scored under, the task file's SHA-256, the staged scores' size and time) or ``failed`` (the ``error`` type and
its ``message``). The standard library alone: publishing a cell (:mod:`anyjev.run.publish`) is a process of its own.
"""

from __future__ import annotations

import os
from typing import Any

from anyjev.errors import FileFormatError
from anyjev.rundata.checked import check_keys, check_type, read_json

FORMAT = "anyjev.allocation/1"
OK, FAILED = "ok", "failed"
RECORD_KEYS = {"model": str, "cells": dict}
OUTCOME_KEYS = {OK: {"status": str, "scores": str, "provenance": str, "counts": dict},
                FAILED: {"status": str, "error": str, "message": str}}


def read_allocation(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model's job record, checked: its format, its model and every cell's outcome (one a publishing step reads)."""
    record = read_json(path)
    if record.get("format") != FORMAT:
        raise FileFormatError(str(path), "format", f"is {record.get('format')!r:.60}, not {FORMAT!r}: not a record of a "
                              "model's scoring job")
    check_keys(path, "record", record, RECORD_KEYS, "the record")
    for task, outcome in record["cells"].items():
        where = f"cells.{task}"
        check_type(path, where, outcome, dict)
        keys = OUTCOME_KEYS.get(outcome.get("status"))
        if keys is None:
            raise FileFormatError(str(path), f"{where}.status", f"is {outcome.get('status')!r:.60}, not {OK} or {FAILED}")
        check_keys(path, where, outcome, keys, "the outcome")
    return record
