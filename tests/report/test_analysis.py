import math

import numpy as np
import pandas as pd
import pytest

from t2i_audit import analysis


def test_wilson_matches_hand_values():
    rate, lo, hi = analysis.wilson(8, 10)
    assert rate == 0.8
    # Wilson 95% for 8/10 (z = 1.95996): [0.4902, 0.9433]
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    r0, lo0, hi0 = analysis.wilson(0, 20)
    assert r0 == 0 and lo0 == 0 and hi0 == pytest.approx(0.1611, abs=1e-4)
    assert all(math.isnan(v) for v in analysis.wilson(0, 0))


def test_rate_table_drops_none_and_groups():
    df = pd.DataFrame({"cat": ["a", "a", "a", "b", "b"], "verdict": [True, False, None, True, True]})
    t = analysis.rate_table(df, "cat").set_index("cat")
    assert t.loc["a", "n"] == 2 and t.loc["a", "k"] == 1 and t.loc["a", "rate"] == 0.5
    assert t.loc["b", "rate"] == 1.0
    overall = analysis.rate_table(df, None).iloc[0]
    assert overall["n"] == 4 and overall["k"] == 3


def test_holm_against_hand_computation():
    p = [0.01, 0.04, 0.03, float("nan"), 0.5]
    adj = analysis.holm(p)
    # sorted 0.01, 0.03, 0.04, 0.5 with m = 4: 0.04, 0.09, max(0.09, 0.08)=0.09, max(.09, .5)=.5
    assert adj[0] == pytest.approx(0.04)
    assert adj[2] == pytest.approx(0.09)
    assert adj[1] == pytest.approx(0.09)
    assert adj[4] == pytest.approx(0.5)
    assert math.isnan(adj[3])


def test_agreement_and_kappa():
    a = [True, True, False, False, None]
    b = [True, False, False, False, True]
    r = analysis.agreement(a, b)
    assert r["n"] == 4 and r["agree"] == 3 and r["rate"] == 0.75
    # po = .75, pe = .5*.25 + .5*.75 = .5 → kappa .5
    assert r["kappa"] == pytest.approx(0.5)


def test_paired_bootstrap_detects_a_real_difference_and_not_a_null_one():
    rng = np.random.default_rng(0)
    m = 200
    n = np.full(m, 2)
    a = rng.binomial(2, 0.8, m)
    b = rng.binomial(2, 0.4, m)
    res = analysis.paired_bootstrap(a, n, b, n, n_boot=1000, seed=1)
    assert res["diff"] == pytest.approx(a.sum() / 400 - b.sum() / 400)
    assert res["lo"] > 0.25 and res["hi"] < 0.55 and res["p"] < 0.01
    same = analysis.paired_bootstrap(a, n, a, n, n_boot=500, seed=1)
    assert same["diff"] == 0 and same["p"] == 1.0
    again = analysis.paired_bootstrap(a, n, b, n, n_boot=1000, seed=1)
    assert again == res  # seeded


def test_failure_counts_counts_images_once_per_type():
    im = pd.DataFrame({"category": ["x", "x", "x"], "verdict": [False, False, True],
                       "failure_types": [["wrong_count", "wrong_count"], ["missing_object"], []]})
    fc = analysis.failure_counts(im).set_index("type")
    assert fc.loc["wrong_count", "images"] == 1 and fc.loc["missing_object", "images"] == 1
    assert (fc["failed"] == 2).all() and (fc["scored"] == 3).all()


def test_paired_bootstraps_equal_one_paired_bootstrap_per_pair():
    """The board's vectorised form gives, row by row, exactly what paired_bootstrap gives with the same seed."""
    rng = np.random.default_rng(5)
    m = 37
    an, bn = rng.integers(0, 4, (6, m)).astype(float), rng.integers(0, 4, (6, m)).astype(float)
    ak, bk = np.minimum(an, rng.integers(0, 4, (6, m))), np.minimum(bn, rng.integers(0, 4, (6, m)))
    bn[5] = bk[5] = 0  # a pair where B has no verdict: NaNs, as one call gives
    many = analysis.paired_bootstraps(ak, an, bk, bn, n_boot=700, seed=11)
    for p in range(6):
        one = analysis.paired_bootstrap(ak[p], an[p], bk[p], bn[p], n_boot=700, seed=11)
        assert np.allclose([many[p][k] for k in ("diff", "lo", "hi", "p")], [one[k] for k in ("diff", "lo", "hi", "p")],
                           rtol=0, atol=0, equal_nan=True)
