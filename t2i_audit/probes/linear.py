"""Linear probes on arrays: decodability, failure prediction, decodability ↔ success.

Everything is cross-validated *grouped by composition* (``GroupKFold``), so a test fold only
holds compositions never seen in training; every number comes beside chance and a control or
a baseline. Deterministic given ``seed``.

* Decodability of a constituent (a slot's value, e.g. the colour of the first object):
  multinomial logistic regression on standardized activations. Reported with the majority-
  class chance (same folds) and a **control task**: the same probe on a fixed random
  relabelling drawn per composition from the target's own value distribution. The control
  has the target's classes and marginals but no structure that carries over to unseen
  compositions, so a probe that beats chance on it is memorizing compositions or the CV
  leaks. (A relabelling of the values themselves would be a bijection — exactly as decodable
  as the target, so it could not serve as a control.)
* Failure prediction: logistic regression from activations to "failed" (success rate < 0.5),
  out-of-fold AUROC with a bootstrap CI, next to a prompt-only baseline that sees only the
  one-hot constituents (``slot=value``, template); the paired AUROC difference says whether
  the activations add anything.
* Correlation: per composition (or per attribute–object binding), mean out-of-fold
  probability of the true constituents against the success rate.

Two backends fit the same probes: ``"sklearn"`` (the reference, one fit at a time) and
``"torch"`` (``torch_fit``: scikit-learn's own L-BFGS path, many fits batched on a device;
tests/probes/test_torch_fit.py pins it to the reference). The ``*_many`` functions take many
(array, target) jobs at once so the torch backend can batch them.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import stats
from ..errors import AuditError

BACKENDS = ("torch", "sklearn")
DEFAULT_BACKEND = "torch"


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise AuditError(f"probe backend {backend!r}: choose {' or '.join(BACKENDS)}")
    return backend


def grouped_folds(groups: Sequence, n_splits: int = 5, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index pairs; no group is ever on both sides of a split."""
    from sklearn.model_selection import GroupKFold

    groups = np.asarray(groups)
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise AuditError(f"grouped CV needs at least 2 compositions, got {n_groups}")
    k = min(n_splits, n_groups)
    cv = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in cv.split(np.zeros(len(groups)), groups=groups)]


def _probe(seed: int, C: float):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, tol=1e-3, max_iter=500, random_state=seed))


def oof_proba(X: np.ndarray, y: np.ndarray, folds, *, seed: int = 0, C: float = 1.0,
              scale: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold class probabilities, columns in ``classes`` (sorted unique ``y``) order."""
    from sklearn.linear_model import LogisticRegression

    from threadpoolctl import threadpool_limits

    classes = np.unique(y)
    proba = np.zeros((len(y), len(classes)))
    with threadpool_limits(1):  # small fits: BLAS threads only contend (measured 50x slower)
        _fit_folds(X, y, folds, classes, proba, seed=seed, C=C, scale=scale)
    return proba, classes


def _fit_folds(X, y, folds, classes, proba, *, seed, C, scale):
    from sklearn.linear_model import LogisticRegression

    for tr, te in folds:
        present = np.unique(y[tr])
        cols = np.searchsorted(classes, present)
        if len(present) == 1:
            proba[np.ix_(te, cols)] = 1.0
            continue
        model = _probe(seed, C) if scale else LogisticRegression(C=C, tol=1e-3, max_iter=500, random_state=seed)
        model.fit(X[tr], y[tr])
        proba[np.ix_(te, cols)] = model.predict_proba(X[te])


def oof_proba_many(items: Sequence[tuple], *, seed: int = 0, C: float = 1.0, backend: str = DEFAULT_BACKEND,
                   device: str | None = "cpu") -> list[tuple[np.ndarray, np.ndarray]]:
    """``oof_proba`` for many items ``(X, rows, y, folds, scale)``: rows of X (None: all) with
    labels y and folds indexing those rows. Items may share one X (same object): the torch
    backend then fits all their folds in one batch."""
    check_backend(backend)
    if backend == "sklearn":
        return [oof_proba(X if rows is None else X[rows], y, folds, seed=seed, C=C, scale=scale)
                for X, rows, y, folds, scale in items]
    from . import torch_fit

    out: list = [None] * len(items)
    by_dim: dict[int, list[int]] = {}
    for i, (X, *_rest) in enumerate(items):
        by_dim.setdefault(int(np.shape(X)[1]), []).append(i)
    for idx in by_dim.values():  # one batched fit per feature width (e.g. per encoder)
        arrays, slot = [], {}
        for i in idx:
            X = items[i][0]
            if id(X) not in slot:
                slot[id(X)] = len(arrays)
                arrays.append(X)
        n = max(len(a) for a in arrays)
        if any(len(a) != n for a in arrays):  # fit_logistic wants one shape: pad with unused rows
            arrays = [np.concatenate([a, np.full((n - len(a), a.shape[1]), np.nan, np.float32)]) if len(a) < n
                      else a for a in arrays]
        array_of, labels, train, scale, meta = [], [], [], [], []
        K = 1
        for i in idx:
            X, rows, y, folds, sc = items[i]
            rows = np.arange(len(X)) if rows is None else np.asarray(rows)
            classes, yi = np.unique(y, return_inverse=True)
            K = max(K, len(classes))
            meta.append((i, rows, classes, folds, len(array_of)))
            for tr, _te in folds:
                lab = np.full(n, -1)
                lab[rows] = yi
                m = np.zeros(n, bool)
                m[rows[tr]] = True
                array_of.append(slot[id(X)]), labels.append(lab), train.append(m), scale.append(sc)
        res = torch_fit.fit_logistic(arrays, array_of, np.array(labels), np.array(train), K, scale=scale, C=C,
                                     device=device)
        for i, rows, classes, folds, first in meta:
            proba = np.zeros((len(rows), len(classes)))
            for f, (_tr, te) in enumerate(folds):
                proba[te] = res.proba[first + f][rows[te], :len(classes)]
            out[i] = (proba, classes)
    return out


def control_labels(y: np.ndarray, groups: np.ndarray, seed: int = 0) -> np.ndarray:
    """One random value per composition, drawn from the empirical distribution of ``y``."""
    rng = np.random.default_rng(seed + 7919)
    uniq, inv = np.unique(groups, return_inverse=True)
    draw = y[rng.integers(0, len(y), len(uniq))]
    return draw[inv]


def _majority_chance(y: np.ndarray, folds) -> float:
    hits = 0
    for tr, te in folds:
        vals, counts = np.unique(y[tr], return_counts=True)
        hits += int((y[te] == vals[np.argmax(counts)]).sum())
    return hits / sum(len(te) for _, te in folds)


def decodability(X: np.ndarray, y: Sequence, groups: Sequence, *, n_splits: int = 5,
                 seed: int = 0, C: float = 1.0, control: bool = True, backend: str = DEFAULT_BACKEND,
                 device: str | None = "cpu") -> tuple[dict, np.ndarray]:
    """Grouped-CV accuracy of a linear probe for ``y``; also returns out-of-fold p(true value)."""
    return decodability_many([(X, None, y, groups)], n_splits=n_splits, seed=seed, C=C, control=control,
                             backend=backend, device=device)[0]


def decodability_many(jobs: Sequence[tuple], *, n_splits: int = 5, seed: int = 0, C: float = 1.0,
                      control: bool = True, backend: str = DEFAULT_BACKEND,
                      device: str | None = "cpu") -> list[tuple[dict, np.ndarray]]:
    """``decodability`` for many jobs ``(X, rows, y, groups)`` (y, groups: for X[rows]; rows None:
    all); jobs that share one X object (targets of one array) are fitted together."""
    items, preps = [], []
    for X, rows, y, groups in jobs:
        X = np.asarray(X, dtype=np.float32)  # the same object when it already is: shared fits
        y, groups = np.asarray(y).astype(str), np.asarray(groups)
        folds = grouped_folds(groups, n_splits, seed)
        items.append((X, rows, y, folds, True))
        yc = control_labels(y, groups, seed) if control else None
        if control:
            items.append((X, rows, yc, folds, True))
        preps.append((y, groups, folds, yc))
    fits = iter(oof_proba_many(items, seed=seed, C=C, backend=backend, device=device))
    out = []
    for y, groups, folds, yc in preps:
        proba, classes = next(fits)
        pred = classes[proba.argmax(1)]
        correct = pred == y
        p_true = proba[np.arange(len(y)), np.searchsorted(classes, y)]
        res = {
            "accuracy": float(correct.mean()),
            "accuracy_folds": [float(correct[te].mean()) for _, te in folds],
            "chance": _majority_chance(y, folds),
            "chance_uniform": 1.0 / len(classes),
            "n": int(len(y)), "n_classes": int(len(classes)),
            "n_compositions": int(len(np.unique(groups))), "n_folds": len(folds),
        }
        if control:
            pc, cc = next(fits)
            res["control_accuracy"] = float((cc[pc.argmax(1)] == yc).mean())
            res["control_chance"] = _majority_chance(yc, folds)
            res["selectivity"] = res["accuracy"] - res["control_accuracy"]
        out.append((res, p_true))
    return out


def onehot_constituents(prompts: Sequence[dict], names: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """The prompt-only baseline's features: one column per ``slot=value`` and per template. ``names``: the
    columns of an earlier fit, in its order (a value it never saw gets no column: all zeros)."""
    feats = [[f"{k}={v}" for k, v in sorted((p.get("slots") or {}).items())]
             + [f"template={p.get('template')}"] for p in prompts]
    names = list(names) if names is not None else sorted({f for fs in feats for f in fs})
    col = {n: i for i, n in enumerate(names)}
    X = np.zeros((len(prompts), len(names)), dtype=np.float32)
    for i, fs in enumerate(feats):
        X[i, [col[f] for f in fs if f in col]] = 1.0
    return X, names


def oof_risk(X: np.ndarray, failed: np.ndarray, folds, *, seed: int = 0, C: float = 1.0,
             scale: bool = True, backend: str = DEFAULT_BACKEND, device: str | None = "cpu") -> np.ndarray:
    return _risks([(X, failed, folds, scale)], seed=seed, C=C, backend=backend, device=device)[0]


def _risks(items, *, seed, C, backend, device) -> list[np.ndarray]:
    """Out-of-fold P(failed) for items ``(X, failed, folds, scale)``."""
    fits = oof_proba_many([(np.asarray(X, np.float32), None, np.asarray(f).astype(int), folds, sc)
                           for X, f, folds, sc in items], seed=seed, C=C, backend=backend, device=device)
    return [proba[:, list(classes).index(1)] if 1 in classes else np.zeros(len(proba))
            for proba, classes in fits]


def failure_prediction(X: np.ndarray, failed: Sequence, groups: Sequence, baseline_X: np.ndarray, *,
                       n_splits: int = 5, seed: int = 0, C: float = 1.0, n_boot: int = 1000,
                       backend: str = DEFAULT_BACKEND, device: str | None = "cpu") -> dict:
    """Out-of-fold AUROC of probe vs prompt-only baseline on the same grouped folds."""
    return failure_prediction_many([(X, failed, groups, baseline_X)], n_splits=n_splits, seed=seed, C=C,
                                   n_boot=n_boot, backend=backend, device=device)[0]


def failure_prediction_many(jobs: Sequence[tuple], *, n_splits: int = 5, seed: int = 0, C: float = 1.0,
                            n_boot: int = 1000, backend: str = DEFAULT_BACKEND,
                            device: str | None = "cpu") -> list[dict]:
    """``failure_prediction`` for jobs ``(X, failed, groups, baseline_X)``; jobs that pass the very
    same (failed, groups, baseline_X) objects share one baseline fit (it would be identical)."""
    preps, probe_items, base_items, base_of = [], [], [], {}
    for X, failed, groups, baseline_X in jobs:
        failed = np.asarray(failed).astype(bool)
        folds = grouped_folds(np.asarray(groups), n_splits, seed)
        probe_items.append((X, failed, folds, True))
        key = (id(jobs[len(preps)][1]), id(groups), id(baseline_X))  # same objects: same fit
        if key not in base_of:
            base_of[key] = len(base_items)
            base_items.append((baseline_X, failed, folds, False))
        preps.append((failed, folds, base_of[key]))
    risks = _risks(probe_items, seed=seed, C=C, backend=backend, device=device)
    bases = _risks(base_items, seed=seed, C=C, backend=backend, device=device)
    out = []
    for (failed, folds, b), risk, job in zip(preps, risks, jobs):
        out.append(_failure_result(failed, folds, risk, bases[b], seed=seed, n_boot=n_boot,
                                   n_compositions=len(np.unique(np.asarray(job[2])))))
    return out


def _failure_result(failed, folds, risk, base, *, seed, n_boot, n_compositions=None) -> dict:
    probe_auc = stats.auroc_ci(failed, risk, n_boot=n_boot, seed=seed)
    base_auc = stats.auroc_ci(failed, base, n_boot=n_boot, seed=seed)
    diff = stats.auroc_diff_ci(failed, risk, base, n_boot=n_boot, seed=seed)
    if math.isnan(diff["diff"]):
        verdict = "undetermined (only one outcome among these prompts)"
    elif diff["ci"][0] > 0:
        verdict = "the activations add over the prompt-only baseline"
    elif diff["ci"][1] < 0:
        verdict = "the prompt-only baseline beats the activations"
    else:
        verdict = "no evidence that the activations add anything over the prompt-only baseline"
    return {"auroc": probe_auc, "baseline_auroc": base_auc, "auroc_diff": diff, "verdict": verdict,
            "n": int(len(failed)), "failure_rate": float(failed.mean()), "n_folds": len(folds),
            "n_compositions": n_compositions}


def per_unit(prompts: Sequence[dict], decod: np.ndarray, success: np.ndarray, unit: str = "composition"):
    """Mean decodability and success per composition or per (family, value, object) binding."""
    keys: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        if unit == "composition":
            ks = [p.get("composition") or p["id"]]
        elif unit == "binding":
            ks = ["|".join(map(str, b)) for b in p.get("bindings") or []]
        else:
            raise AuditError(f"correlation unit {unit!r}: choose composition or binding")
        for k in ks:
            keys.setdefault(k, []).append(i)
    names = sorted(keys)
    d = np.array([np.nanmean(decod[keys[k]]) for k in names])
    s = np.array([np.nanmean(success[keys[k]]) for k in names])
    return names, d, s


def decodability_success_correlation(prompts: Sequence[dict], decod: np.ndarray, success: np.ndarray,
                                     *, unit: str = "composition", seed: int = 0,
                                     n_boot: int = 1000, n_perm: int = 1000) -> dict:
    ok = np.isfinite(decod) & np.isfinite(success)
    sub = [p for p, k in zip(prompts, ok) if k]
    names, d, s = per_unit(sub, decod[ok], success[ok], unit)
    out = stats.correlation(d, s, n_boot=n_boot, n_perm=n_perm, seed=seed)
    out["unit"] = unit
    out["n_units"] = len(names)
    # the per-unit points, so the report can draw the scatter behind the number
    out["points"] = [{"unit": n, "x": round(float(x), 4), "y": round(float(y), 4)} for n, x, y in zip(names, d, s)]
    return out
