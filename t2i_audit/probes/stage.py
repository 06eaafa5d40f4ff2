"""The ``probe`` stage: extract activations, fit the three analyses, write probes/ + summary."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import AuditError
from ..records import check_run
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl
from ..scenes import prompt_groups
from .fit import linear
from .capture.activations import load_activations, load_array

PROMPT_LEVEL = ("eos", "mean")  # poolings that describe a whole prompt (slot-* describe one slot)


# --- labels -----------------------------------------------------------------------------------
def label_scorers(rd: RunDir, prompts: Sequence[dict], scorer: str | None = None) -> dict:
    """Category → the scorer whose verdicts label its prompts: ``scorer`` for all (``--scorer``),
    else the one rule of :mod:`t2i_audit.deciding` (the run report's deciding scorer)."""
    from .. import deciding as rule

    cats = sorted({p.get("category") for p in prompts}, key=str)
    if scorer:
        if not rd.scores(scorer).exists():
            have = sorted(p.stem for p in rd.scores_dir.glob("*.jsonl")) if rd.scores_dir.exists() else []
            raise AuditError(f"{rd.scores(scorer)}: no scores for scorer {scorer!r} (have: {', '.join(have) or 'none'})")
        return rule.forced(cats, scorer)
    return rule.deciding_scorers([rd], cats)


def success_rates(rd: RunDir, scorer: str | None = None, *,
                  deciding: dict | None = None) -> tuple[dict[str, float], list[str]]:
    """Per prompt: mean verdict over its samples, from the scorer deciding the prompt's category
    (``deciding``, see :func:`label_scorers`; ``scorer`` forces one); prompts without one are
    absent. Returns the rates and the scorers the labels came from."""
    prompts = rd.read_prompts()
    deciding = deciding if deciding is not None else label_scorers(rd, prompts, scorer)
    cat_of = {p["id"]: p.get("category") for p in prompts}
    by_cat = {c: d.get("scorer") for c, d in deciding.items()}
    used = sorted({n for n in by_cat.values() if n})
    votes: dict[str, list[float]] = {}
    for name in used:
        path = rd.scores(name)
        for r in rd.read_scores(path):
            if (r.get("kind") == "prompt" and r.get("verdict") is not None
                    and by_cat.get(cat_of.get(r["prompt_id"])) == name):
                votes.setdefault(r["prompt_id"], []).append(float(bool(r["verdict"])))
    return {k: float(np.mean(v)) for k, v in votes.items()}, used


def slot_targets(prompts: Sequence[dict]) -> dict[str, str]:
    """Slot name → family, for every slot some prompt has."""
    out: dict[str, str] = {}
    for p in prompts:
        for s, fam in (p.get("families") or {}).items():
            out.setdefault(s, fam)
    return dict(sorted(out.items()))


def _fmt(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float):
        return _fmt(obj)
    return obj


# --- the stage --------------------------------------------------------------------------------
def fit_probes(rd: RunDir, prompts: list[dict], encoders: Sequence[str], *, scorer: str | None,
               seed: int = 0, n_splits: int = 5, n_boot: int = 1000, progress: bool = True,
               backend: str = linear.DEFAULT_BACKEND, device: str | None = "cpu",
               batch_bytes: int | None = None) -> dict:
    """Fit decodability / failure / correlation on stored activations; write probes/*.jsonl.

    Arrays are loaded in batches of about ``batch_bytes``; all fits of a batch (arrays ×
    targets × control × folds) go to the backend at once, which the torch backend fits together.
    """
    linear.check_backend(backend)
    by_id = {p["id"]: p for p in prompts}
    targets = slot_targets(prompts)
    deciding = label_scorers(rd, prompts, scorer)
    rates, scorers = success_rates(rd, deciding=deciding)
    labels_from = {str(c): {"scorer": d.get("scorer"), "source": d.get("source"), "why": d.get("why")}
                   for c, d in deciding.items()}
    t0 = time.perf_counter()
    dec_rows, fail_rows, corr_rows = [], [], []
    probe_fits: list[dict] = []
    if batch_bytes is None:  # the sklearn path fits one by one: nothing to gain from batching
        batch_bytes = 0 if backend == "sklearn" else (256 << 20 if str(device).startswith("cpu") else 4 << 30)
    for enc in encoders:
        enc_dir = rd.activations_dir / enc
        meta, ids = load_activations(enc_dir)
        recs = [by_id[i] for i in ids if i in by_id]
        if len(recs) != len(ids):
            raise AuditError(f"{enc_dir}/index.jsonl: prompt ids not in {rd.prompts}; rerun extraction")
        groups = np.array(prompt_groups(recs))  # one scene, or a swap twin: never on both sides of a fold
        success = np.array([rates.get(p["id"], np.nan) for p in recs])
        labelled_sets: dict = {}  # one (failed, groups, baseline) per set of labelled rows: shared fits
        per_array = max(1, len(recs) * int(meta.get("dim") or 1) * 4)
        chunk = max(1, batch_bytes // per_array)
        names = list(meta["arrays"])
        for start in range(0, len(names), chunk):
            batch = names[start:start + chunk]
            X = {a: np.asarray(load_array(enc_dir, a), dtype=np.float32) for a in batch}
            finite = {a: np.isfinite(X[a]).all(1) for a in batch}
            dec_jobs, dec_keys, fail_jobs, fail_keys = [], [], [], []
            for array in batch:
                for j, (slot, family) in enumerate(targets.items()):
                    vals = np.array([str((p.get("slots") or {}).get(slot, "")) for p in recs])
                    rows = np.flatnonzero(finite[array] & (vals != ""))
                    if len(rows) < 2 * n_splits or len(np.unique(vals[rows])) < 2 or len(np.unique(groups[rows])) < 2:
                        continue
                    dec_jobs.append((X[array], rows, vals[rows], groups[rows]))
                    dec_keys.append((array, j, slot, family, rows))
                if array.split("__", 1)[1].startswith("slot-"):
                    continue
                labelled = np.flatnonzero(np.isfinite(success) & finite[array])
                failed = success[labelled] < 0.5
                if len(labelled) >= 2 * n_splits and 0 < failed.sum() < len(failed):
                    key = labelled.tobytes()
                    if key not in labelled_sets:
                        base_X, _ = linear.onehot_constituents([recs[i] for i in labelled])
                        labelled_sets[key] = (failed, groups[labelled], base_X)
                    f_, g_, b_ = labelled_sets[key]
                    fail_jobs.append((X[array][labelled], f_, g_, b_))
                    fail_keys.append(array)
            decs = linear.decodability_many(dec_jobs, n_splits=n_splits, seed=seed, backend=backend, device=device)
            fails = dict(zip(fail_keys, linear.failure_prediction_many(
                fail_jobs, n_splits=n_splits, seed=seed, n_boot=n_boot, backend=backend, device=device)))
            # rows in the order of the one-at-a-time loop: per array, targets, failure, correlation
            for array in batch:
                layer, pooling = array.split("__", 1)
                p_true = np.full((len(recs), len(targets)), np.nan)
                for (arr, j, slot, family, rows), (res, pt) in zip(dec_keys, decs):
                    if arr == array:
                        p_true[rows, j] = pt
                        dec_rows.append({"encoder": enc, "layer": layer, "pooling": pooling, "target": slot,
                                         "family": family, **res})
                if pooling.startswith("slot-"):
                    continue
                decod = np.nanmean(p_true, axis=1) if np.isfinite(p_true).any() else np.full(len(recs), np.nan)
                if array in fails:
                    fr = fails[array]
                    fail_rows.append({"encoder": enc, "layer": layer, "pooling": pooling, **fr})
                    probe_fits.append({"encoder": enc, "array": array, "auroc": fr["auroc"]["auroc"],
                                       "kind": meta.get("kind")})
                if np.isfinite(decod).sum() >= 3 and np.isfinite(success).sum() >= 3:
                    for unit in ("composition", "binding"):
                        cr = linear.decodability_success_correlation(recs, decod, success, unit=unit, seed=seed,
                                                                     n_boot=n_boot, n_perm=n_boot)
                        if cr["n_units"] >= 3:
                            corr_rows.append({"encoder": enc, "layer": layer, "pooling": pooling,
                                              "mean_decodability": float(np.nanmean(decod)), **cr})
        if progress:
            print(f"[probe] fitted {enc} ({backend}): {time.perf_counter() - t0:.1f} s so far", file=sys.stderr)
    rd.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(rd.probes_dir / "decodability.jsonl", (_clean(r) for r in dec_rows))
    atomic_write_jsonl(rd.probes_dir / "failure.jsonl", (_clean(r) for r in fail_rows))
    atomic_write_jsonl(rd.probes_dir / "correlation.jsonl", (_clean(r) for r in corr_rows))
    probe_file = _save_failure_probe(rd, recs_by_id=by_id, rates=rates, fits=probe_fits, seed=seed,
                                     labels_from=labels_from)
    out = _summarize(dec_rows, fail_rows, corr_rows, scorers=scorers, n_labelled=len(rates),
                     probe_file=probe_file, seconds=time.perf_counter() - t0)
    out["labels_from"] = labels_from
    return out


def _save_failure_probe(rd: RunDir, *, recs_by_id: dict, rates: dict, fits: list[dict], seed: int,
                        labels_from: dict | None = None):
    """Refit the text-encoder probe with the best out-of-fold AUROC on all labelled prompts."""
    text_fits = [f for f in fits if f["encoder"] != "denoiser" and f["auroc"] is not None
                 and not math.isnan(f["auroc"])]
    if not text_fits:
        return None
    best = max(text_fits, key=lambda f: f["auroc"])
    enc_dir = rd.activations_dir / best["encoder"]
    meta, ids = load_activations(enc_dir)
    X = np.asarray(load_array(enc_dir, best["array"]), dtype=np.float32)
    rows = [i for i, pid in enumerate(ids) if pid in rates and np.isfinite(X[i]).all()]
    failed = np.array([rates[ids[i]] < 0.5 for i in rows]).astype(int)
    model = linear._probe(seed, 1.0).fit(X[rows], failed)
    scaler, lr = model[0], model[-1]
    layer, pooling = best["array"].split("__", 1)
    probe = {"encoder": best["encoder"], "layer": layer, "pooling": pooling,
             "fingerprint": meta["fingerprint"], "model": meta.get("model"),
             "oof_auroc": best["auroc"], "n": len(rows), "failure_rate": float(failed.mean()),
             "mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(),
             "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0]),
             "compositions": sorted({recs_by_id[ids[i]].get("composition") or ids[i] for i in rows}),
             "labels_from": labels_from or {}}
    path = rd.probes_dir / "failure_probe.json"
    atomic_write_json(path, probe)
    return rd.rel(path)


def _summarize(dec, fail, corr, *, scorers, n_labelled, probe_file, seconds) -> dict:
    best_layers = {}
    for r in dec:
        key = f"{r['encoder']}/{r['pooling']}/{r['target']}"
        if key not in best_layers or r["accuracy"] > best_layers[key]["accuracy"]:
            best_layers[key] = {"layer": r["layer"], "accuracy": _fmt(r["accuracy"]),
                                "chance": _fmt(r["chance"]), "control": _fmt(r.get("control_accuracy"))}
    out: dict = {"scorers": scorers, "n_labelled_prompts": n_labelled,
                 "files": ["probes/decodability.jsonl", "probes/failure.jsonl", "probes/correlation.jsonl"]
                 + ([probe_file] if probe_file else []),
                 "decodability_best_layer": best_layers, "fit_seconds": round(seconds, 2)}
    if fail:
        b = max(fail, key=lambda r: -1 if math.isnan(r["auroc"]["auroc"]) else r["auroc"]["auroc"])
        out["failure_prediction"] = _clean({
            "encoder": b["encoder"], "layer": b["layer"], "pooling": b["pooling"],
            "auroc": b["auroc"]["auroc"], "auroc_ci": b["auroc"]["ci"],
            "baseline_auroc": b["baseline_auroc"]["auroc"], "baseline_auroc_ci": b["baseline_auroc"]["ci"],
            "diff_ci": b["auroc_diff"]["ci"], "verdict": b["verdict"], "n": b["n"],
            "failure_rate": b.get("failure_rate"), "n_compositions": b.get("n_compositions"),
            "note": "best of all layers x poolings by out-of-fold AUROC (a selected maximum)"})
    else:
        out["failure_prediction"] = {"skipped": "no scored prompts with both outcomes"}
    comp = [r for r in corr if r["unit"] == "composition"]
    if comp:
        b = max(comp, key=lambda r: r["mean_decodability"])
        out["correlation"] = _clean({
            "encoder": b["encoder"], "layer": b["layer"], "pooling": b["pooling"], "unit": b["unit"],
            "n_units": b["n_units"], "spearman": b["spearman"], "pearson": b["pearson"],
            "note": "layer x pooling with the highest mean decodability"})
    else:
        out["correlation"] = {"skipped": "needs scored prompts and decodable constituents"}
    return out


def _fit_key(rd: RunDir, metas: dict, encoders, **settings) -> str:
    """Hash of everything the fits depend on: activations, score files, settings."""
    h = hashlib.sha1(json.dumps([{k: v.get("key") for k, v in metas.items()}, list(encoders), settings],
                                sort_keys=True, default=str).encode())
    if "denoiser" in encoders and (rd.activations_dir / "denoiser" / "meta.json").exists():
        h.update((rd.activations_dir / "denoiser" / "meta.json").read_bytes())
    h.update(rd.prompts.read_bytes())
    for path in sorted(rd.scores_dir.glob("*.jsonl")) if rd.scores_dir.exists() else []:
        h.update(path.name.encode())
        h.update(hashlib.sha1(path.read_bytes()).digest())
    return h.hexdigest()[:16]


# the run's records the probe stage reads (labels: scores and calibration; the summary it rewrites)
PROBE_READS = ("manifest", "summary", "scores", "calibration", "images", "activation-index")


def write_summary(rd: RunDir, probes: dict) -> None:
    """Read-modify-write summary.json, touching only the "probes" key (under the writer lock)."""
    rd.update_summary("probes", probes)


def run_probe_stage(run_dir, *, model: str, scorer: str | None = None, layers: str = "all",
                    poolings=("eos", "mean", "slot"), seed: int = 0, device: str = "cpu",
                    denoiser: bool = False, progress: bool = True, n_splits: int = 5,
                    n_boot: int = 1000, batch_size: int = 32,
                    timesteps: Sequence[int] | None = None, probe_backend: str = linear.DEFAULT_BACKEND,
                    state=None, variant=None) -> dict:
    """Extraction on every Accelerate process (each its share of chunks, on its own device), then
    fitting and summary on the main process, which alone returns the probes (``{}`` elsewhere).
    ``variant``: the run's LoRAs / replaced components (t2i_audit.variants), applied to ``model``."""
    from ..processes import process_state, rank_device, share_cpu
    from .capture.activations import extract_text_activations

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    linear.check_backend(probe_backend)
    state = state or process_state(device)
    state.wait_for_everyone()  # the main process has merged the previous stage
    prompts = rd.read_prompts()
    if not prompts:
        raise AuditError(f"{rd.prompts}: no prompts")
    check_run(rd.root, PROBE_READS)  # before the extraction: a damaged record is refused, nothing written
    t0 = time.perf_counter()
    share_cpu(state, device)
    if state.is_main_process:
        rd.update_stage("probe", status="running", model=model, seed=seed, world_size=state.num_processes)
    if isinstance(poolings, str):
        poolings = tuple(p.strip() for p in poolings.split(",") if p.strip())
    metas = extract_text_activations(prompts, rd.activations_dir, model, layers=layers,
                                     poolings=poolings, device=rank_device(state, device), batch_size=batch_size,
                                     progress=progress, state=state, variant=variant)
    t_extract = time.perf_counter() - t0
    encoders = list(metas)
    if denoiser:
        from .capture.denoiser import extract_denoiser_activations

        extract_denoiser_activations(rd, model, device=rank_device(state, device), timesteps=timesteps,
                                     progress=progress, state=state, variant=variant)
        encoders.append("denoiser")
    if not state.is_main_process:  # fitting is batched in torch and fast: the main process alone
        return {}
    labels = {str(c): d.get("scorer") for c, d in label_scorers(rd, prompts, scorer).items()}
    fit_key = _fit_key(rd, metas, encoders, scorer=scorer, labels=labels, seed=seed, n_splits=n_splits,
                       n_boot=n_boot, backend=probe_backend)
    old = rd.read_summary().get("probes") or {}
    if old.get("fit_key") == fit_key and all((rd.root / f).exists() for f in old.get("files", [])):
        rd.update_stage("probe", status="done", n_prompts=len(prompts), encoders=encoders,
                        seconds=round(time.perf_counter() - t0, 2), scorers=old.get("scorers"), reused=True)
        return old  # same activations, labels and settings: the fits would be identical
    probes = fit_probes(rd, prompts, encoders, scorer=scorer, seed=seed, n_splits=n_splits,
                        n_boot=n_boot, progress=progress, backend=probe_backend, device=device)
    probes.update(fit_key=fit_key, model=model, seed=seed, layers=layers, poolings=list(poolings),
                  probe_backend=probe_backend,
                  encoders={k: {"arrays": len(v["arrays"]), "dim": v["dim"], "bytes": v["bytes"],
                                "truncated": len(v["truncated"])} for k, v in metas.items()},
                  extract_seconds=round(t_extract, 2))
    write_summary(rd, probes)
    rd.update_stage("probe", status="done", n_prompts=len(prompts), encoders=encoders,
                    seconds=round(time.perf_counter() - t0, 2), scorers=probes["scorers"])
    return probes
