"""Statistics of the coverage sweep across models (see t2i_audit.mini.sweep for the design):
claim 1 (held-out success vs coverage), decodability vs coverage, claim 2 (per-composition
decodability ↔ success pooled over models); Holm over the exploratory layers. No torch."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


def _r(v, nd: int = 4):
    if v is None:
        return None
    v = float(v)
    return None if math.isnan(v) else round(v, nd)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (NaN stays NaN and is not counted)."""
    p = np.asarray(pvalues, float)
    ok = np.where(np.isfinite(p))[0]
    adj = np.full(len(p), np.nan)
    order = ok[np.argsort(p[ok])]
    m, running = len(order), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj.tolist()


def _corr(x, y, cfg, seed: int = 0) -> dict:
    """stats.correlation (r and permutation p as scipy computes them); where its percentile
    bootstrap CI is NaN — some resamples hold one value only (many 0 % successes), and scipy's
    percentile of a NaN-containing sample is NaN — the CI is taken over the resamples where r
    is defined instead (``ci_method`` says which, ``ci_resamples_used`` how many)."""
    from ..stats import correlation

    res = correlation(x, y, n_boot=cfg.n_boot, n_perm=cfg.n_perm, seed=seed)
    out: dict = {"n": res["n"]}
    for k, v in res.items():
        if k == "n":
            continue
        entry = {"r": _r(v["r"]), "ci": [_r(c) for c in v["ci"]], "p_perm": _r(v["p_perm"]),
                 "ci_method": "percentile bootstrap over points (scipy.stats.bootstrap)"}
        if entry["r"] is not None and entry["ci"][0] is None:
            entry["ci"], used = _boot_defined(x, y, k, cfg.n_boot, seed)
            entry["ci_method"] = "percentile bootstrap over points, resamples with undefined r dropped"
            entry["ci_resamples_used"] = used
        out[k] = entry
    return out


def _boot_defined(x, y, kind: str, n_boot: int, seed: int) -> tuple[list, int]:
    from ..stats import CORRELATIONS

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), (n_boot, len(x)))
    xs, ys = x[idx], y[idx]
    keep = (np.ptp(xs, axis=1) > 0) & (np.ptp(ys, axis=1) > 0)
    if keep.sum() < 10:
        return [None, None], int(keep.sum())
    rs = CORRELATIONS[kind](xs[keep], ys[keep], axis=-1)
    lo, hi = np.quantile(rs, [0.025, 0.975])
    return [_r(lo), _r(hi)], int(keep.sum())


def _cluster_boot_spearman(models: list[dict], value: Callable, cfg, seed: int = 0) -> list:
    """95 % CI of Spearman(coverage, value(model, compositions)) resampling the held-out
    compositions (the unit that generalises) with replacement."""
    from ..stats import _spearman_axis

    comps = sorted({c["composition"] for m in models for c in m["eval"]["per_composition"] if c["split"] == "heldout"})
    if len(models) < 3 or len(comps) < 2:
        return [None, None]
    rng = np.random.default_rng(seed)
    cov = np.array([m["coverage"] for m in models], float)
    rs = []
    for _ in range(cfg.n_boot):
        pick = list(rng.choice(comps, len(comps)))
        ys = np.array([value(m, pick) for m in models], float)
        if np.ptp(ys) > 0 and np.ptp(cov) > 0:
            rs.append(float(_spearman_axis(cov, ys)))
    if len(rs) < 10:
        return [None, None]
    lo, hi = np.quantile(rs, [0.025, 0.975])
    return [_r(lo), _r(hi)]


def _heldout_rate(m: dict, comps: Sequence[str]) -> float:
    by = {c["composition"]: c for c in m["eval"]["per_composition"]}
    k = sum(by[c]["k"] for c in comps)
    n = sum(by[c]["n"] for c in comps)
    return k / n if n else math.nan


def _heldout_decod(layer: str) -> Callable:
    def f(m: dict, comps: Sequence[str]) -> float:
        by = {c["composition"]: c for c in m["eval"]["per_composition"]}
        return float(np.mean([by[c]["decodability"][layer] for c in comps]))
    return f


def aggregate(models: list[dict], cfg, headline: str) -> dict:
    """Claim 1 (held-out success vs coverage), decodability vs coverage, claim 2 (per-composition
    decodability ↔ success pooled over models); headline layer pre-registered, the rest Holm."""
    from ..analysis import wilson

    done = [m for m in models if m.get("eval")]
    if not done:
        return {"n_models": 0}
    layers = done[0]["eval"]["layers"]
    if headline not in layers:
        raise ValueError(f"pre-registered layer {headline} not hooked (have {layers})")
    cov = [m["coverage"] for m in done]
    held = [m["eval"]["success"]["heldout"]["rate"] for m in done]
    seen = [m["eval"]["success"]["seen"]["rate"] for m in done]
    claim1 = {"x": "coverage (fraction of the 18 trainable pairs)", "y": "held-out success (pixel judge)",
              "spearman_over_models": _corr(cov, held, cfg),
              "spearman_ci_resampling_heldout_compositions": _cluster_boot_spearman(done, _heldout_rate, cfg),
              "seen_success_vs_coverage": _corr(cov, seen, cfg)}
    per_cov = []
    for c in sorted(set(cov)):
        ms = [m for m in done if m["coverage"] == c]
        row = {"coverage": _r(c), "n_models": len(ms), "n_seen_pairs": ms[0]["n_seen_pairs"],
               "seeds": [m["seed"] for m in ms]}
        for s in ("heldout", "seen", "uncovered"):
            k = sum(m["eval"]["success"][s]["k"] for m in ms)
            n = sum(m["eval"]["success"][s]["n"] for m in ms)
            rate, lo, hi = wilson(k, n)
            row[s] = {"k": k, "n": n, "rate": _r(rate), "ci": [_r(lo), _r(hi)]}
        row["heldout_decodability"] = {
            L: _r(np.mean([_heldout_decod(L)(m, [c["composition"] for c in m["eval"]["per_composition"]
                                               if c["split"] == "heldout"]) for m in ms])) for L in layers}
        per_cov.append(row)
    claim1["per_coverage"] = per_cov

    def decod_vs_cov(layer: str) -> dict:
        ys = [_heldout_decod(layer)(m, [c["composition"] for c in m["eval"]["per_composition"]
                                        if c["split"] == "heldout"]) for m in done]
        out = _corr(cov, ys, cfg)
        out["ci_resampling_heldout_compositions"] = _cluster_boot_spearman(done, _heldout_decod(layer), cfg)
        return out

    def decod_vs_success(layer: str, split: str | None) -> dict:
        pts = [(m["name"], c["composition"], c["decodability"][layer], c["success"])
               for m in done for c in m["eval"]["per_composition"] if split is None or c["split"] == split]
        out = _corr([p[2] for p in pts], [p[3] for p in pts], cfg)
        out["points"] = [{"model": a, "composition": b, "x": x, "y": y} for a, b, x, y in pts]
        return out

    def with_holm(fn) -> dict:
        res = {L: fn(L) for L in layers}
        explore = [L for L in layers if L != headline]
        adj = holm([res[L]["spearman"]["p_perm"] if res[L]["spearman"]["p_perm"] is not None else math.nan
                    for L in explore])
        for L, a in zip(explore, adj):
            res[L]["spearman"]["p_holm"] = _r(a)
        return {"headline_layer": headline, "headline": res[headline],
                "exploration": {L: res[L] for L in explore},
                "correction": f"Holm over the {len(explore)} exploratory layers (the pre-registered layer is not "
                              "corrected)"}

    claim2_held = with_holm(lambda L: decod_vs_success(L, "heldout"))
    claim2_all = with_holm(lambda L: decod_vs_success(L, None))
    for block in (*claim2_all["exploration"].values(), *claim2_held["exploration"].values()):
        block.pop("points", None)  # the scatter is drawn for the headline layer only
    return {
        "n_models": len(done), "layers": layers, "headline_layer": headline,
        "claim1_heldout_success_vs_coverage": claim1,
        "decodability_vs_coverage": with_holm(decod_vs_cov),
        "claim2_decodability_vs_success_heldout": claim2_held,
        "claim2_decodability_vs_success_all_compositions": claim2_all,
        "units": {"decodability": "mean out-of-fold probe probability of the true colour and of the true shape, "
                                  "averaged (grouped CV by composition over all 24 compositions)",
                  "success": "pixel judge: the image shows the prompt's shape in the prompt's colour",
                  "claim2_points": "one point per (model, composition), pooled over models; bootstrap over "
                                   "points, permutation p over pairings"},
    }


