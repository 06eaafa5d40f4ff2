"""Statistics of the sweep across the models that fit (see t2i_audit.mini.sweep_design for the design):
held-out success against coverage (within width) and against scale (within coverage), decodability against
both, and the decodability ↔ success link within coverage (sweep_link.py); Holm over the exploratory layers;
pooled figures beside. No torch."""

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


def _cluster_boot_spearman(models: list[dict], value: Callable, cfg, x: Callable, seed: int = 0) -> list:
    """95 % CI of Spearman(x(model), value(model, compositions)) resampling the held-out
    compositions (the unit that generalises) with replacement."""
    from ..stats import _spearman_axis

    comps = sorted({c["composition"] for m in models for c in m["eval"]["per_composition"] if c["split"] == "heldout"})
    if len(models) < 3 or len(comps) < 2:
        return [None, None]
    rng = np.random.default_rng(seed)
    xs = np.array([x(m) for m in models], float)
    rs = []
    for _ in range(cfg.n_boot):
        pick = list(rng.choice(comps, len(comps)))
        ys = np.array([value(m, pick) for m in models], float)
        if np.ptp(ys) > 0 and np.ptp(xs) > 0:
            rs.append(float(_spearman_axis(xs, ys)))
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


def _heldout_comps(m: dict) -> list[str]:
    return [c["composition"] for c in m["eval"]["per_composition"] if c["split"] == "heldout"]


AXES = {"coverage": ("coverage (fraction of the 18 trainable pairs)", lambda m: m["coverage"]),
        "scale": ("UNet width w (blocks w, 2w, 2w)", lambda m: m["width"])}


def fit_models(models: list[dict]) -> list[dict]:
    """The evaluated models a claim may be read from: those that fit their own training pairs."""
    return [m for m in models if m.get("eval") and m.get("fit", {}).get("fits")]


def _pooled(ms: list[dict], split: str) -> dict:
    from ..analysis import wilson

    k = sum(m["eval"]["success"][split]["k"] for m in ms)
    n = sum(m["eval"]["success"][split]["n"] for m in ms)
    rate, lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": _r(rate), "ci": [_r(lo), _r(hi)]}


def _cells(ms: list[dict], keys: Sequence[str], layers: Sequence[str]) -> list[dict]:
    """Success (Wilson, seeds pooled) and mean held-out decodability per value of `keys`."""
    out = []
    for val in sorted({tuple(m[k] for k in keys) for m in ms}):
        group = [m for m in ms if tuple(m[k] for k in keys) == val]
        row = {**dict(zip(keys, val)), "n_models": len(group), "seeds": [m["seed"] for m in group],
               "n_seen_pairs": sorted({m["n_seen_pairs"] for m in group})}
        for s in ("heldout", "seen", "uncovered"):
            row[s] = _pooled(group, s)
        row["heldout_decodability"] = {L: _r(np.mean([_heldout_decod(L)(m, _heldout_comps(m)) for m in group]))
                                       for L in layers}
        out.append(row)
    return out


AXIS_STRATA = {"coverage": ("width", lambda m: m["width"]), "scale": ("coverage", lambda m: m["coverage"])}


def _within(done: list[dict], axis: str, y, cfg) -> dict:
    """``y(model)`` against the axis within each value of the other axis (models as points): coverage within
    width, width within coverage — the other axis's trend kept out of the headline."""
    from ..stratified import stratified_spearman

    _label, x = AXES[axis]
    name, stratum = AXIS_STRATA[axis]
    res = stratified_spearman([x(m) for m in done], [y(m) for m in done], [stratum(m) for m in done],
                              n_perm=cfg.n_perm, n_boot=cfg.n_boot, seed=0)
    res["strata"] = name
    return res


def aggregate(models: list[dict], cfg, headline: str) -> dict:
    """Over the models that FIT (seen success ≥ the bar): held-out success against coverage (within width) and
    against scale (within coverage), decodability against both, and the decodability ↔ success link within
    coverage (``sweep_link``) with its references; headline layer pre-registered, the rest Holm; pooled figures
    beside."""
    from .sweep_link import decodability_link

    evaluated = [m for m in models if m.get("eval")]
    done = fit_models(models)
    excluded = [{"name": m["name"], "seen_success": m["fit"]["seen_success"]} for m in evaluated if m not in done]
    head = {"n_models_evaluated": len(evaluated), "n_models": len(done), "excluded_unfit": excluded,
            "fit_threshold": cfg.fit_threshold}
    if not done:
        return head
    layers = done[0]["eval"]["layers"]
    if headline not in layers:
        raise ValueError(f"pre-registered layer {headline} not hooked (have {layers})")
    held = lambda m: m["eval"]["success"]["heldout"]["rate"]  # noqa: E731

    def success_vs(axis: str) -> dict:
        label, x = AXES[axis]
        xs = [x(m) for m in done]
        return {"x": label, "y": "held-out success (pixel judge)",
                "within": _within(done, axis, held, cfg),
                "spearman_over_models": _corr(xs, [held(m) for m in done], cfg),
                "spearman_ci_resampling_heldout_compositions": _cluster_boot_spearman(done, _heldout_rate, cfg, x),
                "seen_success": _corr(xs, [m["eval"]["success"]["seen"]["rate"] for m in done], cfg)}

    def decod_vs(axis: str) -> Callable:
        _label, x = AXES[axis]

        def fn(layer: str) -> dict:
            ys = [_heldout_decod(layer)(m, _heldout_comps(m)) for m in done]
            out = _corr([x(m) for m in done], ys, cfg)
            out["ci_resampling_heldout_compositions"] = _cluster_boot_spearman(done, _heldout_decod(layer), cfg, x)
            return out
        return fn

    def with_holm(fn, axis: str) -> dict:
        res = {L: fn(L) for L in layers}
        explore = [L for L in layers if L != headline]
        adj = holm([res[L]["spearman"]["p_perm"] if res[L]["spearman"]["p_perm"] is not None else math.nan
                    for L in explore])
        for L, a in zip(explore, adj):
            res[L]["spearman"]["p_holm"] = _r(a)
        return {"headline_layer": headline,
                "within": _within(done, axis, lambda m: _heldout_decod(headline)(m, _heldout_comps(m)), cfg),
                "headline": res[headline], "exploration": {L: res[L] for L in explore},
                "correction": f"Holm over the {len(explore)} exploratory layers (the pre-registered layer is not "
                              "corrected); pooled over the other axis"}

    return {
        **head, "layers": layers, "headline_layer": headline,
        "heldout_success_vs_coverage": success_vs("coverage"),
        "heldout_success_vs_scale": success_vs("scale"),
        "per_coverage": _cells(done, ["coverage"], layers),
        "per_width": _cells(done, ["width"], layers),
        "per_cell": _cells(done, ["width", "coverage"], layers),
        "decodability_vs_coverage": with_holm(decod_vs("coverage"), "coverage"),
        "decodability_vs_scale": with_holm(decod_vs("scale"), "scale"),
        "decodability_success_link": decodability_link(done, layers, headline, cfg),
        "units": {"decodability": "mean out-of-fold probe probability of the true colour and of the true shape, "
                                  "averaged (grouped CV by composition over all 24 compositions), read from seeds "
                                  "other than the judged ones",
                  "control_decodability": "the same for the control task (one random colour and one random shape "
                                          "label per composition): what a probe reads off without the constituents",
                  "text_decodability": "the same probe on the text encoder's output (the conditioning the UNet "
                                       "receives), same folds",
                  "success": "pixel judge on the judged seeds: the image shows the prompt's shape in the prompt's "
                             "colour",
                  "within": "Spearman within strata (ranks centred per stratum; t2i_audit/stratified.py), shuffles "
                            "within strata for p, CI resampling clusters; the pooled figure beside it",
                  "points": "one point per (fit model, held-out composition)"},
    }
