"""The numbers of one group of runs: success per category with Wilson CIs, rank intervals by a bootstrap over
prompt groups, paired differences with Holm's correction. Arrays in, rows out (no files).

* The prompts compared are the ones every run of the group has (matched by prompt id; by template and text
  when the group holds several suites), so that every rate and rank rests on the same prompts.
* An image's verdict comes from the judge deciding its category for the whole group (``deciding``, the one
  rule of :mod:`t2i_audit.deciding`); flagged or unscored images drop out of the run they belong to.
* Rank intervals: every resample draws whole prompt groups (:func:`t2i_audit.scenes.prompt_groups` — prompts
  showing one scene, "A left of B" / "B right of A", and a prompt with its swap twin are one unit; the tables'
  ``twin_group`` column) with replacement, the same draw for every run; a run's rank is 1 + the runs with a
  strictly higher rate; the interval is the 2.5–97.5 percentiles of its ranks.
* Paired differences: where two runs have images of the same prompt, sample and seed, those images are
  paired (``pairing = "prompt+seed"``); runs of other seeds are paired by prompt only (``"prompt"``). Either
  way the bootstrap resamples prompt groups, every pair of a category on the same resamples
  (:func:`t2i_audit.analysis.paired_bootstraps`).
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
    out["unit"] = out["key"].map(ref).fillna(out["key"])  # the first run's prompt group names the unit
    return out, sorted(common)


class Wide:
    """A group's verdicts as arrays: one row per shared (key, sample), one column per run (NaN: no verdict)."""

    def __init__(self, v: pd.DataFrame, run_ids: list[str]):
        v = v.assign(_v=v["image_verdict"].astype(float), _s=pd.to_numeric(v["seed"], errors="coerce"))
        v = v.drop_duplicates(["key", "sample", "run_id"])
        by = v.set_index(["key", "sample", "run_id"])
        self.verdict = by["_v"].unstack("run_id").reindex(columns=run_ids)
        rows = self.verdict.index
        self.seed = by["_s"].unstack("run_id").reindex(index=rows, columns=run_ids).to_numpy(float)
        first = v.drop_duplicates(["key", "sample"]).set_index(["key", "sample"]).reindex(rows)
        self.category = first["category"].astype(str).to_numpy()
        self.units = sorted(v["unit"].unique().tolist(), key=str)
        self.unit = pd.Categorical(first["unit"], categories=self.units).codes
        self.verdict = self.verdict.to_numpy(float)

    def counts(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(successes, scored images) per unit (rows) and run (columns) among the rows in ``mask``."""
        nu, runs = len(self.units), self.verdict.shape[1]
        k, n = np.zeros((nu, runs)), np.zeros((nu, runs))
        for j in range(runs):
            ok = mask & ~np.isnan(self.verdict[:, j])
            k[:, j] = np.bincount(self.unit[ok], weights=self.verdict[ok, j], minlength=nu)
            n[:, j] = np.bincount(self.unit[ok], minlength=nu)
        return k, n

    def pair_counts(self, mask: np.ndarray, a: int, b: int) -> tuple[tuple, str, int]:
        """Per-unit (successes, scored) of A and of B for their paired difference: on the images of the same prompt,
        sample and seed when there are any, else on each run's own images of the shared prompts."""
        va, vb = self.verdict[:, a], self.verdict[:, b]
        matched = mask & ~np.isnan(va) & ~np.isnan(vb) & (self.seed[:, a] == self.seed[:, b])
        nu = len(self.units)
        if matched.any():
            ma = mb = matched
            pairing, images = "prompt+seed", int(matched.sum())
        else:
            ma, mb = mask & ~np.isnan(va), mask & ~np.isnan(vb)
            pairing, images = "prompt", int(ma.sum() + mb.sum())
        counts = (np.bincount(self.unit[ma], weights=va[ma], minlength=nu), np.bincount(self.unit[ma], minlength=nu),
                  np.bincount(self.unit[mb], weights=vb[mb], minlength=nu), np.bincount(self.unit[mb], minlength=nu))
        return counts, pairing, images


def _failures(v: pd.DataFrame) -> dict:
    """{(run, category): {failure type: failed images}} (``overall`` too); an image failed without a recorded
    type counts as ``unspecified``."""
    failed = v[v["image_verdict"].notna()]
    failed = failed[~failed["image_verdict"].astype(bool)]
    types = failed["failure_types"].map(lambda t: list(t) if t is not None and len(t) else ["unspecified"])
    long = failed[["run_id", "category"]].assign(type=types).explode("type")
    out: dict = {}
    for (run, cat, t), c in long.groupby(["run_id", "category", "type"]).size().items():
        out.setdefault((run, cat), {})[t] = int(c)
        tot = out.setdefault((run, OVERALL), {})
        tot[t] = tot.get(t, 0) + int(c)
    return out


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


def group_numbers(v: pd.DataFrame, run_ids: list[str], *, seed: int) -> tuple[list[dict], list[dict]]:
    """(rate rows per run × category incl. overall, comparison rows) of one group; ``v``: :func:`shared`'s rows."""
    w = Wide(v, run_ids)
    fails = _failures(v)
    cats = [OVERALL] + sorted(set(w.category.tolist()), key=str)
    rates, comps = [], []
    for ci, cat in enumerate(cats):
        mask = np.ones(len(w.category), bool) if cat == OVERALL else w.category == cat
        k, n = w.counts(mask)
        ranks = rank_intervals(k, n, seed=seed + ci)
        for j, r in enumerate(run_ids):
            kk, nn = int(k[:, j].sum()), int(n[:, j].sum())
            rate, lo, hi = analysis.wilson(kk, nn)
            f = fails.get((r, cat), {})
            rank, rlo, rhi = ranks[j]
            rates.append({"run_id": r, "category": cat, "n": nn, "k": kk, "rate": rate, "lo": lo, "hi": hi,
                          "failed": nn - kk, "failures": [{"type": x, "images": c} for x, c in sorted(f.items())],
                          "rank": rank, "rank_lo": rlo, "rank_hi": rhi, "units": int((n[:, j] > 0).sum())})
        pairs = list(combinations(range(len(run_ids)), 2))
        if pairs:  # every pair of this category on the same resamples of units (analysis.paired_bootstraps)
            found = [w.pair_counts(mask, a, b) for a, b in pairs]
            arrays = [np.stack([c[0][i] for c in found]) for i in range(4)]
            res = analysis.paired_bootstraps(*arrays, n_boot=N_BOOT_PAIRED, seed=seed + 10_000 + ci)
            for (a, b), (_, pairing, images), r in zip(pairs, found, res):
                comps.append({"category": cat, "a": run_ids[a], "b": run_ids[b], **r, "pairing": pairing,
                              "images": images})
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
