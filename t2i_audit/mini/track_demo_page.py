"""The mini track's overview page (reports/track/index.html): both coverages over training on one axis, and the
pre-registered test. Every number is read from the test.json dict it is given; texts pass ``escape``."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from ..report.charts import PALETTE, line_chart
from .sweep_page import CSS


def _f(v, nd: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _ci(ci) -> str:
    if not ci or ci[0] is None:
        return "[—]"
    return f"[{_step(ci[0])}, {_step(ci[1])}]" if all(float(x).is_integer() for x in ci) and abs(ci[1]) >= 10 \
        else f"[{_f(ci[0])}, {_f(ci[1])}]"


def _step(v, none: str = "never") -> str:
    return none if v is None else f"{v:g}"


def _crossing(cr) -> str:
    if not cr:
        return "—"
    lo, hi = cr.get("step_ci") or (None, None)
    return f"{_step(cr.get('step'))} [{_step(lo)}, {_step(hi)}]"


def _series(models: list[dict], pick, label) -> list[dict]:
    out = []
    for i, m in enumerate(models):
        pts = pick(m)
        if not pts:
            continue
        out.append({"label": label(m), "colour": PALETTE[i], "ys": [p[0] for p in pts],
                    "band": ([p[1] for p in pts], [p[2] for p in pts])})
    return out


def _split_points(m: dict, key: str, value: str = "rate"):
    return [(p[value], *(p["ci"] or (None, None))) for p in m.get(key) or []] or None


def render_overview(result: dict) -> str:
    models = result["models"]
    steps = models[0]["steps"] or [p["step"] for p in models[0]["seen_success"]]
    xs = ["base" if s == 0 else str(s) for s in steps]
    label = lambda m: f"coverage {m['coverage']:g}"  # noqa: E731
    chance = next((m["crossing"]["chance"] for m in models if m.get("crossing")), None)
    charts = [
        ("Held-out success (pixel judge; compositions the model never trained on), 95 % CI",
         _series(models, lambda m: _split_points(m, "heldout_success_ci"), label), "success",
         [(chance, "chance 1/24")] if chance is not None else []),
        ("Seen success (its training pairs), 95 % CI", _series(models, lambda m: _split_points(m, "seen_success"),
                                                              label), "success", []),
        ("Held-out decodability: UNet mid block, middle step, fresh seeds (pre-registered layer), 95 % CI",
         _series(models, lambda m: _split_points(m, "heldout_decodability_ci", "p_true"), label), "p(true value)", []),
        ("Held-out decodability from the text encoder alone (conditioning layer, end-of-text): the reference",
         _series(models, lambda m: _split_points(m, "text_reference", "p_true"), label), "p(true value)", []),
    ]
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>mini track</title>"
           f"<style>{CSS}</style></head><body>",
           "<h1>Composition over training in the mini world</h1>",
           "<p class=muted>Two mini generators, the sweep's recipe (16 px single objects, width 16, seed 0), trained at "
           "two coverages of the colour-shape pairs; every checkpoint (every 200 steps, EMA weights) audited by "
           "<code>t2i-audit track</code> on the same 24 prompts × 8 seeds. Per coverage: <a href=cov050/index.html>"
           "coverage 0.5</a> · <a href=cov100/index.html>coverage 1</a>.</p>"]
    out.append("<div class=figs>")
    for title, series, ylab, refs in charts:
        keys = " ".join(f'<span style="color:{s["colour"]}">■</span> {escape(s["label"])}' for s in series)
        out.append(f"<div class=fig><b>{escape(title)}</b><br>{keys}<br>"
                   f"{line_chart(xs, series, x_label='training step', y_label=ylab, refs=refs, width=520)}</div>")
    out.append("</div>")
    pre = result["preregistration"]
    out.append(f"<h2>The pre-registered test: does decodability rise before success?</h2>"
               f"<p>Registered {escape(pre['registered_on'])} in <code>{escape(pre['file'])}</code> (sha256 "
               f"<code>{escape(pre['sha256'][:16])}…</code>) before any model was trained. "
               f"{escape(pre['test']['rise'])}; {escape(pre['test']['timing'])}; {escape(pre['test']['statistic'])}; "
               f"CI by resampling held-out compositions ({pre['test']['bootstrap']['resamples']} times).</p>")
    out.append("<table><tr><th class=l>model</th><th>held-out success base → final [gain CI]</th>"
               "<th>decodability base → final [gain CI]</th><th>half-rise: success / decodability</th>"
               "<th>lead (steps) [95 % CI]</th><th class=l>decision</th><th>exceeds chance 1/24 at [step interval]</th>"
               "<th>exceeds the base model's own rate at [step interval]</th></tr>")
    for m in models:
        s, d, lead = m["heldout_success"] or {}, m["heldout_decodability"] or {}, m["lead"] or {}
        row = [f"{escape(label(m))}{' (headline)' if m['headline'] else ''}",
               f"{_f((s.get('curve') or [None])[0])} → {_f((s.get('curve') or [None])[-1])} {_ci(s.get('gain_ci'))}",
               f"{_f((d.get('curve') or [None])[0])} → {_f((d.get('curve') or [None])[-1])} {_ci(d.get('gain_ci'))}",
               f"{s.get('half_rise_step', '—')} / {d.get('half_rise_step', '—')}",
               f"{_step(lead.get('steps'), 'undefined')} {_ci(lead.get('ci'))}", f"<b>{escape(str(m['decision']))}</b>",
               _crossing(m.get("crossing")), _crossing(m.get("crossing_vs_base"))]
        out.append("<tr>" + "".join(f"<td{' class=l' if i in (0, 5) else ''}>{c}</td>" for i, c in enumerate(row))
                   + "</tr>")
    out.append("</table><p class=muted>Every number: <code>test.json</code> here, the curves and tables in each "
               "coverage's folder (<code>curves.json</code>, <code>success.csv</code>, <code>decodability.csv</code>).</p>"
               "</body></html>")
    return str(Markup("".join(out)))
