"""The sweep's link, read cleanly: does a held-out composition's decodability track its success WITHIN a
coverage? (See t2i_audit.mini.sweep_design; issue 35.)

Points are (model that fits, held-out composition). Success and decodability both rise with coverage, so the
pooled correlation carries the coverage trend; the headline is the within-coverage Spearman
(``stratified.stratified_spearman``: strata = coverage, permutations within coverage, CI resampling the held-out
compositions), with every coverage's own ρ and the pooled ρ beside. Readings, one per ``x``:

* ``denoiser`` — the pre-registered layer's decodability, read from seeds other than the judged ones;
* ``text_encoder`` — the same probe on the conditioning the denoiser receives (no seed: one vector per prompt):
  what the text encoder already carries, so what the denoiser adds is the difference;
* ``judged_seeds`` — the headline layer read from the judged images' own trajectories (the earlier designs'
  reading: the half-drawn image partly predicts itself);
* ``control`` — the control task (random labels per composition) on the other seeds.

Every other layer is exploration (within-coverage ρ and p, Holm over the layers; no CI, to keep it quick).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..analysis import holm
from ..stratified import stratified_spearman

READINGS: dict[str, tuple[str, Callable]] = {
    "denoiser": ("decodability at the headline layer, other seeds than the judged", lambda c, L: c["decodability"][L]),
    "text_encoder": ("text-encoder-only decodability (encode_prompt, same folds)", lambda c, L: c.get("text_decodability")),
    "judged_seeds": ("decodability at the headline layer from the judged seeds' own trajectories",
                     lambda c, L: (c.get("decodability_judged_seeds") or {}).get(L)),
    "control": ("control task (random labels per composition), other seeds", lambda c, L: c["control_decodability"][L]),
}


def _points(models: list[dict], x: Callable, layer: str) -> list[dict]:
    return [{"model": m["name"], "coverage": m["coverage"], "composition": c["composition"],
             "x": x(c, layer), "y": c["success"]}
            for m in models for c in m["eval"]["per_composition"] if c["split"] == "heldout"]


def link(pts: list[dict], cfg, *, n_boot: int | None = None) -> dict:
    ok = [p for p in pts if p["x"] is not None and p["y"] is not None]
    res = stratified_spearman([p["x"] for p in ok], [p["y"] for p in ok], [p["coverage"] for p in ok],
                              [p["composition"] for p in ok], n_perm=cfg.n_perm,
                              n_boot=cfg.n_boot if n_boot is None else n_boot, seed=0)
    res["strata"] = "coverage"
    res["clusters"] = "held-out compositions (resampled whole)"
    return res


def decodability_link(models: list[dict], layers: list[str], headline: str, cfg) -> dict:
    """Within-coverage link of each reading at the headline layer, and of every layer's denoiser decodability."""
    out: dict = {"headline_layer": headline, "headline_reading": "denoiser", "readings": {}}
    for name, (what, x) in READINGS.items():
        pts = _points(models, x, headline)
        if not any(p["x"] is not None for p in pts):
            continue  # a cached evaluation from before the reading existed
        res = link(pts, cfg)
        res["x"], res["y"] = what, "held-out success (pixel judge, judged seeds)"
        if name == "denoiser":
            res["points"] = [{k: v for k, v in p.items()} for p in pts]
        out["readings"][name] = res
    out["per_coverage"] = _per_coverage(models, headline)
    explore = [L for L in layers if L != headline]
    rows = {L: link(_points(models, READINGS["denoiser"][1], L), cfg, n_boot=0)["within"] for L in explore}
    adj = holm([rows[L].get("p_perm") if rows[L].get("p_perm") is not None else float("nan") for L in explore])
    out["exploration"] = {L: {"rho": rows[L]["rho"], "p_perm": rows[L].get("p_perm"), "p_holm": None if a != a else
                              round(a, 4)} for L, a in zip(explore, adj)}
    out["correction"] = f"Holm over the {len(explore)} exploratory layers (within-coverage ρ, shuffles within coverage)"
    return out


def _per_coverage(models: list[dict], layer: str) -> list[dict]:
    """Per coverage: mean success, denoiser and text decodability over (model, held-out composition) points."""
    out = []
    for cov in sorted({m["coverage"] for m in models}):
        pts = [c for m in models if m["coverage"] == cov for c in m["eval"]["per_composition"] if c["split"] == "heldout"]
        text = [c.get("text_decodability") for c in pts if c.get("text_decodability") is not None]
        out.append({"coverage": cov, "n_points": len(pts), "success": round(float(np.mean([c["success"] for c in pts])), 4),
                    "denoiser_decodability": round(float(np.mean([c["decodability"][layer] for c in pts])), 4),
                    "text_decodability": round(float(np.mean(text)), 4) if text else None})
    return out
