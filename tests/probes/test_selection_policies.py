"""Seed-selection policies: what each costs (denoiser loop iterations, VAE decodes, judge calls) and what it
succeeds at, simulated per prompt over every subset of its seeds; the nested budget choice; twin-group
bootstrap and Holm (numpy only, milliseconds)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from t2i_audit.clusters import GroupBootstrap, holm
from t2i_audit.select import choose as budget
from t2i_audit.select import cost as costs
from t2i_audit.select.policies import (Staged, Whole, WholeJudged, WholeMix, grid, on_curve, policy_from_dict,
                                      simulate, whole_curve, whole_success)

T = 20


@pytest.mark.parametrize("policy,expected", [
    (Whole(1), costs.Cost(20, 1, 0)),  # one random seed: no judge needed
    (Whole(4), costs.Cost(80, 4, 4)),  # best of 4 by the final judge: every image judged
    (Staged("probe", 4, ((3, 1),), continued=False), costs.Cost(36, 1, 0)),  # the "36": regenerated
    (Staged("probe", 4, ((3, 1),)), costs.Cost(32, 1, 0)),  # continued from the scan: 16 + 16
    (Staged("probe", 6, ((3, 1),)), costs.Cost(40, 1, 0)),  # the pre-registered headline
    (Staged("probe", 4, ((3, 2),)), costs.Cost(48, 2, 2)),  # two finished: the judge picks
    (Staged("probe", 8, ((1, 4), (3, 1))), costs.Cost(16 + 8 + 16, 1, 0)),  # halving: 8 to step 2, 4 to step 4
    (Staged("x0", 4, ((3, 1),)), costs.Cost(32, 5, 4)),  # an x0 preview decoded and judged per scanned seed
    (Staged("x0", 8, ((1, 4), (3, 2))), costs.Cost(16 + 8 + 32, 8 + 4 + 2, 8 + 4 + 2)),
])
def test_cost_of_each_policy(policy, expected):
    assert policy.cost(T) == expected
    assert policy_from_dict(policy.as_dict()).cost(T) == expected


def test_cost_rejects_impossible_rungs_and_converts_to_seconds():
    with pytest.raises(ValueError, match="strictly increasing"):
        costs.staged(4, [(3, 2), (3, 1)], T)
    with pytest.raises(ValueError, match="keep 5 of 4"):
        costs.staged(4, [(3, 5)], T)
    with pytest.raises(ValueError, match="one rung only"):
        costs.staged(8, [(1, 4), (3, 1)], T, continued=False)
    c = costs.Cost(40, 1, 2)
    assert c.seconds({"iteration": 0.01, "decode": 0.1, "judge_call": 1.0}) == pytest.approx(0.4 + 0.1 + 2.0)


UNIT = {"iteration": 0.01, "decode": 0.1, "judge_call": 1.0, "continued_iteration": 0.011, "read": 0.001,
        "scan_iteration": {"probe": 0.012, "rawmaps": 0.013, "x0-fitted": 0.014},
        "judge_call_by": {"mini-judge": 2.0}}


def test_seconds_count_the_scan_capture_the_continuation_the_reads_and_who_judges():
    """What the user pays: a scan iteration carries its ranking's capture, a continued one its own unit, every
    scanned seed one read; a preview ranking its decodes and judge calls; best of n picked by another judge
    that judge's calls."""
    head = Staged("probe", 6, ((3, 1),))
    c = head.cost(T)
    assert (c.scan_iterations, c.continued_iterations, c.reads) == (24, 16, 6)
    assert head.seconds(UNIT, T) == pytest.approx(24 * 0.012 + 16 * 0.011 + 6 * 0.001 + 1 * 0.1)
    x0 = Staged("x0-fitted", 6, ((3, 1),))
    assert x0.seconds(UNIT, T) == pytest.approx(24 * 0.014 + 16 * 0.011 + 6 * 0.001 + 7 * 0.1 + 6 * 1.0)
    halving = Staged("rawmaps", 8, ((1, 4), (3, 1)))
    assert (halving.cost(T).scan_iterations, halving.cost(T).reads) == (16 + 8, 8 + 4)
    regenerated = Staged("probe", 4, ((3, 1),), continued=False)
    assert regenerated.seconds(UNIT, T) == pytest.approx(16 * 0.012 + 20 * 0.01 + 4 * 0.001 + 0.1)
    assert Whole(4).seconds(UNIT, T) == pytest.approx(80 * 0.01 + 4 * 0.1 + 4 * 1.0)
    assert WholeJudged(4).seconds(UNIT, T) == pytest.approx(80 * 0.01 + 4 * 0.1 + 4 * 2.0)
    assert WholeMix(30.0, T).seconds(UNIT, T) == pytest.approx(0.5 * Whole(1).seconds(UNIT, T)
                                                               + 0.5 * Whole(2).seconds(UNIT, T))
    assert "oracle" in Whole(2).name and "not the ground truth" in WholeJudged(2).name
    assert policy_from_dict(WholeJudged(3, "mini-judge").as_dict()) == WholeJudged(3, "mini-judge")


def test_best_of_n_picked_by_another_judge_is_the_mean_over_every_subset():
    """The non-oracle baseline: in each n-subset the image the other judge scores highest (ties: the lower seed)
    is handed over; success is the ground truth's verdict on it."""
    rng = np.random.default_rng(2)
    success = (rng.random((25, 8)) < 0.4).astype(float)
    score = np.round(rng.random((25, 8)) + 0.5 * success, 1)  # an informative, coarse judge with ties
    risks = {"judge:mini-judge": {"final": -score}}
    for n in (2, 3, 5):
        got = simulate(WholeJudged(n), success, risks)
        brute = [_subset_mean(success[i:i + 1], n, lambda sub, i=i: float(
            success[i, sorted(sub, key=lambda k: (-score[i, k], k))[0]])) for i in range(25)]
        assert np.allclose(got, brute)
        assert (got <= whole_success(success, n) + 1e-12).all()  # never above the oracle


def test_the_gap_at_equal_seconds_reads_the_whole_image_curve_in_seconds():
    from t2i_audit.probes.studies.pareto import _policy_rows, seconds_curve

    rng = np.random.default_rng(4)
    success = (rng.random((40, 8)) < 0.3).astype(float)
    risks = {"probe": {3: rng.random((40, 8))}}
    curve = whole_curve(success, T)
    boot = GroupBootstrap(np.arange(40), 200, 0)
    head = Staged("probe", 6, ((3, 1),))
    rows, per = _policy_rows([Whole(1), Whole(2), head], success, risks, curve, T, boot, UNIT)
    xs, ys = seconds_curve(curve, T, UNIT)
    assert xs[1] == pytest.approx(Whole(2).seconds(UNIT, T))
    expect = per[:, 2] - on_curve((xs, ys), head.seconds(UNIT, T))
    assert rows[2]["seconds"] == pytest.approx(head.seconds(UNIT, T))
    assert rows[2]["gap_to_whole_at_same_seconds"] == pytest.approx(expect.mean())
    assert rows[2]["gap_to_whole"] == pytest.approx((per[:, 2] - on_curve(curve, 40)).mean())
    assert rows[1]["oracle"] and not rows[0]["oracle"] and not rows[2]["oracle"]


def _subset_mean(success, n, pick):
    S = success.shape[1]
    return np.mean([pick(list(sub)) for sub in itertools.combinations(range(S), n)])


def test_whole_images_is_the_mean_over_every_subset():
    rng = np.random.default_rng(0)
    success = (rng.random((30, 8)) < 0.3).astype(float)
    for n in (1, 2, 4, 8):
        brute = [_subset_mean(success[i:i + 1], n, lambda sub, i=i: float(success[i, sub].max()))
                 for i in range(30)]
        assert np.allclose(whole_success(success, n), brute)
    assert np.allclose(whole_success(success, 1), success.mean(1))


def test_staged_keeps_the_lowest_risk_and_breaks_ties_low():
    success = np.array([[1.0, 0.0, 0.0, 0.0]])
    good = {"probe": {3: np.array([[0.0, 1.0, 1.0, 1.0]])}}
    bad = {"probe": {3: np.array([[1.0, 0.0, 0.0, 0.0]])}}
    tie = {"probe": {3: np.zeros((1, 4))}}
    pol = Staged("probe", 2, ((3, 1),))
    # a perfect ranking finds the passing seed whenever the subset holds it: as best of 2 by the judge
    assert simulate(pol, success, good)[0] == pytest.approx(whole_success(success, 2)[0]) == pytest.approx(0.5)
    assert simulate(pol, success, bad)[0] == 0.0
    # equal risks: the lower sample index is kept, seed 0 whenever drawn
    assert simulate(pol, success, tie)[0] == pytest.approx(0.5)
    assert simulate(pol, success[:, ::-1], tie)[0] == 0.0  # seed 3 is never kept: its pair holds a lower index


def test_halving_ranks_at_each_rung_with_that_steps_risk():
    success = np.array([[0.0, 1.0, 0.0, 0.0]])
    # step 1 says seeds 0 and 1 look good, step 3 prefers 1: halving finds it; ranking by step 1 alone does not
    risks = {"probe": {1: np.array([[0.0, 0.1, 0.9, 0.9]]), 3: np.array([[0.5, 0.0, 0.9, 0.9]])}}
    assert simulate(Staged("probe", 4, ((1, 2), (3, 1))), success, risks)[0] == 1.0
    assert simulate(Staged("probe", 4, ((1, 1),)), success, risks)[0] == 0.0
    brute = _subset_mean(success, 4, lambda sub: 1.0)
    assert brute == 1.0


def test_whole_curve_interpolates_between_image_counts():
    success = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], float)
    curve = whole_curve(success, T)
    assert list(curve[0]) == [20, 40, 60, 80]
    w1, w2 = whole_success(success, 1), whole_success(success, 2)
    assert np.allclose(on_curve(curve, 36), 0.2 * w1 + 0.8 * w2)
    assert np.allclose(on_curve(curve, 40), w2)
    assert np.isnan(on_curve(curve, 10)).all() and np.isnan(on_curve(curve, 90)).all()


def test_grid_never_costs_as_much_as_finishing_every_scanned_seed():
    pols = grid("probe", [0, 1, 3, 5, 9], T, 8)
    assert pols and all(p.cost(T).iterations < T * p.n_of for p in pols)
    assert Staged("probe", 6, ((3, 1),)) in pols and Staged("probe", 8, ((1, 4), (3, 1))) in pols


def _world(P=60, S=8, seed=0, informative=True):
    rng = np.random.default_rng(seed)
    success = (rng.random((P, S)) < 0.3).astype(float)
    risk = (1 - success) + 0.01 * rng.random((P, S)) if informative else rng.random((P, S))
    return success, {"probe": {3: risk}}


def test_budget_choice_falls_back_to_whole_images_when_the_probe_is_noise():
    policies = grid("probe", [3], T, 8, halving=False)
    fold, groups = np.repeat(np.arange(5), 12), np.repeat(np.arange(30), 2)
    for informative, expect_whole in ((True, False), (False, True)):
        success, risks = _world(informative=informative)
        got = budget.nested(policies, 40, success, fold, groups, risks, lambda o: risks, T)
        assert all(c["iterations"] <= 40 for c in got["chosen"])
        if expect_whole:  # a random ranking is no better than one random seed: best of 2 whole images wins
            assert all(c["whole_images"] for c in got["chosen"])
            assert np.allclose(got["success"], whole_success(success, 2))
        else:  # a ranking that knows the verdict beats two whole images at 40 iterations
            assert not any(c["whole_images"] for c in got["chosen"])
            assert got["success"].mean() > whole_success(success, 2).mean()
    # between two image counts the fall-back is the mix: exactly on the whole-image curve
    success, risks = _world(informative=False)
    got = budget.nested(policies, 30, success, fold, groups, risks, lambda o: risks, T)
    assert all(c["whole_images"] for c in got["chosen"])
    assert np.allclose(got["success"], on_curve(whole_curve(success, T), 30))


def test_a_probe_policy_that_wins_by_luck_falls_back():
    """Best on the training prompts by a hair, not by the one-sided 95 % margin: whole images are run."""
    success, risks = _world(informative=False, seed=3)
    rows = np.arange(60)
    groups = np.repeat(np.arange(30), 2)
    cands = budget.candidates(grid("probe", [3], T, 8, halving=False), 36, T, 8)
    means = {p: simulate(p, success, risks).mean() for p in cands}
    best = max(means, key=means.get)
    pick, fell_back = budget.choose(cands, success, risks, rows, groups, T)
    assert not isinstance(pick, Staged)
    assert fell_back == isinstance(best, Staged)
    assert WholeMix(36.0, T) in cands and WholeMix(36.0, T).cost(T) == costs.Cost(36, 1.8, 1.6)  # one image needs no judge


def test_budget_choice_never_looks_at_the_fold_it_scores():
    success, risks = _world()
    fold = np.repeat(np.arange(5), 12)
    seen = []

    def inner(o):
        seen.append(o)
        masked = risks["probe"][3].copy()
        masked[fold == o] = np.nan  # a choice that read these would get NaN means and fail loudly
        return {"probe": {3: masked}}
    policies = [Staged("probe", 6, ((3, 1),))]
    got = budget.nested(policies, 40, success, fold, np.arange(60), risks, inner, T)
    assert sorted(seen) == [0, 1, 2, 3, 4] and np.isfinite(got["success"]).all()


def test_group_bootstrap_keeps_twins_together_and_holm():
    groups = np.array(["a", "a", "b", "b", "c", "c"])
    values = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    boots = GroupBootstrap(groups, 500, 0).means(values)
    # resampling whole groups of equal size: every mean is a multiple of 1/3
    assert np.allclose(np.round(boots * 3), boots * 3)
    s = GroupBootstrap(groups, 500, 0).summary(values - 0.5, null=0.0)
    assert s["n_groups"] == 3 and s["ci"][0] <= s["mean"] <= s["ci"][1]
    adj = holm({"x": 0.01, "y": 0.04, "z": 0.03})
    assert adj == pytest.approx({"x": 0.03, "z": 0.06, "y": 0.06})
