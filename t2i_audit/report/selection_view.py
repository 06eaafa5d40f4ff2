"""The selection study in the report: ``probes/selection.json`` (``select --from RUN --study``) and
``probes/binding.json``. Per category a success-against-cost chart — the whole-image curve with its CI
band, one random seed, and each policy family's frontier (the best success at each cost) — the
pre-registered headline, the budgets chosen by nested CV, the controls, and AUROC by step per feature
family. Missing or odd files give an empty section, never an error (like probes_view)."""

from __future__ import annotations

import json
from pathlib import Path

from markupsafe import Markup, escape

from . import charts
from .probes_view import _f

FAMILY_COLOURS = {"whole images": "#000000", "random": "#999999", "probe": "#0072B2", "probe (halving)": "#56B4E9",
                  "x0": "#CC79A7", "x0 (halving)": "#CC79A7", "x0-fitted": "#D55E00", "x0-fitted (halving)": "#D55E00",
                  "cfg": "#009E73", "cfg (halving)": "#009E73", "rawmaps": "#E69F00", "rawmaps (halving)": "#E69F00"}
SHOWN = ("probe", "probe (halving)", "x0", "x0-fitted", "cfg", "rawmaps")


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pareto_chart(series: list[dict], *, x_max: float, tick: float = 20, width=560, height=300, marks=(),
                 x_label: str = "denoiser loop iterations per prompt") -> Markup:
    """Success (0–1) against cost per prompt (a tick every ``tick``: one whole image).
    ``series``: {label, colour, pts [(x, y)], band?, dash?}."""
    ml, mr, mt, mb = 44, 12, 10, 36
    pw, ph = width - ml - mr, height - mt - mb
    X = lambda v: ml + pw * min(max(v, 0), x_max) / x_max  # noqa: E731
    Y = lambda v: mt + ph * (1 - min(max(v, 0), 1))  # noqa: E731
    o = [f'<svg class="chart pareto" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
         f'aria-label="success against {escape(x_label)}">']
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" class="grid"/>'
                 f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" class="tl" text-anchor="end">{t:.2f}</text>')
    every = max(1, int(x_max // tick) // 10 + 1)  # at most ~10 labels
    for i in range(0, int(x_max // tick) + 1, every):
        o.append(f'<text x="{X(i * tick):.1f}" y="{mt + ph + 14}" class="tl" text-anchor="middle">{i * tick:.3g}</text>')
    o.append(f'<text x="{ml + pw / 2}" y="{height - 4}" class="al" text-anchor="middle">{escape(x_label)}</text>')
    for s in series:
        band = s.get("band")
        if band:
            poly = [(X(x), Y(hi)) for x, _, hi in band] + [(X(x), Y(lo)) for x, lo, _ in band[::-1]]
            o.append(f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in poly)}" fill="{s["colour"]}" '
                     f'opacity="0.12"/>')
        pts = [(X(x), Y(y)) for x, y in s["pts"] if x is not None and y is not None]
        if len(pts) > 1:
            dash = ' stroke-dasharray="5 4"' if s.get("dash") else ""
            o.append(f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="none" '
                     f'stroke="{s["colour"]}" stroke-width="2"{dash}><title>{escape(s["label"])}</title></polyline>')
        for (a, b), (x, y) in zip(pts, s["pts"]):
            o.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.8" fill="{s["colour"]}"><title>{escape(s["label"])}: '
                     f'{y:.3f} at {x:.4g}</title></circle>')
    for x, y, label in marks:
        o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="6" fill="none" stroke="#b2182b" stroke-width="2">'
                 f'<title>{escape(label)}</title></circle>')
    o.append("</svg>")
    return Markup("".join(o))


def _seconds_chart(r: dict):
    """The same frontiers against measured seconds per prompt (None when the study had no unit seconds)."""
    whole, secs = r.get("whole_images") or [], r.get("whole_images_seconds")
    if not whole or not secs:
        return None
    series = [{"label": "whole images, best of n by the final judge (oracle)", "colour": FAMILY_COLOURS["whole images"],
               "pts": [(x, _f(w["mean"])) for x, w in zip(secs, whole)],
               "band": [(x, _f(w["ci"][0]), _f(w["ci"][1])) for x, w in zip(secs, whole)]}]
    for fam, front in sorted((r.get("frontiers_seconds") or {}).items()):
        if fam in SHOWN or fam.startswith("whole images,"):
            series.append({"label": f"{fam} (best at each cost)", "colour": FAMILY_COLOURS.get(fam, "#777"),
                           "dash": "halving" in fam or fam.startswith("whole images,"),
                           "pts": [(f["seconds"], _f(f["success"])) for f in front if f["seconds"] <= secs[-1]]})
    return pareto_chart(series, x_max=secs[-1], tick=secs[0], x_label="measured seconds per prompt")


def _category(name: str, r: dict, budgets: list) -> dict:
    whole = r.get("whole_images") or []
    x_max = max([w["iterations"] for w in whole] + [20])
    series = [{"label": "whole images, best of n by the final judge (oracle)", "colour": FAMILY_COLOURS["whole images"],
               "pts": [(w["iterations"], _f(w["mean"])) for w in whole],
               "band": [(w["iterations"], _f(w["ci"][0]), _f(w["ci"][1])) for w in whole]}]
    for fam in SHOWN:
        front = (r.get("frontiers") or {}).get(fam)
        if front:
            series.append({"label": f"{fam} (best at each cost)", "colour": FAMILY_COLOURS.get(fam, "#777"),
                           "dash": "halving" in fam,
                           "pts": [(f["cost"]["iterations"], _f(f["success"])) for f in front
                                   if f["cost"]["iterations"] <= x_max]})
    head = r.get("headline") or {}
    marks = [(head["cost"]["iterations"], _f(head["success"]["mean"]), f"pre-registered: {head['policy']}")] \
        if "cost" in head else []
    rows = []
    for B in budgets:
        b = (r.get("budgets") or {}).get(str(B))
        if b:
            chosen = sorted({c["policy"] for c in b["chosen"]})
            rows.append({"budget": B, "success": b["success"], "whole": b["whole_images_at_same_cost"],
                         "gap": b["gap_to_whole"], "lift": b["lift_over_random"], "chosen": chosen,
                         "fell_back": sum(1 for c in b["chosen"] if c.get("fell_back")),
                         "folds": len(b["chosen"])})
    return {"name": name, "n": r.get("n_prompts"), "groups": r.get("n_groups"),
            "chart": pareto_chart(series, x_max=x_max, tick=whole[0]["iterations"] if whole else 20, marks=marks),
            "chart_seconds": _seconds_chart(r), "registered": r.get("registered") or {},
            "legend": [{"label": s["label"], "colour": s["colour"], "dash": s.get("dash")} for s in series],
            "headline": head, "budgets": rows, "perm": r.get("permutation_control"),
            "seen": r.get("seen_vs_unseen"), "diffs": r.get("differences") or {}}


def _binding(b: dict | None) -> list[dict]:
    if not isinstance(b, dict):
        return []
    out = []
    for cat, r in sorted((b.get("categories") or {}).items()):
        if "steps" not in r:
            continue
        tags = list(r["steps"])
        fams = list(next(iter(r["steps"].values()))["families"]) if tags else []
        out.append({"name": cat, "steps": [r["steps"][t]["iterations"] for t in tags],
                    "loop_steps": b.get("loop_steps"), "prompt_only": _f((r.get("prompt-only") or {}).get("auroc")),
                    "rows": [{"family": f, "cells": [{"auroc": _f(r["steps"][t]["families"][f]["auroc"]["auroc"]),
                                                      "readable": r["steps"][t]["families"][f].get("readable")}
                                                     for t in tags]} for f in fams]})
    return out


def selection_section(rd) -> dict:
    res = _read(rd.probes_dir / "selection.json")
    if not isinstance(res, dict) or "categories" not in res:
        return {"ran": False}
    cats, skipped = [], []
    for name, r in sorted(res["categories"].items()):
        try:
            cats.append(_category(name, r, res.get("budgets") or [])) if "policies" in r else \
                skipped.append((name, r.get("skipped")))
        except (KeyError, TypeError, IndexError, ValueError):
            skipped.append((name, "unreadable entry"))
    unit = res.get("unit_seconds") or {}
    return {"ran": True, "categories": cats, "skipped": skipped, "loop_steps": res.get("loop_steps"),
            "seeds": res.get("seeds_per_prompt"), "prereg": res.get("preregistered") or {},
            "exploration": res.get("exploration") or {}, "unit": unit,
            "judge_in_iterations": (unit["judge_call"] / unit["iteration"]) if unit.get("iteration") else None,
            "binding": _binding(_read(rd.probes_dir / "binding.json"))}
