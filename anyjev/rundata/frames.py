"""The tidy frames of a run's cells: one row per observation, the cell's ``model`` and ``task`` on every row.

* :func:`cells_frame`: one row per cell, finished or failed (counts, K, settings, the notes its evaluation made for a
  reader, answer mass, L1's temperatures, the batch audit's numbers, provenance essentials; the error line and log of a
  failed one);
* :func:`metrics_frame`: one row per (cell, level, metric), with every field ``metrics.json`` holds for it;
* :func:`level_differences_frame`: one row per (cell, level, metric): the level minus raw, with its paired interval;
* :func:`predictions_frame`: ``predictions.csv``, one row per (cell, test item, level, layout group);
* :func:`items_frame`: one row per scored item (test and calibration) of ``scores.jsonl``;
* :func:`probabilities_frame`: one row per (item, layout, position): the label shown there, the option it stood
  for, and its log-probability and probability renormalised over the labels;
* :func:`failed_frame`: one row per failed cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from anyjev.rundata.cell import Cell

CELL_KEY = ["model", "task"]
ITEM_COLUMNS = ["item_id", "split", "gold", "k", "prior_group", "question_key", "labels", "label_ids", "label_kind",
                "answer_mass", "adaptive"]
PROBABILITY_COLUMNS = ["item_id", "split", "layout", "group", "rotation", "swapped", "prompt_sha", "position", "label",
                       "option", "lp", "p"]
FAILED_COLUMNS = ["model", "task", "error", "log"]
FIRST_FIELDS = ("value", "T", "lo", "hi")  # an entry's fields in this order, then the others as the file has them


def flatten(entry: object, name: str = "value") -> dict[str, Any]:
    """A ``metrics.json`` entry as columns: a number is NAME; an object's ``value`` is NAME and its other fields
    ``NAME_field`` (a nested object's ``NAME_field_sub``; under the default NAME, ``value``, they are ``field`` and
    ``field_sub``), so whatever the evaluation records becomes a column of its own."""
    if not isinstance(entry, Mapping):
        return {name: entry}
    out: dict[str, Any] = {}
    for key, value in sorted(entry.items(), key=lambda kv: FIRST_FIELDS.index(kv[0]) if kv[0] in FIRST_FIELDS else len(FIRST_FIELDS)):
        column = name if key == "value" else (key if name == "value" else f"{name}_{key}")
        out |= flatten(value, column) if isinstance(value, Mapping) else {column: value}
    return out


def _frame(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    """ROWS as a frame whose first columns are COLUMNS (the others follow in order of appearance)."""
    frame = pd.DataFrame(list(rows))
    first = [c for c in columns if c in frame.columns]
    return frame.reindex(columns=[*columns, *[c for c in frame.columns if c not in first]])


# --------------------------------------------------------------------------------------------------- cells
def cell_row(cell: Cell) -> dict[str, Any]:
    """A finished cell's row of the cells frame."""
    m = cell.metrics
    settings, identity, prov = m["settings"], m["identity"], cell.provenance
    row: dict[str, Any] = {"model": cell.model, "task": cell.task, "status": "done", "n": m["n"], "n_calib": m["n_calib"],
                           "K": m["k"], "levels": ",".join(m["levels"]),
                           "prompt_profile": (identity.get("prompt_profile") or {}).get("name"),
                           "prior_mode": settings["prior_mode"], "prior_source": settings["prior_source"],
                           "interval": settings["interval"], "n_boot": settings["n_boot"],
                           "resampled": settings["resampled"], "notes": m["notes"]}
    if "answer_mass" in m:
        row |= flatten(m["answer_mass"], "answer_mass")
    if "audit" in m:  # the batch audit: audit_items, audit_max_abs_logprob_diff, audit_changed_<level>, audit_cost_...
        row |= flatten({k: v for k, v in m["audit"].items() if k not in ("how", "changed_items")}, "audit")
    for group, fit in (m.get("temperature") or {}).items():
        row |= {(f"T_{group}" if key == "T" else f"T_{group}_{key}"): value for key, value in flatten(fit).items()}
    git = prov.get("git") or {}
    row |= {"task_sha256": identity.get("task_sha256"), "served_model": (identity.get("model") or {}).get("served_name"),
            "vllm_version": prov.get("vllm_version"), "git_commit": git.get("commit"), "git_dirty": git.get("dirty"),
            "started": prov.get("started"), "finished": prov.get("finished"), "seconds": prov.get("seconds"),
            "folder": str(cell.folder), "error": None, "log": None}
    return row


def cells_frame(order: Sequence[tuple[str, str]], finished: Mapping[tuple[str, str], Cell],
                failures: Mapping[tuple[str, str], Mapping[str, str | None]]) -> pd.DataFrame:
    """One row per cell of ORDER: the FINISHED ones' facts, the others' error line and log."""
    rows = []
    for key in order:
        if key in finished:
            rows.append(cell_row(finished[key]))
        else:
            rows.append({"model": key[0], "task": key[1], "status": "failed", **failures[key]})
    frame = _frame(rows, [*CELL_KEY, "status"])
    if len(frame):  # counts stay integers beside a failed cell's gaps; K is an int or a text ("mixed (2-5)")
        frame = frame.astype({c: "Int64" for c in ("n", "n_calib", "n_boot") if c in frame.columns})
        frame["K"] = pd.Series([r.get("K") for r in rows], index=frame.index, dtype=object)
    return frame


# ------------------------------------------------------------------------------------------------- metrics
def metrics_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """Every entry of every level of each cell's ``metrics.json``: value, lo, hi, widened, and whatever else it
    holds."""
    rows = []
    for cell in cells:
        m = cell.metrics
        for level in m["levels"]:
            for metric, entry in m["metrics"][level].items():
                rows.append({"model": cell.model, "task": cell.task, "level": level, "metric": metric} | flatten(entry))
    return _frame(rows, [*CELL_KEY, "level", "metric", "value", "lo", "hi"])


def level_differences_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """Every level minus raw, per cell and metric (``metrics.json``'s ``level_minus_raw``): the paired difference on the
    same items and resamples, with its interval."""
    rows = []
    for cell in cells:
        for level, by_metric in (cell.metrics.get("level_minus_raw") or {}).items():
            for metric, entry in by_metric.items():
                rows.append({"model": cell.model, "task": cell.task, "level": level, "versus": "raw", "metric": metric}
                            | flatten(entry))
    return _frame(rows, [*CELL_KEY, "level", "versus", "metric", "value", "lo", "hi"])


def predictions_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """Each cell's ``predictions.csv`` with the cell's model and task."""
    frames = [cell.predictions.assign(model=cell.model, task=cell.task) for cell in cells]
    if not frames:
        return pd.DataFrame(columns=CELL_KEY)
    frame = pd.concat(frames, ignore_index=True)
    return frame[[*CELL_KEY, *[c for c in frame.columns if c not in CELL_KEY]]]


# --------------------------------------------------------------------------------------------------- items
def item_rows(cell: Cell) -> list[dict[str, Any]]:
    return [{"model": cell.model, "task": cell.task, "item_id": r["id"], "split": r.get("split"), "gold": r["gold"],
             "k": r["k"], "prior_group": r["group"], "question_key": r["question"], "labels": list(r["labels"]),
             "label_ids": list(r.get("label_ids") or []), "label_kind": r.get("label_kind"),
             "answer_mass": r.get("answer_mass"), "adaptive": r.get("adaptive")} for r in cell.scores.items]


def items_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """One row per scored item: split, gold, K, prior group, question key, labels, answer mass, and (for an item
    read with adaptive rotations) its adaptive summary."""
    frame = _frame((row for cell in cells for row in item_rows(cell)), [*CELL_KEY, *ITEM_COLUMNS])
    return frame.astype({"answer_mass": "float64"}) if len(frame) else frame


def layout_parts(name: str) -> tuple[str, int]:
    """(group, rotation) of a layout name such as ``rev/r3``."""
    group, _, rotation = name.partition("/r")
    return group, int(rotation)


def probability_columns(cell: Cell) -> dict[str, list]:
    """A cell's layout-level label probabilities as columns (built column-wise: a paper-sized cell has 10^5 rows)."""
    cols: dict[str, list] = {c: [] for c in PROBABILITY_COLUMNS}
    for rec in cell.scores.items:
        k, labels = rec["k"], rec["labels"]
        for name, lay in rec["layouts"].items():
            group, rotation = layout_parts(name)
            for key, value in (("item_id", rec["id"]), ("split", rec.get("split")), ("layout", name), ("group", group),
                               ("rotation", rotation), ("swapped", lay["swapped"]), ("prompt_sha", lay["prompt_sha"])):
                cols[key].extend([value] * k)
            cols["position"].extend(range(k))
            cols["label"].extend(labels)
            cols["option"].extend(lay["order"])
            cols["lp"].extend(lay["lp"])
    cols["p"] = np.exp(np.asarray(cols["lp"], dtype=np.float64)).tolist()
    return cols


def probabilities_frame(cells: Sequence[Cell]) -> pd.DataFrame:
    """One row per (cell, item, layout, position)."""
    frames = [pd.DataFrame(probability_columns(cell)).assign(model=cell.model, task=cell.task) for cell in cells]
    if not frames:
        return pd.DataFrame(columns=[*CELL_KEY, *PROBABILITY_COLUMNS])
    frame = pd.concat(frames, ignore_index=True)
    return frame[[*CELL_KEY, *PROBABILITY_COLUMNS]].astype({"rotation": "int64", "position": "int64", "option": "int64",
                                                            "lp": "float64", "p": "float64", "swapped": bool})


def failed_frame(failures: Mapping[tuple[str, str], Mapping[str, str | None]]) -> pd.DataFrame:
    """One row per failed cell: the first line of its error and its log."""
    return pd.DataFrame([{"model": m, "task": t, "error": f["error"], "log": f["log"]} for (m, t), f in failures.items()],
                        columns=FAILED_COLUMNS)
