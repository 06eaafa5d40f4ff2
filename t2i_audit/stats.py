"""Uncertainty helpers: bootstrap CIs, permutation p-values, AUROC with CIs, correlations.

Thin wrappers on scipy.stats / sklearn.metrics with fixed seeds, so every number a report
shows comes with its interval and is reproducible. No torch here.
"""

from __future__ import annotations

import math
import warnings
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
    with np.errstate(all="ignore"), warnings.catch_warnings():
        # all resamples equal (every verdict the same): the interval is the point, not a problem to warn about
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
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


def cluster_bootstrap_ci(statistic: Callable, *arrays: np.ndarray, groups: Sequence, n_boot: int = 1000,
                         seed: int = 0, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile CI of ``statistic(*arrays)`` over resamples of whole ``groups`` (a cluster bootstrap: the
    images of one prompt, the raters of one image, are not independent). Resamples where the statistic is
    undefined (None / NaN) are dropped; (None, None) when fewer than a tenth of them (and 10) remain."""
    n = len(arrays[0])
    if n < 2 or n_boot <= 0:
        return None, None
    idx = _cluster_resamples(np.asarray(groups), n_boot, _rng(seed))
    vals = [v for v in (statistic(*(a[i] for a in arrays)) for i in idx) if v is not None and not math.isnan(v)]
    if len(vals) < max(10, n_boot // 10):
        return None, None
    a = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [a, 1 - a])
    return float(lo), float(hi)


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


# --- small samples: one rule for every printed AUROC, rate and κ ------------------------------------------
# Below these counts a statistic is printed (and, where a command stores it, stored) as "too few", never as a
# number: its 95 % interval would span most of the scale, so the number would read as a finding it is not.
MIN_PER_CLASS = 10  # AUROC: failures and successes each. Hanley & McNeil's SE at AUROC 0.75 with 10 of each
#                     gives a 95 % CI of ±0.22 (the smallest count at which a fair predictor's interval can
#                     exclude chance); with 5 of each it is ±0.32, with 3 of each ±0.43.
MIN_RATE_N = 10     # rate (success, accuracy, agreement): items. Wilson 95 % half-width at p = 0.5 is 0.26 for
#                     10 items, 0.33 for 5, 0.35 for 4 (one prompt's seeds).
MIN_KAPPA_N = 20    # Cohen's κ: labelled items. At 80 % agreement and 50 % chance agreement the large-sample
#                     95 % CI is ±0.35 with 20 items (slight vs substantial still apart), ±0.50 with 10.
MIN_UNITS = 5       # independent units under any of them (compositions, prompts): items of one prompt are not
#                     independent, grouped CV needs a group per fold (5 folds), and a cluster bootstrap over 4
#                     units has only 35 distinct resamples.
TOO_FEW = "too few"


def too_few(kind: str, *, n: int, n_units: int | None = None, n_minority: int | None = None,
            items: str = "items", units: str = "units") -> str | None:
    """Why an ``auroc`` / ``rate`` / ``kappa`` from this sample is not shown as a number, or None when it may be.

    ``n``: items it rests on; ``n_units``: independent units among them (None: not known, not checked);
    ``n_minority``: the smaller class (AUROC). The words name the caller's items and units ("images",
    "compositions")."""
    need = {"auroc": MIN_PER_CLASS, "rate": MIN_RATE_N, "kappa": MIN_KAPPA_N}[kind]
    have = n_minority if kind == "auroc" else n
    short = have is not None and have < need
    few_units = n_units is not None and n_units < MIN_UNITS
    if not (short or few_units):
        return None
    what = {"auroc": f"≥ {need} of each class", "rate": f"≥ {need} {items}", "kappa": f"≥ {need} {items}"}[kind]
    got = f"{n} {items}" + (f", {n_minority} in the smaller class" if kind == "auroc" and n_minority is not None
                            else "")
    if n_units is not None:
        got += f", {n_units} {units}"
    return f"{TOO_FEW}: {got}; {'an AUROC' if kind == 'auroc' else 'a κ' if kind == 'kappa' else 'a rate'} " \
           f"needs {what} over ≥ {MIN_UNITS} {units}"


def auroc_too_few(n: int | None, failure_rate: float | None, n_units: int | None = None, *, items: str = "prompts",
                  units: str = "compositions") -> str | None:
    """:func:`too_few` for an AUROC stored with its ``n`` and failure rate (the smaller class is recovered from
    them); None where they were not stored (a file from before), so the number is shown as it was."""
    if n is None or failure_rate is None:
        return None
    return too_few("auroc", n=n, n_minority=round(n * min(failure_rate, 1 - failure_rate)), n_units=n_units,
                   items=items, units=units)


def shown(value, reason: str | None = None, spec: str = ".3f") -> str:
    """``value`` formatted by ``spec``, or "too few" where :func:`too_few` gave a reason (or the value is
    missing / not finite: "—"). The one formatter every printer of an AUROC, a rate or a κ uses."""
    if reason:
        return TOO_FEW
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def auroc_or_too_few(y_true: Sequence, score: Sequence, *, n_units: int | None = None, items: str = "images",
                     units: str = "prompts", groups: Sequence | None = None, **kw) -> dict:
    """:func:`auroc_ci`, or ``{"auroc": None, "ci": [None, None], "n", "too_few": why}`` below the rule: what a
    command stores where the number would mislead. ``n_units``: independent units (default: distinct ``groups``,
    the bootstrap's clusters)."""
    y = np.asarray(y_true).astype(int)
    if n_units is None and groups is not None:
        n_units = len(np.unique(np.asarray(groups)))
    why = too_few("auroc", n=len(y), n_units=n_units, n_minority=int(min(y.sum(), len(y) - y.sum())),
                  items=items, units=units)
    if why:
        return {"auroc": None, "ci": [None, None], "n": int(len(y)), "too_few": why}
    return auroc_ci(y, score, groups=groups, **kw)
