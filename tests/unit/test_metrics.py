"""Metrics on hand-worked examples, and bootstrap intervals of them over resampled items."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anyjev.numbers.metrics import (
    METRICS,
    accuracy,
    aurc,
    brier,
    coverage_at_risk,
    ece,
    flip,
    macro_f1,
    metric_values,
    nll,
)
from tests.items_bootstrap import bootstrap

# Four items, K = 3.  pred = [0, 1, 2, 0], gold = [0, 2, 2, 1]: correct = [T, F, T, F]; conf = [.7, .6, .5, .45]
P = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.3, 0.5], [0.45, 0.35, 0.2]])
LP = np.log(P)
GOLD = np.array([0, 2, 2, 1])
CONF = np.array([0.7, 0.6, 0.5, 0.45])
CORRECT = np.array([True, False, True, False])


def test_accuracy_nll_brier_by_hand() -> None:
    assert accuracy(LP, GOLD) == pytest.approx(0.5)
    assert nll(LP, GOLD) == pytest.approx(-(math.log(0.7) + math.log(0.3) + math.log(0.5) + math.log(0.35)) / 4)
    # per item: .09+.04+.01, .01+.36+.49, .04+.09+.25, .2025+.4225+.04
    assert brier(LP, GOLD) == pytest.approx((0.14 + 0.86 + 0.38 + 0.665) / 4)


def test_nll_clips_at_1e_12() -> None:
    lp = np.array([[0.0, -np.inf], [math.log(0.5), math.log(0.5)]])
    assert nll(lp, np.array([1, 0])) == pytest.approx((-math.log(1e-12) - math.log(0.5)) / 2)


def test_macro_f1_by_hand() -> None:
    # class 0: tp 1, 2 predicted, 1 gold -> 2/3; class 1: tp 0 -> 0; class 2: tp 1, 1 predicted, 2 gold -> 2/3
    assert macro_f1(LP, GOLD) == pytest.approx(4 / 9)
    # a fourth option nobody predicts nor needs does not count as a class
    lp4 = np.c_[LP, np.full(4, -np.inf)]
    assert macro_f1(lp4, GOLD) == pytest.approx(4 / 9)
    # a class only predicted counts with F1 0
    lp_pred_only = np.log(np.array([[0.9, 0.1], [0.2, 0.8]]))
    assert macro_f1(lp_pred_only, np.array([0, 0])) == pytest.approx((2 * 1 / (1 + 2) + 0) / 2)


def test_ece_by_hand() -> None:
    # sorted ascending: .45 F, .5 T | .6 F, .7 T -> 0.5*|.475-.5| + 0.5*|.65-.5|
    assert ece(CONF, CORRECT, n_bins=2) == pytest.approx(0.5 * 0.025 + 0.5 * 0.15)
    # 15 bins with n = 4: four singleton bins
    assert ece(CONF, CORRECT) == pytest.approx((0.45 + 0.5 + 0.6 + 0.3) / 4)
    # n = 5 in 2 bins: sizes 3 and 2 (np.array_split)
    conf5 = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
    ok5 = np.array([1, 0, 1, 1, 0])
    # ascending: .1 F, .3 T, .5 T | .7 F, .9 T
    expected = (3 / 5) * abs(0.3 - 2 / 3) + (2 / 5) * abs(0.8 - 0.5)
    assert ece(conf5, ok5, n_bins=2) == pytest.approx(expected)


def test_coverage_and_aurc_by_hand() -> None:
    # descending: .7 T, .6 F, .5 T, .45 F -> error rates 0, 1/2, 1/3, 1/2
    assert coverage_at_risk(CONF, CORRECT) == pytest.approx(0.25)
    assert coverage_at_risk(CONF, CORRECT, risk=0.4) == pytest.approx(0.75)  # largest k, not the first break
    assert coverage_at_risk(CONF, CORRECT, risk=0.5) == pytest.approx(1.0)
    assert aurc(CONF, CORRECT) == pytest.approx((0 + 1 / 2 + 1 / 3 + 1 / 2) / 4)
    assert coverage_at_risk(np.array([0.9, 0.3]), np.array([False, True])) == 0.0


def test_coverage_exact_boundary_and_confidence_ties() -> None:
    conf = np.linspace(1.0, 0.5, 20)
    ok = np.ones(20, dtype=bool)
    ok[-1] = False  # 1 error in 20 = exactly 5%
    assert coverage_at_risk(conf, ok) == pytest.approx(1.0)
    # equal confidences form one block, ranked in expectation over a random order: input order is irrelevant
    # (the stable sort used to give (1 + 0.5) / 2 and (0 + 0.5) / 2 depending on which item came first)
    assert coverage_at_risk(np.array([0.9, 0.9]), np.array([False, True])) == 0.0
    assert aurc(np.array([0.9, 0.9]), np.array([False, True])) == pytest.approx(0.5)
    assert aurc(np.array([0.9, 0.9]), np.array([True, False])) == pytest.approx(0.5)
    # a block inside a ranking: .9 T, then {.5 F, .5 T}, then .1 F -> expected errors 0, .5, 1, 2
    conf4, ok4 = np.array([0.5, 0.9, 0.1, 0.5]), np.array([False, True, False, True])
    assert aurc(conf4, ok4) == pytest.approx((0 + 0.5 / 2 + 1 / 3 + 2 / 4) / 4)
    assert coverage_at_risk(conf4, ok4, risk=0.25) == pytest.approx(0.5)


def test_flip_by_hand() -> None:
    rev = np.log(np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.2, 0.3, 0.5], [0.3, 0.5, 0.2]]))
    assert flip(LP, rev) == pytest.approx(0.5)
    assert flip(LP, LP) == 0.0


def test_metric_values_consistent_with_scalar_functions() -> None:
    vals = metric_values(LP, GOLD)
    assert tuple(vals) == METRICS
    assert math.isnan(vals["flip"])
    assert vals["acc"] == pytest.approx(accuracy(LP, GOLD))
    assert vals["macro_f1"] == pytest.approx(4 / 9)
    assert vals["nll"] == pytest.approx(nll(LP, GOLD))
    assert vals["brier"] == pytest.approx(brier(LP, GOLD))
    assert vals["ece"] == pytest.approx(ece(CONF, CORRECT))
    assert vals["cov@5"] == pytest.approx(0.25)
    assert vals["aurc"] == pytest.approx(aurc(CONF, CORRECT))
    rev = LP[:, ::-1]
    assert metric_values(LP, GOLD, rev)["flip"] == pytest.approx(flip(LP, rev))


def test_input_validation_names_the_argument() -> None:
    with pytest.raises(ValueError, match="gold"):
        metric_values(LP, np.array([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="gold"):
        metric_values(LP, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="gold"):
        accuracy(LP, np.array([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="lp_rev"):
        metric_values(LP, GOLD, LP[:3])
    with pytest.raises(ValueError, match="lp"):
        metric_values(LP[0], GOLD)
    with pytest.raises(ValueError, match="correct"):
        ece(CONF, CORRECT[:3])
    with pytest.raises(ValueError, match="conf"):
        aurc(np.array([]), np.array([], dtype=bool))


def _typical(seed: int, n: int = 200, k: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, k, size=n)
    logits = 1.5 * rng.normal(size=(n, k))
    logits[np.arange(n), gold] += 1.5
    rev_logits = logits + 0.8 * rng.normal(size=(n, k))
    norm = lambda x: x - np.log(np.exp(x).sum(axis=1, keepdims=True))  # noqa: E731
    return norm(logits), gold, norm(rev_logits)


def test_bootstrap_contains_point_and_is_seeded() -> None:
    lp, gold, rev = _typical(0)
    values = metric_values(lp, gold, rev)
    ci = bootstrap(lp, gold, rev)
    assert tuple(ci) == METRICS
    for name in METRICS:
        lo, hi = ci[name]
        assert lo <= values[name] <= hi, name
        if name != "tie_rate":
            assert lo < hi, name
    assert ci["tie_rate"] == (0.0, 0.0)  # continuous log-probs never tie
    assert bootstrap(lp, gold, rev, seed=0) == ci
    other = bootstrap(lp, gold, rev, seed=1)
    assert any(other[name] != ci[name] for name in METRICS)
    narrow = bootstrap(lp, gold, rev, level=0.5)
    assert narrow["acc"][0] >= ci["acc"][0] and narrow["acc"][1] <= ci["acc"][1]


def test_bootstrap_matches_metric_values_on_each_resample() -> None:
    lp, gold, rev = _typical(3, n=40, k=4)
    n_boot = 1000
    idx = np.random.default_rng(7).integers(0, 40, size=(n_boot, 40))
    per = {name: [] for name in METRICS}
    for row in idx:
        vals = metric_values(lp[row], gold[row], rev[row])
        for name in METRICS:
            per[name].append(vals[name])
    ci = bootstrap(lp, gold, rev, n_boot=n_boot, seed=7, method="percentile")
    for name in METRICS:
        lo, hi = np.percentile(per[name], [2.5, 97.5])
        assert ci[name] == pytest.approx((lo, hi), abs=1e-12), name


def test_bootstrap_without_rev_and_bad_level() -> None:
    lp, gold, _ = _typical(1)
    ci = bootstrap(lp, gold)
    assert all(math.isnan(v) for v in ci["flip"])
    with pytest.raises(ValueError, match="level"):
        bootstrap(lp, gold, level=1.5)


def test_reliability_bins_are_the_bins_ece_uses():
    from anyjev.numbers.metrics import ece, reliability_bins

    rng = np.random.default_rng(3)
    conf = rng.uniform(0.3, 1.0, size=100)
    correct = rng.uniform(size=100) < conf
    x, y, size = reliability_bins(conf, correct)
    assert size.sum() == 100 and len(size) == 15 and set(size) == {6, 7}
    assert np.all(np.diff(x) >= 0), "bins run from least to most confident"
    assert float(np.sum(size / 100 * np.abs(x - y))) == pytest.approx(ece(conf, correct), abs=1e-12)


# ------------------------------------------------------------------------------------------- planted ties


def test_planted_ties_are_broken_uniformly_not_toward_position_a() -> None:
    from anyjev.numbers.metrics import TIE_TOL, tie_rate, tie_weights

    # item 0: options 0 and 1 tie exactly (gold 1); item 1: three-way tie within 1e-13 (gold 2); item 2: clear
    p = np.array([[0.4, 0.4, 0.2], [1 / 3, 1 / 3, 1 / 3], [0.1, 0.2, 0.7]])
    lp = np.log(p)
    lp[1, 1] -= 1e-13  # inside the tolerance: still a tie
    gold = np.array([1, 2, 2])
    assert TIE_TOL == 1e-12
    np.testing.assert_allclose(tie_weights(lp), [[0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0, 1]])
    assert tie_rate(lp) == pytest.approx(2 / 3)
    lowest_index = float(np.mean(lp.argmax(axis=1) == gold))
    assert lowest_index == pytest.approx(1 / 3)  # np.argmax gives both ties to option 0: wrong twice
    assert accuracy(lp, gold) == pytest.approx((0.5 + 1 / 3 + 1) / 3)
    # expected confusion: class 0 pred .5+1/3, gold 0; class 1 tp .5, pred .5+1/3, gold 1; class 2 tp 1/3+1,
    # pred 1/3+1, gold 2
    f1 = [0.0, 2 * 0.5 / (5 / 6 + 1), 2 * (4 / 3) / (4 / 3 + 2)]
    assert macro_f1(lp, gold) == pytest.approx(sum(f1) / 3)
    # reversed layout: item 0 now prefers option 1 clearly; item 1 tied between 1 and 2; item 2 unchanged
    rev = np.log(np.array([[0.3, 0.5, 0.2], [0.2, 0.4, 0.4], [0.1, 0.2, 0.7]]))
    # P(differ): item 0: 1 - .5 = .5; item 1: 1 - (1/3 * 1/2 + 1/3 * 1/2) = 2/3; item 2: 0
    assert flip(lp, rev) == pytest.approx((0.5 + 2 / 3) / 3)
    assert float(np.mean(lp.argmax(1) != rev.argmax(1))) == pytest.approx(2 / 3)  # what argmax would say
    # just outside the tolerance the tie is gone
    lp_out = np.log(p)
    lp_out[0, 0] -= 1e-9
    assert accuracy(lp_out, np.array([1, 2, 2])) > accuracy(lp, gold)
    assert tie_rate(lp_out) == pytest.approx(1 / 3)


def test_selective_metrics_use_expected_correctness_and_tie_blocks() -> None:
    # two items with the same confidence: one tied (gold among two tied labels), one wrong
    lp = np.log(np.array([[0.45, 0.45, 0.1], [0.45, 0.1, 0.45], [0.9, 0.05, 0.05]]))
    gold = np.array([1, 1, 0])
    vals = metric_values(lp, gold)
    # expected correctness [.5, 0, 1]; ranking: item 2 (.9), then {0, 1} as one block with mean .25
    assert vals["acc"] == pytest.approx(0.5)
    assert vals["aurc"] == pytest.approx((0 + (0 + 0.75) / 2 + (0 + 1.5) / 3) / 3)
    assert vals["cov@5"] == pytest.approx(1 / 3)
    assert vals["tie_rate"] == pytest.approx(2 / 3)
    # ECE with 15 bins -> 3 singleton bins, the tied-confidence pair averaged: |.45-.25| twice, |.9-1|
    assert vals["ece"] == pytest.approx((0.2 + 0.2 + 0.1) / 3)
    # the item order does not matter any more
    perm = np.array([1, 0, 2])
    shuffled = metric_values(lp[perm], gold[perm])
    assert all(shuffled[m] == pytest.approx(vals[m]) for m in METRICS if m != "flip")


def test_bca_interval_widens_degenerate_and_corrects_bias() -> None:
    from anyjev.numbers.metrics import interval, jackknife_acceleration

    boot = np.linspace(0.12, 0.23, 1000)  # every resample above the point (an ECE-like upward bias)
    lo, hi, widened = interval(0.115, boot)
    assert widened and lo == 0.115 and hi <= 0.23
    assert interval(0.115, boot, method="percentile")[2]
    # symmetric, centred distribution: BCa with a = 0 equals the percentile interval
    boot = np.random.default_rng(0).normal(size=20001)
    lo, hi, widened = interval(0.0, boot)
    plo, phi, _ = interval(0.0, boot, method="percentile")
    assert not widened and lo == pytest.approx(plo, abs=0.02) and hi == pytest.approx(phi, abs=0.02)
    # a constant statistic: a point interval, not widened
    assert interval(0.75, np.full(1000, 0.75)) == (0.75, 0.75, False)
    assert all(math.isnan(x) for x in interval(math.nan, np.full(1000, np.nan))[:2])
    # acceleration by hand: one stratum, theta_(i) = [0, 0, 3] -> l = 2*(1 - theta) = [2, 2, -4]
    a = jackknife_acceleration([np.array([0.0, 0.0, 3.0])])
    assert a == pytest.approx((8 + 8 - 64) / 27 / (6 * ((4 + 4 + 16) / 9) ** 1.5))
    assert jackknife_acceleration([np.ones(5), np.ones(1)]) == 0.0
