"""Aggregation of verdicts: success rates with confidence intervals, failure-type counts,
scorer agreement and paired comparison of models. Pure numpy/pandas: no torch, no scipy import.

Conventions: a *verdict* is True/False/None; None (not applicable: flagged image, skipped
question) is left out of every rate. Rates carry a 95% Wilson interval, which behaves well
at 0% and 100% and for small n, where the normal approximation does not.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd
Z95 = 1.959963984540054  # scipy.stats.norm.ppf(0.975); scipy.stats costs seconds to import


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(rate, lo, hi) for k successes out of n; NaNs when n == 0."""
    if n <= 0:
        return (float("nan"),) * 3
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return p, max(0.0, centre - half), min(1.0, centre + half)


def _pct(v) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{v:.1%}"


def ci_text(lo, hi) -> str:
    """A rate's 95 % CI as every page, card and terminal line shows it: ``[0.0%, 32.4%]`` (Wilson, :func:`wilson`).
    One formatter, so the same k of n reads the same on the report, compare, board and track pages."""
    return f"[{_pct(lo)}, {_pct(hi)}]"


def rate_text(rate, lo, hi) -> str:
    """A rate with its CI: ``0.0% [0.0%, 32.4%]``."""
    return f"{_pct(rate)} {ci_text(lo, hi)}"


def _as_bool(series: pd.Series) -> pd.Series:
    """Verdict column → float 1/0 with NaN for None."""
    return series.map(lambda v: np.nan if v is None or (isinstance(v, float) and np.isnan(v))
                      else float(bool(v))).astype(float)


def rate_table(df: pd.DataFrame, by: str | Sequence[str] | None, verdict: str = "verdict") -> pd.DataFrame:
    """Success per group: columns ``by`` + n, k, rate, lo, hi (rows with no verdict dropped)."""
    v = _as_bool(df[verdict]) if len(df) else pd.Series(dtype=float)
    d = pd.DataFrame({"_v": v}, index=df.index)
    keys = [] if by is None else ([by] if isinstance(by, str) else list(by))
    for k in keys:
        d[k] = df[k]
    d = d.dropna(subset=["_v"])
    if not keys:
        n, k = len(d), int(d["_v"].sum())
        return pd.DataFrame([dict(zip(("n", "k", "rate", "lo", "hi"), (n, k, *wilson(k, n))))])
    if d.empty:
        return pd.DataFrame(columns=keys + ["n", "k", "rate", "lo", "hi"])
    g = d.groupby(keys, sort=True, dropna=False)["_v"].agg(["count", "sum"]).reset_index()
    g = g.rename(columns={"count": "n", "sum": "k"})
    g["k"] = g["k"].astype(int)
    ci = [wilson(k, n) for k, n in zip(g["k"], g["n"])]
    g["rate"], g["lo"], g["hi"] = zip(*ci) if ci else ([], [], [])
    return g


def failure_counts(images: pd.DataFrame, by: str = "category") -> pd.DataFrame:
    """Images (scored, failed) having each failure type, per group: long table
    ``by, type, images`` plus the group's ``failed`` and ``scored`` image counts."""
    scored = images[images["verdict"].notna()]
    rows = []
    for key, grp in scored.groupby(by, sort=True):
        failed = grp[grp["verdict"] == False]  # noqa: E712  (object column)
        counts: dict[str, int] = {}
        for types in failed["failure_types"]:
            for t in set(types or []) or {"unspecified"}:
                counts[t] = counts.get(t, 0) + 1
        for t, c in sorted(counts.items()):
            rows.append({by: key, "type": t, "images": c, "failed": len(failed), "scored": len(grp)})
        if not counts:
            rows.append({by: key, "type": None, "images": 0, "failed": 0, "scored": len(grp)})
    return pd.DataFrame(rows, columns=[by, "type", "images", "failed", "scored"])


def concept_rates(images: pd.DataFrame, prompts: dict[str, dict]) -> pd.DataFrame:
    """Image success per concept (family, value): an image counts for every slot value."""
    rows = []
    for pid, v in zip(images["prompt_id"], images["verdict"]):
        if v is None:
            continue
        p = prompts.get(pid) or {}
        fams = p.get("families", {})
        for slot, val in (p.get("slots") or {}).items():
            rows.append({"family": fams.get(slot, "?"), "concept": str(val), "verdict": bool(v)})
    if not rows:
        return pd.DataFrame(columns=["family", "concept", "n", "k", "rate", "lo", "hi"])
    return rate_table(pd.DataFrame(rows), ["family", "concept"])


def agreement(a: Iterable, b: Iterable) -> dict:
    """Agreement of two verdict sequences on items both decided: rate, Cohen's kappa, n."""
    pairs = [(bool(x), bool(y)) for x, y in zip(a, b) if x is not None and y is not None]
    n = len(pairs)
    if n == 0:
        return {"n": 0, "agree": 0, "rate": float("nan"), "kappa": float("nan")}
    x = np.array([p[0] for p in pairs], float)
    y = np.array([p[1] for p in pairs], float)
    po = float((x == y).mean())
    pe = float(x.mean() * y.mean() + (1 - x.mean()) * (1 - y.mean()))
    kappa = 1.0 if pe >= 1.0 else (po - pe) / (1 - pe)
    return {"n": n, "agree": int((x == y).sum()), "rate": po, "kappa": float(kappa)}


def paired_bootstrap(a_k: np.ndarray, a_n: np.ndarray, b_k: np.ndarray, b_n: np.ndarray, *,
                     n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> dict:
    """Difference of success rates A − B over paired units (prompt groups), resampling units.

    ``a_k[i]``/``a_n[i]``: successes / scored images of unit i for model A (same for B), so
    all samples of one prompt group move together. Returns diff, CI (percentile) and a two-sided
    bootstrap p-value (twice the smaller tail mass at 0, with the +1 correction).
    """
    return paired_bootstraps(*(np.asarray(x, float)[None, :] for x in (a_k, a_n, b_k, b_n)),
                             n_boot=n_boot, seed=seed, alpha=alpha)[0]


def paired_bootstraps(a_k: np.ndarray, a_n: np.ndarray, b_k: np.ndarray, b_n: np.ndarray, *,
                      n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> list[dict]:
    """:func:`paired_bootstrap` for P comparisons over the same m units at once (arrays of shape P × m), on the
    same resamples: row p gives exactly what ``paired_bootstrap`` gives for it with this seed (a resample's
    sums are counts of units times their values: integer sums, exact in float64, in any order)."""
    a_k, a_n, b_k, b_n = (np.atleast_2d(np.asarray(x, float)) for x in (a_k, a_n, b_k, b_n))
    pairs, m = a_k.shape
    nan = {"diff": float("nan"), "lo": float("nan"), "hi": float("nan"), "p": float("nan"), "units": m}
    if m == 0:
        return [dict(nan) for _ in range(pairs)]
    rng = np.random.default_rng(seed)
    boots = np.empty((pairs, n_boot))
    chunk = max(1, min(n_boot, 4_000_000 // max(m, 1)))
    for s in range(0, n_boot, chunk):
        idx = rng.integers(0, m, size=(min(chunk, n_boot - s), m))
        w = np.zeros(idx.shape)  # how often each unit is drawn: a resample's sum is w @ values
        np.add.at(w, (np.arange(len(idx))[:, None], idx), 1.0)
        ak, an, bk, bn = (w @ x.T for x in (a_k, a_n, b_k, b_n))  # resamples × pairs
        with np.errstate(invalid="ignore", divide="ignore"):
            boots[:, s:s + len(idx)] = (ak / an - bk / bn).T
    out = []
    for p in range(pairs):
        if a_n[p].sum() == 0 or b_n[p].sum() == 0:
            out.append(dict(nan))
            continue
        diff = a_k[p].sum() / a_n[p].sum() - b_k[p].sum() / b_n[p].sum()
        bp = boots[p][np.isfinite(boots[p])]
        lo, hi = np.quantile(bp, [alpha / 2, 1 - alpha / 2])
        tail = min((bp <= 0).sum(), (bp >= 0).sum())
        pv = min(1.0, 2 * (tail + 1) / (len(bp) + 1))
        if diff == 0 and np.all(bp == 0):
            pv = 1.0
        out.append({"diff": float(diff), "lo": float(lo), "hi": float(hi), "p": float(pv), "units": m})
    return out


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (NaNs kept as NaN, not counted)."""
    p = np.asarray(pvalues, float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if len(ok) == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adj, 1.0)
    return out
