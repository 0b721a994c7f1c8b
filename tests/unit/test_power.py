"""Power (anyjev.numbers.power): the formulas against values computed by hand, McNemar's power checked by simulation,
the plan's power per task (worst case and from a pilot run's discordance), and the differences table's underpowered
rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from anyjev.numbers.power import (
    accuracy_half_width,
    correctness,
    detectable_difference,
    detectable_from_interval,
    discordance,
    items_needed,
)
from anyjev.plan import TaskCounts, pilot_discordance, power_plan, power_text
from anyjev.reports.differences import differences_markdown, with_power
from anyjev.rundata import read_run
from anyjev.settings import Settings
from tests.conftest import DEFAULT_CONFIG, REPO

Z975, Z80 = 1.959964, 0.841621  # the normal quantiles of 0.975 and 0.8, from a table


def test_the_formulas_give_the_values_computed_by_hand():
    # the widest accuracy interval of 100 items: 1.96 * sqrt(0.25 / 100)
    assert accuracy_half_width(100) == pytest.approx(Z975 * 0.05, abs=1e-6)
    # McNemar, psi = 1, d = 0.05: ((1.959964 + 0.841621 * sqrt(1 - 0.0025)) / 0.05)^2 = 3137.2 -> 3138
    assert items_needed(0.05) == 3138
    # psi = 0.3, d = 0.1: ((1.959964 * sqrt(0.3) + 0.841621 * sqrt(0.29)) / 0.1)^2 = 233.1 -> 234
    assert items_needed(0.1, 0.3) == 234
    # n = 100, psi = 1: (1.959964 * 10 + 0.841621 * sqrt(100 - 3.841459 + 0.708326)) / (100 + 0.708326)
    assert detectable_difference(100) == pytest.approx((Z975 * 10 + Z80 * math.sqrt(96.866867)) / 100.708326, abs=1e-6)
    # the two are one equation: the items needed detect the difference, one item fewer does not
    for d, psi in ((0.05, 1.0), (0.1, 0.3), (0.2, 0.5)):
        n = items_needed(d, psi)
        assert detectable_difference(n, psi) <= d < detectable_difference(n - 1, psi)
    # from an interval: its standard error (hi - lo) / (2 * 1.959964), times 1.959964 + 0.841621
    assert detectable_from_interval(-0.03, 0.05) == pytest.approx((Z975 + Z80) * 0.08 / (2 * Z975), abs=1e-6)
    with pytest.raises(ValueError):
        items_needed(0.3, 0.2)  # a difference larger than the discordance cannot be


def test_mcnemar_at_the_detectable_difference_rejects_80_percent_of_the_time():
    """Simulated paired decisions with the detectable difference of n items: McNemar's test (normal approximation,
    two-sided 5%) rejects in 80% of the draws (within three standard errors of 20,000 draws)."""
    rng = np.random.default_rng(0)
    for n, psi in ((200, 0.3), (100, 1.0), (1000, 0.1)):
        d = detectable_difference(n, psi)
        counts = rng.multinomial(n, [(psi + d) / 2, (psi - d) / 2, 1 - psi], size=20_000)
        b, c = counts[:, 0], counts[:, 1]
        z = np.divide(b - c, np.sqrt(b + c), out=np.zeros(len(b)), where=b + c > 0)
        power = float(np.mean(np.abs(z) > Z975))
        assert power == pytest.approx(0.80, abs=3 * math.sqrt(0.16 / 20_000) + 0.01), (n, psi, power)


def test_correctness_is_tie_aware_and_discordance_counts_the_split_items():
    # gold on top alone, gold tied with one more (1/2), gold not on top
    assert correctness(np.array([0.7, 0.4, 0.1]), np.array([0.7, 0.4, 0.6]), np.array([1, 2, 1])).tolist() == [1, 0.5, 0]
    assert discordance(np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0])) == 0.5
    assert discordance(np.array([0.5, 1.0]), np.array([0.0, 1.0])) == 0.125


def test_the_plan_reads_the_discordance_of_a_pilot_run():
    """The committed reference run as the pilot: the plan's discordance of a task is the largest share of test items
    one level gets right and raw wrong, or the other way round, counted here from predictions.csv."""
    run = read_run(REPO / "results", REPO / "logs")
    predictions = run.predictions[run.predictions["group"] == "fwd"]
    for task in ("mmlu", "socialiqa", "rotten_tomatoes"):
        rows = predictions[predictions["task"] == task].assign(right=lambda f: f["pred"] == f["gold"])
        assert (rows["n_top"] == 1).all(), "no ties here: right is pred == gold"
        right = rows.pivot(index="item_id", columns="level", values="right")
        by_level = {lv: float((right[lv] != right["raw"]).mean()) for lv in right.columns if lv != "raw"}
        pilot = pilot_discordance(run, task)
        assert pilot["discordance"] == pytest.approx(max(by_level.values()))
        most = [lv for lv, psi in by_level.items() if psi == max(by_level.values())]
        assert pilot["pair"] in [f"smollm2-135m: {lv} vs raw" for lv in most] and pilot["items"] == 100

    settings = Settings.load(DEFAULT_CONFIG, workdir=REPO)
    tasks = {"mmlu": TaskCounts([], 100, 60), "absent": TaskCounts([], 400, 0)}
    power = power_plan(settings, tasks, REPO / "results", REPO / "logs")
    mmlu, absent = power["mmlu"], power["absent"]
    psi = mmlu["pilot"]["discordance"]
    assert mmlu["detectable"] == pytest.approx(detectable_difference(100)) and mmlu["items_needed"] == items_needed(0.05)
    assert mmlu["pilot"]["detectable"] == pytest.approx(detectable_difference(100, psi))
    assert mmlu["pilot"]["items_needed"] == items_needed(settings.detect_difference, psi) < mmlu["items_needed"]
    assert absent["pilot"] is None and absent["accuracy_half_width"] == pytest.approx(accuracy_half_width(400))
    text = "\n".join(power_text(power))
    assert f"{detectable_difference(100):.3f} | {detectable_difference(100, psi):.3f}" in text
    assert "no finished cell of the task in the results folder" in text


def test_a_difference_whose_interval_covers_zero_below_the_detectable_is_underpowered():
    rows = pd.DataFrame([
        {"task": "t", "model": "m", "versus_model": "m", "level": "L0", "versus_level": "raw", "metric": "acc",
         "value": 0.01, "lo": -0.03, "hi": 0.05, "widened": False},  # covers 0, 0.01 < 0.057: underpowered
        {"task": "t", "model": "m", "versus_model": "m", "level": "L1", "versus_level": "raw", "metric": "acc",
         "value": 0.06, "lo": 0.02, "hi": 0.10, "widened": False},  # excludes 0
        {"task": "t", "model": "m", "versus_model": "m", "level": "L0-bc", "versus_level": "raw", "metric": "acc",
         "value": 0.19, "lo": -0.001, "hi": 0.2, "widened": True}])  # covers 0, but 0.19 > 0.144: not underpowered
    marked = with_power(rows)
    assert marked["underpowered"].tolist() == [True, False, False]
    assert marked["detectable"].tolist() == pytest.approx([detectable_from_interval(lo, hi) for lo, hi in
                                                           zip(rows["lo"], rows["hi"], strict=True)])
    md = differences_markdown(marked)
    assert "+0.010 [-0.030, +0.050] †" in md and "**+0.060 [+0.020, +0.100]**" in md
    assert "+0.190 [-0.001, +0.200] |" in md and "| 0.057 |" in md
