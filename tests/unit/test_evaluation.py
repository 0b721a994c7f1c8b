"""Evaluation of a cell: intervals that refit priors and temperature, prior modes, flagged fits, mixed K."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anyjev.errors import TaskDataError
from anyjev.numbers.levels import LevelInputs, compute_levels, level_inputs, levels_resampled
from anyjev.numbers.logprobs import log_softmax
from anyjev.numbers.metrics import METRICS, metric_values
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.evaluate import EvaluateJob, compare_cells, evaluate_cell, evaluate_records
from anyjev.run.store import write_scores
from anyjev.schema import default
from tests.conftest import REPO


def cyclic(k: int) -> np.ndarray:
    return (np.arange(k)[None, :] + np.arange(k)[:, None]) % k


def make_records(rng: np.random.Generator, n_test: int, n_calib: int, k: int, *, group: str = "task",
                 id_prefix: str = "", bias: float = 1.5, signal: float = 1.5) -> list[dict]:
    """Choice records as the scorer writes them: K rotations fwd, reversed rotations rev, position bias on A."""
    orders = {"fwd": cyclic(k), "rev": cyclic(k)[:, ::-1]}
    pos_bias = np.zeros(k)
    pos_bias[0] = bias
    out = []
    for i in range(n_test + n_calib):
        gold = int(rng.integers(0, k))
        z = rng.normal(size=k)
        z[gold] += signal
        layouts = {}
        for g, ords in orders.items():
            for s, order in enumerate(ords):
                lp = log_softmax(z[order] + pos_bias + 0.1 * rng.normal(size=k))
                layouts[f"{g}/r{s}"] = {"lp": lp.tolist(), "order": order.tolist(), "swapped": False,
                                        "prompt_sha": f"{i}-{g}-{s}"}
        out.append({"id": f"{id_prefix}{i}", "split": "test" if i < n_test else "calib", "gold": gold, "group": group,
                    "k": k, "labels": [chr(65 + p) for p in range(k)], "question": f"{id_prefix}{i}", "layouts": layouts})
    return out


def arrays(records: list[dict], g: str) -> tuple[np.ndarray, np.ndarray]:
    names = sorted((n for n in records[0]["layouts"] if n.startswith(g + "/")), key=lambda n: int(n.split("/r")[1]))
    lp = np.array([[r["layouts"][n]["lp"] for n in names] for r in records])
    return lp, np.array([records[0]["layouts"][n]["order"] for n in names])


def levels_of(records: list[dict], options: EvaluationOptions):
    test = [r for r in records if r["split"] == "test"]
    calib = [r for r in records if r["split"] == "calib"]
    (fwd, of), (rev, orv) = arrays(test, "fwd"), arrays(test, "rev")
    return compute_levels(fwd, rev, of, orv, [r["group"] for r in test], calib_fwd=arrays(calib, "fwd")[0],
                          calib_rev=arrays(calib, "rev")[0], calib_groups=[r["group"] for r in calib],
                          calib_gold=np.array([r["gold"] for r in calib]), options=options)


# ------------------------------------------------------------------------------------------ refit core


def test_each_resample_refits_priors_and_temperature() -> None:
    rng = np.random.default_rng(0)
    recs = make_records(rng, 30, 20, 3)
    test = [r for r in recs if r["split"] == "test"]
    calib = [r for r in recs if r["split"] == "calib"]
    (fwd, of), (rev, orv) = arrays(test, "fwd"), arrays(test, "rev")
    inputs: LevelInputs = level_inputs(fwd, rev, of, orv, ["t"] * 30, calib_fwd=arrays(calib, "fwd")[0],
                                       calib_rev=arrays(calib, "rev")[0], calib_groups=["t"] * 20,
                                       calib_gold=np.array([r["gold"] for r in calib]))
    idx_t = np.sort(rng.integers(0, 30, size=(3, 30)), axis=1)
    idx_c = np.sort(rng.integers(0, 20, size=(3, 20)), axis=1)
    for options in (EvaluationOptions(), EvaluationOptions(prior_mode="streaming")):
        res = levels_resampled(inputs, idx_t, idx_c, options)
        for b in range(3):
            t_rows = [test[i] for i in idx_t[b]]
            c_rows = [calib[i] for i in idx_c[b]]
            # duplicates need distinct positions only for the ids; the arrays are what count
            alone = levels_of([dict(r, split="test") for r in t_rows] + [dict(r, split="calib") for r in c_rows],
                              options)
            assert math.exp(res.log_t["fwd"][b]) == pytest.approx(alone.temperature["fwd"], rel=1e-9)
            for level in ("raw", "L0-perm", "L0-bc", "L0", "L1"):
                for g in ("fwd", "rev"):
                    np.testing.assert_allclose(res.levels[level][g][b], alone[level][g], atol=1e-10)
        # the temperature moves between resamples: it is refit, not held
        assert np.ptp(res.log_t["fwd"]) > 1e-3


def test_level_minus_raw_is_the_paired_bootstrap_of_the_difference_computed_by_hand() -> None:
    """Each level minus raw: the point is the difference of the two levels' own values; the interval is the BCa
    interval of the difference on the same resamples (the test and the calibration items drawn as the bootstrap
    engine draws them, each resample's priors and temperature refit by compute_levels), with the acceleration of
    the leave-one-out differences."""
    from anyjev.numbers.metrics import interval, jackknife_acceleration

    n_test, n_calib = 15, 10
    recs = make_records(np.random.default_rng(5), n_test, n_calib, 3)
    options = EvaluationOptions()
    ev = evaluate_records(recs, options)
    assert set(ev.level_minus_raw) == set(ev.levels) - {"raw"}
    for name, per in ev.level_minus_raw.items():
        assert tuple(per) == METRICS
        for m, v in per.items():
            assert v["value"] == ev.metrics[name][m]["value"] - ev.metrics["raw"][m]["value"], (name, m)
    assert "level_minus_raw" in ev.to_json()

    test = [r for r in recs if r["split"] == "test"]
    calib = [r for r in recs if r["split"] == "calib"]
    names, checked = ("L0", "L1"), ("acc", "nll", "ece", "flip")

    def minus_raw(t_rows: list[dict], c_rows: list[dict]) -> dict[str, dict[str, float]]:
        levels = levels_of([dict(r, split="test") for r in t_rows] + [dict(r, split="calib") for r in c_rows], options)
        gold = np.array([r["gold"] for r in t_rows])
        raw = metric_values(levels["raw"]["fwd"], gold, levels["raw"]["rev"])
        return {name: {m: metric_values(levels[name]["fwd"], gold, levels[name]["rev"])[m] - raw[m] for m in checked}
                for name in names}

    draw = np.random.default_rng(options.bootstrap_seed)  # the engine's rows: test, then calibration, sorted
    rows_test = np.sort(draw.integers(0, n_test, size=(options.n_boot, n_test)), axis=1)
    rows_calib = np.sort(draw.integers(0, n_calib, size=(options.n_boot, n_calib)), axis=1)
    boot = [minus_raw([test[i] for i in rt], [calib[i] for i in rc]) for rt, rc in zip(rows_test, rows_calib, strict=True)]
    jack_test = [minus_raw(test[:i] + test[i + 1:], calib) for i in range(n_test)]
    jack_calib = [minus_raw(test, calib[:i] + calib[i + 1:]) for i in range(n_calib)]
    for name in names:
        for m in checked:
            value = ev.level_minus_raw[name][m]["value"]
            accel = jackknife_acceleration([np.array([d[name][m] for d in jack]) for jack in (jack_test, jack_calib)])
            lo, hi, _ = interval(value, np.array([d[name][m] for d in boot]), accel=accel)
            assert (ev.level_minus_raw[name][m]["lo"], ev.level_minus_raw[name][m]["hi"]) == pytest.approx((lo, hi), abs=1e-9), (name, m)


def two_models(tmp_path: Path, n_test: int, n_calib: int) -> tuple[str, str, list[dict], list[dict]]:
    """Two cells of one task: the same items and gold (one seed), model B's log-probs with less signal and bias."""
    a = make_records(np.random.default_rng(7), n_test, n_calib, 3)
    b = make_records(np.random.default_rng(7), n_test, n_calib, 3, signal=0.5, bias=0.5)
    paths = []
    for name, recs in (("a", a), ("b", b)):
        paths.append(str(tmp_path / f"{name}.jsonl"))
        write_scores(paths[-1], {"model": name, "task": "t"}, recs)
    return paths[0], paths[1], a, b


def test_model_minus_model_is_the_paired_bootstrap_of_the_difference_computed_by_hand(tmp_path) -> None:
    """Model A minus model B on the same items: the point is the difference of the two cells' own values; the
    interval is the BCa interval of the difference with both cells resampled on the same items (the engine's rows,
    each cell's priors and temperature refit by compute_levels), accelerated by leaving the same item out of both."""
    from anyjev.numbers.metrics import interval, jackknife_acceleration

    n_test, n_calib = 12, 8
    path_a, path_b, recs_a, recs_b = two_models(tmp_path, n_test, n_calib)
    options = EvaluationOptions()
    out = compare_cells(path_a, path_b, options)
    ev_a, ev_b = evaluate_records(recs_a, options), evaluate_records(recs_b, options)
    assert out["levels"] == ev_a.levels == ["raw", "L0-perm", "L0-bc", "L0", "L1"]
    assert (out["n"], out["n_calib"]) == (n_test, n_calib)
    for name, per in out["model_minus_model"].items():
        assert tuple(per) == METRICS
        for m, v in per.items():
            assert v["value"] == ev_a.metrics[name][m]["value"] - ev_b.metrics[name][m]["value"], (name, m)
    assert json.loads(json.dumps(out)) == out

    names, checked = ("raw", "L1"), ("acc", "nll", "ece")

    def values(recs: list[dict], t: Sequence[int], c: Sequence[int]) -> dict[str, dict[str, float]]:
        test = [r for r in recs if r["split"] == "test"]
        calib = [r for r in recs if r["split"] == "calib"]
        t_rows, c_rows = [test[i] for i in t], [calib[i] for i in c]
        levels = levels_of([dict(r, split="test") for r in t_rows] + [dict(r, split="calib") for r in c_rows], options)
        gold = np.array([r["gold"] for r in t_rows])
        return {name: metric_values(levels[name]["fwd"], gold, levels[name]["rev"]) for name in names}

    def a_minus_b(t: Sequence[int], c: Sequence[int]) -> dict[str, dict[str, float]]:
        va, vb = values(recs_a, t, c), values(recs_b, t, c)
        return {name: {m: va[name][m] - vb[name][m] for m in checked} for name in names}

    draw = np.random.default_rng(options.bootstrap_seed)  # the engine's rows: test, then calibration, sorted
    rows_test = np.sort(draw.integers(0, n_test, size=(options.n_boot, n_test)), axis=1)
    rows_calib = np.sort(draw.integers(0, n_calib, size=(options.n_boot, n_calib)), axis=1)
    boot = [a_minus_b(rt, rc) for rt, rc in zip(rows_test, rows_calib, strict=True)]
    every_test, every_calib = list(range(n_test)), list(range(n_calib))
    jack = [[a_minus_b(every_test[:i] + every_test[i + 1:], every_calib) for i in range(n_test)],
            [a_minus_b(every_test, every_calib[:i] + every_calib[i + 1:]) for i in range(n_calib)]]
    for name in names:
        for m in checked:
            got = out["model_minus_model"][name][m]
            accel = jackknife_acceleration([np.array([d[name][m] for d in stratum]) for stratum in jack])
            lo, hi, _ = interval(got["value"], np.array([d[name][m] for d in boot]), accel=accel)
            assert (got["lo"], got["hi"]) == pytest.approx((lo, hi), abs=1e-9), (name, m)


def test_cells_compared_must_hold_the_same_items(tmp_path) -> None:
    path_a, path_b, _, recs_b = two_models(tmp_path, 6, 4)
    for change, message in (
        (lambda recs: recs[2].update(gold=(recs[2]["gold"] + 1) % 3), r"b\.jsonl:item 3 \(2\): gold \d where .*a\.jsonl has \d"),
        (lambda recs: recs[0].update(id="x0"), r"b\.jsonl:item 1 \(x0\): id 'x0' where .*a\.jsonl has '0'"),
        (lambda recs: recs.pop(), r"b\.jsonl:items: 9 items where .*a\.jsonl has 10"),
    ):
        changed = [dict(r) for r in recs_b]
        change(changed)
        write_scores(path_b, {"model": "b", "task": "t"}, changed)
        with pytest.raises(TaskDataError, match=message):
            compare_cells(path_a, path_b)


def test_streaming_prior_with_repeated_items_counts_them_in_order() -> None:
    from anyjev.numbers.priors import running_prior

    probs = np.array([[[0.9, 0.1]], [[0.5, 0.5]], [[0.2, 0.8]]])
    idx = np.array([[0, 0, 2]])  # item 0 drawn twice, item 1 not at all
    prior = running_prior(probs, np.zeros(3, dtype=np.intp), idx, n_groups=1, prior_min_items=1, effective_batch_size=1)
    np.testing.assert_allclose(prior[0, :, 0, 0], [0.9, 0.9, (0.9 + 0.9 + 0.2) / 3])
    prior = running_prior(probs, np.zeros(3, dtype=np.intp), idx, n_groups=1, prior_min_items=3, effective_batch_size=1)
    np.testing.assert_allclose(prior[0, :, 0, 0], [0.5, 0.5, (0.9 + 0.9 + 0.2) / 3])  # uniform until 3 seen


# --------------------------------------------------------------------------------------- evaluate_records


def test_evaluation_intervals_contain_points_and_state_what_is_resampled() -> None:
    recs = make_records(np.random.default_rng(1), 40, 24, 3)
    ev = evaluate_records(recs)
    assert ev.settings["prior_mode"] == default("evaluation", "prior_mode") == "batch"
    assert ev.settings["interval"] == "BCa 95%" and ev.settings["n_boot"] == 1000
    assert "calibration" in ev.settings["resampled"] and "refit" in ev.settings["resampled"]
    widened = 0
    for level, per in ev.metrics.items():
        assert tuple(per) == METRICS
        for name, v in per.items():
            assert v["lo"] <= v["value"] <= v["hi"], (level, name)
            widened += v["widened"]
    assert ev.intervals_widened == widened
    assert ev.k == 3 and ev.k_groups == [{"k": 3, "n": 40, "n_calib": 24, "prior_source": "items"}]
    assert set(ev.temperature) == {"fwd", "rev"} and not ev.temperature["fwd"]["at_bound"]
    t = ev.temperature["fwd"]
    assert t["lo"] < t["T"] < t["hi"]
    # seeded: the same seed gives the same intervals, another seed others
    again = evaluate_records(recs)
    assert again.metrics == ev.metrics
    other = evaluate_records(recs, EvaluationOptions(bootstrap_seed=1))
    assert other.metrics["L1"]["nll"]["lo"] != ev.metrics["L1"]["nll"]["lo"]


def test_refit_interval_is_wider_than_a_held_fit_interval() -> None:
    from tests.items_bootstrap import bootstrap

    recs = make_records(np.random.default_rng(2), 60, 16, 3)
    ev = evaluate_records(recs)
    held = bootstrap(ev.point["L1"]["fwd"], ev.gold, ev.point["L1"]["rev"])
    width = ev.metrics["L1"]["nll"]["hi"] - ev.metrics["L1"]["nll"]["lo"]
    assert width > held["nll"][1] - held["nll"][0]  # the temperature's own uncertainty on 16 calibration items


def test_prior_modes_match_compute_levels() -> None:
    recs = make_records(np.random.default_rng(3), 30, 12, 3)
    for mode, batch_size in (("streaming", 1), ("batch", None)):
        ev = evaluate_records(recs, EvaluationOptions(prior_mode=mode))
        ref = levels_of(recs, EvaluationOptions(prior_mode=mode))
        for level in ("L0", "L0-bc", "L1"):
            np.testing.assert_allclose(ev.point[level]["fwd"], ref[level]["fwd"], atol=1e-12)
        assert ev.settings["effective_batch_size"] == batch_size
    stream = evaluate_records(recs, EvaluationOptions(prior_mode="streaming"))
    batch = evaluate_records(recs, EvaluationOptions(prior_mode="batch"))
    assert not np.allclose(stream.point["L0"]["fwd"], batch.point["L0"]["fwd"])
    with pytest.raises(ValueError, match="prior_mode"):
        evaluate_records(recs, EvaluationOptions(prior_mode="running"))
    with pytest.raises(ValueError, match="batch_size"):
        evaluate_records(recs, EvaluationOptions(prior_mode="batch", prior_batch_size=4))


def test_temperature_at_the_bound_is_flagged_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    # confident answers that avoid the gold option: the best temperature is as flat as the search allows
    recs = make_records(np.random.default_rng(4), 20, 20, 3, signal=-4.0, bias=0.0)
    for r in recs:
        for lay in r["layouts"].values():
            lay["lp"] = log_softmax(4.0 * np.asarray(lay["lp"])).tolist()
    with caplog.at_level(logging.WARNING, logger="anyjev.numbers.evaluation"):
        ev = evaluate_records(recs, source="results/cells/m/t/scores.jsonl")
    t = ev.temperature["fwd"]
    assert t["at_bound"] and t["log_T"] == pytest.approx(3.0, abs=1e-6)
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("results/cells/m/t/scores.jsonl" in m and "T = 20.09" in m and "fwd" in m for m in msgs), msgs


# -------------------------------------------------------------------------------------------- mixed K


def test_mixed_k_uses_per_k_priors_and_pads() -> None:
    rng = np.random.default_rng(5)
    r3 = make_records(rng, 30, 12, 3, id_prefix="a", bias=2.0)
    r5 = make_records(rng, 20, 10, 5, id_prefix="b", bias=-1.0)
    # interleave in file order, test first then calibration as prepare writes them
    test = [r for pair in zip(r3[:20], r5[:20], strict=True) for r in pair] + r3[20:30]
    mixed = test + r3[30:] + r5[20:]
    ev = evaluate_records(mixed)
    assert ev.k == "mixed (3-5)" and ev.n == 50
    assert [{k: g[k] for k in ("k", "n", "n_calib")} for g in ev.k_groups] == [{"k": 3, "n": 30, "n_calib": 12},
                                                                          {"k": 5, "n": 20, "n_calib": 10}]
    assert ev.ids == [r["id"] for r in test]
    sep3, sep5 = evaluate_records(r3), evaluate_records(r5)
    pos3 = [i for i, r in enumerate(test) if r["k"] == 3]
    pos5 = [i for i, r in enumerate(test) if r["k"] == 5]
    for level in ("raw", "L0-perm", "L0-bc", "L0"):
        lp = ev.point[level]["fwd"]
        np.testing.assert_allclose(lp[pos3, :3], sep3.point[level]["fwd"], atol=1e-12)
        assert np.isneginf(lp[pos3, 3:]).all()
        np.testing.assert_allclose(lp[pos5], sep5.point[level]["fwd"], atol=1e-12)
        nll = (30 * sep3.metrics[level]["nll"]["value"] + 20 * sep5.metrics[level]["nll"]["value"]) / 50
        assert ev.metrics[level]["nll"]["value"] == pytest.approx(nll, rel=1e-12)
        flip = (30 * sep3.metrics[level]["flip"]["value"] + 20 * sep5.metrics[level]["flip"]["value"]) / 50
        assert ev.metrics[level]["flip"]["value"] == pytest.approx(flip, rel=1e-12)
    # the K=3 items' prior is their own: without the K=5 items (whose position bias has the other sign) it is
    # unchanged, which a prior pooled over the task regardless of K would not be
    np.testing.assert_allclose(ev.point["L0-bc"]["fwd"][pos3, :3], sep3.point["L0-bc"]["fwd"], atol=1e-12)
    # L1: one temperature fitted on every calibration item, each K under its own frozen prior
    assert set(ev.temperature) == {"fwd", "rev"}
    for m in METRICS:
        v = ev.metrics["L1"][m]
        assert v["lo"] <= v["value"] <= v["hi"], m
    assert metric_values(ev.point["L1"]["fwd"], ev.gold, ev.point["L1"]["rev"])["nll"] == pytest.approx(
        ev.metrics["L1"]["nll"]["value"])


# A TruthfulQA-mc1-like cell: K from 2 to 8, four of its seven K groups of one or two test items; the small groups'
# position bias is strong, so the items that make or break "L0-perm minus raw" sit in strata a within-K bootstrap never
# varies. (test items, calibration items) per K:
MIXED_K = {2: (12, 6), 3: (2, 1), 4: (10, 5), 5: (1, 1), 6: (2, 1), 7: (1, 0), 8: (12, 6)}


def mixed_k_records(seed: int = 11) -> list[dict]:
    rng = np.random.default_rng(seed)
    test, calib = [], []
    for k, (n_test, n_calib) in MIXED_K.items():
        small = n_test <= 2
        recs = make_records(rng, n_test, n_calib, k, id_prefix=f"k{k}-", bias=4.0 if small else 0.5,
                            signal=0.5 if small else 2.0)
        test += recs[:n_test]
        calib += recs[n_test:]
    order = np.random.default_rng(seed).permutation(len(test))  # K mixed through the file, as a seeded split leaves it
    return [test[i] for i in order] + calib


def test_mixed_k_intervals_match_a_direct_paired_bootstrap_over_items() -> None:
    """The design fixes how many test items a cell has, not how many of each K: the engine's replicates of a
    per-item statistic (raw NLL; L0-perm minus raw in NLL and accuracy, which refit nothing) must have the spread of a
    direct paired bootstrap over all items, drawn here with another generator.

    Tolerance, from Monte Carlo error alone (nothing tuned to this fixture): the log of a standard deviation estimated
    from B draws has standard error sqrt((kappa - 1) / (4 B)) (kappa: the replicates' kurtosis), so two independent
    estimates agree within 4 standard errors of their difference; an interval's bound is a quantile, whose standard
    error is read off the draws' own order statistics (the distribution-free binomial window at +-1 sd), and two
    widths agree within 4 standard errors of their difference. A bootstrap within K misses the spread of the small
    groups and between the groups: here it is more than 10 standard errors narrower."""
    from anyjev.numbers.metrics import interval, jackknife_acceleration, metric_values

    n_boot = 4000
    recs = mixed_k_records()
    ev = evaluate_records(recs, EvaluationOptions(n_boot=n_boot))
    assert ev.k == "mixed (2-8)" and ev.n == 40
    test = [r for r in recs if r["split"] == "test"]
    # per test item, what it adds to each statistic: levels that refit nothing are the item's own
    gold = np.array([r["gold"] for r in test])
    per_item = {}
    for name in ("raw", "L0-perm"):
        lp = ev.point[name]
        per_item[name] = {"nll": -np.take_along_axis(lp["fwd"], gold[:, None], axis=1)[:, 0],
                          "acc": np.array([metric_values(lp["fwd"][i:i + 1], gold[i:i + 1], lp["rev"][i:i + 1])["acc"]
                                           for i in range(len(gold))])}
    stats = {("metric", "raw", "nll"): per_item["raw"]["nll"],
             ("minus_raw", "L0-perm", "nll"): per_item["L0-perm"]["nll"] - per_item["raw"]["nll"],
             ("minus_raw", "L0-perm", "acc"): per_item["L0-perm"]["acc"] - per_item["raw"]["acc"]}
    draws = np.random.default_rng(12345).integers(0, len(gold), size=(n_boot, len(gold)))
    loo = np.array([np.delete(np.arange(len(gold)), i) for i in range(len(gold))])

    def quantile_se(v: np.ndarray, q: float) -> float:
        s = np.sort(v)
        half = math.sqrt(len(v) * q * (1 - q))
        return float(s[min(len(v) - 1, math.ceil(len(v) * q + half))] - s[max(0, math.floor(len(v) * q - half))]) / 2

    for (kind, name, m), values in stats.items():
        engine = ev.replicates.boot[name][m] - (ev.replicates.boot["raw"][m] if kind == "minus_raw" else 0.0)
        direct = values[draws].mean(axis=1)
        kurt = float(np.mean((direct - direct.mean()) ** 4) / direct.var() ** 2)
        se = math.sqrt((kurt - 1) / 4 * (2 / n_boot))
        assert abs(math.log(engine.std() / direct.std())) <= 4 * se, (name, m, engine.std(), direct.std(), se)
        if m != "nll":
            continue  # accuracy moves in steps of 1/40: its bounds jump, its spread is the comparison
        got = ev.metrics[name][m] if kind == "metric" else ev.level_minus_raw[name][m]
        lo, hi, _ = interval(float(values.mean()), direct, accel=jackknife_acceleration([values[loo].mean(axis=1)]))
        q_lo, q_hi = float((direct < lo).mean()), float((direct < hi).mean())
        se_width = math.sqrt(sum(quantile_se(v, q) ** 2 for v in (direct, engine) for q in (q_lo, q_hi)))
        assert abs((got["hi"] - got["lo"]) - (hi - lo)) <= 4 * se_width, (name, m, got, (lo, hi), se_width)


def test_mixed_k_resamples_are_the_levels_of_the_items_drawn() -> None:
    """Each bootstrap row draws 40 test and 20 calibration items from all of them: the engine's levels for a row are
    those of the drawn items, split by K and computed for each K alone (its own batch prior from the K's drawn test
    items), a K drawn 0 times adding nothing."""
    from anyjev.numbers.bootstrap import calib_rows, resample_rows
    from anyjev.numbers.evaluation import with_calibration
    from anyjev.run.records import cell_groups

    options = EvaluationOptions()
    recs = mixed_k_records()
    cell = cell_groups(recs, None, options.prior_mode, "<mixed>")
    ev = evaluate_records(recs, options)
    rows = resample_rows(cell.groups, calib_rows(cell.groups, with_calibration(cell.groups, options)), options)
    per_k = [[r for r in recs if r["split"] == "test" and r["k"] == g.k] for g in cell.groups]
    flat = [r for recs_k in per_k for r in recs_k]  # the engine's order of the test items: K group after K group
    counts = np.array([[sum(1 for i in row if flat[i]["k"] == g.k) for g in cell.groups] for row in rows.test])
    assert (counts.sum(axis=1) == 40).all() and (counts == 0).any() and len({tuple(c) for c in counts}) > 1
    for b in range(5):
        drawn = [flat[i] for i in rows.test[b]]
        nll = []
        for g in cell.groups:
            mine = [r for r in drawn if r["k"] == g.k]
            if not mine:
                continue
            (fwd, of), (rev, orv) = arrays(mine, "fwd"), arrays(mine, "rev")
            lv = compute_levels(fwd, rev, of, orv, [r["group"] for r in mine], options=options)
            gold = np.array([r["gold"] for r in mine])
            nll += list(-np.take_along_axis(lv["L0"]["fwd"], gold[:, None], axis=1)[:, 0])
        assert ev.replicates.boot["L0"]["nll"][b] == pytest.approx(np.mean(nll), rel=1e-12)


def test_equal_k_rows_are_those_of_a_bootstrap_within_the_split() -> None:
    """With one K the rows are what they are for any split: the test draws, then the calibration draws, sorted (the
    committed reference cells keep their numbers to the last bit)."""
    from anyjev.numbers.bootstrap import calib_rows, jackknife_rows, resample_rows
    from anyjev.run.records import cell_groups

    options = EvaluationOptions()
    groups = cell_groups(make_records(np.random.default_rng(3), 30, 20, 4), None, "batch", "<k4>").groups
    rows = resample_rows(groups, calib_rows(groups, True), options)
    draw = np.random.default_rng(options.bootstrap_seed)
    np.testing.assert_array_equal(rows.test, np.sort(draw.integers(0, 30, size=(options.n_boot, 30)), axis=1))
    np.testing.assert_array_equal(rows.calib, np.sort(draw.integers(0, 20, size=(options.n_boot, 20)), axis=1))
    test_loo, calib_loo = jackknife_rows(groups, [True])
    assert test_loo.test.shape == (30, 29) and (test_loo.calib == np.arange(20)).all()
    assert calib_loo.calib.shape == (20, 19) and (calib_loo.test == np.arange(30)).all()


def test_mixed_k_without_calibration_for_one_k_takes_the_temperature_of_the_others(caplog) -> None:
    """A K with no calibration items keeps L1: its test items take the temperature fitted on the other K's calibration
    items (their own frozen prior cannot be estimated: the uniform one), and metrics.json says which K."""
    from anyjev.numbers.levels import marginalise
    from anyjev.numbers.temperature import apply_temperature

    rng = np.random.default_rng(6)
    r3 = make_records(rng, 20, 10, 3)
    r2 = make_records(rng, 10, 0, 2, id_prefix="b")
    with caplog.at_level(logging.WARNING, logger="anyjev.numbers.evaluation"):
        ev = evaluate_records(r3[:20] + r2 + r3[20:])
    assert "L1" in ev.metrics and ev.k == "mixed (2-3)" and ev.n_calib == 10
    assert ev.notes == [{"level": "L1", "text": "L1 of K=2 (10 test items) takes the temperature fitted on the 10 "
                         "calibration items of the other K (none has K=2; their frozen prior is the uniform one)"}]
    assert any("K=2" in r.getMessage() for r in caplog.records)
    alone = evaluate_records(r3)  # the same calibration items: the same temperature
    assert ev.temperature["fwd"]["T"] == pytest.approx(alone.temperature["fwd"]["T"], rel=1e-12)
    fwd, _ = arrays(r2, "fwd")
    opt = np.take_along_axis(fwd, np.argsort(cyclic(2), axis=-1)[None], axis=-1)  # position to option space
    np.testing.assert_allclose(ev.point["L1"]["fwd"][20:, :2],
                               apply_temperature(marginalise(opt), ev.temperature["fwd"]["T"]), atol=1e-7)
    np.testing.assert_allclose(ev.point["L1"]["fwd"][:20], alone.point["L1"]["fwd"], atol=1e-12)
    v = ev.metrics["L1"]["nll"]
    assert v["lo"] <= v["value"] <= v["hi"]


def test_l1_is_refused_below_the_minimum_of_calibration_items_and_says_why() -> None:
    """One calibration item (a 30-item file task split 29 + 1 under allow_fewer) fits no L1 worth reporting: the cell
    has none, and its notes say why, naming the setting; at the minimum it has L1 again."""
    recs = make_records(np.random.default_rng(8), 29, 1, 4)
    ev = evaluate_records(recs)
    assert "L1" not in ev.metrics and not ev.temperature
    assert ev.notes == [{"level": "L1", "text": "no L1: 1 calibration item, fewer than evaluation.min_calib_items = 8"}]
    assert default("evaluation", "min_calib_items") == 8
    assert "L1" in evaluate_records(recs, EvaluationOptions(min_calib_items=1)).metrics
    none = evaluate_records(make_records(np.random.default_rng(8), 20, 0, 4))
    assert none.notes == [{"level": "L1", "text": "no L1: no calibration items to fit its temperature on"}]


# ------------------------------------------------------------------------------------ committed cell


def test_reference_cell_evaluates(tmp_path: Path) -> None:
    """The committed default cell (100 test + 60 calibration, K = 4, 5 levels) with refits and BCa."""
    scores = REPO / "results" / "cells" / "smollm2-135m" / "mmlu" / "scores.jsonl"
    out = evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), str(tmp_path / "pred.csv"))
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["k"] == 4 and data["levels"] == ["raw", "L0-perm", "L0-bc", "L0", "L1"]
    preds = pd.read_csv(tmp_path / "pred.csv")
    raw = preds[(preds["level"] == "raw") & (preds["group"] == "fwd")]
    # float32 with the fp32 head: no raw top-label ties in the reference cell, counted two ways
    assert data["metrics"]["raw"]["tie_rate"]["value"] == 0.0 and (raw["n_top"] == 1).all()
    assert data["temperature"]["fwd"]["at_bound"] is True  # T = e^3 on this cell
    for level in data["metrics"].values():
        for v in level.values():
            assert v["lo"] <= v["value"] <= v["hi"]
    assert out["settings"]["resampled"].startswith("test and calibration items")
    header = (tmp_path / "pred.csv").read_text().splitlines()[0]
    assert header.endswith("n_top")


def scored_cell(folder: Path, n_test: int, n_calib: int, *, asked: tuple[int, int] | None = None) -> tuple[Path, Path]:
    """A cell as the workflow holds it: its task file (split as the prepare step writes it, with the counts the config
    asked) and its scores, in a cell folder ``<results>/cells/m/t/``."""
    from anyjev.data.taskfile import write_task_file
    from anyjev.data.tasks import Item, Task
    from anyjev.decision.questions import choice

    recs = make_records(np.random.default_rng(4), n_test, n_calib, 3, id_prefix="q")
    question = choice("Which?", ["a", "b", "c"])
    items = [Item(id=r["id"], state="", question=question, gold=r["gold"], split=r["split"]) for r in recs]
    n_asked, c_asked = asked or (n_test, n_calib)
    task_file = folder / "tasks" / "t.jsonl"
    write_task_file(Task(name="t", items=items, prior_group="task",
                         source={"split": {"n_test": n_asked, "n_calib": c_asked, "seed": 0}}), task_file)
    scores = folder / "results" / "cells" / "m" / "t" / "scores.jsonl"
    scores.parent.mkdir(parents=True)
    write_scores(scores, {"model": "m", "task": "t"}, recs)
    return task_file, scores


def test_a_cut_scores_file_is_refused_by_name_with_the_way_back(tmp_path: Path) -> None:
    """scores.jsonl cut at a line boundary (`head -n 51`: the header and 50 of 120 items) is not evaluated on what is
    left: one line names the file, the counts and the first missing item, and the way back; a whole staged copy is
    named as that way."""
    import subprocess
    import sys

    task_file, scores = scored_cell(tmp_path, 100, 20)
    whole = scores.read_text()
    scores.write_text("".join(whole.splitlines(keepends=True)[:51]))  # head -n 51
    job = EvaluateJob().to_file(tmp_path / "jobs")
    argv = [sys.executable, "-m", "anyjev", "evaluate", "--job", str(job), "--scores", str(scores), "--task-file",
            str(task_file), "--out", str(tmp_path / "metrics.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"anyjev evaluate: TaskDataError: {scores}:items: 50 items where {task_file} has 120 (100 test + 20 "
                               "calibration); the first missing is 'q50' (test)"), lines[0]
    assert f"rescore the cell: delete {scores} and run again" in lines[0]
    assert not (tmp_path / "metrics.json").exists()
    staged = scores.parent / "staged" / "scores.jsonl"
    staged.parent.mkdir()
    staged.write_text(whole)
    with pytest.raises(TaskDataError, match=f"its staged copy holds them all: cp {staged} {scores}"):
        evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), task_file=str(task_file))
    staged.write_text(whole.replace('"id":"q7"', '"id":"x7"'))  # an item not in the task
    with pytest.raises(TaskDataError, match="rescore the cell"):
        evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), task_file=str(task_file))
    scores.write_text(whole.replace('"id":"q7"', '"id":"x7"'))
    with pytest.raises(TaskDataError, match=f"item 'x7' is not in {task_file}"):
        evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), task_file=str(task_file))
    scores.write_text(whole)
    out = evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), task_file=str(task_file))
    assert (out["n"], out["n_calib"], out["notes"]) == (100, 20, [])


def test_a_cell_with_fewer_items_than_its_config_asked_says_so(tmp_path: Path) -> None:
    """A 30-item file task under `n_test: 500, n_calib: 10` (allow_fewer: 29 + 1): metrics.json notes the counts
    and the keys that asked for more, and that L1 on one calibration item is refused."""
    task_file, scores = scored_cell(tmp_path, 29, 1, asked=(500, 10))
    out = evaluate_cell(EvaluateJob(), str(scores), str(tmp_path / "metrics.json"), task_file=str(task_file))
    assert out["notes"] == [
        {"level": None, "text": "29 test and 1 calibration items, fewer than the 500 and 10 the config asks "
                                "(tasks.t.n_test and n_calib; tasks.t.allow_fewer kept what there is)"},
        {"level": "L1", "text": "no L1: 1 calibration item, fewer than evaluation.min_calib_items = 8"}]
    assert json.loads((tmp_path / "metrics.json").read_text())["notes"] == out["notes"]


def test_answer_mass_is_summarised_per_cell_with_an_interval() -> None:
    from anyjev.numbers.evaluation import answer_mass_summary

    rng = np.random.default_rng(3)
    values = rng.uniform(0.2, 0.9, size=60)
    s = answer_mass_summary(list(values), EvaluationOptions(), level=0.95)
    assert s["value"] == pytest.approx(values.mean())
    assert s["lo"] < s["value"] < s["hi"] and s["hi"] - s["lo"] < 0.2
    assert answer_mass_summary([0.5, None], EvaluationOptions(), level=0.95) is None
