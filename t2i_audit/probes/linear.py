"""Linear probes on arrays: decodability, failure prediction, decodability ↔ success.

Everything is cross-validated *grouped by composition* (``GroupKFold``), so a test fold only
holds compositions never seen in training; every number comes beside chance and a control or
a baseline. Pure numpy / scikit-learn, CPU, deterministic given ``seed``.

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
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import stats
from ..errors import AuditError


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
                 seed: int = 0, C: float = 1.0, control: bool = True) -> tuple[dict, np.ndarray]:
    """Grouped-CV accuracy of a linear probe for ``y``; also returns out-of-fold p(true value)."""
    X = np.asarray(X, dtype=np.float32)
    y, groups = np.asarray(y).astype(str), np.asarray(groups)
    folds = grouped_folds(groups, n_splits, seed)
    proba, classes = oof_proba(X, y, folds, seed=seed, C=C)
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
        yc = control_labels(y, groups, seed)
        pc, cc = oof_proba(X, yc, folds, seed=seed, C=C)
        res["control_accuracy"] = float((cc[pc.argmax(1)] == yc).mean())
        res["control_chance"] = _majority_chance(yc, folds)
        res["selectivity"] = res["accuracy"] - res["control_accuracy"]
    return res, p_true


def onehot_constituents(prompts: Sequence[dict]) -> tuple[np.ndarray, list[str]]:
    """The prompt-only baseline's features: one column per ``slot=value`` and per template."""
    feats = [[f"{k}={v}" for k, v in sorted((p.get("slots") or {}).items())]
             + [f"template={p.get('template')}"] for p in prompts]
    names = sorted({f for fs in feats for f in fs})
    col = {n: i for i, n in enumerate(names)}
    X = np.zeros((len(prompts), len(names)), dtype=np.float32)
    for i, fs in enumerate(feats):
        X[i, [col[f] for f in fs]] = 1.0
    return X, names


def oof_risk(X: np.ndarray, failed: np.ndarray, folds, *, seed: int = 0, C: float = 1.0,
             scale: bool = True) -> np.ndarray:
    proba, classes = oof_proba(np.asarray(X, np.float32), failed.astype(int), folds, seed=seed,
                               C=C, scale=scale)
    return proba[:, list(classes).index(1)] if 1 in classes else np.zeros(len(failed))


def failure_prediction(X: np.ndarray, failed: Sequence, groups: Sequence, baseline_X: np.ndarray, *,
                       n_splits: int = 5, seed: int = 0, C: float = 1.0, n_boot: int = 1000) -> dict:
    """Out-of-fold AUROC of probe vs prompt-only baseline on the same grouped folds."""
    failed = np.asarray(failed).astype(bool)
    folds = grouped_folds(np.asarray(groups), n_splits, seed)
    risk = oof_risk(X, failed, folds, seed=seed, C=C)
    base = oof_risk(baseline_X, failed, folds, seed=seed, C=C, scale=False)
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
            "n": int(len(failed)), "failure_rate": float(failed.mean()), "n_folds": len(folds)}


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
