"""``t2i-audit mini sweep``: train and evaluate every model of the design (``sweep_design``), then
aggregate the claims into sweep.json and the page. Import order, no circle: sweep → sweep_work →
sweep_eval → sweep_design."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..ownership import claim_output_dir
from ..rundir import atomic_write_text
from .sweep_design import (ALL_PAIRS, DEFAULT_COVERAGES, DEFAULT_SEEDS, DEFAULT_WIDTHS, FIT_THRESHOLD,
                           HEADLINE_BLOCK, HEADLINE_STEP, MIN_SEEN, TARGETS, TRAINABLE_PAIRS, SweepConfig,
                           block_channels, generator_config, model_jobs, model_name, pair_key, pair_order,
                           seen_pairs, smoke_sweep_config)
from .sweep_stats import _r, aggregate
from .world import COLORS, HELDOUT_PAIRS, SHAPES

# the design's names, read through this module by the CLI and the tests
__all__ = ["ALL_PAIRS", "DEFAULT_COVERAGES", "DEFAULT_SEEDS", "DEFAULT_WIDTHS", "FIT_THRESHOLD", "HEADLINE_BLOCK",
           "HEADLINE_STEP", "MIN_SEEN", "TARGETS", "TRAINABLE_PAIRS", "SweepConfig", "block_channels",
           "generator_config", "model_jobs", "model_name", "pair_key", "pair_order", "seen_pairs",
           "smoke_sweep_config", "collect_models", "compute_used", "fit_verdict", "model_entry", "run_sweep"]

# ---------------------------------------------------------------- the whole sweep


def model_entry(cfg: SweepConfig, width: int, cov: float, seed: int) -> dict:
    name = model_name(width, cov, seed)
    seen = seen_pairs(cov, seed)
    return {"name": name, "width": width, "unet_blocks": list(block_channels(width)), "coverage": _r(cov),
            "seed": seed, "n_seen_pairs": len(seen), "coverage_of_space": _r(len(seen) / len(ALL_PAIRS)),
            "seen_pairs": [pair_key(p) for p in seen],
            "uncovered_pairs": [pair_key(p) for p in TRAINABLE_PAIRS if p not in seen],
            "heldout_pairs": [pair_key(p) for p in HELDOUT_PAIRS],
            "folder": f"models/{name}"}


def fit_verdict(seen: dict, threshold: float) -> dict:
    """Whether a model learned its own training pairs: seen-pair success ≥ threshold."""
    rate = seen.get("rate")
    return {"fits": rate is not None and rate >= threshold, "threshold": threshold, "seen_success": rate}


def collect_models(out: Path, cfg: SweepConfig) -> list[dict]:
    """Every expected model's entry: its training card and cached evaluation where they exist."""
    from .sweep_work import cached_eval, trained_card

    models = []
    for width, cov, seed in sorted(model_jobs(cfg), key=lambda j: (j[2], j[0], j[1])):
        entry = model_entry(cfg, width, cov, seed)
        folder = out / entry["folder"]
        card = trained_card(folder, generator_config(cfg, width, cov, seed))
        ev = cached_eval(folder, cfg) if card else None
        if card is None:
            entry["status"] = "not trained yet"
        elif ev is None:
            entry["status"] = "not evaluated yet"
        else:
            entry["status"] = "evaluated"
        if card:
            trained_on = {pair_key(p) for p in ALL_PAIRS} - {pair_key(p) for p in card["heldout_pairs"]}
            if trained_on != set(entry["seen_pairs"]):
                raise ValueError(f"{folder}: trained on {sorted(trained_on)}, expected {entry['seen_pairs']}")
            entry["train"] = {k: card.get(k) for k in ("steps", "cpu_seconds", "wall_seconds", "final_loss_ema100",
                                                       "parameters", "threads")}
        if ev is not None:
            entry["eval"] = ev
            entry["fit"] = fit_verdict(ev["success"]["seen"], cfg.fit_threshold)
        models.append(entry)
    return models


def compute_used(models: list[dict]) -> dict:
    """CPU seconds the models took (training: the card's process time; evaluation: the
    evaluation's), and what that is in minutes of 2 cores, one single-thread job per core."""
    train = sum((m.get("train") or {}).get("cpu_seconds") or 0 for m in models)
    ev = sum((m.get("eval") or {}).get("eval_cpu_seconds") or 0 for m in models)
    return {"train_cpu_seconds": round(train, 1), "eval_cpu_seconds": round(ev, 1),
            "models_counted": sum(1 for m in models if m.get("train")),
            "minutes_on_2_cores": round((train + ev) / 120, 1)}


def run_sweep(out: Path | str, cfg: SweepConfig | None = None, *, eval_only: bool = False,
              train_only: bool = False, log: Callable = print) -> dict:
    """Train and evaluate every model not yet done (resumable per model, ``cfg.workers``
    processes), then aggregate: sweep.json + index.html."""
    from .sweep_work import run_workers

    cfg = cfg or SweepConfig()
    out = claim_output_dir(out, "sweep")  # a new, empty or sweep folder only
    t0 = time.time()
    run_workers(out, cfg, train=not eval_only, evaluate=not train_only, log=log)
    if train_only:
        return {}
    models = collect_models(out, cfg)
    for m in models:
        if m.get("eval"):
            h, s = m["eval"]["success"]["heldout"], m["eval"]["success"]["seen"]
            log(f"{m['name']}: held-out {h['rate']} {h['ci']}  seen {s['rate']} {s['ci']}"
                f"{'' if m['fit']['fits'] else '  (does NOT fit: excluded)'}")
    result = {
        "kind": "t2i-audit mini sweep", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": json.loads(json.dumps(asdict(cfg), default=list)),
        "design": {"space": f"{len(COLORS)} colours × {len(SHAPES)} shapes = {len(ALL_PAIRS)} pairs, single objects, "
                            f"{cfg.size} px, the object {cfg.object_size[0]:g}–{cfg.object_size[1]:g} of the side",
                   "heldout_pairs": [pair_key(p) for p in HELDOUT_PAIRS],
                   "trainable_pairs": [pair_key(p) for p in TRAINABLE_PAIRS],
                   "coverage": "fraction of the trainable pairs a model trains on; nested across coverages for "
                               "one seed; never fewer than 6 (every colour and shape seen)",
                   "scale": "UNet width w (blocks w, 2w, 2w); same text encoder for every model",
                   "compute": f"{cfg.steps} optimisation steps × batch {cfg.batch} for every model",
                   "fit": f"a model fits when its success on its own training pairs is ≥ {cfg.fit_threshold}; "
                          "unfit models are listed but left out of every claim",
                   "headline_layer": f"{HEADLINE_BLOCK}@{HEADLINE_STEP}",
                   "preregistered": "HEADLINE_BLOCK/HEADLINE_STEP/FIT_THRESHOLD are constants in "
                                    "t2i_audit/mini/sweep.py: the layer and step written before the first sweep "
                                    "was evaluated (2026-11) and kept, the fit bar added 2026-12-05, before any model "
                                    "of this sweep (16 px, two widths, this recipe) was trained"},
        "models_expected": len(model_jobs(cfg)),
        "models": [{k: (v if k != "eval" else {a: b for a, b in v.items() if a != "grid_png_b64"})
                    for k, v in m.items()} for m in models],
        "wall_seconds_this_invocation": round(time.time() - t0, 1),
        "compute": compute_used(models),
    }
    result["complete"] = all(m["status"] == "evaluated" for m in models)
    result["aggregate"] = aggregate(result["models"], cfg, f"{HEADLINE_BLOCK}@{HEADLINE_STEP}")
    atomic_write_text(out / "sweep.json", json.dumps(result, indent=1))
    from .sweep_page import render_page

    grids = {m["name"]: m["eval"]["grid_png_b64"] for m in models if m.get("eval")}
    atomic_write_text(out / "index.html", render_page(result, grids))
    log(f"wrote {out / 'sweep.json'} and {out / 'index.html'}")
    return result
