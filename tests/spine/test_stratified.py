"""Within-stratum statistics (t2i_audit/stratified.py): pinned to scipy where scipy computes the same number, the
permutation null checked against exhaustive enumeration, and the confound they exist for."""

import itertools

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from t2i_audit.stratified import (_within_permutations, centred_ranks, cluster_interval, jackknife_t_interval,
                                  one_way_rows, pigeonhole_rows, stratified_spearman, within_spearman)


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
    res = stratified_spearman(x, y, strata, clusters, n_perm=100, n_boot=400, min_bootstrap_clusters=3)
    possible = set()
    for pick in itertools.product(range(3), repeat=3):
        rows = np.concatenate([np.flatnonzero(clusters == c) for c in pick])
        v = within_spearman(x[rows], y[rows], strata[rows])
        if np.isfinite(v):
            possible.add(round(v, 4))
    lo, hi = res["within"]["ci"]
    assert any(abs(lo - v) < 1e-3 for v in possible) and any(abs(hi - v) < 1e-3 for v in possible)
    assert res["n_clusters"] == 3


# ---------------------------------------------------------------- intervals for few clusters (issue 43)


def test_the_jackknife_of_a_mean_is_the_t_interval_scipy_gives():
    """For the mean of cluster means the delete-one-cluster jackknife SE is exactly s/√G, so its interval is
    scipy's t interval on the G cluster means."""
    from scipy import stats as st

    means = np.array([0.3, 1.1, -0.4, 0.8, 2.0])
    vals, clusters = np.repeat(means, 3), np.repeat(np.arange(5), 3)
    res = jackknife_t_interval(lambda rows: float(vals[rows].mean()), clusters)
    lo, hi = st.t.interval(0.95, 4, loc=means.mean(), scale=st.sem(means))
    assert res["ci"] == pytest.approx([lo, hi], abs=1e-4)
    assert "t(4)" in res["ci_method"]


def test_few_clusters_get_the_jackknife_t_interval_automatically():
    """Six compositions (the sweep's design): the within-stratum ρ's CI is the jackknife t(5) interval, recomputed
    here by hand from scipy's Spearman with each composition left out."""
    from scipy import stats as st

    rng = np.random.default_rng(5)
    clusters = np.tile(np.arange(6), 4)          # 6 compositions × 4 models
    x = rng.normal(size=24) + clusters * 0.3
    y = x + rng.normal(size=24)
    res = stratified_spearman(x, y, np.zeros(24), clusters, n_perm=50, n_boot=200)
    full = st.spearmanr(x, y)[0]
    loo = np.array([st.spearmanr(x[clusters != g], y[clusters != g])[0] for g in range(6)])
    se = np.sqrt(5 / 6 * ((loo - loo.mean()) ** 2).sum())
    t = st.t.ppf(0.975, 5)
    assert res["within"]["ci"] == pytest.approx([full - t * se, full + t * se], abs=2e-4)
    assert res["within"]["ci_method"].startswith("delete-one-cluster jackknife over 6 clusters, t(5)")
    many = stratified_spearman(np.arange(40.0), np.arange(40.0) % 7, np.zeros(40), n_perm=20, n_boot=100)
    assert many["within"]["ci_method"].startswith("percentile bootstrap over 40 clusters")


def test_a_pigeonhole_resample_weights_each_point_by_both_factors_draws():
    a, b = np.repeat([0, 1, 2], 4), np.tile([0, 1, 2, 3], 3)
    rows = pigeonhole_rows(a, b, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    wa, wb = np.bincount(rng.integers(0, 3, 3), minlength=3), np.bincount(rng.integers(0, 4, 4), minlength=4)
    assert np.bincount(rows, minlength=12).tolist() == [int(wa[i] * wb[j]) for i, j in zip(a, b)]


def test_the_crossed_bootstrap_covers_where_one_way_resampling_does_not():
    """y = μ + model effect + composition effect + noise over 4 models × 12 compositions; the grand mean's 95 %
    interval. Resampling compositions only treats the 4 models as fixed and misses their variance; the
    pigeonhole bootstrap resamples both. Expected one-way coverage: the SE it sees is ≈ 0.49 of the true one,
    so 2Φ(1.96 · 0.49) − 1 ≈ 0.66. 120 simulated data sets (≈ 4 s) give 0.66 vs 0.91 here, a gap of about six
    binomial SEs; each bound below sits about two SEs from what was observed."""
    rng = np.random.default_rng(11)
    models, comps = np.repeat(np.arange(4), 12), np.tile(np.arange(12), 4)
    hit_one, hit_two = 0, 0
    for _ in range(120):
        y = rng.normal(0, 1, 4)[models] + rng.normal(0, 1, 12)[comps] + rng.normal(0, 0.3, 48)
        mean = lambda rows: float(y[rows].mean())  # noqa: E731
        two = cluster_interval(mean, models, crossed=comps, n_boot=200, rng=rng)
        one = cluster_interval(mean, comps, n_boot=200, rng=rng, min_bootstrap_clusters=0)
        hit_two += two["ci"][0] <= 0 <= two["ci"][1]
        hit_one += one["ci"][0] <= 0 <= one["ci"][1]
        assert two["ci_method"].startswith("pigeonhole bootstrap (Owen 2007): 4 × 12")
    assert hit_two / 120 >= 0.85 and hit_one / 120 <= 0.75, (hit_two, hit_one)


def test_stratified_spearman_names_the_crossed_method():
    rng = np.random.default_rng(2)
    models, comps = np.repeat(np.arange(4), 6), np.tile(np.arange(6), 4)
    x, y = rng.normal(size=24), rng.normal(size=24)
    res = stratified_spearman(x, y, models, comps, crossed=models, n_perm=20, n_boot=100)
    assert res["within"]["ci_method"].startswith("pigeonhole bootstrap (Owen 2007): 6 × 4 crossed")
    assert res["within"]["ci"][0] < res["within"]["ci"][1]
