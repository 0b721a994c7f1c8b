"""A cell's levels per test item, by the library's level code under the cell's own evaluation settings, and the
check that its ``predictions.csv`` follows from them: the viewer shows no decision the scores do not give."""

from __future__ import annotations

import numpy as np

from anyjev.errors import TaskDataError
from anyjev.numbers.evaluation import ItemLevels
from anyjev.numbers.metrics import tie_weights
from anyjev.paths import PREDICTIONS
from anyjev.run.evaluate import item_levels
from anyjev.rundata import Cell

CHECK_TOL = 1e-6  # predictions.csv against the library's levels (float noise across machines is ~1e-10)


def cell_levels(cell: Cell) -> ItemLevels:
    """The cell's levels per test item by the library's level code, under its ``metrics.json`` settings."""
    return item_levels(cell.scores.items, cell.evaluation_options, source=str(cell.scores.path), extras=cell.scores.extras)


def check_predictions(cell: Cell, levels: ItemLevels) -> None:
    """Refuse a ``predictions.csv`` that does not follow from the scores under the cell's settings."""
    index = {item: i for i, item in enumerate(levels.ids)}
    where = str(cell.file(PREDICTIONS))
    for n, row in enumerate(cell.predictions.itertuples(index=False), start=2):
        i = index.get(row.item_id)
        lv = levels.levels.get(row.level, {}).get(row.group)
        if i is None or lv is None:
            raise TaskDataError(where, f"line {n}", f"item {row.item_id!r} level {row.level} {row.group} is not a "
                                f"test item and level of {cell.scores.path}")
        lp = lv[i]
        p = np.exp(lp)
        pred = int(np.argmax(p))
        ours = (pred, float(p[pred]), float(p[int(row.gold)]), int(tie_weights(lp[None])[0].astype(bool).sum()))
        theirs = (int(row.pred), float(row.conf), float(row.p_gold), int(row.n_top))
        if (ours[0], ours[3]) != (theirs[0], theirs[3]) or max(abs(ours[1] - theirs[1]), abs(ours[2] - theirs[2])) > CHECK_TOL:
            raise TaskDataError(where, f"line {n}", f"item {row.item_id!r} {row.level} {row.group}: predictions.csv "
                                f"says (pred, conf, p_gold, n_top) = {theirs}, the scores under the settings of metrics.json "
                                f"give {ours}: predictions.csv was not made from these scores; evaluate the cell again")
