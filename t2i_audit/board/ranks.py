"""The numbers of one group of runs: success per category with Wilson CIs, rank intervals by a bootstrap over
twin groups, paired differences with Holm's correction. Arrays in, rows out (no files).

* The prompts compared are the ones every run of the group has (matched by prompt id; by template and text
  when the group holds several suites), so that every rate and rank rests on the same prompts.
* An image's verdict comes from the judge deciding its category for the whole group (``deciding``, the one
  rule of :mod:`t2i_audit.deciding`); flagged or unscored images drop out of the run they belong to.
* Rank intervals: every resample draws whole twin groups (:func:`t2i_audit.prompts.twin_group` — a prompt
  and its swap twin are one unit) with replacement, the same draw for every run; a run's rank is 1 + the
  runs with a strictly higher rate; the interval is the 2.5–97.5 percentiles of its ranks.
* Paired differences: where two runs have images of the same prompt, sample and seed, those images are
  paired (``pairing = "prompt+seed"``); runs of other seeds are paired by prompt only (``"prompt"``). Either
  way the bootstrap resamples twin groups (:func:`t2i_audit.analysis.paired_bootstrap`).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from .. import analysis

N_BOOT = 1000        # rank-interval resamples
N_BOOT_PAIRED = 2000  # paired-difference resamples (as compare)
ALPHA = 0.05
OVERALL = "overall"


def verdict_frame(images: pd.DataFrame, deciding: dict, *, by_text: bool) -> pd.DataFrame:
    """One row per (run, image) with the verdict of the judge deciding its category for the group."""
    judge_of = {c: (d or {}).get("scorer") for c, d in deciding.items()}
    want = images["category"].map(judge_of)
    v = images[images["judge"].notna() & (images["judge"] == want)].copy()
    v["key"] = (v["template"].astype(str) + "|" + v["prompt"].astype(str)) if by_text else v["prompt_id"]
    return v


def shared(v: pd.DataFrame, run_ids: list[str], keys_of: dict) -> tuple[pd.DataFrame, list]:
    """Rows of the keys every run has (``keys_of``: run -> its keys, verdict or not), and those keys."""
    common = set.intersection(*(set(keys_of[r]) for r in run_ids)) if run_ids else set()
    ref = v[v["run_id"] == run_ids[0]].drop_duplicates("key").set_index("key")["twin_group"]
    out = v[v["key"].isin(common)].copy()
    out["unit"] = out["key"].map(ref).fillna(out["key"])  # the first run's twin group names the unit
    return out, sorted(common)


def _rate_row(g: pd.DataFrame) -> dict:
    scored = g[g["image_verdict"].notna()]
    k, n = int(scored["image_verdict"].astype(bool).sum()), len(scored)
    rate, lo, hi = analysis.wilson(k, n)
    failed = scored[~scored["image_verdict"].astype(bool)]
    counts: dict = {}
    for types in failed["failure_types"]:
        for t in list(types) if types is not None and len(types) else ["unspecified"]:
            counts[t] = counts.get(t, 0) + 1
    return {"n": n, "k": k, "rate": rate, "lo": lo, "hi": hi, "failed": len(failed),
            "failures": [{"type": t, "images": c} for t, c in sorted(counts.items())]}


def _unit_counts(g: pd.DataFrame, run_ids: list[str], units: list) -> tuple[np.ndarray, np.ndarray]:
    """(successes, scored images) per unit (rows) and run (columns)."""
    s = g[g["image_verdict"].notna()]
    if s.empty:
        return np.zeros((len(units), len(run_ids))), np.zeros((len(units), len(run_ids)))
    by = s["image_verdict"].astype(bool).astype(int).groupby([s["unit"], s["run_id"]])
    k = by.sum().unstack(fill_value=0).reindex(index=units, columns=run_ids, fill_value=0)
    n = by.size().unstack(fill_value=0).reindex(index=units, columns=run_ids, fill_value=0)
    return k.to_numpy(float), n.to_numpy(float)


def rank_intervals(k: np.ndarray, n: np.ndarray, *, seed: int, n_boot: int = N_BOOT) -> list[tuple]:
    """Per run (column): (rank, lo, hi), or (None, None, None) for a run with no verdict here."""
    runs = k.shape[1]
    total = n.sum(0)
    ok = total > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(ok, k.sum(0) / np.where(ok, total, 1), np.nan)
    units = k.shape[0]
    if units == 0 or not ok.any():
        return [(None, None, None)] * runs
    rng = np.random.default_rng(seed)
    w = rng.multinomial(units, np.full(units, 1.0 / units), size=n_boot).astype(float)  # whole units, same draw
    kb, nb = w @ k, w @ n
    with np.errstate(invalid="ignore", divide="ignore"):
        rb = np.where(nb > 0, kb / np.where(nb > 0, nb, 1), -np.inf)  # a run unscored in a draw ranks last
    rb[:, ~ok] = np.nan
    out = []
    for j in range(runs):
        if not ok[j]:
            out.append((None, None, None))
            continue
        others = [i for i in range(runs) if ok[i] and i != j]
        rank = 1 + int(sum(rate[i] > rate[j] for i in others))
        ranks = 1 + (rb[:, others] > rb[:, [j]]).sum(1) if others else np.ones(n_boot)
        lo, hi = np.quantile(ranks, [ALPHA / 2, 1 - ALPHA / 2])
        out.append((rank, int(np.floor(lo)), int(np.ceil(hi))))
    return out


def _pair(g: pd.DataFrame, a: str, b: str, units: list, seed: int) -> dict:
    s = g[g["image_verdict"].notna()]
    ga, gb = s[s["run_id"] == a], s[s["run_id"] == b]
    on = ["key", "sample", "seed"]
    matched = ga.merge(gb[on + ["image_verdict"]], on=on, suffixes=("", "_b"))
    if len(matched):
        pairing = "prompt+seed"
        da = matched.assign(run_id=a)
        db = matched.assign(run_id=b, image_verdict=matched["image_verdict_b"])
        both = pd.concat([da, db], ignore_index=True)
    else:
        pairing = "prompt"
        both = pd.concat([ga, gb], ignore_index=True)
    k, n = _unit_counts(both, [a, b], units)
    res = analysis.paired_bootstrap(k[:, 0], n[:, 0], k[:, 1], n[:, 1], n_boot=N_BOOT_PAIRED, seed=seed)
    return {**res, "pairing": pairing, "images": int(len(matched)) if len(matched) else int(len(both))}


def group_numbers(v: pd.DataFrame, run_ids: list[str], *, seed: int) -> tuple[list[dict], list[dict]]:
    """(rate rows per run × category incl. overall, comparison rows) of one group; ``v``: :func:`shared`'s rows."""
    units = sorted(v["unit"].unique().tolist(), key=str)
    cats = [OVERALL] + sorted(v["category"].dropna().unique().tolist(), key=str)
    rates, comps = [], []
    t = 0
    for ci, cat in enumerate(cats):
        g = v if cat == OVERALL else v[v["category"] == cat]
        k, n = _unit_counts(g, run_ids, units)
        ranks = rank_intervals(k, n, seed=seed + ci)
        for j, r in enumerate(run_ids):
            row = _rate_row(g[g["run_id"] == r])
            rank, lo, hi = ranks[j]
            rates.append({"run_id": r, "category": cat, **row, "rank": rank, "rank_lo": lo, "rank_hi": hi,
                          "units": int((n[:, j] > 0).sum())})
        for a, b in combinations(run_ids, 2):
            comps.append({"category": cat, "a": a, "b": b, **_pair(g, a, b, units, seed + 10_000 + t)})
            t += 1
    return rates, comps


def holm(comparisons: list[dict]) -> None:
    """Holm-adjust every comparison's p in place (all groups, categories and pairs: one family)."""
    adj = analysis.holm([c["p"] for c in comparisons])
    for c, pa in zip(comparisons, adj):
        c["p_holm"] = float(pa)
        c["significant"] = bool(np.isfinite(pa) and pa < ALPHA)


def disagreements(v: pd.DataFrame, run_ids: list[str], limit: int) -> list[dict]:
    """Images of one prompt and sample in every run whose verdicts differ; worst-agreeing first."""
    s = v[v["image_verdict"].notna()]
    wide = s.pivot_table(index=["key", "sample"], columns="run_id", values="image_verdict",
                         aggfunc="first").reindex(columns=run_ids).dropna()
    if wide.empty:
        return []
    share = wide.astype(bool).astype(float).mean(axis=1)
    split = wide[(share > 0) & (share < 1)]
    order = (share[split.index] - 0.5).abs().sort_values(kind="stable").index[:limit]
    return [{"key": key, "sample": int(sample)} for key, sample in order]
