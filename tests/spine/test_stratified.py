"""Within-stratum statistics (t2i_audit/stratified.py): pinned to scipy where scipy computes the same number, the
permutation null checked against exhaustive enumeration, and the confound they exist for."""

import itertools

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from t2i_audit.stratified import _within_permutations, centred_ranks, stratified_spearman, within_spearman


def test_one_stratum_is_spearman_and_each_stratum_is_scipys():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=40), rng.normal(size=40)
    y[:20] += x[:20]
    assert within_spearman(x, y, np.zeros(40)) == pytest.approx(spearmanr(x, y)[0], abs=1e-12)
    strata = np.repeat([0, 1], 20)
    res = stratified_spearman(x, y, strata, n_perm=200, n_boot=200)
    for s, row in zip((0, 1), res["per_stratum"]):
        assert row["rho"] == pytest.approx(spearmanr(x[strata == s], y[strata == s])[0], abs=1e-4)
    assert res["pooled"]["rho"] == pytest.approx(spearmanr(x, y)[0], abs=1e-4)
    rx, ry = centred_ranks(x, strata), centred_ranks(y, strata)
    assert res["within"]["rho"] == pytest.approx(pearsonr(rx, ry)[0], abs=1e-4)


def test_a_shared_trend_is_not_read_as_a_link():
    """Both rise with the stratum, unrelated inside it: pooled ρ is large, the within-stratum ρ is not, and the
    within-stratum null does not reject while the shuffle-everything p does."""
    rng = np.random.default_rng(0)
    strata = np.repeat(np.arange(4), 30)
    x, y = strata + rng.normal(0, 0.3, 120), strata + rng.normal(0, 0.3, 120)
    res = stratified_spearman(x, y, strata, n_perm=1000, n_boot=300)
    assert res["pooled"]["rho"] > 0.8 and res["pooled"]["p_perm_all_points"] < 0.01
    assert abs(res["within"]["rho"]) < 0.2 and res["within"]["p_perm"] > 0.05
    assert res["within"]["ci"][0] < 0 < res["within"]["ci"][1]


def test_shuffles_stay_inside_their_stratum():
    strata = np.array([0, 0, 1, 1, 1, 2, 0, 2])
    idx = _within_permutations(strata, 50, np.random.default_rng(0))
    assert (strata[idx] == strata).all()
    assert all(sorted(row) == list(range(8)) for row in idx.tolist())


def test_the_permutation_p_matches_exhaustive_enumeration():
    x = np.array([1.0, 2, 3, 4, 10, 11, 12, 13])
    y = np.array([1.0, 3, 2, 4, 13, 11, 12, 10])
    strata = np.repeat([0, 1], 4)
    obs = within_spearman(x, y, strata)
    ry = centred_ranks(y, strata)
    rx = centred_ranks(x, strata)
    null = [pearsonr(rx, ry[list(a) + [4 + j for j in b]])[0]
            for a in itertools.permutations(range(4)) for b in itertools.permutations(range(4))]
    exact = np.mean(np.abs(null) >= abs(obs) - 1e-12)
    res = stratified_spearman(x, y, strata, n_perm=20000, n_boot=50)
    assert res["within"]["rho"] == pytest.approx(obs, abs=1e-4)
    assert res["within"]["p_perm"] == pytest.approx(exact, abs=0.01)
    assert res["within"]["n_perm"] == 20000 and 0 <= res["within"]["observed_quantile_in_null"] <= 1


def test_the_bootstrap_resamples_whole_clusters():
    """With 3 clusters there are few distinct resamples: the CI ends are values of the statistic on unions of
    whole clusters, never of single points."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=30), rng.normal(size=30)
    clusters, strata = np.repeat([0, 1, 2], 10), np.tile([0, 1], 15)
    res = stratified_spearman(x, y, strata, clusters, n_perm=100, n_boot=400)
    possible = set()
    for pick in itertools.product(range(3), repeat=3):
        rows = np.concatenate([np.flatnonzero(clusters == c) for c in pick])
        v = within_spearman(x[rows], y[rows], strata[rows])
        if np.isfinite(v):
            possible.add(round(v, 4))
    lo, hi = res["within"]["ci"]
    assert any(abs(lo - v) < 1e-3 for v in possible) and any(abs(hi - v) < 1e-3 for v in possible)
    assert res["n_clusters"] == 3
