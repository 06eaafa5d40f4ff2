"""Correlations when the points come from different conditions: within-stratum first, pooled only beside.

Points from several conditions (coverage, width, model, category) share the conditions' trends: if success and
decodability both rise with coverage, pooling the coverages correlates them through coverage alone. So the
headline (DESIGN.md, "Stratify before you pool") is:

* **within-stratum Spearman** — x and y ranked inside each stratum (``scipy.stats.rankdata``, ties averaged),
  the ranks centred on their stratum's mean, all strata pooled, and Pearson's r of the centred ranks: what is
  left of the association once each stratum's level is removed (with one stratum it is Spearman's ρ);
* **per stratum** — ``scipy.stats.spearmanr`` in each stratum, beside;
* **a null distribution** — ``n_perm`` shuffles of y *within* its stratum (a shuffle across strata would
  break the structure and test the shared trend as well); p = (1 + #|null| ≥ |observed|) / (1 + n_perm), and
  the observed value's place in the null (the share of shuffles below it);
* **a bootstrap over clusters** — whole clusters (compositions, prompt groups: the unit that generalises)
  resampled with replacement, the statistic recomputed within the resample's strata; percentile CI over the
  resamples where it is defined (how many: ``ci_resamples_used``);
* **pooled** Spearman over all points, labelled as such, with the shuffle-everything p it usually comes with
  (which tests the shared trend too: never the headline).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _r(v, nd: int = 4):
    return None if v is None or not np.isfinite(v) else round(float(v), nd)


def centred_ranks(v: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Ranks of ``v`` within each stratum (ties averaged), minus the stratum's mean rank."""
    from scipy.stats import rankdata

    out = np.zeros(len(v), float)
    for s in np.unique(strata):
        m = strata == s
        r = rankdata(v[m])
        out[m] = r - r.mean()
    return out


def _pearson_rows(a: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Pearson r of vector ``a`` with each row of ``B`` (NaN where a row is constant)."""
    a = a - a.mean()
    B = B - B.mean(axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        return (B @ a) / np.sqrt((a @ a) * (B * B).sum(-1))


def within_spearman(x: np.ndarray, y: np.ndarray, strata: np.ndarray) -> float:
    """The within-stratum Spearman: Pearson r of the stratum-centred ranks."""
    rx, ry = centred_ranks(x, strata), centred_ranks(y, strata)
    if not (np.ptp(rx) > 0 and np.ptp(ry) > 0):
        return math.nan
    return float(_pearson_rows(rx, ry[None])[0])


def _within_permutations(strata: np.ndarray, n_perm: int, rng) -> np.ndarray:
    """(n_perm, n) row indices: each row a permutation that moves points only inside their stratum."""
    idx = np.tile(np.arange(len(strata)), (n_perm, 1))
    for s in np.unique(strata):
        cols = np.flatnonzero(strata == s)
        idx[:, cols] = rng.permuted(np.tile(cols, (n_perm, 1)), axis=1)
    return idx


def stratified_spearman(x: Sequence[float], y: Sequence[float], strata: Sequence, clusters: Sequence | None = None,
                        *, n_perm: int = 2000, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict:
    """The within-stratum Spearman of ``x`` and ``y`` with its null distribution (shuffles within strata) and a
    bootstrap CI resampling ``clusters`` (None: single points; ``n_boot`` 0: no CI); per-stratum ρ and the pooled ρ
    beside it."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    strata = np.asarray(strata)
    clusters = np.arange(len(x)) if clusters is None else np.asarray(clusters)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, strata, clusters = x[ok], y[ok], strata[ok], clusters[ok]
    rng = np.random.default_rng(seed)
    obs = within_spearman(x, y, strata) if len(x) >= 3 else math.nan
    out: dict = {"n": int(len(x)), "n_strata": int(len(np.unique(strata))), "n_clusters": int(len(np.unique(clusters))),
                 "method": "Spearman within strata: ranks centred within each stratum, pooled, Pearson r"}
    within: dict = {"rho": _r(obs)}
    if np.isfinite(obs):
        rx, ry = centred_ranks(x, strata), centred_ranks(y, strata)
        null = _pearson_rows(rx, ry[_within_permutations(strata, n_perm, rng)])
        null = null[np.isfinite(null)]
        within.update({"p_perm": _r((1 + int((np.abs(null) >= abs(obs) - 1e-12).sum())) / (1 + len(null))),
                       "n_perm": int(len(null)), "permutation": "y shuffled within each stratum",
                       "observed_quantile_in_null": _r(float((null < obs).mean())),
                       "null": {"mean": _r(null.mean()), "sd": _r(null.std()),
                                "q025": _r(np.quantile(null, 0.025)), "q975": _r(np.quantile(null, 0.975))}})
        if n_boot > 0:
            within.update(_cluster_ci(x, y, strata, clusters, n_boot, rng, confidence))
    out["within"] = within
    out["per_stratum"] = []
    for s in np.unique(strata):
        m = strata == s
        rho = spearmanr(x[m], y[m])[0] if m.sum() >= 3 and np.ptp(x[m]) > 0 and np.ptp(y[m]) > 0 else math.nan
        out["per_stratum"].append({"stratum": s.item() if hasattr(s, "item") else s, "n": int(m.sum()),
                                   "rho": _r(rho), "mean_x": _r(x[m].mean()), "mean_y": _r(y[m].mean())})
    pooled = spearmanr(x, y)[0] if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan
    pooled_null = _pearson_rows(centred_ranks(x, np.zeros(len(x))),
                                centred_ranks(y, np.zeros(len(y)))[rng.permuted(
                                    np.tile(np.arange(len(y)), (n_perm, 1)), axis=1)]) if np.isfinite(pooled) else []
    out["pooled"] = {"rho": _r(pooled),
                     "p_perm_all_points": _r((1 + int((np.abs(pooled_null) >= abs(pooled) - 1e-12).sum()))
                                             / (1 + len(pooled_null))) if np.isfinite(pooled) else None,
                     "note": "all strata pooled: carries the strata's shared trend; shown beside, not the headline"}
    return out


def _cluster_ci(x, y, strata, clusters, n_boot: int, rng, confidence: float) -> dict:
    codes, member = np.unique(clusters, return_inverse=True)
    rows_of = [np.flatnonzero(member == c) for c in range(len(codes))]
    vals = []
    for _ in range(n_boot):
        rows = np.concatenate([rows_of[c] for c in rng.integers(0, len(codes), len(codes))])
        v = within_spearman(x[rows], y[rows], strata[rows])
        if np.isfinite(v):
            vals.append(v)
    if len(vals) < max(10, n_boot // 10):
        return {"ci": [None, None], "ci_resamples_used": len(vals)}
    a = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [a, 1 - a])
    return {"ci": [_r(lo), _r(hi)], "ci_resamples_used": len(vals),
            "ci_method": f"percentile bootstrap over {len(codes)} clusters resampled whole ({n_boot} resamples)"}
