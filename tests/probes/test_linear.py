"""The statistics on synthetic data whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from probe_data import make_prompts
from sklearn.metrics import roc_auc_score

from t2i_audit import stats
from t2i_audit.errors import AuditError
from t2i_audit.probes.fit import linear


def _synthetic(n_rep=4, dim=24, seed=0):
    """6 colours x 6 objects compositions, n_rep prompts each; 'layers' with and without colour."""
    rng = np.random.default_rng(seed)
    colors, objects = np.arange(6), np.arange(6)
    c = np.repeat([ci for ci in colors for _ in objects], n_rep)
    o = np.repeat([oi for _ in colors for oi in objects], n_rep)
    groups = np.array([f"{a}-{b}" for a, b in zip(c, o)])
    W = rng.normal(size=(6, dim))
    layers = {}
    for L in range(5):
        noise = rng.normal(size=(len(c), dim))
        layers[L] = noise + (3 * W[c] if L in (2, 3) else 0)  # colour planted at layers 2 and 3 only
    return c.astype(str), o.astype(str), groups, layers


def test_decodability_high_exactly_where_planted():
    c, _, groups, layers = _synthetic()
    acc = {}
    for L, X in layers.items():
        res, p_true = linear.decodability(X, c, groups, seed=0)
        acc[L] = res["accuracy"]
        assert res["chance"] < 0.3 and res["chance_uniform"] == pytest.approx(1 / 6)
        assert res["control_accuracy"] < 0.35, res  # control task near chance everywhere
        assert p_true.shape == (len(c),)
    assert acc[2] > 0.95 and acc[3] > 0.95
    for L in (0, 1, 4):
        assert acc[L] < 0.35, acc


def test_grouped_cv_never_puts_a_test_composition_in_training():
    _, _, groups, _ = _synthetic()
    folds = linear.grouped_folds(groups, 5, seed=3)
    assert len(folds) == 5
    seen_test = np.concatenate([te for _, te in folds])
    assert sorted(seen_test) == list(range(len(groups)))  # every row tested exactly once
    for tr, te in folds:
        assert not set(groups[tr]) & set(groups[te])
    again = linear.grouped_folds(groups, 5, seed=3)
    assert all((a[1] == b[1]).all() for a, b in zip(folds, again))
    other = linear.grouped_folds(groups, 5, seed=4)
    assert any(set(a[1]) != set(b[1]) for a, b in zip(folds, other))


def test_grouped_cv_needs_two_compositions():
    with pytest.raises(AuditError, match="at least 2 compositions"):
        linear.grouped_folds(["x"] * 10)


def test_decodability_is_deterministic_given_seed():
    c, _, groups, layers = _synthetic()
    a, pa = linear.decodability(layers[1], c, groups, seed=5)
    b, pb = linear.decodability(layers[1], c, groups, seed=5)
    assert a == b and np.array_equal(pa, pb)


def test_failure_label_of_concepts_alone_baseline_matches_probe():
    prompts = make_prompts(360, seed=1)
    rng = np.random.default_rng(0)
    W = {v: rng.normal(size=16) for v in {p["slots"]["c1"] for p in prompts} | {p["slots"]["o1"] for p in prompts}}
    X = np.array([3 * W[p["slots"]["c1"]] + 3 * W[p["slots"]["o1"]] for p in prompts]) + rng.normal(size=(360, 16))
    failed = np.array([p["slots"]["c1"] in ("red", "blue") for p in prompts])
    groups = [p["composition"] for p in prompts]
    base_X, names = linear.onehot_constituents(prompts)
    assert "c1=red" in names and "template=two_object" in names
    res = linear.failure_prediction(X, failed, groups, base_X, seed=0, n_boot=300)
    assert res["baseline_auroc"]["auroc"] > 0.97
    assert res["auroc"]["auroc"] > 0.95
    assert abs(res["auroc"]["auroc"] - res["baseline_auroc"]["auroc"]) < 0.05
    assert res["auroc_diff"]["ci"][0] <= 0.0 <= res["auroc_diff"]["ci"][1] or res["auroc_diff"]["diff"] < 0
    assert "activations add over" not in res["verdict"]


def test_shuffled_failure_labels_give_chance():
    """A label the activations predict well, shuffled: probe and baseline fall to AUROC 0.5."""
    prompts = make_prompts(400, seed=2)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 16))
    real = X[:, 0] > 0.3
    groups, base = [p["composition"] for p in prompts], linear.onehot_constituents(prompts)[0]
    assert linear.failure_prediction(X, real, groups, base, seed=0, n_boot=100)["auroc"]["auroc"] > 0.9
    probe, baseline = [], []
    for k in range(6):
        res = linear.failure_prediction(X, rng.permutation(real), groups, base, seed=0, n_boot=100)
        probe.append(res["auroc"]["auroc"])
        baseline.append(res["baseline_auroc"]["auroc"])
        assert abs(probe[-1] - 0.5) < 0.15 and abs(baseline[-1] - 0.5) < 0.15
    assert abs(np.mean(probe) - 0.5) < 0.05 and abs(np.mean(baseline) - 0.5) < 0.05, (probe, baseline)


def test_activations_adding_information_is_detected():
    """Failure depends on a hidden per-prompt variable that only the activations carry."""
    prompts = make_prompts(400, seed=3)
    rng = np.random.default_rng(2)
    hidden = rng.normal(size=400)
    X = np.c_[hidden, rng.normal(size=(400, 7))]
    failed = hidden > 0.3
    res = linear.failure_prediction(X, failed, [p["composition"] for p in prompts],
                                    linear.onehot_constituents(prompts)[0], seed=0, n_boot=300)
    assert res["auroc"]["auroc"] > 0.9 and res["auroc_diff"]["ci"][0] > 0
    assert res["verdict"] == "the activations add over the prompt-only baseline"


def test_correlation_recovers_a_planted_relationship():
    prompts = make_prompts(300, seed=4)
    rng = np.random.default_rng(3)
    decod = rng.uniform(0.2, 1.0, 300)
    success = np.clip(decod + rng.normal(0, 0.1, 300), 0, 1)
    res = linear.decodability_success_correlation(prompts, decod, success, seed=0, n_boot=500, n_perm=500)
    assert res["unit"] == "composition" and res["n_units"] == 300
    assert res["spearman"]["r"] > 0.8 and res["spearman"]["ci"][0] > 0.7
    assert res["pearson"]["p_perm"] < 0.01
    null = linear.decodability_success_correlation(prompts, decod, rng.permutation(success), seed=0,
                                                   n_boot=500, n_perm=500)
    lo, hi = null["spearman"]["ci"]
    assert lo < 0 < hi and null["spearman"]["p_perm"] > 0.01
    by_binding = linear.decodability_success_correlation(prompts, decod, success, unit="binding", seed=0,
                                                         n_boot=200, n_perm=200)
    assert by_binding["n_units"] == len({(p["slots"]["c1"], p["slots"]["o1"]) for p in prompts}
                                        | {(p["slots"]["c2"], p["slots"]["o2"]) for p in prompts})
    assert by_binding["spearman"]["r"] > 0.3


def test_stats_helpers_match_sklearn_and_scipy():
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    s = np.round(y + rng.normal(0, 1, 500), 1)  # ties
    r = stats.auroc_ci(y, s, n_boot=200, seed=1)
    assert r["auroc"] == pytest.approx(roc_auc_score(y, s))
    assert r["ci"][0] < r["auroc"] < r["ci"][1]
    assert stats.auroc_ci(y, s, n_boot=200, seed=1) == r
    assert np.isnan(stats.auroc([1, 1, 1], [0.1, 0.2, 0.3]))
    x, z = rng.normal(size=100), rng.normal(size=100)
    c = stats.correlation(x, x + z, n_boot=200, n_perm=200)
    assert c["spearman"]["r"] == pytest.approx(spearmanr(x, x + z).statistic)
    assert c["pearson"]["r"] == pytest.approx(pearsonr(x, x + z).statistic)
    assert np.isnan(stats.correlation([1, 1, 1, 1], [1, 2, 3, 4])["spearman"]["r"])
