"""The item pages' data (``cells/<model>/<task>.items.js``): each test item's texts, its label probabilities by
layout in option space (from the run's probabilities frame), each level's distribution with the priors divided out
and L1's temperature (the library's level code), its prior group as a person reads it, and every layout's exact
prompt (rebuilt and verified by :mod:`anyjev.run.rebuild`)."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from anyjev.data.tasks import Task
from anyjev.decision.layouts import GROUPS
from anyjev.numbers.evaluation import ItemLevels
from anyjev.reports.viewer.cell_page import CellFrames
from anyjev.reports.viewer.encoding import Lines, Table, probs, sig
from anyjev.run.rebuild import RenderedPrompt
from anyjev.rundata.frames import layout_parts

GROUP_NAME_WIDTH = 60  # characters of a question's text that name its prior group


def prior_group_names(task: Task) -> dict[str, str]:
    """How the page names each prior group of TASK: the task's name when it pools the whole task (``prior_group:
    task``, or every item shares one question), else the group's question text, shortened."""
    texts = {it.question.key(): it.question.text for it in task.items}
    if len(texts) == 1:
        return {task.name: task.name, **dict.fromkeys(texts, task.name)}
    return {task.name: task.name} | {key: textwrap.shorten(text, GROUP_NAME_WIDTH, placeholder=" …")
                                     for key, text in texts.items()}


def read_layouts(probabilities: pd.DataFrame) -> dict[str, dict[str, dict]]:
    """``{item: {layout: {"order": options by position, "p": probabilities by position, "swapped": ...}}}``."""
    out: dict[str, dict[str, dict]] = {}
    for r in probabilities.itertuples(index=False):
        lay = out.setdefault(r.item_id, {}).setdefault(r.layout, {"order": [], "p": [], "swapped": bool(r.swapped)})
        lay["order"].append(int(r.option))
        lay["p"].append(float(r.p))
    return out


def layout_names(layouts: dict[str, dict], k: int, adaptive: bool, group: str) -> list[str]:
    """A group's layouts in rotation order, including those an adaptive item did not read (from its r0 order)."""
    names = sorted((n for n in layouts if layout_parts(n)[0] == group), key=lambda n: layout_parts(n)[1])
    if adaptive and names and len(names) < k and not any(lay["swapped"] for lay in layouts.values()):
        names = [f"{group}/r{s}" for s in range(k)]
    return names


def matrix(layouts: dict[str, dict], k: int, group: str, names: list[str]) -> tuple[list, dict]:
    """Label probabilities by layout in option space (rows: layouts, columns: options; None: not read), and the
    layouts' shape: names, orders (position -> option) and phrasing."""
    r0 = layouts[f"{group}/r0"]["order"]
    rows, orders, swapped = [], [], []
    for s, name in enumerate(names):
        lay = layouts.get(name)
        order = lay["order"] if lay else [int(o) for o in np.roll(r0, -s)]
        orders.append(order)
        swapped.append(bool(lay and lay["swapped"]))
        if lay is None:
            rows.append(None)
            continue
        by_option = [0.0] * k
        for pos, option in enumerate(order):
            by_option[option] = lay["p"][pos]
        rows.append([sig(p) for p in by_option])
    return rows, {"layouts": names, "order": orders, "swapped": swapped}


def _prior(prior: np.ndarray | None, k: int) -> list | None:
    return None if prior is None else [[sig(p) for p in row[:k]] for row in np.asarray(prior).tolist()]


def layout_key(name: str) -> tuple[int, int]:
    """fwd before rev, then by rotation (fwd/r2 before fwd/r10)."""
    group, rotation = layout_parts(name)
    return (GROUPS.index(group) if group in GROUPS else len(GROUPS), rotation)


def items_page(data: CellFrames, levels: ItemLevels, task: Task, prompts: dict[str, dict[str, RenderedPrompt]]) -> dict:
    """The item pages' data: texts, probabilities by layout, level distributions, priors, T and prompts."""
    by_task = {it.id: it for it in task.items}
    items_by_id = {r["item_id"]: r for r in data.items.to_dict("records")}
    read = read_layouts(data.probabilities)
    group_names = prior_group_names(task)
    priors, shapes = Table(), Table()
    lines = Lines()
    items = {}
    for i, item_id in enumerate(levels.ids):
        rec, it, layouts = items_by_id[item_id], by_task[item_id], read[item_id]
        k = int(rec["k"])
        adaptive = rec["adaptive"] if isinstance(rec["adaptive"], dict) else None
        groups = {}
        for g in GROUPS:
            names = layout_names(layouts, k, bool(adaptive), g)
            if not names:
                continue
            rows, shape = matrix(layouts, k, g, names)
            groups[g] = {"rows": rows, "shape": shapes.add(shape), "prior": priors.add(_prior(levels.test_prior[g][i], k)),
                         "l1prior": priors.add(_prior(levels.l1_prior[g][i], k)) if g in levels.l1_prior else None}
        dist = {name: {g: probs(v[i], k) for g, v in lv.items()} for name, lv in levels.levels.items()}
        texts = [{"layout": name, "n": r.n_tokens, "sha": r.prompt_sha, "l": lines.add(r.text)}
                 for name, r in sorted(prompts[item_id].items(), key=lambda kv: layout_key(kv[0]))]
        group = rec["prior_group"]
        items[item_id] = {"state": it.state, "question": it.question.text, "kind": it.question.kind,
                          "options": list(it.question.options), "labels": list(rec["labels"]),
                          "group": group_names.get(group, group), "group_key": group,
                          "split": None if pd.isna(rec["split"]) else rec["split"],
                          "groups": groups, "dist": dist, "prompts": texts}
        if adaptive:
            items[item_id]["adaptive"] = adaptive
    row = data.row
    return {"key": data.cell.key, "strength": data.cell.evaluation_options.prior_strength, "prior_mode": row["prior_mode"],
            "prior_source": levels.prior_source,
            # 6 digits: the fit's last bits differ between BLAS builds, and the page shows 3
            "T": {g: sig(t, 6) for g, t in levels.temperature.items()}, "priors": priors.rows, "shapes": shapes.rows,
            "lines": lines.rows, "items": items}
