"""The run page's data (inline in ``index.html``): every cell of the run, a finished one with its summary-table
numbers per level (the rows :func:`anyjev.reports.tables.summary_frame` makes of the run's frames, as in
``summary.csv``) and header facts from the cells frame (the batch audit's among them), a failed one with the first
line of its error and its log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from anyjev.decision.layouts import GROUPS
from anyjev.reports.tables import METRIC_TITLES, arrow, cell_notes, interval_note
from anyjev.reports.viewer.encoding import num
from anyjev.rundata import Run
from anyjev.rundata.summary import TABLE_METRICS

VIEWER_FORMAT = "anyjev.viewer/1"


def _text(v: object) -> str | None:
    return None if v is None or pd.isna(v) else str(v)


def cell_summary(row: dict[str, Any], table: pd.DataFrame, levels: Sequence[str]) -> dict:
    """A finished cell's card and summary rows: ROW is its row of the cells frame, TABLE its summary-table rows, LEVELS
    those the viewer shows (its notes about other levels are left out)."""
    metrics = {}
    for r in table.to_dict("records"):
        metrics[r["level"]] = {m: [num(r[m]), num(r[f"{m}_lo"]), num(r[f"{m}_hi"])] for m in TABLE_METRICS}
        metrics[r["level"]]["tie_rate"] = num(r.get("tie_rate"))
    temperature = {g: {"T": num(row[f"T_{g}"]), "at_bound": bool(row[f"T_{g}_at_bound"])}
                   for g in GROUPS if num(row.get(f"T_{g}")) is not None}
    mass = num(row.get("answer_mass"))
    model, task = row["model"], row["task"]
    audit = None
    if num(row.get("audit_items")) is not None:  # the batch audit (scoring.audit): changed decisions per level
        audit = {"items": int(row["audit_items"]), "max_dlp": num(row["audit_max_abs_logprob_diff"]),
                 "changed": {lv: int(row[f"audit_changed_{lv}"]) for lv in metrics
                             if num(row.get(f"audit_changed_{lv}")) is not None},
                 "prompts": int(row["audit_cost_prompts"]), "seconds": num(row["audit_cost_seconds"])}
    return {"model": model, "task": task, "key": f"{model}/{task}", "status": "done", "n": int(row["n"]),
            "n_calib": int(row["n_calib"]), "k": row["K"], "levels": list(metrics), "metrics": metrics,
            "temperature": temperature, "notes": cell_notes(row, levels),
            "answer_mass": None if mass is None else [mass, num(row["answer_mass_lo"]), num(row["answer_mass_hi"])],
            "audit": audit,
            "prior": f"{row['prior_mode']} ({row['prior_source']})", "interval": interval_note(row),
            "finished": _text(row.get("finished")), "prompt_profile": _text(row.get("prompt_profile")),
            "files": {"cell": f"cells/{model}/{task}.js", "items": f"cells/{model}/{task}.items.js"}}


def run_page(run: Run, levels: Sequence[str], summary: pd.DataFrame) -> dict:
    """The run page's data: every cell of RUN, finished (its SUMMARY rows) or failed (why), and the LEVELS shown."""
    cells = []
    for row in run.cells.to_dict("records"):
        model, task = row["model"], row["task"]
        if row["status"] == "done":
            cells.append(cell_summary(row, summary[(summary["model"] == model) & (summary["task"] == task)], levels))
        else:
            cells.append({"model": model, "task": task, "key": f"{model}/{task}", "status": "failed", "error": row["error"],
                          "log": row["log"]})
    return {"format": VIEWER_FORMAT, "levels": list(levels),
            "metrics": [{"key": m, "title": METRIC_TITLES[m], "arrow": arrow(m)} for m in TABLE_METRICS],
            "models": list(dict.fromkeys(m for m, _ in run.order)), "tasks": list(dict.fromkeys(t for _, t in run.order)),
            "cells": cells}
