"""Composition over training, from a track's files: per checkpoint, success by category and split (seen /
held-out) with 95 % Wilson CIs (the one CI of a rate on every page), failure types, and decodability of the constituents from the denoiser (the fresh-seed
capture) and the text encoders (the run's stored activations); then when held-out success first exceeds chance
and whether decodability rises before it (timing.py).

Decodability CIs, the crossing and the rise resample prompt groups (``units``: :func:`t2i_audit.scenes.prompt_groups`, prompts showing one scene and swap
twins, one cluster for all their images and probe items), 2,000 times, seed 0. Decodability is read as each item's
out-of-fold probability of its true value from a linear probe (the probe stage's ``linear.decodability_many``:
standardised logistic, C = 1), folds grouped the same way, so a held-out composition is never in its own probe's
training fold. A group is named by the smallest composition among its prompts: for single-object prompts (the
mini track's, pre-registered with the composition as its unit) each group is one composition, so the units, their
names and hence the folds and resamples are the composition's.
"""

from __future__ import annotations

import sys

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from . import index as ix
from .capture import load_capture
from .timing import GroupBootstrap, crossing, rise_lead

N_BOOT = 2000
SPLITS = ("all", "train", "heldout")


@dataclass
class Point:
    """One audited checkpoint's data."""

    entry: ix.Entry
    run: object                       # report.tables.RunData
    prompts: dict                     # id -> PromptRecord
    decod_items: dict = field(default_factory=dict)  # source -> {(prompt id, sample): mean p_true}
    decod_rows: list = field(default_factory=list)


def units(prompts: dict) -> dict[str, str]:
    """prompt id → the unit of independence of its images and probe items: its prompt group
    (``scenes.groups_by_id``), named by the smallest composition in it (groups that share that name are one
    unit: neither a scene nor a composition is ever split)."""
    from ..scenes import groups_by_id

    group = groups_by_id(prompts.values())
    name: dict[str, str] = {}
    for pid, g in group.items():
        c = str(prompts[pid].get("composition") or pid)
        name[g] = min(name.get(g, c), c)
    return {pid: name[g] for pid, g in group.items()}


def load_points(root: Path, *, folds: int = 5, progress: bool = False) -> list[Point]:
    """Every audited checkpoint's run, each category decided by ONE scorer for the whole track (the rule of
    t2i_audit/deciding.py on the union of the runs' evidence, as ``compare`` does): a curve never changes judge."""
    from .. import deciding as rule
    from ..report.tables import load_run
    from ..rundir import RunDir, read_jsonl

    index = ix.load_index(root)
    done = [e for e in index.entries if e.status == "done"]
    categories = sorted({r.get("category") for r in read_jsonl(Path(root) / "prompts.jsonl")}, key=str) \
        if (Path(root) / "prompts.jsonl").is_file() else None
    deciding = rule.deciding_scorers([RunDir(root / e.run) for e in done], categories) if done else {}
    points = []
    for i, e in enumerate(done, 1):
        if progress:
            print(f"[track] page: {e.label} ({i}/{len(done)})", file=sys.stderr, flush=True)
        run = load_run(root / e.run, deciding=deciding)
        p = Point(entry=e, run=run, prompts=run.prompts)
        p.decod_rows, p.decod_items = decodability(root, e, run.prompts, folds=folds)
        points.append(p)
    return points


# --- decodability -------------------------------------------------------------------------------
def denoiser_sources(meta: dict, arrays: dict) -> dict[str, np.ndarray]:
    """``{"denoiser:<block>@middle": rows × dim}``: every block's conditional states at the middle loop step."""
    mid = meta.get("middle_step")
    out = {}
    for name, arr in arrays.items():
        block, rest = name.split("__t", 1)
        if int(rest[:3]) == mid and rest.endswith("-cond"):
            out[f"denoiser:{block}@middle"] = arr
    return out


def headline_source(sources) -> Optional[str]:
    """The denoiser layer the track's headline reads: the UNet's mid block, else the middle block of the list."""
    den = [s for s in sources if s.startswith("denoiser:")]
    if "denoiser:mid@middle" in den:
        return "denoiser:mid@middle"
    return den[len(den) // 2] if den else None


def text_sources(run_root: Path) -> tuple[dict[str, np.ndarray], list[str], list]:
    """Each text encoder's conditioning layer (the layer the pipeline feeds its denoiser; else its last) at the
    end-of-text token, one row per prompt; the prompt ids of the rows; the extractions' keys (meta.json)."""
    from ..probes.capture.activations import load_activations, load_array

    out, ids, keys = {}, [], []
    act = Path(run_root) / "activations"
    for enc in sorted(p for p in act.iterdir() if p.is_dir() and p.name != "denoiser") if act.is_dir() else []:
        if not (enc / "meta.json").is_file():
            continue
        meta, ids = load_activations(enc)
        keys.append([enc.name, meta.get("key"), meta.get("sha256")])
        layer = meta.get("conditioning_layer") or (meta.get("layers") or [None])[-1]
        if layer and f"{layer}__eos" in meta.get("arrays", []):
            out[f"text:{enc.name}:{layer}__eos"] = np.asarray(load_array(enc, f"{layer}__eos"), np.float32)
    return out, ids, keys


FITS_VERSION = 2  # 2: folds by prompt group (units), not by composition


def decodability(root: Path, entry: ix.Entry, prompts: dict, *, folds: int = 5) -> tuple[list, dict]:
    """Rows (source × target × split: mean p(true) with CI) and per-item values of one checkpoint; cached in
    ``activations/<label>/fits.json`` under the key of everything they depend on (the captured and stored
    activations, the prompts, the folds), so a rerun or the next callback call refits only what is new."""
    import hashlib
    import json

    from ..rundir import atomic_write_json
    from ..safeload import read_cache_json

    sources: dict = {}
    parts: list = [FITS_VERSION, folds, sorted(prompts)]
    if entry.activations:
        meta, arrays = load_capture(root / entry.activations)
        if meta:
            parts.append(meta.get("sha256"))
            keys = list(zip(meta["prompt_ids"], meta["samples"]))
            sources.update({s: (keys, a) for s, a in denoiser_sources(meta, arrays).items()})
    text, ids, text_keys = text_sources(root / entry.run)
    parts.append(text_keys)
    sources.update({s: ([(i, 0) for i in ids], a) for s, a in text.items()})
    key = hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    cache = root / "activations" / ix.folder_name(entry.label) / "fits.json"
    cached = read_cache_json(cache)
    if cached and cached.get("key") == key:
        return cached["rows"], {s: {tuple(json.loads(k)): v for k, v in m.items()} for s, m in cached["items"].items()}
    rows, items = _fit_sources(sources, prompts, folds)
    atomic_write_json(cache, {"key": key, "rows": rows, "items": {
        s: {json.dumps(list(k)): (None if not np.isfinite(v) else float(v)) for k, v in m.items()}
        for s, m in items.items()}})
    return rows, items


def _fit_sources(sources: dict, prompts: dict, folds: int) -> tuple[list, dict]:
    rows, items = [], {}
    unit = units(prompts)
    for source, (keys, X) in sorted(sources.items()):
        recs = [prompts.get(pid) for pid, _ in keys]
        if any(r is None for r in recs):
            continue
        groups = np.array([unit[pid] for pid, _ in keys])
        per_item, target_rows = fit_source(np.asarray(X, np.float32), recs, groups, folds=folds)
        items[source] = {k: float(v) for k, v in zip(keys, per_item)}
        split = np.array([r.get("split") or "train" for r in recs])
        for target, res, p_true in [("all", {}, per_item), *target_rows]:
            for s in SPLITS:
                m = np.ones(len(recs), bool) if s == "all" else split == s
                m &= np.isfinite(p_true)
                if not m.any():
                    continue
                summ = GroupBootstrap(groups[m], n_boot=N_BOOT, seed=0).summary(p_true[m])
                rows.append({"source": source, "target": target, "split": s, "p_true": summ["mean"],
                             "ci": summ["ci"], "n": int(m.sum()), "n_groups": summ["n_groups"],
                             **{k: res.get(k) for k in ("accuracy", "chance_uniform", "control_accuracy") if res}})
    return rows, items


def fit_source(X: np.ndarray, recs: list[dict], groups: np.ndarray, *, folds: int = 5,
               seed: int = 0) -> tuple[np.ndarray, list]:
    """Out-of-fold p(true value) of each slot target (≥ 2 values) for every row, and their mean per row; folds by
    ``groups`` (the rows' units)."""
    from ..probes.fit import linear

    slots = sorted({s for r in recs for s in (r.get("slots") or {})})
    jobs, names = [], []
    for slot in slots:
        vals = np.array([str((r.get("slots") or {}).get(slot, "")) for r in recs])
        rows = np.flatnonzero(vals != "")
        if len(np.unique(vals[rows])) < 2 or len(np.unique(groups[rows])) < 2:
            continue
        jobs.append((X, rows, vals[rows], groups[rows]))
        names.append((slot, rows))
    if not jobs:
        return np.full(len(recs), np.nan), []
    fits = linear.decodability_many(jobs, n_splits=folds, seed=seed)
    table = np.full((len(recs), len(jobs)), np.nan)
    out = []
    for j, ((slot, rows), (res, p_true)) in enumerate(zip(names, fits)):
        table[rows, j] = p_true
        col = np.full(len(recs), np.nan)
        col[rows] = p_true
        out.append((slot, res, col))
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(np.where(np.isfinite(table), table, np.nan), axis=1) if table.size else table
    return mean, out


# --- success --------------------------------------------------------------------------------------
def success_rows(point: Point) -> list[dict]:
    """Per category (and all) × split: images passed, with the 95 % Wilson CI of k of n that every page shows for a
    rate (analysis.wilson: a bootstrap reads 0 of 8 as [0 %, 0 %]); ``n_groups``: the prompt groups (``units``)
    the images come from, the units the crossing's and the rise's cluster bootstraps resample (timing.py)."""
    from ..analysis import wilson

    unit = units(point.prompts)
    df = point.run.images_df
    df = df[df["verdict"].notna()]
    rows = []
    cats = ["all"] + sorted(df["category"].dropna().unique().tolist())
    for cat in cats:
        for s in SPLITS:
            sub = df if cat == "all" else df[df["category"] == cat]
            sub = sub if s == "all" else sub[sub["split"].fillna("train") == s]
            if sub.empty:
                continue
            k, n = int(sub["verdict"].map(bool).sum()), int(len(sub))
            rate, lo, hi = wilson(k, n)
            rows.append({"category": cat, "split": s, "k": k, "n": n, "rate": rate, "ci": [lo, hi],
                         "n_groups": len({unit[p] for p in sub["prompt_id"]})})
    return rows


def failure_rows(point: Point) -> list[dict]:
    from ..analysis import failure_counts

    return failure_counts(point.run.images_df).to_dict("records") if len(point.run.images_df) else []


def item_matrix(points: list[Point], values) -> tuple[np.ndarray, list, list]:
    """Items present at every checkpoint × checkpoints, from ``values(point) -> {item key: value}``."""
    maps = [values(p) for p in points]
    keys = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    return np.array([[m[k] for m in maps] for k in keys], float), keys, maps


def heldout_success(point: Point) -> dict:
    df = point.run.images_df
    df = df[df["verdict"].notna() & (df["split"] == "heldout")]
    return {(p, int(k)): float(bool(v)) for p, k, v in zip(df["prompt_id"], df["sample"], df["verdict"])}


def summarize(points: list[Point], *, chance: Optional[float] = None) -> dict:
    """The track's curves, the crossing step and the rise test (JSON-ready)."""
    steps = [p.entry.step if p.entry.step is not None else _after(points) for p in points]
    out = {"checkpoints": [{"label": p.entry.label, "step": p.entry.step, "plot_step": s, "source": p.entry.source,
                            "layout": p.entry.layout, "ema": p.entry.ema, "run": p.entry.run,
                            "success": success_rows(p), "failures": failure_rows(p), "decodability": p.decod_rows}
                           for p, s in zip(points, steps)]}
    if not points:
        return out
    S, s_keys, _ = item_matrix(points, heldout_success)
    prompts = points[0].prompts
    unit = units(prompts)
    s_groups = [unit[k[0]] for k in s_keys]
    base_rate = float(np.mean(S[:, 0])) if len(S) else None
    if chance is None:
        chance, out["chance_from"] = base_rate, "the base model's held-out success"
    else:
        out["chance_from"] = "given (--chance)"
    if len(S) and len(points) > 1:
        out["crossing"] = crossing(S, s_groups, steps, chance)
        if out["chance_from"].startswith("given"):  # beside it: against what the base model itself scores
            out["crossing_base"] = crossing(S, s_groups, steps, base_rate)
    head = headline_source(points[0].decod_items)
    out["headline_source"] = head
    if head and len(S) and len(points) > 2:
        D, d_keys, _ = item_matrix(points, lambda p: {k: v for k, v in p.decod_items.get(head, {}).items()
                                                      if prompts[k[0]].get("split") == "heldout"})
        d_groups = [unit[k[0]] for k in d_keys]
        if len(D) and sorted(set(d_groups)) == sorted(set(s_groups)):
            out["rise"] = {"source": head, **rise_lead(S, s_groups, D, d_groups, steps)}
    return out


def _after(points: list[Point]) -> int:
    """Where the final output goes on the step axis: one checkpoint interval after the last numbered step."""
    known = sorted(p.entry.step for p in points if p.entry.step is not None)
    return known[-1] + (known[-1] - known[-2] if len(known) > 1 else 1) if known else 1
