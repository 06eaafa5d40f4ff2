"""The probes section: reads ``probes/*.jsonl`` (see t2i_audit/probes/__init__.py) into charts.

Files read (each optional; a missing one renders a "not run" note):

* ``decodability.jsonl``: ``encoder, layer, pooling, slot, family, accuracy, chance,
  control_accuracy, n`` → accuracy per layer, one line per slot, chance dotted;
* ``failure_prediction.jsonl``: ``encoder, layer, pooling, auroc, auroc_ci, baseline_auroc,
  baseline_ci`` → AUROC per layer with its CI band beside the prompt-only baseline;
* ``correlation.jsonl``: ``encoder, layer, pooling, x, y, spearman, spearman_ci, pearson,
  pearson_ci, p_perm, points`` → one scatter per row (strongest first).
Rows with unexpected shapes are skipped, never fatal: the probes stage evolves separately.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..rundir import read_jsonl
from . import charts

SCATTER_MAX = 6


def _layer_key(v):
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _f(v):
    try:
        f = float(v)
        return None if math.isnan(f) else f
    except (TypeError, ValueError):
        return None


def _ci(v):
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return _f(v[0]), _f(v[1])
    return None, None


def _groups(rows):
    g: dict[tuple, list] = {}
    for r in rows:
        g.setdefault((str(r.get("encoder", "?")), str(r.get("pooling", "?"))), []).append(r)
    return sorted(g.items())


def decodability(rows: list[dict]) -> list[dict]:
    out = []
    for (enc, pool), rs in _groups(rows):
        layers = sorted({r.get("layer") for r in rs}, key=_layer_key)
        slots = sorted({(str(r.get("slot")), str(r.get("family", ""))) for r in rs})
        series, legend = [], []
        for i, (slot, fam) in enumerate(slots):
            colour = charts.PALETTE[i % len(charts.PALETTE)]
            by = {r.get("layer"): r for r in rs if (str(r.get("slot")), str(r.get("family", ""))) == (slot, fam)}
            acc = [_f(by[l].get("accuracy")) if l in by else None for l in layers]
            chance = [_f(by[l].get("chance")) if l in by else None for l in layers]
            ctrl = [_f(by[l].get("control_accuracy")) if l in by else None for l in layers]
            label = f"{slot} ({fam})" if fam else slot
            series.append({"label": label, "ys": acc, "colour": colour})
            if any(c is not None for c in chance):
                series.append({"label": f"{label} chance", "ys": chance, "colour": colour, "dash": True})
            best = max((a, l) for a, l in zip(acc, layers) if a is not None) if any(a is not None for a in acc) else (None, None)
            legend.append({"label": label, "colour": colour, "best": best[0], "best_layer": best[1],
                           "chance": next((c for c in chance if c is not None), None),
                           "control": max((c for c in ctrl if c is not None), default=None)})
        out.append({"encoder": enc, "pooling": pool, "legend": legend,
                    "chart": charts.line_chart(layers, series, y_label="accuracy")})
    return out


def failure_prediction(rows: list[dict]) -> list[dict]:
    out = []
    for (enc, pool), rs in _groups(rows):
        rs = sorted(rs, key=lambda r: _layer_key(r.get("layer")))
        layers = [r.get("layer") for r in rs]
        au = [_f(r.get("auroc")) for r in rs]
        lo, hi = zip(*[_ci(r.get("auroc_ci")) for r in rs]) if rs else ((), ())
        bl = [_f(r.get("baseline_auroc")) for r in rs]
        blo, bhi = zip(*[_ci(r.get("baseline_ci")) for r in rs]) if rs else ((), ())
        vals = [v for v in au + bl + list(lo) + list(blo) if v is not None]
        ymin = min([0.4] + vals)
        series = [{"label": "probe AUROC", "ys": au, "colour": charts.PALETTE[5],
                   "band": (list(lo), list(hi)) if any(v is not None for v in lo) else None},
                  {"label": "prompt-only baseline", "ys": bl, "colour": charts.PALETTE[3], "dash": True,
                   "band": (list(blo), list(bhi)) if any(v is not None for v in blo) else None}]
        best = max(((a, i) for i, a in enumerate(au) if a is not None), default=(None, None))
        top = rs[best[1]] if best[1] is not None else {}
        out.append({"encoder": enc, "pooling": pool,
                    "chart": charts.line_chart(layers, series, y_range=(math.floor(ymin * 10) / 10, 1.0),
                                               y_label="AUROC", refs=[(0.5, "chance 0.5")]),
                    "best": {"layer": top.get("layer"), "auroc": best[0], "ci": _ci(top.get("auroc_ci")),
                             "baseline": _f(top.get("baseline_auroc")), "baseline_ci": _ci(top.get("baseline_ci"))}})
    return out


def correlation(rows: list[dict]) -> dict:
    rows = sorted(rows, key=lambda r: -abs(_f(r.get("spearman")) or 0))
    table, plots = [], []
    for r in rows:
        t = {"encoder": r.get("encoder"), "layer": r.get("layer"), "pooling": r.get("pooling"),
             "x": r.get("x", "x"), "y": r.get("y", "y"), "spearman": _f(r.get("spearman")),
             "spearman_ci": _ci(r.get("spearman_ci")), "pearson": _f(r.get("pearson")),
             "pearson_ci": _ci(r.get("pearson_ci")), "p_perm": _f(r.get("p_perm")),
             "n": len(r.get("points") or [])}
        table.append(t)
        if len(plots) < SCATTER_MAX and r.get("points"):
            plots.append({**t, "chart": charts.scatter(r["points"], x_label=str(t["x"]), y_label=str(t["y"]))})
    return {"table": table, "plots": plots}


def probes_section(probes_dir: Path) -> dict:
    probes_dir = Path(probes_dir)
    files = {n: read_jsonl(probes_dir / f"{n}.jsonl") for n in
             ("decodability", "failure_prediction", "correlation")}
    return {"ran": any(files.values()),
            "decodability": decodability(files["decodability"]),
            "failure_prediction": failure_prediction(files["failure_prediction"]),
            "correlation": correlation(files["correlation"])}
