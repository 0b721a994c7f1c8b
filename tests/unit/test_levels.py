"""Levels: option-space mapping, batch prior, prior correction, marginalisation, temperature, L1 freezing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anyjev.numbers.levels import LEVELS, compute_levels, log_softmax, marginalise, to_option_space
from anyjev.numbers.options import EvaluationOptions
from anyjev.numbers.priors import batch_prior, prior_correct
from anyjev.numbers.temperature import apply_temperature, fit_temperature


def cyclic_orders(k: int) -> np.ndarray:
    """Rotation s shows option (p + s) mod K at position p."""
    return (np.arange(k)[None, :] + np.arange(k)[:, None]) % k


def biased_positions(z: np.ndarray, bias: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Position-space log-probs of option logits z plus an additive per-position bias, for every layout."""
    logits = z[:, orders] + bias[None, None, :]  # (N, S, K): option orders[s, p] shown at position p
    return log_softmax(logits)


def random_lp(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return log_softmax(scale * rng.normal(size=shape))


# ------------------------------------------------------------------------------------- to_option_space


def test_to_option_space_by_hand() -> None:
    lp = np.log(np.array([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]]))  # one item, two layouts
    orders = np.array([[1, 2, 0], [0, 1, 2]])  # layout 0: position 0 shows option 1, ...
    out = to_option_space(lp, orders)
    np.testing.assert_allclose(np.exp(out[0, 0]), [0.2, 0.5, 0.3])
    np.testing.assert_allclose(np.exp(out[0, 1]), [0.6, 0.3, 0.1])


def test_to_option_space_rejects_non_permutation() -> None:
    lp = np.log(np.full((1, 1, 3), 1 / 3))
    with pytest.raises(ValueError, match="orders"):
        to_option_space(lp, np.array([[0, 0, 1]]))
    with pytest.raises(ValueError, match="orders"):
        to_option_space(lp, np.array([[0, 1, 2], [1, 2, 0]]))


# ------------------------------------------------------------------------------------------ marginalise


def test_marginalisation_removes_additive_position_bias_exactly() -> None:
    rng = np.random.default_rng(1)
    n, k = 12, 5
    z = rng.normal(size=(n, k))
    bias = np.array([2.0, -1.0, 0.5, 0.0, -3.0])
    orders = cyclic_orders(k)
    lp_pos = biased_positions(z, bias, orders)
    opt = to_option_space(lp_pos, orders)
    truth = log_softmax(z)
    np.testing.assert_allclose(marginalise(opt), truth, atol=1e-9, rtol=0)
    raw = opt[:, 0, :]
    assert np.max(np.abs(raw - truth)) > 0.5  # the bias is visible in a single layout


def test_marginalise_floors_each_probability_at_1e_12() -> None:
    lp = np.array([[[0.0, -np.inf], [math.log(0.5), math.log(0.5)]]])  # p = 0 in the first layout
    expected_logits = np.array([0.5 * math.log(0.5), 0.5 * (math.log(1e-12) + math.log(0.5))])
    expected = expected_logits - np.logaddexp(*expected_logits)
    np.testing.assert_allclose(marginalise(lp)[0], expected, atol=1e-12)
    assert np.all(np.isfinite(marginalise(lp)))


# ----------------------------------------------------------------------------------------- batch prior


def test_batch_prior_is_the_hand_mean_of_probabilities() -> None:
    rng = np.random.default_rng(2)
    lp = random_lp(rng, (8, 2, 3), scale=2.0)
    prior = batch_prior(lp, ["q"] * 8)
    hand = np.exp(lp).mean(axis=0)
    for i in range(8):
        np.testing.assert_allclose(prior[i], hand, atol=1e-12)
    np.testing.assert_allclose(prior.sum(axis=-1), 1.0)
    assert not np.allclose(hand[0], hand[1])  # per rotation, not pooled over rotations


def test_batch_prior_min_items_threshold() -> None:
    rng = np.random.default_rng(3)
    lp = random_lp(rng, (15, 1, 4), scale=2.0)
    groups = np.array(["a"] * 8 + ["b"] * 7)
    prior = batch_prior(lp, groups, prior_min_items=8)
    np.testing.assert_allclose(prior[:8], np.broadcast_to(np.exp(lp[:8]).mean(axis=0), (8, 1, 4)), atol=1e-12)
    np.testing.assert_allclose(prior[8:], 0.25)  # 7 items: uniform, no correction
    prior7 = batch_prior(lp[:7], ["a"] * 7, prior_min_items=8)
    np.testing.assert_allclose(prior7, 0.25)


def test_batch_prior_sequential_batches_by_hand() -> None:
    # items 0..5, groups a b a a b b, batches of 2, min_items 2
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.5, 0.5], [0.4, 0.6], [0.1, 0.9]])
    lp = np.log(p)[:, None, :]
    prior = batch_prior(lp, ["a", "b", "a", "a", "b", "b"], prior_min_items=2, effective_batch_size=2)[:, 0, :]
    np.testing.assert_allclose(prior[0], [0.5, 0.5])  # batch 0: one "a" seen
    np.testing.assert_allclose(prior[1], [0.5, 0.5])  # batch 0: one "b" seen
    a_mean = (p[0] + p[2] + p[3]) / 3  # batch 1 includes items 2 and 3
    np.testing.assert_allclose(prior[2], a_mean)
    np.testing.assert_allclose(prior[3], a_mean)
    b_mean = (p[1] + p[4] + p[5]) / 3
    np.testing.assert_allclose(prior[4], b_mean)
    np.testing.assert_allclose(prior[5], b_mean)
    # one batch: everything seen at once
    whole = batch_prior(lp, ["a", "b", "a", "a", "b", "b"], prior_min_items=2)[:, 0, :]
    np.testing.assert_allclose(whole[0], a_mean)
    np.testing.assert_allclose(whole[1], b_mean)


def test_batch_prior_growing_single_group() -> None:
    p = np.array([[0.9, 0.1], [0.5, 0.5], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
    prior = batch_prior(np.log(p)[:, None, :], ["q"] * 5, prior_min_items=1, effective_batch_size=2)[:, 0, :]
    np.testing.assert_allclose(prior[:2], np.broadcast_to(p[:2].mean(0), (2, 2)))
    np.testing.assert_allclose(prior[2:4], np.broadcast_to(p[:4].mean(0), (2, 2)))
    np.testing.assert_allclose(prior[4], p.mean(0))


def test_batch_prior_rejects_wrong_group_count() -> None:
    with pytest.raises(ValueError, match="groups"):
        batch_prior(np.log(np.full((3, 1, 2), 0.5)), ["a", "b"])


# --------------------------------------------------------------------------------------- prior_correct


def test_prior_correct_divides_out_a_known_prior() -> None:
    rng = np.random.default_rng(4)
    truth = random_lp(rng, (6, 1, 4))
    prior = np.array([[0.55, 0.25, 0.15, 0.05]])
    observed = log_softmax(truth + 0.75 * np.log(prior))
    np.testing.assert_allclose(prior_correct(observed, prior), truth, atol=1e-12)
    observed1 = log_softmax(truth + np.log(prior))
    np.testing.assert_allclose(prior_correct(observed1, prior, prior_strength=1.0), truth, atol=1e-12)
    assert not np.allclose(prior_correct(observed1, prior), truth, atol=1e-3)  # strength matters


def test_prior_correct_floors_prior_and_q() -> None:
    lp = np.log(np.array([[[0.5, 0.5]]]))
    out = prior_correct(lp, np.array([0.0, 1.0]), prior_strength=1.0)
    w = np.array([0.5 / 1e-8, 0.5 / 1.0])
    np.testing.assert_allclose(np.exp(out[0, 0]), w / w.sum(), rtol=1e-12)
    lp0 = np.array([[[0.0, -np.inf]]])  # q = 0 is floored at 1e-8
    out0 = prior_correct(lp0, np.array([0.5, 0.5]))
    np.testing.assert_allclose(np.exp(out0[0, 0]), np.array([1.0, 1e-8]) / (1 + 1e-8), rtol=1e-12)


def test_prior_correct_uniform_prior_is_identity() -> None:
    rng = np.random.default_rng(5)
    lp = random_lp(rng, (4, 3, 5))
    np.testing.assert_allclose(prior_correct(lp, np.full((3, 5), 0.2)), lp, atol=1e-12)


# ----------------------------------------------------------------------------------------- temperature


@pytest.mark.parametrize("t_true", [0.5, 2.0])
def test_temperature_recovers_planted_value(t_true: float) -> None:
    rng = np.random.default_rng(6)
    n, k = 20000, 4
    z = 2.0 * rng.normal(size=(n, k))
    p_true = np.exp(log_softmax(z / t_true))
    gold = (rng.random(n)[:, None] > np.cumsum(p_true, axis=1)).sum(axis=1)
    gold = np.minimum(gold, k - 1)
    t_fit = fit_temperature(log_softmax(z), gold)
    assert abs(t_fit / t_true - 1) < 0.05


def test_temperature_keeps_argmax_and_normalises() -> None:
    rng = np.random.default_rng(7)
    lp = random_lp(rng, (50, 6), scale=3.0)
    for t in (0.1, 0.7, 3.0, 15.0):
        out = apply_temperature(lp, t)
        np.testing.assert_array_equal(out.argmax(axis=1), lp.argmax(axis=1))
        np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0)
    np.testing.assert_allclose(apply_temperature(lp, 1.0), lp, atol=1e-12)
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(lp, 0.0)


def test_fit_temperature_stays_in_search_range_and_checks_gold() -> None:
    lp = np.log(np.array([[0.9, 0.1], [0.2, 0.8]]))
    t = fit_temperature(lp, np.array([0, 1]))  # always right: sharpen to the edge of the range
    assert math.exp(-3) <= t < math.exp(-2.99)
    with pytest.raises(ValueError, match="gold"):
        fit_temperature(lp, np.array([0, 2]))


# -------------------------------------------------------------------------------------- compute_levels


def test_compute_levels_definitions_fwd_rev() -> None:
    rng = np.random.default_rng(8)
    n, k = 10, 4
    orders = cyclic_orders(k)
    orders_rev = cyclic_orders(k)[:, ::-1].copy()
    fwd = biased_positions(rng.normal(size=(n, k)), np.array([1.5, 0.0, -0.5, 0.2]), orders)
    rev = biased_positions(rng.normal(size=(n, k)), np.array([-1.0, 0.3, 0.0, 0.9]), orders_rev)
    groups = ["q"] * n
    res = compute_levels(fwd, rev, orders, orders_rev, groups)
    assert tuple(res.levels) == LEVELS[:4]  # no calibration: L1 absent
    assert "L1" not in res and res.temperature == {}
    for g, lp, o in (("fwd", fwd, orders), ("rev", rev, orders_rev)):
        opt = to_option_space(lp, o)
        prior = np.exp(lp).mean(axis=0)  # 10 items >= 8: active
        np.testing.assert_allclose(res["raw"][g], opt[:, 0], atol=1e-12)
        np.testing.assert_allclose(res["L0-perm"][g], marginalise(opt), atol=1e-12)
        bc = to_option_space(prior_correct(lp[:, :1], prior[None, :1]), o[:1])[:, 0]
        np.testing.assert_allclose(res["L0-bc"][g], bc, atol=1e-12)
        l0 = marginalise(to_option_space(prior_correct(lp, prior[None]), o))
        np.testing.assert_allclose(res["L0"][g], l0, atol=1e-12)
        np.testing.assert_allclose(res.test_prior[g][3], prior, atol=1e-12)
        for name in LEVELS[:4]:
            assert res[name][g].shape == (n, k)
            np.testing.assert_allclose(np.exp(res[name][g]).sum(axis=1), 1.0)
        assert not np.allclose(res["L0-bc"][g], res["raw"][g])


def test_l0_bc_without_enough_items_is_raw() -> None:
    rng = np.random.default_rng(9)
    lp = random_lp(rng, (7, 3, 3))
    res = compute_levels(lp, None, cyclic_orders(3), None, ["t"] * 7)
    np.testing.assert_allclose(res["L0-bc"]["fwd"], res["raw"]["fwd"], atol=1e-12)
    np.testing.assert_allclose(res["L0"]["fwd"], res["L0-perm"]["fwd"], atol=1e-12)
    assert res["raw"]["rev"] is None


def test_score_question_single_layout() -> None:
    rng = np.random.default_rng(10)
    lp = random_lp(rng, (9, 1, 5))
    calib = random_lp(rng, (12, 1, 5))
    res = compute_levels(
        lp,
        None,
        np.arange(5)[None, :],
        None,
        ["s"] * 9,
        calib_fwd=calib,
        calib_groups=["s"] * 12,
        calib_gold=rng.integers(0, 5, size=12),
    )
    np.testing.assert_allclose(res["L0-perm"]["fwd"], res["raw"]["fwd"], atol=1e-12)
    np.testing.assert_allclose(res["raw"]["fwd"], lp[:, 0], atol=1e-12)
    np.testing.assert_allclose(res["L0"]["fwd"], res["L0-bc"]["fwd"], atol=1e-12)
    assert res["L1"]["rev"] is None and res["L1"]["fwd"].shape == (9, 5)
    assert set(res.temperature) == {"fwd"}


def test_noul_swapped_phrasings_give_same_l0_for_mirrored_rev() -> None:
    rng = np.random.default_rng(11)
    fwd = random_lp(rng, (9, 2, 2), scale=2.0)
    orders_fwd = np.array([[0, 1], [1, 0]])  # plain, swapped
    orders_rev = np.array([[1, 0], [0, 1]])  # swapped, plain
    res = compute_levels(fwd, fwd[:, ::-1], orders_fwd, orders_rev, ["n"] * 9)
    for level in ("L0-perm", "L0"):
        np.testing.assert_allclose(res[level]["fwd"], res[level]["rev"], atol=1e-12)
    np.testing.assert_allclose(res["raw"]["rev"], to_option_space(fwd, orders_fwd)[:, 1], atol=1e-12)


def test_l1_uses_frozen_calibration_prior_per_group() -> None:
    rng = np.random.default_rng(12)
    k, n_test, n_cal = 3, 10, 20
    orders = cyclic_orders(k)
    orders_rev = orders[:, ::-1].copy()
    # calibration favours position 0 strongly, test favours position 2: the priors differ
    calib_fwd = biased_positions(rng.normal(size=(n_cal, k)), np.array([2.0, 0.0, 0.0]), orders)
    calib_rev = biased_positions(3 * rng.normal(size=(n_cal, k)), np.array([0.0, 1.0, 0.0]), orders_rev)
    test_fwd = biased_positions(rng.normal(size=(n_test, k)), np.array([0.0, 0.0, 2.0]), orders)
    test_rev = biased_positions(rng.normal(size=(n_test, k)), np.array([1.0, 0.0, 0.0]), orders_rev)
    calib_gold = rng.integers(0, k, size=n_cal)
    res = compute_levels(
        test_fwd,
        test_rev,
        orders,
        orders_rev,
        np.array(["q"] * n_test),
        calib_fwd=calib_fwd,
        calib_rev=calib_rev,
        calib_groups=np.array(["q"] * n_cal),
        calib_gold=calib_gold,
        options=EvaluationOptions(prior_mode="streaming", prior_batch_size=4),
    )
    assert tuple(res.levels) == LEVELS
    for g, cal, test, o in (("fwd", calib_fwd, test_fwd, orders), ("rev", calib_rev, test_rev, orders_rev)):
        cal_prior = np.exp(cal).mean(axis=0)  # whole calibration split, per rotation
        np.testing.assert_allclose(res.calib_prior[g]["q"], cal_prior, atol=1e-12)
        cal_l0 = marginalise(to_option_space(prior_correct(cal, cal_prior), o))
        t = fit_temperature(cal_l0, calib_gold)
        assert res.temperature[g] == pytest.approx(t, rel=1e-6)  # NLL is flat to float eps near its minimum
        test_l0_frozen = marginalise(to_option_space(prior_correct(test, cal_prior), o))
        np.testing.assert_allclose(res["L1"][g], apply_temperature(test_l0_frozen, res.temperature[g]), atol=1e-12)
        # the test batch prior would give something else
        assert not np.allclose(res["L1"][g], apply_temperature(res["L0"][g], t), atol=1e-3)
        np.testing.assert_array_equal(res["L1"][g].argmax(1), test_l0_frozen.argmax(1))
    assert res.temperature["fwd"] != pytest.approx(res.temperature["rev"], rel=1e-3)  # calibrated separately


def test_l1_calibration_prior_min_items_and_unseen_group() -> None:
    rng = np.random.default_rng(13)
    k = 2
    orders = np.array([[0, 1], [1, 0]])
    calib = random_lp(rng, (12, 2, k), scale=2.0)
    cal_groups = ["a"] * 8 + ["b"] * 4
    test = random_lp(rng, (3, 2, k), scale=2.0)
    res = compute_levels(
        test,
        None,
        orders,
        None,
        ["a", "b", "c"],
        calib_fwd=calib,
        calib_groups=cal_groups,
        calib_gold=rng.integers(0, k, size=12),
    )
    np.testing.assert_allclose(res.calib_prior["fwd"]["a"], np.exp(calib[:8]).mean(0), atol=1e-12)
    np.testing.assert_allclose(res.calib_prior["fwd"]["b"], 0.5)  # 4 < min_items
    t = res.temperature["fwd"]
    uncorrected = apply_temperature(marginalise(to_option_space(test[1:], orders)), t)
    np.testing.assert_allclose(res["L1"]["fwd"][1:], uncorrected, atol=1e-12)  # "b" uniform, "c" unseen


def test_compute_levels_argument_errors() -> None:
    lp = np.log(np.full((8, 2, 2), 0.5))
    orders = np.array([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="calib_rev"):
        compute_levels(lp, lp, orders, orders, ["a"] * 8, calib_fwd=lp, calib_groups=["a"] * 8, calib_gold=np.zeros(8, dtype=int))
    with pytest.raises(ValueError, match="calib_gold"):
        compute_levels(lp, None, orders, None, ["a"] * 8, calib_fwd=lp, calib_groups=["a"] * 8, calib_gold=np.full(8, 2))
    with pytest.raises(ValueError, match="orders_rev"):
        compute_levels(lp, lp, orders, None, ["a"] * 8)
    with pytest.raises(ValueError, match="groups_test"):
        compute_levels(lp, None, orders, None, ["a"] * 7)
    with pytest.raises(ValueError, match="test_rev"):
        compute_levels(lp, np.log(np.full((8, 2, 3), 1 / 3)), orders, orders, ["a"] * 8)
    with pytest.raises(ValueError, match="test_fwd"):
        compute_levels(np.full((8, 2, 2), np.nan), None, orders, None, ["a"] * 8)
