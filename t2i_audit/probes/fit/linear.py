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

Every fit is the probes' one logistic pipeline (``fit/pipeline.py``: standardize, L2 logistic
regression fitted to convergence) with either backend: ``"torch"`` (all fits of a call batched on a
device, ``fit/logistic.py``) or ``"sklearn"`` (the reference, one converged fit at a time); the
``*_many`` functions take many (array, target) jobs at once so the torch backend can batch them.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ... import stats
from ...errors import AuditError
from . import pipeline as _pipeline

BACKENDS, DEFAULT_BACKEND, check_backend = _pipeline.BACKENDS, _pipeline.DEFAULT_BACKEND, _pipeline.check_backend


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
    """The reference pipeline (StandardScaler + converged LogisticRegression), for a single refit."""
    return _pipeline.sklearn_pipeline(C, seed=seed)


def oof_proba(X: np.ndarray, y: np.ndarray, folds, *, seed: int = 0, C: float = 1.0, scale: bool = True,
              backend: str = DEFAULT_BACKEND, device: str | None = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold class probabilities, columns in ``classes`` (sorted unique ``y``) order."""
    return oof_proba_many([(X, None, y, folds, scale)], seed=seed, C=C, backend=backend, device=device)[0]


def oof_proba_many(items: Sequence[tuple], *, seed: int = 0, C: float = 1.0, backend: str = DEFAULT_BACKEND,
                   device: str | None = "cpu") -> list[tuple[np.ndarray, np.ndarray]]:
    """``oof_proba`` for many items ``(X, rows, y, folds, scale)``: rows of X (None: all) with labels y
    and folds indexing those rows. All folds of all items are one call to the shared pipeline
    (``fit.pipeline``); items that share one X (the same object) share its matmuls. A class absent
    from a fold's training rows gets probability 0 there; a fold with one class gives it probability 1."""
    check_backend(backend)
    problems, metas, K = [], [], 1
    for X, rows, y, folds, scale in items:
        rows = np.arange(len(X)) if rows is None else np.asarray(rows)
        classes, yi = np.unique(y, return_inverse=True)
        K = max(K, len(classes))
        metas.append((rows, classes, folds, len(problems)))
        problems += [_pipeline.Problem(X, rows[tr], yi[tr], rows[te], C, scale) for tr, te in folds]
    fits = _pipeline.fit(problems, K, backend=backend, device=device)
    out = []
    for rows, classes, folds, first in metas:
        proba = np.zeros((len(rows), len(classes)))
        for f, (_tr, te) in enumerate(folds):
            proba[te] = fits[first + f].proba[:, :len(classes)]
        out.append((proba, classes))
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
                                   n_compositions=len(np.unique(np.asarray(job[2]))), groups=np.asarray(job[2])))
    return out


def _failure_result(failed, folds, risk, base, *, seed, n_boot, n_compositions=None, groups=None) -> dict:
    # CIs resample the folds' groups (a prompt group: one scene or a swap twin pair moves together)
    probe_auc = stats.auroc_ci(failed, risk, n_boot=n_boot, seed=seed, groups=groups)
    base_auc = stats.auroc_ci(failed, base, n_boot=n_boot, seed=seed, groups=groups)
    diff = stats.auroc_diff_ci(failed, risk, base, n_boot=n_boot, seed=seed, groups=groups)
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
