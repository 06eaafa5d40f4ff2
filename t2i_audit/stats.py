"""Uncertainty helpers: bootstrap CIs, permutation p-values, AUROC with CIs, correlations.

Thin wrappers on scipy.stats / sklearn.metrics with fixed seeds, so every number a report
shows comes with its interval and is reproducible. No torch here.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _nan_pair() -> tuple[float, float]:
    return (math.nan, math.nan)


def bootstrap_ci(statistic: Callable, *samples: Sequence, n_resamples: int = 1000,
                 confidence: float = 0.95, seed: int = 0, paired: bool = True,
                 vectorized: bool = False) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic(*samples)`` (scipy.stats.bootstrap)."""
    from scipy import stats

    samples = tuple(np.asarray(s, dtype=float) for s in samples)
    if min(len(s) for s in samples) < 3:
        return _nan_pair()
    with np.errstate(all="ignore"):
        res = stats.bootstrap(samples, statistic, n_resamples=n_resamples, paired=paired,
                              vectorized=vectorized, confidence_level=confidence,
                              method="percentile", rng=_rng(seed))
    lo, hi = res.confidence_interval
    return float(lo), float(hi)


def _pearson_axis(x, y, axis=-1):
    x = x - x.mean(axis=axis, keepdims=True)
    y = y - y.mean(axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        return (x * y).sum(axis=axis) / np.sqrt((x * x).sum(axis=axis) * (y * y).sum(axis=axis))


def _spearman_axis(x, y, axis=-1):
    from scipy.stats import rankdata

    return _pearson_axis(rankdata(x, axis=axis), rankdata(y, axis=axis), axis=axis)


CORRELATIONS = {"pearson": _pearson_axis, "spearman": _spearman_axis}


def permutation_pvalue(x: Sequence, y: Sequence, statistic: Callable | str = "spearman", *,
                       n_resamples: int = 1000, seed: int = 0,
                       alternative: str = "two-sided") -> float:
    """Permutation p-value of an association statistic (scipy.stats.permutation_test, pairings)."""
    from scipy import stats

    fn = CORRELATIONS[statistic] if isinstance(statistic, str) else statistic
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    res = stats.permutation_test((x, y), fn, permutation_type="pairings", vectorized=True,
                                 n_resamples=n_resamples, alternative=alternative, rng=_rng(seed))
    return float(res.pvalue)


def correlation(x: Sequence, y: Sequence, *, n_boot: int = 1000, n_perm: int = 1000,
                seed: int = 0, confidence: float = 0.95) -> dict:
    """Spearman and Pearson r with bootstrap CIs and permutation p-values."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    out: dict = {"n": int(len(x))}
    for name, fn in CORRELATIONS.items():
        degenerate = len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0
        r = math.nan if degenerate else float(fn(x, y))
        ci = _nan_pair() if degenerate else bootstrap_ci(fn, x, y, n_resamples=n_boot, seed=seed,
                                                         confidence=confidence, vectorized=True)
        p = math.nan if degenerate else permutation_pvalue(x, y, fn, n_resamples=n_perm, seed=seed)
        out[name] = {"r": r, "ci": list(ci), "p_perm": p}
    return out


def auroc(y_true: Sequence, score: Sequence) -> float:
    from sklearn.metrics import roc_auc_score

    y_true = np.asarray(y_true)
    if len(np.unique(y_true)) < 2:
        return math.nan
    return float(roc_auc_score(y_true, score))


def _cluster_resamples(groups: np.ndarray, b: int, rng) -> np.ndarray:
    """``b`` resamples of whole groups (with replacement), each cut or cycled to ``len(groups)`` rows so
    they stack: rows of one group stay together, the unit of independence (images of one prompt)."""
    codes, members = np.unique(groups, return_inverse=True)
    rows_of = [np.flatnonzero(members == g) for g in range(len(codes))]
    out = np.empty((b, len(groups)), dtype=int)
    for i in range(b):
        picked = np.concatenate([rows_of[g] for g in rng.integers(0, len(codes), len(codes))])
        out[i] = np.resize(picked, len(groups))
    return out


def _boot_aurocs(y: np.ndarray, scores: Sequence[np.ndarray], n_boot: int, seed: int, groups=None):
    """AUROC of each score on the same bootstrap resamples (Mann–Whitney on average ranks).

    Vectorized over resamples in chunks; resamples holding one class only are dropped. ``groups``:
    resample whole groups (a cluster bootstrap) instead of items.
    """
    from scipy.stats import rankdata

    rng = _rng(seed)
    out = [[] for _ in scores]
    left = n_boot
    while left > 0:
        b = min(left, 200)
        left -= b
        idx = (rng.integers(0, len(y), (b, len(y))) if groups is None
               else _cluster_resamples(np.asarray(groups), b, rng))
        yy = y[idx].astype(bool)
        n1 = yy.sum(1)
        n0 = yy.shape[1] - n1
        keep = (n1 > 0) & (n0 > 0)
        for j, s in enumerate(scores):
            r = rankdata(s[idx], axis=1)
            auc = ((r * yy).sum(1) - n1 * (n1 + 1) / 2) / np.where(keep, n1 * n0, 1)
            out[j].extend(auc[keep].tolist())
    return [np.asarray(v) for v in out]


def auroc_ci(y_true: Sequence, score: Sequence, *, n_boot: int = 1000, seed: int = 0,
             confidence: float = 0.95, groups: Sequence | None = None) -> dict:
    """AUROC with a percentile bootstrap CI over items (over whole ``groups`` where given)."""
    y, s = np.asarray(y_true).astype(int), np.asarray(score, float)
    value = auroc(y, s)
    if math.isnan(value):
        return {"auroc": value, "ci": list(_nan_pair()), "n": int(len(y))}
    (vals,) = _boot_aurocs(y, [s], n_boot, seed, groups)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [a, 1 - a])
    return {"auroc": value, "ci": [float(lo), float(hi)], "n": int(len(y))}


def auroc_diff_ci(y_true: Sequence, score_a: Sequence, score_b: Sequence, *, n_boot: int = 1000,
                  seed: int = 0, confidence: float = 0.95, groups: Sequence | None = None) -> dict:
    """AUROC(a) − AUROC(b) on the same items, paired bootstrap CI (whole ``groups`` where given) and a
    two-sided bootstrap p."""
    y = np.asarray(y_true).astype(int)
    a, b = np.asarray(score_a, float), np.asarray(score_b, float)
    diff = auroc(y, a) - auroc(y, b)
    if math.isnan(diff):
        return {"diff": diff, "ci": list(_nan_pair()), "p": math.nan}
    va, vb = _boot_aurocs(y, [a, b], n_boot, seed, groups)
    vals = va - vb
    q = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [q, 1 - q])
    p = min(1.0, 2 * min((vals <= 0).mean(), (vals >= 0).mean()))
    return {"diff": float(diff), "ci": [float(lo), float(hi)], "p": float(p)}
