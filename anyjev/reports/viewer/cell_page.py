"""The cell page's data (``cells/<model>/<task>.js``): every test item's decision at each level (from the run's
predictions frame), correct and flipped under uniform tie-breaking, its answer mass, the option names, and the
reliability diagram's bins of each level."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from anyjev.decision.layouts import GROUPS
from anyjev.numbers.evaluation import ItemLevels
from anyjev.numbers.metrics import reliability_bins, tie_weights
from anyjev.reports.draw import reliability_bin_count, wilson_interval
from anyjev.rundata import Cell, Run
from anyjev.rundata import frames as tidy


@dataclass
class CellFrames:
    """What the viewer shows of one finished cell, as the run reader's frames: its row of the cells frame, its rows
    of the metrics frame, its predictions, its test items and their layout-level label probabilities."""

    cell: Cell
    row: dict[str, Any]
    metrics: pd.DataFrame
    predictions: pd.DataFrame
    items: pd.DataFrame
    probabilities: pd.DataFrame

    @classmethod
    def of(cls, run: Run, cell: Cell) -> CellFrames:
        """CELL's frames (its item-level frames built for it alone: a run of paper-sized cells is large)."""
        mine = (run.cells["model"] == cell.model) & (run.cells["task"] == cell.task)
        metrics = run.metrics[(run.metrics["model"] == cell.model) & (run.metrics["task"] == cell.task)]
        items = tidy.items_frame([cell])
        probabilities = tidy.probabilities_frame([cell])
        test = items["split"].isin(["test"]) | items["split"].isna()
        return cls(cell, run.cells[mine].to_dict("records")[0], metrics, tidy.predictions_frame([cell]),
                   items[test].reset_index(drop=True), probabilities[probabilities["item_id"].isin(items.loc[test, "item_id"])])


def option_names(probabilities: pd.DataFrame) -> dict[str, list[str]]:
    """How the page names each item's options: the label each had in its first layout (fwd/r0), i.e. in the raw
    prompt (A, B, ... for choice questions; Yes / No)."""
    first = probabilities.groupby("item_id", sort=False)["layout"].first()
    has_r0 = set(probabilities.loc[probabilities["layout"] == "fwd/r0", "item_id"])
    chosen = {item: "fwd/r0" if item in has_r0 else layout for item, layout in first.items()}
    rows = probabilities[probabilities["layout"] == probabilities["item_id"].map(chosen)]
    names: dict[str, dict[int, str]] = {}
    for r in rows.itertuples(index=False):
        names.setdefault(r.item_id, {})[int(r.option)] = r.label
    return {item: [by_option[j] for j in range(len(by_option))] for item, by_option in names.items()}


def decision(lv: np.ndarray, i: int, gold: int, rev: np.ndarray | None, row: Any, row_rev: Any | None) -> dict:
    """One item's decision at one level: predictions.csv's fields, and the expected correctness and flip
    under uniform tie-breaking (the metrics' definitions)."""
    w = tie_weights(lv[i][None])[0]
    out = {"p": int(row.pred), "c": round(float(row.conf), 6), "g": round(float(row.p_gold), 6), "t": int(row.n_top),
           "ok": round(float(w[gold]), 6)}
    if rev is not None and row_rev is not None:
        out |= {"f": round(float(1.0 - np.sum(w * tie_weights(rev[i][None])[0])), 6), "pr": int(row_rev.pred),
                "tr": int(row_rev.n_top)}
    return out


def reliability(data: CellFrames, levels: list[str]) -> dict:
    """Per level, the reliability diagram's bins exactly as results/plots/reliability draws them (forward
    group, equal-mass bins, Wilson intervals) and the table's ECE with its interval."""
    out = {}
    ece = data.metrics[data.metrics["metric"] == "ece"].set_index("level")
    for level in levels:
        rows = data.predictions[(data.predictions["level"] == level) & (data.predictions["group"] == "fwd")]
        if rows.empty:
            continue
        conf = rows["conf"].to_numpy(dtype=np.float64)
        correct = (rows["pred"] == rows["gold"]).to_numpy(dtype=np.float64)
        x, y, size = reliability_bins(conf, correct, reliability_bin_count(len(conf)))
        lo, hi = wilson_interval(np.round(y * size), size)
        e = ece.loc[level]
        out[level] = {"bins": [[round(float(a), 6), round(float(b), 6), int(c), round(float(d), 6), round(float(f), 6)]
                               for a, b, c, d, f in zip(x, y, size, lo, hi, strict=True)],
                      "ece": [float(e["value"]), float(e["lo"]), float(e["hi"])], "acc": round(float(correct.mean()), 6),
                      "n": len(rows)}
    return out


def cell_page(data: CellFrames, levels: ItemLevels, shown: list[str]) -> dict:
    """The cell page's data: every test item's decision at each level, answer mass, and the reliability bins."""
    rows = {(r.item_id, r.level, r.group): r for r in data.predictions.itertuples(index=False)}
    present = [lv for lv in shown if lv in levels.levels]
    items_by_id = data.items.set_index("item_id")
    names = option_names(data.probabilities)
    items = []
    for i, item_id in enumerate(levels.ids):
        gold = int(levels.gold[i])
        decisions = {}
        for level in present:
            lv = levels.levels[level]
            decisions[level] = decision(lv["fwd"], i, gold, lv.get("rev"), rows[(item_id, level, "fwd")],
                                        rows.get((item_id, level, "rev")))
        mass = items_by_id.at[item_id, "answer_mass"]
        items.append({"id": item_id, "gold": gold, "k": int(items_by_id.at[item_id, "k"]), "o": names[item_id],
                      "d": decisions, "m": None if pd.isna(mass) else round(float(mass), 6)})
    return {"key": data.cell.key, "model": data.cell.model, "task": data.cell.task, "levels": present,
            "groups": [g for g in GROUPS if g in levels.levels[present[0]]], "items": items,
            "reliability": reliability(data, present)}
