"""The probes section: reads ``probes/*.jsonl`` (documented in t2i_audit/probes/__init__.py).

* ``decodability.jsonl``: ``encoder, layer, pooling, target, family, accuracy, chance,
  control_accuracy, selectivity, n …`` → accuracy per layer, one line per target slot,
  chance dashed. ``slot-<s>`` poolings (each slot's own token span) are drawn as one chart.
* ``failure.jsonl``: ``encoder, layer, pooling, auroc: {auroc, ci, n}, baseline_auroc: {…},
  auroc_diff: {diff, ci, p}, verdict`` → AUROC per layer with CI band beside the prompt-only
  baseline.
* ``correlation.jsonl``: ``encoder, layer, pooling, unit, n_units, spearman: {r, ci, p_perm},
  pearson: {…}`` → a table, strongest first; a scatter for rows that carry ``points``
  (``[{"unit"|"composition", "x"|"decodability", "y"|"success"}]``).
Flat variants (``slot``, ``auroc`` as a number with ``auroc_ci``, ``failure_prediction.jsonl``,
``spearman`` as a number with ``spearman_ci``) are read too. Rows with unexpected shapes are
skipped, never fatal: the probes stage evolves separately.
"""

from __future__ import annotations

import math
from pathlib import Path

from .. import stats
from ..rundir import read_jsonl
from ..safeload import read_cache_json
from . import charts

SCATTER_MAX = 6


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


def _metric(r: dict, key: str, value_key: str) -> tuple:
    """(value, (lo, hi), p) from ``key: {value_key, ci, p…}`` or flat ``key`` + ``key_ci``."""
    v = r.get(key)
    if isinstance(v, dict):
        return _f(v.get(value_key)), _ci(v.get("ci")), _f(v.get("p_perm", v.get("p")))
    base = key[:-6] if key.endswith("_auroc") else key
    ci = r.get(f"{key}_ci", r.get(f"{base}_ci"))
    return _f(v), _ci(ci), _f(r.get("p_perm"))


def _order(rows) -> list:
    """Layers in the order the probes stage wrote them (h00 … h12, final; block names)."""
    return list(dict.fromkeys(r.get("layer") for r in rows))


def _groups(rows, key=lambda r: str(r.get("pooling", "?"))):
    g: dict[tuple, list] = {}
    for r in rows:
        g.setdefault((str(r.get("encoder", "?")), key(r)), []).append(r)
    return sorted(g.items())


def _dec_pool(r) -> str:
    p = str(r.get("pooling", "?"))
    return "slot (own span)" if p.startswith("slot-") else p


def decodability(rows: list[dict]) -> list[dict]:
    out = []
    for (enc, pool), rs in _groups(rows, _dec_pool):
        layers = _order(rs)
        tgt = lambda r: (str(r.get("target", r.get("slot"))), str(r.get("family", "")))  # noqa: E731
        targets = list(dict.fromkeys(tgt(r) for r in rs))
        series, legend = [], []
        for i, (slot, fam) in enumerate(targets):
            colour = charts.PALETTE[i % len(charts.PALETTE)]
            by = {r.get("layer"): r for r in rs if tgt(r) == (slot, fam)}
            acc = [_f(by[l].get("accuracy")) if l in by else None for l in layers]
            chance = [_f(by[l].get("chance")) if l in by else None for l in layers]
            ctrl = [_f(by[l].get("control_accuracy")) if l in by else None for l in layers]
            label = f"{slot} ({fam})" if fam else slot
            series.append({"label": label, "ys": acc, "colour": colour})
            if any(c is not None for c in chance):
                series.append({"label": f"{label} chance", "ys": chance, "colour": colour, "dash": True})
            scored = [(a, j) for j, a in enumerate(acc) if a is not None]
            best = max(scored) if scored else (None, None)
            legend.append({"label": label, "colour": colour, "best": best[0],
                           "best_layer": layers[best[1]] if best[1] is not None else None,
                           "chance": chance[best[1]] if best[1] is not None else None,
                           "control": ctrl[best[1]] if best[1] is not None else None})
        out.append({"encoder": enc, "pooling": pool, "legend": legend,
                    "chart": charts.line_chart(layers, series, y_label="accuracy")})
    return out


def failure_prediction(rows: list[dict]) -> list[dict]:
    out = []
    for (enc, pool), rs in _groups(rows):
        layers = _order(rs)
        by = {r.get("layer"): r for r in rs}
        probe = [_metric(by[l], "auroc", "auroc") for l in layers]
        base = [_metric(by[l], "baseline_auroc", "auroc") for l in layers]
        au, lo, hi = [p[0] for p in probe], [p[1][0] for p in probe], [p[1][1] for p in probe]
        bl, blo, bhi = [b[0] for b in base], [b[1][0] for b in base], [b[1][1] for b in base]
        vals = [v for v in au + bl + lo + blo if v is not None]
        series = [{"label": "probe AUROC", "ys": au, "colour": charts.PALETTE[5],
                   "band": (lo, hi) if any(v is not None for v in lo) else None},
                  {"label": "prompt-only baseline", "ys": bl, "colour": charts.PALETTE[3], "dash": True,
                   "band": (blo, bhi) if any(v is not None for v in blo) else None}]
        scored = [(a, j) for j, a in enumerate(au) if a is not None]
        j = max(scored)[1] if scored else None
        top = by[layers[j]] if j is not None else {}
        diff = top.get("auroc_diff") if isinstance(top.get("auroc_diff"), dict) else {}
        n, units = top.get("n"), top.get("n_compositions")  # the one small-sample rule (stats.too_few)
        few = stats.auroc_too_few(n if isinstance(n, int) else None, _f(top.get("failure_rate")),
                                  units if isinstance(units, int) else None)
        out.append({"encoder": enc, "pooling": pool,
                    "chart": charts.line_chart(layers, series, y_range=(math.floor(min([0.4] + vals) * 10) / 10, 1.0),
                                               y_label="AUROC", refs=[(0.5, "chance 0.5")]),
                    "best": {"layer": top.get("layer"), "auroc": au[j] if j is not None else None,
                             "ci": probe[j][1] if j is not None else (None, None),
                             "baseline": bl[j] if j is not None else None,
                             "baseline_ci": base[j][1] if j is not None else (None, None),
                             "diff": _f(diff.get("diff")), "diff_ci": _ci(diff.get("ci")),
                             "p": _f(diff.get("p")), "verdict": top.get("verdict"),
                             "n": top.get("n"), "too_few": few}})
    return out


def _points(r: dict) -> list[dict]:
    pts = []
    for p in r.get("points") or []:
        if not isinstance(p, dict):
            continue
        x, y = _f(p.get("x", p.get("decodability"))), _f(p.get("y", p.get("success")))
        if x is not None and y is not None:
            pts.append({"x": x, "y": y, "composition": p.get("unit", p.get("composition", ""))})
    return pts


def correlation(rows: list[dict]) -> dict:
    table = []
    for r in rows:
        sp, sp_ci, sp_p = _metric(r, "spearman", "r")
        pe, pe_ci, pe_p = _metric(r, "pearson", "r")
        pts = _points(r)
        table.append({"encoder": r.get("encoder"), "layer": r.get("layer"), "pooling": r.get("pooling"),
                      "unit": r.get("unit", "composition"), "x": r.get("x", "decodability"),
                      "y": r.get("y", "success"), "spearman": sp, "spearman_ci": sp_ci,
                      "p_perm": sp_p, "pearson": pe, "pearson_ci": pe_ci, "pearson_p": pe_p,
                      "n": r.get("n_units", r.get("n", len(pts))), "points": pts,
                      "mean_decodability": _f(r.get("mean_decodability"))})
    table.sort(key=lambda t: -abs(t["spearman"] or 0))
    plots = []
    for t in table:
        if len(plots) < SCATTER_MAX and t["points"]:
            plots.append({**t, "chart": charts.scatter(t["points"], x_label=f"{t['x']} (per {t['unit']})",
                                                       y_label=str(t["y"]))})
    return {"table": table, "plots": plots, "has_points": bool(plots)}


FILES = {"decodability": ("decodability.jsonl",), "failure": ("failure.jsonl", "failure_prediction.jsonl"),
         "correlation": ("correlation.jsonl",)}
# why a file the probe stage wrote holds no rows (the stage writes every file, empty when nothing
# could be fitted: a small run); the stage's summary.json gives its own reason where it has one
EMPTY = {"decodability": "The probe stage ran; a decodability probe needs, per slot, twice the folds' count of "
                         "prompts with two or more of its values over two or more compositions.",
         "failure": "The probe stage ran; a failure probe needs scored prompts with both outcomes.",
         "correlation": "The probe stage ran; a correlation needs scored prompts and decodable constituents."}
SUMMARY_KEY = {"failure": "failure_prediction", "correlation": "correlation"}


def _why_empty(probes_dir: Path, name: str) -> dict:
    """``{"ran", "why"}`` for a subsection without rows: its file missing, or written empty."""
    if not any((probes_dir / n).is_file() for n in FILES[name]):
        return {"ran": False, "why": f"probes/{FILES[name][0]} missing."}
    probes = (read_cache_json(probes_dir.parent / "summary.json") or {}).get("probes")
    entry = probes.get(SUMMARY_KEY.get(name, "")) if isinstance(probes, dict) else None
    skipped = entry.get("skipped") if isinstance(entry, dict) else None
    return {"ran": True, "why": f"The probe stage ran and skipped it: {skipped}." if skipped else EMPTY[name]}


def probes_section(probes_dir: Path) -> dict:
    probes_dir = Path(probes_dir)
    read = lambda *names: next((rows for n in names if (rows := read_jsonl(probes_dir / n))), [])  # noqa: E731
    files = {name: read(*names) for name, names in FILES.items()}
    # "ran" is whether the stage wrote its files, not whether they hold rows: a small run's probe
    # stage runs and fits nothing, and the page says why rather than "not run"
    return {"ran": any((probes_dir / n).is_file() for names in FILES.values() for n in names),
            "decodability": decodability(files["decodability"]),
            "failure_prediction": failure_prediction(files["failure"]),
            "correlation": correlation(files["correlation"]),
            "empty": {name: _why_empty(probes_dir, name) for name in FILES}}  # shown only where nothing is drawn
