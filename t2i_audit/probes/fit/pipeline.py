"""The probes' one logistic pipeline, on any train/predict rows: median imputation (only where a used
row has a NaN), standardization, L2 logistic regression fitted to convergence — with C fixed, or chosen
by an inner grouped CV (``nested``). Every probe of the tool goes through here: the decodability and
failure probes of ``linear.py`` and the per-image probes of ``per_image.py``.

Two backends give the same numbers (tests/probes/test_fit_logistic.py pins them together):
``"torch"`` fits all problems of a call as one batched problem on a device (``logistic.py``);
``"sklearn"`` is the reference, one converged scikit-learn pipeline per problem
(``SimpleImputer(strategy="median", keep_empty_features=True)`` where needed, ``StandardScaler``,
``LogisticRegression(C, tol=TOL, max_iter=10_000)`` in float64).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...errors import AuditError
from .logistic import TOL, fit_logistic

BACKENDS = ("torch", "sklearn")
DEFAULT_BACKEND = "torch"
SKLEARN_MAX_ITER = 10_000


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise AuditError(f"probe backend {backend!r}: choose {' or '.join(BACKENDS)}")
    return backend


@dataclass
class Problem:
    """One fit: train on rows ``train`` of ``X`` with class indices ``y`` (in ``[0, n_classes)``), then
    predict rows ``predict``. Problems that pass the very same ``X`` object share its matmuls."""
    X: np.ndarray
    train: np.ndarray
    y: np.ndarray
    predict: np.ndarray
    C: float = 1.0
    scale: bool = True


@dataclass
class Fitted:
    proba: np.ndarray                 # (len(predict), n_classes); classes absent from training: 0
    params: dict = field(default_factory=dict)  # median, mean, scale, coef (K, D), intercept (K,)


def sklearn_pipeline(C: float = 1.0, *, scale: bool = True, impute: bool = False, seed: int = 0):
    """The reference pipeline, converged (fit it on float64 features)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    steps = [SimpleImputer(strategy="median", keep_empty_features=True)] if impute else []
    steps += [StandardScaler()] if scale else []
    return make_pipeline(*steps, LogisticRegression(C=C, tol=TOL, max_iter=SKLEARN_MAX_ITER, random_state=seed))


def fit(problems: Sequence[Problem], n_classes: int, *, backend: str = DEFAULT_BACKEND,
        device: str | None = "cpu") -> list[Fitted]:
    """Fit every problem; one class in a problem's train rows gives probability 1, no fit."""
    check_backend(backend)
    if backend == "sklearn":
        return [_fit_sklearn(p, n_classes) for p in problems]
    return _fit_torch(problems, n_classes, device)


def _missing(X: np.ndarray, rows: np.ndarray) -> bool:
    return bool(np.isnan(X[rows]).any())


def train_medians(X: np.ndarray, train: np.ndarray) -> np.ndarray:
    """SimpleImputer(strategy="median", keep_empty_features=True): an all-missing column gets 0."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        med = np.nanmedian(np.asarray(X[train], np.float64), axis=0)
    return np.where(np.isnan(med), 0.0, med)


def _fit_sklearn(p: Problem, n_classes: int) -> Fitted:
    from threadpoolctl import threadpool_limits

    proba = np.zeros((len(p.predict), n_classes))
    present = np.unique(p.y)
    if len(present) < 2:
        proba[:, present] = 1.0
        return Fitted(proba)
    impute = _missing(p.X, np.r_[p.train, p.predict])
    model = sklearn_pipeline(p.C, scale=p.scale, impute=impute)
    with threadpool_limits(1):  # small fits: BLAS threads only contend (measured 50x slower)
        model.fit(np.asarray(p.X[p.train], np.float64), p.y)
        if len(p.predict):
            proba[:, present] = model.predict_proba(np.asarray(p.X[p.predict], np.float64))
    lr = model[-1]
    coef = np.zeros((n_classes, np.shape(p.X)[1]))
    intercept = np.zeros(n_classes)
    if len(present) == 2:  # sklearn's one vector is for classes[1]
        coef[present[1]], intercept[present[1]] = lr.coef_[0], lr.intercept_[0]
    else:
        coef[present], intercept[present] = lr.coef_, lr.intercept_
    D = np.shape(p.X)[1]
    params = {"median": model[0].statistics_ if impute else None,
              "mean": model[-2].mean_ if p.scale else np.zeros(D),
              "scale": model[-2].scale_ if p.scale else np.ones(D), "coef": coef, "intercept": intercept}
    return Fitted(proba, params)


def _fit_torch(problems: Sequence[Problem], n_classes: int, device) -> list[Fitted]:
    out: list = [None] * len(problems)
    by_dim: dict[tuple, list[int]] = {}
    for i, p in enumerate(problems):  # one batched fit per feature width and class count (no padded classes)
        by_dim.setdefault((int(np.shape(p.X)[1]), int(np.max(p.y, initial=0)) + 1), []).append(i)
    for (_, K), idx in by_dim.items():
        arrays, slot, medians, keys = [], {}, {}, {}
        for i in idx:
            p = problems[i]
            key: tuple = (id(p.X),)
            if _missing(p.X, np.r_[p.train, p.predict]):  # imputed with this problem's train medians
                key = (id(p.X), np.sort(p.train).tobytes())
            if key not in slot:
                X = p.X
                if len(key) == 2:
                    medians[key] = train_medians(p.X, p.train)
                    X = np.where(np.isnan(p.X), medians[key], p.X)
                slot[key] = len(arrays)
                arrays.append(X)
            keys[i] = key
        n = max(len(a) for a in arrays)
        if any(len(a) != n for a in arrays):  # fit_logistic wants one shape: pad with unused rows
            arrays = [np.concatenate([a, np.full((n - len(a), a.shape[1]), np.nan, np.float32)]) if len(a) < n
                      else a for a in arrays]
        labels = np.full((len(idx), n), -1)
        train = np.zeros((len(idx), n), bool)
        for k, i in enumerate(idx):
            p = problems[i]
            labels[k, p.train], train[k, p.train] = p.y, True
        res = fit_logistic(arrays, [slot[keys[i]] for i in idx], labels, train, K,
                           scale=[problems[i].scale for i in idx], C=[problems[i].C for i in idx], device=device)
        for k, i in enumerate(idx):
            p = problems[i]
            proba = np.zeros((len(p.predict), n_classes))
            proba[:, :K] = res.proba[k][p.predict]
            coef = np.zeros((n_classes, res.coef.shape[2]))
            coef[:K] = res.coef[k]
            out[i] = Fitted(proba, {"median": medians.get(keys[i]), "mean": res.mean[k], "scale": res.scale[k],
                                    "coef": coef, "intercept": np.r_[res.intercept[k], np.zeros(n_classes - K)]})
    return out


@dataclass
class NestedFit:
    C: float                 # chosen by the inner CV (nan: one class in train, no fit)
    risk: np.ndarray         # P(class 1) on the predicted rows
    params: dict = field(default_factory=dict)


def _inner_plan(y, groups, train, Cs, seed):
    """The inner grouped 3-fold CV of one outer train set: (inner train, inner test, C) per fit."""
    from sklearn.model_selection import GroupKFold

    yt, gt = y[train], groups[train]
    if len(np.unique(gt)) < 3 or len(np.unique(yt)) < 2:
        return None
    inner = list(GroupKFold(n_splits=3, shuffle=True, random_state=seed).split(train, yt, gt))
    return [(train[tr], train[te], C) for C in Cs for tr, te in inner]


def nested(X: np.ndarray, y: np.ndarray, groups: np.ndarray, splits: Sequence[tuple[np.ndarray, np.ndarray]], *,
           Cs: Sequence[float], seed: int = 0, backend: str = DEFAULT_BACKEND, device: str | None = "cpu",
           default_C: float = 1.0) -> list[NestedFit]:
    """Binary ``y`` (0/1): for each (train, predict) split, C by an inner grouped 3-fold CV on the train
    rows only (AUROC of the inner out-of-fold risk; ties: the smaller C; fewer than 3 compositions or one
    class: ``default_C``), then the probe refitted on all train rows with that C. A train set with one
    class predicts its failure rate. All inner fits of all splits are one batched call, all final fits
    another."""
    from ... import stats

    y = np.asarray(y).astype(int)
    groups = np.asarray(groups)
    plans, problems = [], []
    for train, _ in splits:
        train = np.asarray(train)
        plan = _inner_plan(y, groups, train, Cs, seed) if len(np.unique(y[train])) > 1 else None
        plans.append((len(problems), plan))
        for tr, te, C in plan or []:
            if len(np.unique(y[tr])) > 1:
                problems.append(Problem(X, tr, y[tr], te, C))
    inner = iter(fit(problems, 2, backend=backend, device=device))
    chosen = []
    for (train, _), (first, plan) in zip(splits, plans):
        train = np.asarray(train)
        if len(np.unique(y[train])) < 2:
            chosen.append(float("nan"))
            continue
        if plan is None:
            chosen.append(default_C)
            continue
        risk = {C: np.full(len(y), np.nan) for C in Cs}
        for tr, te, C in plan:
            risk[C][te] = next(inner).proba[:, 1] if len(np.unique(y[tr])) > 1 else float(y[tr].mean())
        best, best_auc = Cs[-1], -1.0
        for C in Cs:
            auc = stats.auroc(y[train], risk[C][train])
            if np.isfinite(auc) and auc > best_auc:
                best, best_auc = C, auc
        chosen.append(best)
    final = [Problem(X, np.asarray(tr), y[np.asarray(tr)], np.asarray(te), C)
             for (tr, te), C in zip(splits, chosen) if np.isfinite(C)]
    fits = iter(fit(final, 2, backend=backend, device=device))
    out = []
    for (tr, te), C in zip(splits, chosen):
        if not np.isfinite(C):
            out.append(NestedFit(C, np.full(len(te), float(y[np.asarray(tr)].mean()))))
            continue
        f = next(fits)
        out.append(NestedFit(C, f.proba[:, 1], f.params))
    return out
