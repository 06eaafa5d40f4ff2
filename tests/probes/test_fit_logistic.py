"""The probes' one logistic pipeline: the batched solver converges to scikit-learn's optimum (the same
objective, gradient from sklearn's own loss), on every shape the probes use; both backends agree."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from probe_data import make_prompts
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from t2i_audit.errors import AuditError
from t2i_audit.probes.fit import linear, per_image
from t2i_audit.probes.fit import logistic, pipeline
from t2i_audit.rundir import read_jsonl


def _data(n=240, dim=24, n_classes=4, strength=0.6, seed=0):
    """Features far from standardized (offsets, scales, correlated), as real activations are."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    F = rng.normal(size=(n, dim)) @ rng.normal(size=(dim, dim)) / np.sqrt(dim) + strength * rng.normal(
        size=(n_classes, dim))[y]
    return (F * rng.uniform(0.2, 5, dim) + rng.normal(0, 10, dim)).astype(np.float32), y


def _reference(X, y, train, C=1.0, scale=True):
    """Converged scikit-learn, float64: probabilities of every row, in its classes' order."""
    X = np.asarray(X, np.float64)
    sc = StandardScaler().fit(X[train]) if scale else None
    f = sc.transform if scale else (lambda A: A)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ConvergenceWarning would make it no reference
        lr = LogisticRegression(C=C, tol=1e-10, max_iter=100_000).fit(f(X[train]), y[train])
    return lr.predict_proba(f(X)), lr.classes_


def _grad(X, y, train, res, p, C):
    """∇ of mean log-loss + ||W||²/(2 C n) at the answer, by scikit-learn's own LinearModelLoss (the loss
    lbfgs minimises in ``_logistic_regression_path``), on the answer's standardized features."""
    from sklearn._loss.loss import HalfBinomialLoss, HalfMultinomialLoss
    from sklearn.linear_model._linear_loss import LinearModelLoss

    Z = (np.asarray(X[train], np.float64) - res.mean[p]) / res.scale[p]
    classes = np.unique(y[train])
    yi = np.searchsorted(classes, y[train]).astype(np.float64)
    W, b = res.coef[p][classes], res.intercept[p][classes]
    if len(classes) == 2:
        loss, coef = LinearModelLoss(HalfBinomialLoss(), fit_intercept=True), np.r_[W[1], b[1]]
    else:
        loss = LinearModelLoss(HalfMultinomialLoss(n_classes=len(classes)), fit_intercept=True)
        coef = np.c_[W, b].ravel(order="F")
    return loss.gradient(coef, Z, yi, None, l2_reg_strength=1.0 / (C * train.sum()))


SHAPES = {  # name: (X, y, train rows, n_classes, scale, C)
    "multinomial": lambda: (*_data(), None, True, 1.0),
    "binary": lambda: (*_data(n_classes=2), None, True, 1.0),
    "d > n": lambda: (*_data(n=60, dim=150, n_classes=3), None, True, 1.0),
    "C grid small": lambda: (*_data(), None, True, 0.01),
    "unscaled one-hot": lambda: (np.eye(6, dtype=np.float32)[np.arange(200) % 6],
                                 (np.arange(200) % 6 // 3) ^ (np.arange(200) % 7 == 0), None, False, 1.0),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_converges_to_sklearns_optimum(shape):
    X, y, _, scale, C = SHAPES[shape]()
    rng = np.random.default_rng(1)
    train = rng.random(len(y)) < 0.8
    K = int(y.max()) + 1
    res = logistic.fit_logistic([X], [0], np.where(train, y, -1)[None], train[None], K, scale=scale, C=C)
    assert res.converged[0] and res.grad_max[0] <= logistic.TOL
    # the stated objective's gradient, recomputed by scikit-learn's loss, is what the solver says it is
    g = _grad(X, y, train, res, 0, C)
    assert np.abs(g).max() <= 1.5 * logistic.TOL, np.abs(g).max()
    ref, cols = _reference(X, y, train, C, scale)
    assert np.abs(res.proba[0][:, cols] - ref).max() < 1e-3  # measured ≤ 2e-5 on these shapes


def test_near_constant_features_are_scaled_as_sklearn_does():
    X, y = _data()
    X[:, 0] = 7.0                                  # constant: StandardScaler leaves its scale at 1
    X[:, 1] = np.where(np.arange(len(y)) < 12, 1.0, 0.0)  # constant on the train rows below
    X[:, 2] = 3.0 + 1e-6 * (np.arange(len(y)) % 2)  # near-constant, yet not constant to sklearn
    train = np.arange(len(y)) >= 12
    res = logistic.fit_logistic([X], [0], np.where(train, y, -1)[None], train[None], 4)
    sc = StandardScaler().fit(X[train].astype(np.float64))
    np.testing.assert_allclose(res.scale[0], sc.scale_, rtol=1e-9)
    np.testing.assert_allclose(res.mean[0], sc.mean_, rtol=1e-9, atol=1e-9)
    ref, cols = _reference(X, y, train)
    assert np.abs(res.proba[0][:, cols] - ref).max() < 1e-3


def test_binary_uses_sklearns_one_vector_parametrisation():
    """sklearn fits ONE vector for 2 classes; a 2-class softmax is penalised half as much (its optimum is
    the one-vector model at 2C), so matching sklearn to 1e-4 while the 2C fit differs pins the choice."""
    X, y = _data(n_classes=2, strength=0.3)
    train = np.ones(len(y), bool)
    res = logistic.fit_logistic([X], [0], y[None], train[None], 2)
    ref, _ = _reference(X, y, train, 1.0)
    assert np.abs(res.proba[0] - ref).max() < 1e-4
    softmax_like, _ = _reference(X, y, train, 2.0)
    assert np.abs(res.proba[0] - softmax_like).max() > 1e-3
    assert np.all(res.coef[0][0] == 0) and res.intercept[0][0] == 0  # classes[0] pinned at logit 0


def test_absent_and_single_classes():
    """A class absent from the train rows gets probability 0 (sklearn never saw it); one class present:
    sklearn refuses to fit, the pipeline gives that class probability 1."""
    X, y = _data(n_classes=4)
    train = (y != 2) & (np.arange(len(y)) % 5 != 0)
    one = np.arange(len(y)) < 40
    labels = np.stack([np.where(train, y, -1), np.where(one, 1, -1)])
    res = logistic.fit_logistic([X], [0, 0], labels, np.stack([train, one]), 4)
    assert np.all(res.proba[0][:, 2] == 0)
    ref, cols = _reference(X, y, train)
    assert np.abs(res.proba[0][:, cols] - ref).max() < 1e-3
    assert np.all(res.proba[1][:, 1] == 1.0) and res.n_iter[1] == 0
    with pytest.raises(ValueError, match="at least 2 classes"):
        LogisticRegression().fit(X[one], np.ones(40))
    fits = pipeline.fit([pipeline.Problem(X, np.flatnonzero(one), np.ones(40, int), np.arange(5))], 3,
                        backend="sklearn")
    assert np.array_equal(fits[0].proba, np.tile([0.0, 1.0, 0.0], (5, 1)))


def test_a_batch_equals_each_problem_alone():
    """Batching is only arithmetic: problems sharing an array (other targets, folds, C) get their own answer."""
    X, y = _data(n=300, dim=40, n_classes=5)
    X2, _ = _data(n=300, dim=40, seed=3)
    folds = linear.grouped_folds(np.arange(300) // 3, 5, 0)
    labels, trains, arrays, Cs = [], [], [], []
    for a, C in ((0, 1.0), (1, 0.1), (0, 0.01)):
        for tr, _ in folds:
            m = np.zeros(300, bool)
            m[tr] = True
            labels.append(np.where(m, y, -1)), trains.append(m), arrays.append(a), Cs.append(C)
    labels, trains = np.array(labels), np.array(trains)
    both = logistic.fit_logistic([X, X2], arrays, labels, trains, 5, C=Cs)
    assert both.converged.all()
    for p in (0, 7, 13):
        alone = logistic.fit_logistic([[X, X2][arrays[p]]], [0], labels[p:p + 1], trains[p:p + 1], 5, C=Cs[p])
        assert np.abs(alone.proba[0] - both.proba[p]).max() < 2e-4  # both within TOL of one optimum


def test_a_warm_start_reaches_the_same_optimum():
    X, y = _data()
    train = np.ones(len(y), bool)
    cold = logistic.fit_logistic([X], [0], y[None], train[None], 4)
    init = np.random.default_rng(0).normal(size=(1, 4, X.shape[1] + 1))
    warm = logistic.fit_logistic([X], [0], y[None], train[None], 4, init=init)
    assert warm.converged[0] and np.abs(warm.proba - cold.proba).max() < 2e-4


def test_median_imputation_as_sklearns_simple_imputer():
    X, y = _data(n_classes=2)
    X = X.astype(np.float64)
    rng = np.random.default_rng(2)
    X[rng.random(X.shape) < 0.15] = np.nan
    X[:, 3] = np.nan  # a feature no row has: SimpleImputer(keep_empty_features=True) fills 0
    train, test = np.arange(180), np.arange(180, 240)
    ref = pipeline.sklearn_pipeline(0.1, impute=True).fit(X[train], y[train])
    got = pipeline.fit([pipeline.Problem(X, train, y[train], test, 0.1)], 2)[0]
    np.testing.assert_allclose(got.params["median"], ref[0].statistics_)
    assert np.abs(got.proba - ref.predict_proba(X[test])).max() < 1e-3


def test_backends_agree_on_decodability_and_failure():
    X, y = _data(n=300, dim=30, n_classes=6)
    groups = np.arange(300) // 4
    jobs = [(X, None, y.astype(str), groups), (X, np.arange(200), (y[:200] % 3).astype(str), groups[:200])]
    ref = linear.decodability_many(jobs, seed=0, backend="sklearn")
    new = linear.decodability_many(jobs, seed=0, backend="torch")
    for (r, pr), (t, pt) in zip(ref, new):
        assert t == r or all(abs(t[k] - r[k]) <= 1 / t["n"] for k in ("accuracy", "control_accuracy"))
        assert np.abs(pt - pr).max() < 1e-3
    prompts = make_prompts(300, seed=3)
    failed = X[:, 0] + np.random.default_rng(2).normal(size=300) > X[:, 0].mean()
    base, _ = linear.onehot_constituents(prompts)
    groups = [p["composition"] for p in prompts]
    a = linear.failure_prediction(X, failed, groups, base, seed=0, n_boot=100, backend="sklearn")
    b = linear.failure_prediction(X, failed, groups, base, seed=0, n_boot=100, backend="torch")
    assert abs(a["auroc"]["auroc"] - b["auroc"]["auroc"]) <= 1e-3
    assert abs(a["baseline_auroc"]["auroc"] - b["baseline_auroc"]["auroc"]) <= 1e-3


def test_nested_C_backends_agree():
    """per_image's probes: C chosen by the inner grouped CV, the same C and risks from both backends."""
    X, y = _data(n=200, dim=20, n_classes=2, strength=0.4)
    X = X.astype(np.float64)
    X[np.random.default_rng(4).random(X.shape) < 0.05] = np.nan
    groups = np.arange(200) // 4
    folds = linear.grouped_folds(groups, 4, 0)
    a = pipeline.nested(X, y, groups, folds, Cs=per_image.CS, backend="sklearn")
    b = pipeline.nested(X, y, groups, folds, Cs=per_image.CS, backend="torch")
    assert [f.C for f in a] == [f.C for f in b]
    for fa, fb in zip(a, b):
        assert np.abs(fa.risk - fb.risk).max() < 1e-3
    risk = per_image.oof(X, y, groups, folds)
    assert np.array_equal(risk[folds[0][1]], b[0].risk)


def test_unknown_backend_is_a_user_error():
    with pytest.raises(AuditError, match="choose torch or sklearn"):
        linear.decodability(np.zeros((10, 2)), ["a", "b"] * 5, list(range(10)), backend="jax")


def test_probe_stage_rows_agree_between_backends(tiny_clip_dir, tmp_path):
    from test_stage import _make_run

    from t2i_audit.probes import run_probe_stage

    prompts = make_prompts(120, seed=0)
    rd = _make_run(tmp_path / "run", prompts)
    out = {}
    for backend in ("sklearn", "torch"):
        res = run_probe_stage(rd.root, model=str(tiny_clip_dir), seed=0, layers="final", progress=False,
                              poolings=("eos", "slot"), n_boot=100, probe_backend=backend)
        assert res["probe_backend"] == backend
        out[backend] = (read_jsonl(rd.probes_dir / "decodability.jsonl"),
                        read_jsonl(rd.probes_dir / "failure.jsonl"))
    (dec_s, fail_s), (dec_t, fail_t) = out["sklearn"], out["torch"]
    assert len(dec_s) == len(dec_t) == 5 * 4 and len(fail_s) == len(fail_t) == 1
    for s, t in zip(dec_s, dec_t):
        assert set(s) == set(t) and [s[k] for k in ("layer", "pooling", "target")] == \
            [t[k] for k in ("layer", "pooling", "target")]
        for k in ("accuracy", "control_accuracy", "selectivity"):
            assert abs(s[k] - t[k]) <= 1 / s["n"], (k, s, t)  # at most one near-tie flips
    for s, t in zip(fail_s, fail_t):
        assert abs(s["auroc"]["auroc"] - t["auroc"]["auroc"]) <= 1e-3
        assert abs(s["baseline_auroc"]["auroc"] - t["baseline_auroc"]["auroc"]) <= 1e-3
