"""Evaluate a scored cell without a server: levels raw / L0-perm / L0-bc / L0 / L1 and every metric with
its bootstrap interval, plus per-item predictions for reliability diagrams."""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path

import numpy as np

from anyjev.decision.layouts import GROUPS
from anyjev.errors import TaskDataError
from anyjev.files import write_json_atomic
from anyjev.numbers.levels import LEVELS, compute_levels
from anyjev.numbers.metrics import METRICS, summarise
from anyjev.run.store import read_scores
from anyjev.settings import EvaluationSettings

log = logging.getLogger(__name__)


def _layout_names(rec: dict, group: str) -> list[str]:
    names = [n for n in rec["layouts"] if n.startswith(group + "/")]
    return sorted(names, key=lambda n: int(n.split("/r")[1]))


def _arrays(records: list[dict], group: str, names: list[str]) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    if not names:
        return None, None
    lp = np.array([[rec["layouts"][n]["lp"] for n in names] for rec in records], dtype=np.float64)
    orders = np.array([records[0]["layouts"][n]["order"] for n in names], dtype=int)
    return lp, orders


def evaluate_records(records: list[dict], *, strength: float = 0.75, min_items: int = 8, batch_size: int | None = None,
                     n_boot: int = 1000, seed: int = 0, source: str = "<records>") -> dict:
    """Levels and metrics for the test split, with L1 fitted on the calibration split."""
    test = [r for r in records if r.get("split") in (None, "test")]
    calib = [r for r in records if r.get("split") == "calib"]
    if not test:
        raise TaskDataError(source, "items", "no test items to evaluate")
    first = test[0]
    names = {g: _layout_names(first, g) for g in GROUPS}
    for rec in test + calib:
        for g in GROUPS:
            if _layout_names(rec, g) != names[g]:
                raise TaskDataError(source, f"item {rec['id']}", f"layouts {sorted(rec['layouts'])} differ from the cell's")
    fwd, orders_fwd = _arrays(test, "fwd", names["fwd"])
    rev, orders_rev = _arrays(test, "rev", names["rev"])
    kwargs: dict = {}
    if calib:
        kwargs = {
            "calib_fwd": _arrays(calib, "fwd", names["fwd"])[0],
            "calib_rev": _arrays(calib, "rev", names["rev"])[0],
            "calib_groups": [r["group"] for r in calib],
            "calib_gold": np.array([r["gold"] for r in calib]),
        }
    result = compute_levels(fwd, rev, orders_fwd, orders_rev, [r["group"] for r in test], strength=strength,
                            min_items=min_items, batch_size=batch_size, **kwargs)
    gold = np.array([r["gold"] for r in test])
    metrics: dict[str, dict] = {}
    for level in LEVELS:
        if level not in result:
            continue
        lp = result[level]["fwd"]
        metrics[level] = summarise(lp, gold, result[level]["rev"], n_boot=n_boot, seed=seed)
    return {
        "n": len(test),
        "n_calib": len(calib),
        "k": int(first["k"]),
        "levels": [lv for lv in LEVELS if lv in metrics],
        "metrics": metrics,
        "temperature": result.temperature,
        "settings": {"strength": strength, "min_items": min_items, "batch_size": batch_size, "n_boot": n_boot,
                     "bootstrap_seed": seed, "interval": 0.95},
        "_result": result,
        "_gold": gold,
        "_ids": [r["id"] for r in test],
    }


def write_predictions(path: str | os.PathLike, evaluation: dict) -> None:
    """One row per (test item, level, group): gold, predicted option, confidence, p(gold)."""
    result, gold, ids = evaluation["_result"], evaluation["_gold"], evaluation["_ids"]
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["item_id", "level", "group", "gold", "pred", "conf", "p_gold"])
        for level in evaluation["levels"]:
            for group in GROUPS:
                lp = result[level].get(group)
                if lp is None:
                    continue
                p = np.exp(lp)
                for i, item in enumerate(ids):
                    pred = int(np.argmax(p[i]))
                    w.writerow([item, level, group, int(gold[i]), pred, repr(float(p[i, pred])), repr(float(p[i, gold[i]]))])
    os.replace(tmp, path)


def public(evaluation: dict) -> dict:
    """The JSON-ready part of an evaluation."""
    return {k: v for k, v in evaluation.items() if not k.startswith("_")}


def evaluate_file(scores: str, metrics_out: str, predictions_out: str | None = None,
                  settings: EvaluationSettings | None = None) -> dict:
    """Evaluate a scores file into metrics.json (and predictions.csv), with the config's evaluation settings."""
    s = settings or EvaluationSettings()
    identity, records = read_scores(scores)
    evaluation = evaluate_records(records, source=scores, strength=s.prior_strength, min_items=s.prior_min_items,
                                  batch_size=s.prior_batch_size, n_boot=s.n_boot, seed=s.bootstrap_seed)
    out = public(evaluation) | {"identity": identity, "metric_names": list(METRICS)}
    write_json_atomic(metrics_out, out)
    acc = {lv: round(out["metrics"][lv]["acc"]["value"], 3) for lv in out["levels"]}
    log.info("evaluated %s: n=%d K=%s acc %s", scores, out["n"], out["k"], acc)
    if predictions_out:
        write_predictions(predictions_out, evaluation)
    return out
