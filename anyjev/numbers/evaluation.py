"""Evaluate a scored cell without a server: levels raw / L0-perm / L0-bc / L0 / L1 and every metric with
its bootstrap interval, plus per-item predictions for reliability diagrams.

The interval carries the fit: every bootstrap resample redraws the test items and the calibration items
(each split resampled within itself, and within each option count K), recomputes the test prior, the frozen
calibration prior and L1's temperature from the redrawn items, and then every metric. The interval is BCa
(bias-corrected, with a stratified jackknife acceleration); where the point still falls outside its interval
the interval is widened to include it, and that is recorded.

A cell may mix option counts (K): levels are computed per K group (the prior of an item is pooled over the
items of its prior group *and* its K), padded to the largest K with ``-inf``, and L1 fits one temperature on
all calibration items together.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import math
import os
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from anyjev.decision.layouts import GROUPS
from anyjev.errors import TaskDataError
from anyjev.files import write_json_atomic, write_text_atomic
from anyjev.numbers.levels import (
    ALL_LEVELS,
    LevelInputs,
    at_bound,
    fit_log_temperature,
    level_inputs,
    levels_resampled,
)
from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.metrics import METRICS, MIN_BOOT, TIE_TOL, interval, jackknife_acceleration, metrics_batch
from anyjev.run.store import read_cell
from anyjev.settings import EvaluationSettings, default

log = logging.getLogger(__name__)

PRIOR_MODES = ("streaming", "batch", "content_free")
DEFAULT_PRIOR_MODE: str = default("evaluation", "prior_mode")  # chosen by measurement: docs/metrics.md "Prior modes"
RESAMPLED = ("test and calibration items (each split resampled within itself, per option count K); "
             "test prior, calibration prior and L1 temperature refit in every resample")
CHUNK_FLOATS = 3_000_000  # floats per array in one chunk of resamples (memory bound, ~24 MB)


def _layout_names(rec: dict, group: str) -> list[str]:
    names = [n for n in rec["layouts"] if n.startswith(group + "/")]
    return sorted(names, key=lambda n: int(n.split("/r")[1]))


def _layout_order(rec: dict, name: str) -> list[int]:
    """A layout's order; for a rotation the item did not read (adaptive), its rotation of the item's r0 order."""
    if name in rec["layouts"]:
        return rec["layouts"][name]["order"]
    group, s = name.split("/r")
    return list(np.roll(rec["layouts"][f"{group}/r0"]["order"], -int(s)))


def _arrays(records: list[dict], group: str, names: list[str]
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


@dataclass
class _KGroup:
    """The test and calibration items of one option count K, with the positions of its test items."""

    k: int
    inputs: LevelInputs
    test_pos: np.ndarray
    gold: np.ndarray
    prior_source: str = "items"

    def uses_calib(self, with_l1: bool) -> bool:
        """Whether this K's calibration items enter its levels (L1, or the frozen prior of an adaptive cell)."""
        return with_l1 or self.prior_source == "calibration"


def _k_groups(test: list[dict], calib: list[dict], source: str, cf: dict[str, list[dict]] | None = None,
              prior_mode: str = "batch") -> list[_KGroup]:
    """Split a cell by K; within a K every item must have the same layouts (else levels would mix layouts),
    except that a test item read adaptively (``adaptive`` in its record) may hold a subset of them. Each K
    gets its prior source (:func:`prior_source_for`)."""
    out = []
    cf = cf or {}
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
        fwd, orders_fwd, read_fwd = _arrays(t, "fwd", names["fwd"])
        rev, orders_rev, read_rev = _arrays(t, "rev", names["rev"])
        kwargs: dict = {"read_fwd": read_fwd, "read_rev": read_rev,
                        "cf_fwd": _content_free(t, "fwd", names["fwd"], cf, source),
                        "cf_rev": _content_free(t, "rev", names["rev"], cf, source)}
        if c:
            cal = {g: _arrays(c, g, names[g]) for g in GROUPS}
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
        out.append(_KGroup(k, inputs, np.array(pos, dtype=np.intp), np.array([r["gold"] for r in t], dtype=np.intp),
                           prior_source))
    stray = sorted({int(r["k"]) for r in calib} - {g.k for g in out})
    if stray:
        log.warning("%s: calibration items with K=%s have no test items of that K; they are not used", source, stray)
    return out


def _pad(lp: np.ndarray, kmax: int) -> np.ndarray:
    if lp.shape[-1] == kmax:
        return lp
    out = np.full(lp.shape[:-1] + (kmax,), -np.inf)
    out[..., : lp.shape[-1]] = lp
    return out


def _replicates(groups: list[_KGroup], idx: list[tuple[np.ndarray, np.ndarray | None]], with_l1: bool,
                settings: dict) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, dict[str, np.ndarray]]:
    """Levels of every resample, K groups padded and concatenated: ``{level: {g: (B, N, Kmax)}}``, gold ``(B, N)``,
    and ``log T`` per layout group ``(B,)``. One temperature per layout group is fitted on all K groups."""
    kmax = max(g.k for g in groups)
    per = [levels_resampled(grp.inputs, it, ic, fit=False, prior_source=grp.prior_source, **settings)
           for grp, (it, ic) in zip(groups, idx, strict=True)]
    layout_groups = list(groups[0].inputs.test)
    levels = {name: {g: np.concatenate([_pad(r.levels[name][g], kmax) for r in per], axis=1) for g in layout_groups}
              for name in per[0].levels}
    gold = np.concatenate([grp.gold[it] for grp, (it, _) in zip(groups, idx, strict=True)], axis=1)
    log_t: dict[str, np.ndarray] = {}
    if with_l1:
        levels["L1"] = {}
        for g in layout_groups:
            cal = np.concatenate([_pad(r.calib_l0[g], kmax) for r in per if g in r.calib_l0], axis=1)
            cal_gold = np.concatenate([grp.inputs.calib_gold[ic] for grp, (_, ic) in zip(groups, idx, strict=True)
                                       if ic is not None and ic.shape[1]], axis=1)
            log_t[g] = fit_log_temperature(cal, cal_gold)
            frozen = np.concatenate([_pad(r.frozen_l0[g], kmax) for r in per], axis=1)
            levels["L1"][g] = log_softmax(frozen / np.exp(log_t[g])[:, None, None])
    return levels, gold, log_t


def _metric_replicates(groups: list[_KGroup], idx: list[tuple[np.ndarray, np.ndarray | None]], with_l1: bool,
                       settings: dict) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Every metric of every level for each resample (chunked over resamples to bound memory)."""
    b = idx[0][0].shape[0]
    per_resample = sum(g.inputs.size_per_resample() for g in groups)
    chunk = max(1, CHUNK_FLOATS // max(per_resample, 1))
    values: dict[str, dict[str, list[np.ndarray]]] = {}
    temps: dict[str, list[np.ndarray]] = {}
    for lo in range(0, b, chunk):
        part = [(it[lo:lo + chunk], None if ic is None else ic[lo:lo + chunk]) for it, ic in idx]
        levels, gold, log_t = _replicates(groups, part, with_l1, settings)
        for name, lv in levels.items():
            m = metrics_batch(lv["fwd"], gold, lv.get("rev"))
            for metric, v in m.items():
                values.setdefault(name, {}).setdefault(metric, []).append(v)
        for g, v in log_t.items():
            temps.setdefault(g, []).append(v)
    return ({name: {m: np.concatenate(v) for m, v in d.items()} for name, d in values.items()},
            {g: np.concatenate(v) for g, v in temps.items()})


def _identity(groups: list[_KGroup], with_l1: bool, rows: int = 1) -> list[tuple[np.ndarray, np.ndarray | None]]:
    out = []
    for grp in groups:
        it = np.broadcast_to(np.arange(grp.inputs.n_test), (rows, grp.inputs.n_test))
        ic = np.broadcast_to(np.arange(grp.inputs.n_calib), (rows, grp.inputs.n_calib)) if grp.uses_calib(with_l1) else None
        out.append((it, ic))
    return out


def _jackknife(groups: list[_KGroup], with_l1: bool, settings: dict) -> list[dict[str, dict[str, np.ndarray]]]:
    """Leave-one-out metric values, one entry per stratum (split x K) of at least 2 items."""
    strata = []
    for j, grp in enumerate(groups):
        for split, n in (("test", grp.inputs.n_test), ("calib", grp.inputs.n_calib if grp.uses_calib(with_l1) else 0)):
            if n < 2:
                continue
            loo = np.array([np.delete(np.arange(n), i) for i in range(n)])
            idx = _identity(groups, with_l1, rows=n)
            it, ic = idx[j]
            idx[j] = (loo, ic) if split == "test" else (it, loo)
            strata.append(_metric_replicates(groups, idx, with_l1, settings)[0])
    return strata


def _test_order(groups: list[_KGroup]) -> np.ndarray:
    """Permutation that puts K-group-concatenated test items back into cell order."""
    return np.argsort(np.concatenate([g.test_pos for g in groups]), kind="stable")


def evaluate_records(records: list[dict], settings: EvaluationSettings | None = None, *, level: float = 0.95,
                     source: str = "<records>", extras: dict[str, dict] | None = None) -> dict:
    """Levels and metrics for the test split, with L1 fitted on the calibration split, and refit-BCa intervals.

    SETTINGS are the config's ``evaluation.*`` (default: the schema's). ``prior_mode``: ``"streaming"``
    (published: per prior group, K and rotation, the mean over the test items scored so far, the current one
    included, in the task file's seeded order; ``prior_batch_size`` > 1 scores that many items per call) or
    ``"batch"`` (the whole test split; ``prior_batch_size`` must be None) or ``"content_free"`` (the mean over
    the content-free probes of the item's question, per layout; the cell must hold them). EXTRAS are the
    cell's non-item records (:func:`anyjev.run.store.read_cell`): content-free probes add the ``L0-cf`` row.
    """
    s = settings or EvaluationSettings()
    strength, min_items, prior_mode, batch_size = s.prior_strength, s.prior_min_items, s.prior_mode, s.prior_batch_size
    n_boot, seed = s.n_boot, s.bootstrap_seed
    if prior_mode not in PRIOR_MODES:
        raise ValueError(f"prior_mode: must be one of {PRIOR_MODES}, got {prior_mode!r}")
    if prior_mode != "streaming" and batch_size is not None:
        raise ValueError(f"prior_batch_size: only meaningful with prior_mode 'streaming', got {batch_size} with {prior_mode!r}")
    if n_boot < MIN_BOOT:
        raise ValueError(f"n_boot: must be >= {MIN_BOOT}, got {n_boot}")
    test = [r for r in records if r.get("split") in (None, "test")]
    calib = [r for r in records if r.get("split") == "calib"]
    if not test:
        raise TaskDataError(source, "items", "no test items to evaluate")
    effective_batch = (batch_size or 1) if prior_mode == "streaming" else None
    settings = {"strength": strength, "min_items": min_items, "batch_size": effective_batch}
    cf: dict[str, list[dict]] = {}
    for rec in sorted((extras or {}).values(), key=lambda r: r["id"]):
        if rec.get("type") == "content_free":
            for key in rec["questions"]:
                cf.setdefault(key, []).append(rec)
    if prior_mode == "content_free" and not cf:
        raise TaskDataError(source, "evaluation.prior_mode", "is content_free, but the cell holds no content-free probes "
                            "(rescore it: score jobs read them when prior_mode is content_free or levels lists L0-cf)")

    groups = _k_groups(test, calib, source, cf, prior_mode)
    prior_source = "/".join(sorted({g.prior_source for g in groups}))
    with_l1 = all(g.inputs.n_calib > 0 for g in groups)
    if calib and not with_l1:
        missing = [g.k for g in groups if g.inputs.n_calib == 0]
        log.warning("%s: no calibration items with K=%s, so no L1 for this cell", source, missing)

    # point values: every item once, in cell order
    levels, gold, log_t = _replicates(groups, _identity(groups, with_l1), with_l1, settings)
    order = _test_order(groups)
    levels = {name: {g: v[:, order] for g, v in lv.items()} for name, lv in levels.items()}
    gold = gold[:, order]
    point = {name: metrics_batch(lv["fwd"], gold, lv.get("rev")) for name, lv in levels.items()}

    # bootstrap: each stratum (split x K) resampled within itself, rows sorted to keep the scored order
    rng = np.random.default_rng(seed)
    idx = []
    for grp in groups:
        it = np.sort(rng.integers(0, grp.inputs.n_test, size=(n_boot, grp.inputs.n_test)), axis=1)
        ic = (np.sort(rng.integers(0, grp.inputs.n_calib, size=(n_boot, grp.inputs.n_calib)), axis=1)
              if grp.uses_calib(with_l1) else None)
        idx.append((it, ic))
    boot, boot_t = _metric_replicates(groups, idx, with_l1, settings)
    jack = _jackknife(groups, with_l1, settings)

    metrics: dict[str, dict] = {}
    widened = 0
    for name in ALL_LEVELS:
        if name not in point:
            continue
        metrics[name] = {}
        for metric in METRICS:
            value = float(point[name][metric][0])
            accel = jackknife_acceleration([s[name][metric] for s in jack])
            lo, hi, wide = interval(value, boot[name][metric], accel=accel, level=level, method="bca")
            widened += wide
            metrics[name][metric] = {"value": value, "lo": lo, "hi": hi, "widened": wide}

    temperature: dict[str, dict] = {}
    for g, lt in log_t.items():
        t = math.exp(float(lt[0]))
        lo, hi = np.percentile(np.exp(boot_t[g]), [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
        temperature[g] = {"T": t, "log_T": float(lt[0]), "at_bound": at_bound(t), "lo": float(lo), "hi": float(hi)}
        if temperature[g]["at_bound"]:
            log.warning("%s: L1 temperature (%s layouts) T = %.4g (log T = %.6f) is at the search bound [-3, 3]: "
                        "the fit is clipped and L1 is %s", source, g, t, math.log(t),
                        "nearly uniform" if t > 1 else "nearly one-hot")
    mass = answer_mass_summary(test, n_boot=n_boot, seed=seed, level=level)
    ks = sorted(g.k for g in groups)
    result = _LevelsView(levels, {g: math.exp(float(v[0])) for g, v in log_t.items()})
    return {
        "n": len(test),
        "n_calib": sum(g.inputs.n_calib for g in groups) if with_l1 else len(calib),
        "k": ks[0] if len(ks) == 1 else f"mixed ({ks[0]}-{ks[-1]})",
        "k_groups": [{"k": g.k, "n": g.inputs.n_test, "n_calib": g.inputs.n_calib, "prior_source": g.prior_source}
                     for g in groups],
        "levels": [lv for lv in ALL_LEVELS if lv in metrics],
        "metrics": metrics,
        "temperature": temperature,
        **({"answer_mass": mass} if mass is not None else {}),
        "intervals_widened": int(widened),
        "settings": {**dataclasses.asdict(s), "effective_batch_size": effective_batch, "prior_source": prior_source,
                     "interval": f"BCa {level:.0%}", "interval_level": level, "resampled": RESAMPLED,
                     "tie_tolerance": TIE_TOL},
        "_result": result,
        "_gold": gold[0],
        "_ids": [r["id"] for r in test],
    }


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


def answer_mass_summary(test: list[dict], *, n_boot: int, seed: int, level: float) -> dict | None:
    """Mean answer mass of the test items (the probability on the label tokens at all, read with
    ``scoring.answer_mass``) with its BCa interval over resampled items; None when the cell did not read it."""
    values = [r.get("answer_mass") for r in test]
    if not values or any(v is None for v in values):
        return None
    arr = np.asarray(values, dtype=np.float64)
    n = arr.size
    boot = arr[np.random.default_rng(seed).integers(0, n, size=(n_boot, n))].mean(axis=1)
    jack = (arr.sum() - arr) / (n - 1) if n > 1 else arr
    lo, hi, wide = interval(float(arr.mean()), boot, accel=jackknife_acceleration([jack]), level=level, method="bca")
    return {"value": float(arr.mean()), "lo": lo, "hi": hi, "widened": wide}


@dataclass
class _LevelsView:
    """Point levels in cell order, ``view[level][group]`` ``(N, Kmax)`` (``-inf`` on padded options)."""

    levels: dict[str, dict[str, np.ndarray]]
    temperature: dict[str, float]

    def __getitem__(self, level: str) -> dict[Hashable, np.ndarray | None]:
        return {g: (self.levels[level][g][0] if g in self.levels[level] else None) for g in GROUPS}

    def __contains__(self, level: object) -> bool:
        return level in self.levels


def write_predictions(path: str | os.PathLike, evaluation: dict) -> None:
    """One row per (test item, level, group): gold, predicted option, confidence, p(gold), tied top labels.

    ``pred`` is the lowest-index top option; ``n_top`` > 1 says it is tied and the metrics count each tied
    option with weight 1/n_top.
    """
    result, gold, ids = evaluation["_result"], evaluation["_gold"], evaluation["_ids"]
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["item_id", "level", "group", "gold", "pred", "conf", "p_gold", "n_top"])
    for level in evaluation["levels"]:
        for group in GROUPS:
            lp = result[level].get(group)
            if lp is None:
                continue
            p = np.exp(lp)
            n_top = (lp >= lp.max(axis=1, keepdims=True) - TIE_TOL).sum(axis=1)
            for i, item in enumerate(ids):
                pred = int(np.argmax(p[i]))
                w.writerow([item, level, group, int(gold[i]), pred, repr(float(p[i, pred])),
                            repr(float(p[i, gold[i]])), int(n_top[i])])
    write_text_atomic(path, buf.getvalue())


def public(evaluation: dict) -> dict:
    """The JSON-ready part of an evaluation."""
    return {k: v for k, v in evaluation.items() if not k.startswith("_")}


def evaluate_file(scores: str, metrics_out: str, predictions_out: str | None = None,
                  settings: EvaluationSettings | None = None) -> dict:
    """Evaluate ``scores`` with the config's evaluation settings; write ``metrics.json`` (and the predictions
    CSV) atomically."""
    identity, records, extras = read_cell(scores)
    evaluation = evaluate_records(records, settings, source=scores, extras=extras)
    out = public(evaluation) | {"identity": identity, "metric_names": list(METRICS)}
    write_json_atomic(metrics_out, out)
    acc = {lv: round(out["metrics"][lv]["acc"]["value"], 3) for lv in out["levels"]}
    log.info("evaluated %s: n=%d K=%s acc %s", scores, out["n"], out["k"], acc)
    if predictions_out:
        write_predictions(predictions_out, evaluation)
    return out


# ------------------------------------------------------------------------------------------- per item
@dataclass
class ItemLevels:
    """The point levels of a cell's test items (cell order) with what made them, to look at single items.

    * ``ids``, ``gold`` ``(N,)``, ``k`` ``(N,)``: the test items as :func:`evaluate_records` orders them;
    * ``levels[level][group]``: option-space log-probs ``(N, Kmax)`` (``-inf`` on padded options), the arrays
      :func:`evaluate_records` computes its metrics and :func:`write_predictions` its rows from;
    * ``temperature[group]``: L1's fitted T (absent without calibration items);
    * ``test_prior[group][i]``: the prior divided out of test item ``i`` for L0 (L0-bc: its row 0),
      probabilities ``(S, K_i)`` in position space (rows: the group's layouts r0, r1, ...; columns: labels);
    * ``l1_prior[group][i]``: the prior under which L1's temperature is applied to item ``i`` (the calibration
      items' frozen prior of its prior group, or its content-free prior), same shape; absent without L1;
    * ``prior_source``: ``items``, ``calibration`` or ``content_free`` (``/``-joined when K groups differ).
    """

    ids: list[str]
    gold: np.ndarray
    k: np.ndarray
    levels: dict[str, dict[str, np.ndarray]]
    temperature: dict[str, float]
    test_prior: dict[str, list[np.ndarray]]
    l1_prior: dict[str, list[np.ndarray]]
    prior_source: str


def item_levels(records: list[dict], settings: EvaluationSettings | None = None, *, source: str = "<records>",
                extras: dict[str, dict] | None = None) -> ItemLevels:
    """Every level of every test item at the point (no bootstrap), by the code :func:`evaluate_records` uses
    for its point values, with the per-item priors and L1's temperature; ``evaluate_records`` with the same
    SETTINGS gives the same levels (so the same ``predictions.csv``)."""
    s = settings or EvaluationSettings()
    if s.prior_mode not in PRIOR_MODES:
        raise ValueError(f"prior_mode: must be one of {PRIOR_MODES}, got {s.prior_mode!r}")
    test = [r for r in records if r.get("split") in (None, "test")]
    calib = [r for r in records if r.get("split") == "calib"]
    if not test:
        raise TaskDataError(source, "items", "no test items to evaluate")
    batch = (s.prior_batch_size or 1) if s.prior_mode == "streaming" else None
    fit_settings = {"strength": s.prior_strength, "min_items": s.prior_min_items, "batch_size": batch}
    cf: dict[str, list[dict]] = {}
    for rec in sorted((extras or {}).values(), key=lambda r: r["id"]):
        if rec.get("type") == "content_free":
            for key in rec["questions"]:
                cf.setdefault(key, []).append(rec)
    groups = _k_groups(test, calib, source, cf, s.prior_mode)
    with_l1 = all(g.inputs.n_calib > 0 for g in groups)
    idx = _identity(groups, with_l1)
    levels, gold, log_t = _replicates(groups, idx, with_l1, fit_settings)
    order = _test_order(groups)
    test_prior: dict[str, list[np.ndarray | None]] = {}
    l1_prior: dict[str, list[np.ndarray | None]] = {}
    for grp, (it, ic) in zip(groups, idx, strict=True):
        res = levels_resampled(grp.inputs, it, ic, fit=False, prior_source=grp.prior_source, **fit_settings)
        for g, prior in res.test_prior.items():
            test_prior.setdefault(g, [None] * len(test))
            frozen = None
            if with_l1 and grp.prior_source == "content_free":
                frozen = prior[0]
            elif with_l1:
                frozen = res.calib_prior[g][0][0][grp.inputs.test_gid]
            for j, pos in enumerate(grp.test_pos):
                test_prior[g][pos] = prior[0, j]
                if frozen is not None:
                    l1_prior.setdefault(g, [None] * len(test))[pos] = frozen[j]
    return ItemLevels(
        ids=[r["id"] for r in test],
        gold=gold[0, order],
        k=np.array([int(r["k"]) for r in test]),
        levels={name: {g: v[0, order] for g, v in lv.items()} for name, lv in levels.items()},
        temperature={g: math.exp(float(v[0])) for g, v in log_t.items()},
        test_prior=test_prior,  # type: ignore[arg-type]
        l1_prior=l1_prior,  # type: ignore[arg-type]
        prior_source="/".join(sorted({g.prior_source for g in groups})),
    )
