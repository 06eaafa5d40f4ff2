"""When things happen over training, with their uncertainty: the step where held-out success first exceeds
chance, and whether decodability rises before success (the half-rise lead pre-registered in
t2i_audit/mini/track_preregistered.py). numpy only.

Curves are given per item (an image's verdict, a probe item's out-of-fold probability) × checkpoint, with the
item's cluster (its prompt group, curves.units: the unit of independence, resampled whole). Both curves of a lead are resampled
with the same draws of clusters (paired), so the clusters must be the same set.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..clusters import GroupBootstrap

N_BOOT = 2000
N_NESTED = 200  # outer × inner resamples for the crossing step's own interval


def first_above(lower: np.ndarray, threshold: float) -> Optional[int]:
    """Index of the first checkpoint whose lower bound lies above ``threshold`` (None: never)."""
    hit = np.flatnonzero(np.asarray(lower) > threshold)
    return int(hit[0]) if len(hit) else None


def crossing(values: np.ndarray, groups: Sequence, steps: Sequence[int], chance: float, *, first: int = 1,
             n_boot: int = N_BOOT, n_nested: int = N_NESTED, seed: int = 0) -> dict:
    """The first checkpoint (from index ``first``: the base is not a step of training) whose 95 % CI of success
    (cluster bootstrap) lies above ``chance``; its rate and CI; and the step's own 95 % interval: the same rule
    applied to ``n_nested`` resamples of the clusters (each with its own inner bootstrap), ``None`` bounds where
    a resample never crosses within the checkpoints."""
    v = np.asarray(values, float)
    boot = GroupBootstrap(np.asarray(groups), n_boot=n_boot, seed=seed)
    curves = boot.means(v)
    lo = np.nanquantile(curves, 0.025, axis=0)
    hi = np.nanquantile(curves, 0.975, axis=0)
    at = first_above(lo[first:], chance)
    out = {"chance": float(chance), "index": None if at is None else at + first,
           "step": None if at is None else int(steps[at + first]), "n_groups": int(len(boot.codes))}
    if at is not None:
        i = at + first
        out.update(rate=float(np.nanmean(v[:, i])), ci=[float(lo[i]), float(hi[i])])
    out.update(_nested_step(v, boot, steps, chance, first, n_nested, seed))
    return out


def _nested_step(v: np.ndarray, boot: GroupBootstrap, steps, chance: float, first: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed + 1)
    G = len(boot.codes)
    sums = np.zeros((G, v.shape[1]))
    cnts = np.zeros_like(sums)
    ok = np.isfinite(v)
    np.add.at(sums, boot.member, np.where(ok, v, 0.0))
    np.add.at(cnts, boot.member, ok.astype(float))
    found = []
    for _ in range(n):
        outer = rng.integers(0, G, G)  # a resample of the clusters …
        inner = outer[rng.integers(0, G, (n, G))]  # … and its own bootstrap
        w = np.zeros((n, G))
        np.add.at(w, (np.repeat(np.arange(n), G), inner.ravel()), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            curves = (w @ sums) / (w @ cnts)
        at = first_above(np.nanquantile(curves, 0.025, axis=0)[first:], chance)
        found.append(np.inf if at is None else float(steps[at + first]))
    lo, hi = step_interval(np.array(found))
    return {"step_ci": [None if np.isinf(lo) else int(lo), None if np.isinf(hi) else int(hi)],
            "crossing_share": float(np.isfinite(found).mean()), "nested_resamples": n}


def step_interval(values: np.ndarray) -> tuple[float, float]:
    """The 95 % percentile interval of step-valued resamples, read off the resamples themselves (lower and higher
    order statistics: a step between two checkpoints is not a result, and ``inf`` — never — stays ``inf``)."""
    return (float(np.quantile(values, 0.025, method="lower")), float(np.quantile(values, 0.975, method="higher")))


def half_rise(curve: np.ndarray, steps: Sequence[int]) -> Optional[int]:
    """The first checkpoint step with X(t) >= X(0) + (max X - X(0)) / 2 (None when X never rises above X(0))."""
    c = np.asarray(curve, float)
    top = np.nanmax(c)
    if not np.isfinite(c[0]) or not top > c[0]:
        return None
    # ">=" up to float rounding: 0.1 + (0.5 - 0.1) / 2 is 0.30000000000000004, and 0.3 reaches it
    return int(steps[int(np.flatnonzero(c >= c[0] + (top - c[0]) / 2 - 1e-12)[0])])


def rise_lead(success: np.ndarray, s_groups: Sequence, decod: np.ndarray, d_groups: Sequence, steps: Sequence[int],
              *, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The pre-registered test (t2i_audit/mini/track_preregistered.py TEST) on one track: does decodability rise
    before success? Items × checkpoints for each measure, clusters resampled together (paired)."""
    sb = GroupBootstrap(np.asarray(s_groups), n_boot=n_boot, seed=seed)
    db = GroupBootstrap(np.asarray(d_groups), n_boot=n_boot, seed=seed)
    if list(sb.codes) != list(db.codes):
        raise ValueError("rise_lead: success and decodability items must come from the same clusters")
    S, D = sb.means(np.asarray(success, float)), db.means(np.asarray(decod, float))  # (n_boot, checkpoints)
    s_obs, d_obs = np.nanmean(success, axis=0), np.nanmean(decod, axis=0)
    out = {"steps": [int(s) for s in steps], "n_groups": int(len(sb.codes))}
    for name, boots, obs in (("success", S, s_obs), ("decodability", D, d_obs)):
        gain = boots[:, -1] - boots[:, 0]
        out[name] = {"curve": [float(x) for x in obs], "gain": float(obs[-1] - obs[0]),
                     "gain_ci": [float(x) for x in np.nanquantile(gain, [0.025, 0.975])],
                     "half_rise_step": half_rise(obs, steps)}
        out[name]["rises"] = bool(out[name]["gain_ci"][0] > 0)
    leads = []
    for s_curve, d_curve in zip(S, D):
        ts, td = half_rise(s_curve, steps), half_rise(d_curve, steps)
        leads.append(np.nan if ts is None or td is None else ts - td)
    leads = np.array(leads, float)
    ts, td = out["success"]["half_rise_step"], out["decodability"]["half_rise_step"]
    lead = None if ts is None or td is None else ts - td
    defined = leads[np.isfinite(leads)]
    ci = [float(x) for x in step_interval(defined)] if len(defined) >= 10 else [None, None]
    out["lead"] = {"steps": lead, "ci": ci, "resamples_defined": int(len(defined))}
    out["decision"] = decide(out)
    return out


def decide(res: dict) -> str:
    """TEST["decision"] of the pre-registration, as written there."""
    if not res["success"]["rises"]:
        return "not testable"
    lo, hi = res["lead"]["ci"]
    if not res["decodability"]["rises"] or (hi is not None and hi < 0):
        return "after"
    if lo is not None and lo > 0:
        return "before"
    return "not distinguishable"
