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
* **an interval over clusters** (the unit that generalises: compositions, prompt groups), its method named in
  ``ci_method`` — chosen by the design, never by the data:

  - *two crossed cluster factors* (``crossed``: e.g. models × compositions, every point a (model, composition)
    cell): the **pigeonhole bootstrap** (Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat. 1(2):386–411;
    McCullagh 2000, "Resampling and exchangeable arrays", Bernoulli 6(2)): levels of each factor resampled
    independently with replacement, every point kept with the product of its two levels' multiplicities; a
    one-way resample of one factor treats the other's levels as fixed and is too narrow when they are few;
  - *fewer than* ``MIN_BOOTSTRAP_CLUSTERS`` *clusters* (one factor): the **delete-one-cluster jackknife** with a
    t(G − 1) interval, θ̂ ± t · SE, SE² = (G − 1)/G · Σ (θ̂₍g₎ − θ̄)² (Cameron & Miller 2015, "A practitioner's
    guide to cluster-robust inference", J. Human Resources 50(2), §VI: with few clusters the percentile
    bootstrap under-covers; the t(G − 1) reference is their small-G rule);
  - otherwise the percentile **bootstrap over whole clusters** (how many resamples defined it:
    ``ci_resamples_used``);
* **pooled** Spearman over all points, labelled as such, with the shuffle-everything p it usually comes with
  (which tests the shared trend too: never the headline).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

# below this many clusters a one-way percentile bootstrap is replaced by the cluster jackknife with t(G - 1)
# (Cameron & Miller 2015 put "few" at roughly 20-50; 20 is the lenient end)
MIN_BOOTSTRAP_CLUSTERS = 20


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
                        *, crossed: Sequence | None = None, n_perm: int = 2000, n_boot: int = 2000, seed: int = 0,
                        confidence: float = 0.95, min_bootstrap_clusters: int = MIN_BOOTSTRAP_CLUSTERS) -> dict:
    """The within-stratum Spearman of ``x`` and ``y`` with its null distribution (shuffles within strata) and a CI
    over ``clusters`` (None: single points; ``n_boot`` 0: no CI) — crossed with a second cluster factor
    ``crossed`` (pigeonhole bootstrap), or, with fewer than ``min_bootstrap_clusters``, the cluster jackknife with
    t(G − 1) (see the module's docstring); per-stratum ρ and the pooled ρ beside it."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    strata = np.asarray(strata)
    clusters = np.arange(len(x)) if clusters is None else np.asarray(clusters)
    crossed = None if crossed is None else np.asarray(crossed)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, strata, clusters = x[ok], y[ok], strata[ok], clusters[ok]
    crossed = None if crossed is None else crossed[ok]
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
            def stat(rows):
                return within_spearman(x[rows], y[rows], strata[rows])
            within.update(cluster_interval(stat, clusters, crossed=crossed, n_boot=n_boot, rng=rng,
                                           confidence=confidence, min_bootstrap_clusters=min_bootstrap_clusters))
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


def _codes(labels: np.ndarray) -> tuple[int, list[np.ndarray]]:
    codes, member = np.unique(labels, return_inverse=True)
    return len(codes), [np.flatnonzero(member == c) for c in range(len(codes))]


def jackknife_t_interval(statistic: Callable[[np.ndarray], float], clusters: Sequence, *,
                         confidence: float = 0.95) -> dict:
    """The delete-one-cluster jackknife: ``statistic(rows)`` on all rows and with each cluster left out;
    θ̂ ± t_{G−1} · SE with SE² = (G − 1)/G · Σ_g (θ̂₍g₎ − θ̄)²."""
    from scipy.stats import t as student_t

    clusters = np.asarray(clusters)
    g, rows_of = _codes(clusters)
    every = np.arange(len(clusters))
    full = statistic(every)
    loo = np.array([statistic(np.setdiff1d(every, rows_of[c], assume_unique=True)) for c in range(g)], float)
    if g < 3 or not np.isfinite(full) or not np.isfinite(loo).all():
        return {"ci": [None, None], "ci_method": f"cluster jackknife: undefined over these {g} clusters"}
    se = math.sqrt((g - 1) / g * float(((loo - loo.mean()) ** 2).sum()))
    half = float(student_t.ppf(0.5 + confidence / 2, g - 1)) * se
    return {"ci": [_r(full - half), _r(full + half)], "ci_se": _r(se),
            "ci_method": f"delete-one-cluster jackknife over {g} clusters, t({g - 1}) interval "
                         f"(the small-cluster rule: a percentile bootstrap of so few clusters is too narrow)"}


def pigeonhole_rows(a: np.ndarray, b: np.ndarray, rng) -> np.ndarray:
    """One pigeonhole resample (Owen 2007) of points labelled by two crossed factors: each factor's levels drawn
    with replacement, independently; a point appears (times level a drawn) × (times level b drawn)."""
    na, ia = np.unique(a, return_inverse=True)
    nb, ib = np.unique(b, return_inverse=True)
    wa = np.bincount(rng.integers(0, len(na), len(na)), minlength=len(na))
    wb = np.bincount(rng.integers(0, len(nb), len(nb)), minlength=len(nb))
    return np.repeat(np.arange(len(a)), wa[ia] * wb[ib])


def one_way_rows(rows_of: list[np.ndarray], rng) -> np.ndarray:
    """One bootstrap resample of whole clusters (``rows_of``: each cluster's row indices)."""
    return np.concatenate([rows_of[c] for c in rng.integers(0, len(rows_of), len(rows_of))])


def cluster_interval(statistic: Callable[[np.ndarray], float], clusters: Sequence, *, crossed: Sequence | None = None,
                     n_boot: int, rng, confidence: float = 0.95,
                     min_bootstrap_clusters: int = MIN_BOOTSTRAP_CLUSTERS) -> dict:
    """The CI of ``statistic(rows)`` over clusters, by the rule in the module's docstring: crossed factors →
    pigeonhole bootstrap; one factor with fewer than ``min_bootstrap_clusters`` levels → jackknife t(G − 1);
    else the percentile bootstrap of whole clusters. ``ci_method`` names the one used."""
    clusters = np.asarray(clusters)
    g, rows_of = _codes(clusters)
    if crossed is not None:
        crossed = np.asarray(crossed)
        h = len(np.unique(crossed))
        draw = lambda: pigeonhole_rows(clusters, crossed, rng)  # noqa: E731
        method = (f"pigeonhole bootstrap (Owen 2007): {g} × {h} crossed cluster levels resampled independently, "
                  f"percentile ({n_boot} resamples)")
    elif g < min_bootstrap_clusters:
        return jackknife_t_interval(statistic, clusters, confidence=confidence)
    else:
        draw = lambda: one_way_rows(rows_of, rng)  # noqa: E731
        method = f"percentile bootstrap over {g} clusters resampled whole ({n_boot} resamples)"
    vals = []
    for _ in range(n_boot):
        rows = draw()
        v = statistic(rows) if len(rows) else math.nan
        if np.isfinite(v):
            vals.append(v)
    if len(vals) < max(10, n_boot // 10):
        return {"ci": [None, None], "ci_resamples_used": len(vals), "ci_method": method}
    a = (1 - confidence) / 2
    lo, hi = np.quantile(vals, [a, 1 - a])
    return {"ci": [_r(lo), _r(hi)], "ci_resamples_used": len(vals), "ci_method": method}
