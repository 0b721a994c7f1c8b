"""The record schema of a scores file, both ways: what scoring writes per item (:func:`item_record`) and how
evaluation reads a cell back into arrays per option count K (:func:`cell_groups`).

An item record holds its id, split, gold, prior group, K, labels and label ids, its question key, and per layout it
read: the option order (caller's option indices by position), the Yes/No phrasing, the prompt hash and the label
log-probs in position space; plus its answer mass and, when read adaptively, its ``adaptive`` summary. Other record
types (``content_free`` probes, an adaptive ``certificate``, the batch ``audit``) sit after the items (:mod:`anyjev.rundata.scores`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from anyjev.decision.layouts import GROUPS
from anyjev.errors import TaskDataError
from anyjev.numbers.bootstrap import KGroup
from anyjev.numbers.levels import level_inputs
from anyjev.numbers.logprobs import log_softmax
from anyjev.run.prepared import PreparedItem
from anyjev.rundata.scores import CONTENT_FREE, ITEM

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------- writing
def layouts_record(p: PreparedItem, values: dict[str, list[float]]) -> dict:
    """The ``layouts`` field of a record: the layouts that were read (the keys of VALUES), each with its
    order (caller's option indices by position), phrasing, prompt hash and label log-probs."""
    return {lay.name: {"order": list(lay.order), "swapped": lay.swapped, "prompt_sha": sha, "lp": values[lay.name]}
            for (lay, _), sha in zip(p.layouts, p.prompt_shas, strict=True) if lay.name in values}


def item_record(p: PreparedItem, values: dict[str, list[float]], answer_mass: float | None = None) -> dict:
    """An item's record; only the layouts named in VALUES (those read) are stored."""
    record = {
        "type": ITEM,
        "id": p.item.id,
        "split": p.item.split,
        "gold": p.item.gold,
        "group": p.group,
        "k": len(p.labels),
        "labels": p.labels,
        "label_ids": p.label_ids,
        "label_kind": p.label_kind,
        "question": p.item.question.key(),
        "layouts": layouts_record(p, values),
    }
    if answer_mass is not None:
        record["answer_mass"] = answer_mass
    return record


# ---------------------------------------------------------------------------------------------------- reading
def _layout_names(rec: dict, group: str) -> list[str]:
    names = [n for n in rec["layouts"] if n.startswith(group + "/")]
    return sorted(names, key=lambda n: int(n.split("/r")[1]))


def _layout_order(rec: dict, name: str) -> list[int]:
    """A layout's order; for a rotation the item did not read (adaptive), its rotation of the item's r0 order."""
    if name in rec["layouts"]:
        return rec["layouts"][name]["order"]
    group, s = name.split("/r")
    return list(np.roll(rec["layouts"][f"{group}/r0"]["order"], -int(s)))


def layout_arrays(records: list[dict], group: str, names: list[str]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[None, None, None]:
    """Position-space log-probs ``(N, S, K)`` (uniform placeholders where a layout was not read), orders
    (shared ``(S, K)`` when every item has the same, else per item ``(N, S, K)``) and the read mask ``(N, S)``."""
    if not names:
        return None, None, None
    k = int(records[0]["k"])
    filler = [-math.log(k)] * k
    lp = np.array([[rec["layouts"][n]["lp"] if n in rec["layouts"] else filler for n in names] for rec in records],
                  dtype=np.float64)
    read = np.array([[n in rec["layouts"] for n in names] for rec in records], dtype=bool)
    orders = np.array([[_layout_order(rec, n) for n in names] for rec in records], dtype=int)
    shared = bool((orders == orders[:1]).all())
    return lp, (orders[0] if shared else orders), read


def _content_free(records: list[dict], group: str, names: list[str], cf: dict[str, list[dict]], source: str
                  ) -> np.ndarray | None:
    """Per item, the content-free prior of its question per layout: the mean over the probes of each layout's
    label probabilities, ``(N, S, K)``; None when the cell has no probes."""
    if not cf or not names:
        return None
    out = []
    for rec in records:
        probes = cf.get(rec["question"])
        if not probes:
            raise TaskDataError(source, f"item {rec['id']}", f"no content-free probes for its question {rec['question']}")
        try:
            out.append(np.mean([[np.exp(log_softmax(np.array(pr["layouts"][n]["lp"]))) for n in names] for pr in probes],
                               axis=0))
        except KeyError as exc:
            raise TaskDataError(source, f"content-free probes of question {rec['question']}",
                                f"layout {exc} missing (item {rec['id']} has it)") from None
    return np.array(out)


def _k_groups(test: list[dict], calib: list[dict], source: str, cf: dict[str, list[dict]], prior_mode: str) -> list[KGroup]:
    """Split a cell by K; within a K every item must have the same layouts (else levels would mix layouts),
    except that a test item read adaptively (``adaptive`` in its record) may hold a subset of them. Each K
    gets its prior source (:func:`prior_source_for`)."""
    out = []
    for k in sorted({int(r["k"]) for r in test}):
        pos = [i for i, r in enumerate(test) if int(r["k"]) == k]
        t = [test[i] for i in pos]
        c = [r for r in calib if int(r["k"]) == k]
        full = next((r for r in t if "adaptive" not in r), None) or next(iter(c), None)
        names = {g: sorted({n for r in ([full] if full else t) for n in _layout_names(r, g)},
                           key=lambda n: int(n.split("/r")[1])) for g in GROUPS}
        for rec in t + c:
            for g in GROUPS:
                mine = _layout_names(rec, g)
                if mine != names[g] and not ("adaptive" in rec and set(mine) <= set(names[g])):
                    ref = full["id"] if full else t[0]["id"]
                    raise TaskDataError(source, f"item {rec['id']}",
                                        f"layouts {sorted(rec['layouts'])} differ from those of item {ref} (K={k})")
        fwd, orders_fwd, read_fwd = layout_arrays(t, "fwd", names["fwd"])
        rev, orders_rev, read_rev = layout_arrays(t, "rev", names["rev"])
        kwargs: dict = {"read_fwd": read_fwd, "read_rev": read_rev,
                        "cf_fwd": _content_free(t, "fwd", names["fwd"], cf, source),
                        "cf_rev": _content_free(t, "rev", names["rev"], cf, source)}
        if c:
            cal = {g: layout_arrays(c, g, names[g]) for g in GROUPS}
            kwargs |= {"calib_fwd": cal["fwd"][0], "calib_rev": cal["rev"][0],
                       "calib_groups": [r["group"] for r in c], "calib_gold": np.array([r["gold"] for r in c]),
                       "calib_cf_fwd": _content_free(c, "fwd", names["fwd"], cf, source),
                       "calib_cf_rev": _content_free(c, "rev", names["rev"], cf, source)}
            for g, orders in (("fwd", orders_fwd), ("rev", orders_rev)):
                cal_orders = cal[g][1]
                if cal_orders is None:
                    continue
                if orders.ndim == 3 or cal_orders.ndim == 3 or not np.array_equal(orders, cal_orders):
                    # per-item orders (canonical option order): test and calibration items each carry their own
                    n_t = len(t)
                    kwargs[f"calib_orders_{g}"] = np.broadcast_to(cal_orders, (len(c), *cal_orders.shape[-2:])).copy()
                    per_item = np.broadcast_to(orders, (n_t, *orders.shape[-2:])).copy()
                    if g == "fwd":
                        orders_fwd = per_item
                    else:
                        orders_rev = per_item
        inputs = level_inputs(fwd, rev, orders_fwd, orders_rev, [r["group"] for r in t], **kwargs)
        prior_source = prior_source_for(prior_mode, t)
        if prior_source == "calibration" and not c:
            raise TaskDataError(source, "items", f"test items with K={k} were read with adaptive rotations, but the "
                                f"cell holds no calibration items with K={k}, whose frozen prior their L0 needs")
        out.append(KGroup(k, inputs, np.array(pos, dtype=np.intp), np.array([r["gold"] for r in t], dtype=np.intp),
                           prior_source))
    stray = sorted({int(r["k"]) for r in calib} - {g.k for g in out})
    if stray:
        log.warning("%s: calibration items with K=%s have no test items of that K; they are not used", source, stray)
    return out


def prior_source_for(prior_mode: str, test: list[dict]) -> str:
    """Where the test items' prior comes from: the content-free probes, the test items themselves, or, for a
    cell read with adaptive rotations, the calibration items' frozen prior.

    An adaptive cell's items read different rotations, hard items more of them, so a prior estimated from
    the items that read each rotation is biased by the stopping rule, and the L0 decision it gives is not the
    one the certificate covers. The stopping statistic is L0 under the calibration items' frozen prior
    (:mod:`anyjev.run.adaptive`), so that is the prior of an adaptive cell's L0 under ``batch`` and
    ``streaming`` alike.
    """
    if prior_mode == "content_free":
        return "content_free"
    if any("adaptive" in r for r in test):
        return "calibration"
    return "items"


@dataclass
class CellArrays:
    """A scored cell read back for evaluation: its K groups, the test items' ids (cell order), their answer
    masses, and how many calibration items it holds."""

    groups: list[KGroup]
    ids: list[str]
    answer_mass: list[float | None]
    n_calib: int


def cell_groups(records: list[dict], extras: dict[str, dict] | None, prior_mode: str, source: str) -> CellArrays:
    """A cell's item records (and its other records: content-free probes) as arrays per K, ready for
    :func:`anyjev.numbers.evaluation.evaluate`."""
    test = [r for r in records if r.get("split") in (None, "test")]
    calib = [r for r in records if r.get("split") == "calib"]
    if not test:
        raise TaskDataError(source, "items", "no test items to evaluate")
    cf: dict[str, list[dict]] = {}
    for rec in sorted((extras or {}).values(), key=lambda r: r["id"]):
        if rec.get("type") == CONTENT_FREE:
            for key in rec["questions"]:
                cf.setdefault(key, []).append(rec)
    if prior_mode == "content_free" and not cf:
        raise TaskDataError(source, "evaluation.prior_mode", "is content_free, but the cell holds no content-free probes "
                            "(rescore it: score jobs read them when prior_mode is content_free or levels lists L0-cf)")
    return CellArrays(_k_groups(test, calib, source, cf, prior_mode), [r["id"] for r in test],
                      [r.get("answer_mass") for r in test], len(calib))
