"""Bootstrap over twin groups for per-prompt outcomes, and Holm's correction (numpy only).

The unit of independence is the twin group (a composition and its swap twin): every prompt of one
group is resampled together, so the CI of a success rate or of a paired difference carries the
dependence between a prompt and its twin.
"""

from __future__ import annotations

import numpy as np


class GroupBootstrap:
    """``n_boot`` resamples of whole groups, shared by every statistic of one category (paired)."""

    def __init__(self, groups: np.ndarray, n_boot: int = 2000, seed: int = 0):
        self.codes, self.member = np.unique(np.asarray(groups), return_inverse=True)
        G = len(self.codes)
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, G, (n_boot, G))
        self.counts = np.zeros((n_boot, G))
        np.add.at(self.counts, (np.repeat(np.arange(n_boot), G), draws.ravel()), 1.0)
        self.sizes = np.bincount(self.member, minlength=G).astype(float)

    def means(self, values: np.ndarray) -> np.ndarray:
        """``values`` (prompts,) or (prompts, k) → bootstrap means (n_boot,) or (n_boot, k); NaN rows ignored."""
        v = np.asarray(values, float)
        one = v.ndim == 1
        v = v[:, None] if one else v
        ok = np.isfinite(v)
        sums = np.zeros((len(self.codes), v.shape[1]))
        cnts = np.zeros_like(sums)
        np.add.at(sums, self.member, np.where(ok, v, 0.0))
        np.add.at(cnts, self.member, ok.astype(float))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (self.counts @ sums) / (self.counts @ cnts)
        return out[:, 0] if one else out

    def summary(self, values: np.ndarray, null: float | None = None, confidence: float = 0.95) -> dict:
        """Mean, percentile CI and (with ``null``) a two-sided bootstrap p of mean = null."""
        v = np.asarray(values, float)
        boots = self.means(v)
        a = (1 - confidence) / 2
        lo, hi = np.nanquantile(boots, [a, 1 - a])
        out = {"mean": float(np.nanmean(v)), "ci": [float(lo), float(hi)], "n_prompts": int(np.isfinite(v).sum()),
               "n_groups": int(len(self.codes))}
        if null is not None:
            out["p"] = normal_p(out["mean"] - null, float(np.nanstd(boots)))
        return out


def normal_p(diff: float, se: float) -> float:
    """Two-sided p of ``diff`` = 0 from its bootstrap standard error (normal approximation). A percentile count
    cannot go below 1 / resamples, which no correction over hundreds of tests could ever pass."""
    from scipy.stats import norm

    if not np.isfinite(diff) or not np.isfinite(se):
        return float("nan")
    if se == 0:
        return 1.0 if diff == 0 else 0.0
    return float(2 * norm.sf(abs(diff) / se))


def p_from_ci(diff: float, ci, confidence: float = 0.95) -> float:
    """``normal_p`` with the standard error read off a percentile CI (its width / 2 z)."""
    from scipy.stats import norm

    lo, hi = ci
    return normal_p(diff, (hi - lo) / (2 * norm.ppf(0.5 + confidence / 2)))


def holm(pvalues: dict) -> dict:
    """Holm–Bonferroni adjusted p-values (step-down, monotone), same keys."""
    items = sorted(((p, k) for k, p in pvalues.items() if p is not None and np.isfinite(p)))
    m, out, running = len(items), {}, 0.0
    for i, (p, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out
