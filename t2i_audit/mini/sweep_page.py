"""The coverage sweep's HTML page: self-contained (inline CSS, inline SVG charts, PNG grids as
data URIs), every number read from the sweep.json dict it is given."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from ..report.charts import PALETTE, line_chart, scatter

CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f7}td.l,th.l{text-align:left}.muted{color:#777}.warn{background:#fff4d6;padding:8px;border:1px solid #e6c65c}
.grid{stroke:#e6e6ea}.tl{font-size:10px;fill:#555}.al{font-size:11px;fill:#333}
.ref{stroke:#999;stroke-dasharray:3 3}
.pt{fill:#0072B2;opacity:.55}.figs{display:flex;flex-wrap:wrap;gap:18px}.fig{font-size:12px}
.thumbs{display:flex;flex-wrap:wrap;gap:14px}.thumbs figure{margin:0;font-size:12px}
code{background:#f4f4f7;padding:0 3px}
"""


def _f(v, nd: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.{nd}f}"


def _ci(ci) -> str:
    if not ci or ci[0] is None:
        return "[—]"
    return f"[{_f(ci[0])}, {_f(ci[1])}]"


def _corr_text(c: dict, extra_ci: list | None = None, holm: bool = False) -> str:
    s = c["spearman"]
    txt = f"ρ = {_f(s['r'])} {_ci(s['ci'])}, permutation p = {_f(s['p_perm'], 3)}, n = {c['n']}"
    if holm and s.get("p_holm") is not None:
        txt += f", Holm p = {_f(s['p_holm'], 3)}"
    if extra_ci:
        txt += f"; CI resampling held-out compositions {_ci(extra_ci)}"
    return txt


def _verdict(s: dict, y: str, x: str) -> str:
    if s["r"] is None or s["ci"][0] is None:
        return f"undetermined ({y} or {x} does not vary enough)."
    if s["ci"][0] > 0:
        return f"{y} rises with {x} (95 % CI of ρ above 0)."
    if s["ci"][1] < 0:
        return f"{y} FALLS with {x} (95 % CI of ρ below 0)."
    return f"no evidence of a monotone relation between {y} and {x} (95 % CI of ρ includes 0)."


def _rate(r: dict) -> str:
    return f"{_f(r['rate'])} {_ci(r['ci'])} <span class='muted'>({r['k']}/{r['n']})</span>"


def render_page(res: dict, grids: dict[str, str]) -> str:
    agg, cfg, design = res["aggregate"], res["config"], res["design"]
    o = [f"<!doctype html><html><head><meta charset='utf-8'><title>Mini-world coverage sweep</title>"
         f"<style>{CSS}</style></head><body>",
         "<h1>Coverage → held-out success → decodability (mini world)</h1>",
         "<p>The two claims of Redhardt, Akram &amp; Schug (2025) checked against ground truth: (1) more "
         "training coverage of the composition space → better held-out compositions; (2) where composition "
         "works, the constituents are linearly decodable from the network's activations, and decodability "
         "tracks success. Here: the mini world's colour × shape space, the <b>denoiser's</b> (UNet) block "
         "activations.</p>"]
    n_done = sum(1 for m in res["models"] if m["status"] == "evaluated")
    if not res["complete"]:
        o.append(f"<p class='warn'>Incomplete: {n_done} of {res['models_expected']} models evaluated; the "
                 "numbers below use those only.</p>")
    if cfg.get("smoke"):
        o.append("<p class='warn'>SMOKE run (a few optimisation steps of a tiny model): the numbers are "
                 "meaningless; it only exercises the code path.</p>")
    o.append("<h2>Design</h2><ul>")
    o.append(f"<li>Space: {escape(design['space'])}. Held-out pairs, seen by <b>no</b> model: "
             f"{escape(', '.join(design['heldout_pairs']))}.</li>")
    covs = ", ".join(f"{c:.3g}" for c in cfg["coverages"])
    o.append(f"<li>Coverage: {escape(design['coverage'])}. Coverages {escape(covs)}, seeds "
             f"{escape(str(cfg['seeds']))}.</li>")
    o.append(f"<li>Compute: {escape(design['compute'])}. <b>Reduced generator</b> (so one model trains in a few "
             f"CPU-minutes on one thread): UNet blocks {escape(str(cfg['block_out_channels']))}, text encoder "
             f"width {cfg['text_width']} × {cfg['text_layers']} layers, single-object scenes only — not the "
             "shipped generator's config.</li>")
    o.append(f"<li>Evaluation: the 24 prompts × {cfg['samples']} samples, same seeds for every model, "
             f"{cfg['eval_steps']} DDIM steps, guidance {cfg['guidance']}; success = pixel judge (right shape "
             "in the right colour); 95 % Wilson intervals.</li>")
    o.append(f"<li>Decodability: linear probes per UNet block × sampling step (first / middle / last) for "
             f"colour and shape, grouped CV by composition ({cfg['n_splits']} folds over all 24 compositions, "
             "so a held-out composition is never in its probe's training fold), beside chance and a control "
             "task (random labels per composition).</li>")
    o.append(f"<li><b>Pre-registered headline layer: <code>{escape(design['headline_layer'])}</code></b> (UNet "
             "mid block, middle sampling step), fixed in code before any result was seen; every other layer is "
             "exploration with Holm-corrected p-values.</li></ul>")
    if not agg.get("n_models"):
        o.append("<p>No model evaluated yet.</p></body></html>")
        return "".join(o)

    c1 = agg["claim1_heldout_success_vs_coverage"]
    L = agg["headline_layer"]
    dvc = agg["decodability_vs_coverage"]
    c2 = agg["claim2_decodability_vs_success_heldout"]
    c2all = agg["claim2_decodability_vs_success_all_compositions"]
    o.append("<h2>Headline</h2><ul>")
    o.append(f"<li><b>Claim 1</b> — held-out success vs coverage (Spearman over {agg['n_models']} models): "
             f"{_corr_text(c1['spearman_over_models'], c1['spearman_ci_resampling_heldout_compositions'])}.</li>")
    o.append(f"<li>Held-out decodability (<code>{escape(L)}</code>) vs coverage: "
             f"{_corr_text(dvc['headline'], dvc['headline'].get('ci_resampling_heldout_compositions'))}.</li>")
    o.append(f"<li><b>Claim 2</b> — per-composition decodability (<code>{escape(L)}</code>) ↔ success, held-out "
             f"compositions pooled over models: {_corr_text(c2['headline'])}; all 24 compositions: "
             f"{_corr_text(c2all['headline'])}.</li></ul>")

    o.append("<h2>Reading</h2><ul>")
    v1 = _verdict(c1["spearman_over_models"]["spearman"], "held-out success", "coverage")
    v2 = _verdict(c2["headline"]["spearman"], "success", f"decodability at {L}")
    o.append(f"<li>Claim 1 (over models): {escape(v1)}</li><li>Claim 2 (held-out compositions × models): "
             f"{escape(v2)}</li>")
    best_seen = max((m["eval"]["success"]["seen"]["rate"] or 0) for m in res["models"] if m.get("eval"))
    if best_seen < 0.5:
        o.append(f"<li class='warn'>No model fits even its own training pairs well (best seen success "
                 f"{best_seen:.2f}): at this compute the sweep measures early training, not converged "
                 "generalisation. With equal compute, a lower coverage also means more updates per seen pair, "
                 "so it can fit its few pairs sooner. Rerun with more <code>--steps</code> (and a GPU) before "
                 "reading either claim off these models.</li>")
    o.append("</ul>")

    per = c1["per_coverage"]
    xs = [f"{p['coverage']:.2f}" for p in per]
    series = []
    for i, s in enumerate(("heldout", "seen", "uncovered")):
        ys = [p[s]["rate"] for p in per]
        series.append({"label": s, "ys": ys, "colour": PALETTE[[5, 2, 0][i]],
                       "band": ([p[s]["ci"][0] for p in per], [p[s]["ci"][1] for p in per])})
    dec = [p["heldout_decodability"][L] for p in per]
    series.append({"label": f"held-out decodability {L}", "ys": dec, "colour": PALETTE[3], "dash": True})
    o.append("<h2>Success and decodability by coverage</h2><div class='figs'><div class='fig'>")
    o.append(line_chart(xs, series, x_label="coverage (fraction of the 18 trainable pairs)", y_label="rate",
                        width=560, height=260))
    o.append("<br>blue: held-out · green: seen · orange: trainable pairs outside this coverage · dashed red: "
             f"held-out decodability at {escape(L)} (mean p(true)); bands: Wilson 95 % (seeds pooled)</div>")
    pts = [{"x": p["x"], "y": p["y"], "composition": f"{p['model']} {p['composition']}"}
           for p in c2["headline"].get("points", [])]
    o.append("<div class='fig'>" + str(scatter(pts, x_label=f"decodability {L}", y_label="success")) +
             "<br>held-out compositions × models</div></div>")

    o.append("<table><tr><th>coverage</th><th>seen pairs</th><th>models</th><th>held-out success</th>"
             "<th>seen success</th><th>outside coverage</th><th>held-out decodability " + str(escape(L)) +
             "</th></tr>")
    for p in per:
        o.append(f"<tr><td>{_f(p['coverage'])}</td><td>{p['n_seen_pairs']}</td><td>{p['n_models']}</td>"
                 f"<td>{_rate(p['heldout'])}</td><td>{_rate(p['seen'])}</td><td>{_rate(p['uncovered'])}</td>"
                 f"<td>{_f(p['heldout_decodability'][L])}</td></tr>")
    o.append("</table>")

    o.append("<h2>Models</h2><table><tr><th class='l'>model (folder)</th><th>coverage</th><th>seed</th>"
             "<th>steps</th><th>CPU s</th><th>held-out</th><th>seen</th><th>outside coverage</th>"
             f"<th>colour acc. held-out ({escape(L)})</th><th>shape acc. held-out</th><th>control</th></tr>")
    for m in res["models"]:
        link = f"<a href='{escape(m['folder'])}/'>{escape(m['name'])}</a>"
        if m["status"] != "evaluated":
            o.append(f"<tr><td class='l'>{link}</td><td>{_f(m['coverage'])}</td><td>{m['seed']}</td>"
                     f"<td colspan='8' class='l muted'>{escape(m['status'])}</td></tr>")
            continue
        e, d = m["eval"], m["eval"]["decodability"][L]
        o.append(f"<tr><td class='l'>{link}</td><td>{_f(m['coverage'])}</td><td>{m['seed']}</td>"
                 f"<td>{m['train']['steps']}</td><td>{_f(m['train']['cpu_seconds'], 0)}</td>"
                 f"<td>{_rate(e['success']['heldout'])}</td><td>{_rate(e['success']['seen'])}</td>"
                 f"<td>{_rate(e['success']['uncovered'])}</td>"
                 f"<td>{_f(d['color']['heldout']['accuracy'])}</td><td>{_f(d['shape']['heldout']['accuracy'])}</td>"
                 f"<td>{_f(d['color']['control_accuracy'])} / {_f(d['shape']['control_accuracy'])}</td></tr>")
    o.append("</table><p class='muted'>Decodability columns: out-of-fold probe accuracy on the held-out "
             "compositions' items; chance 1/6 (colour), 1/4 (shape); control = accuracy on random labels per "
             "composition (all items). Accuracy far <i>below</i> chance means the constituent is not encoded: "
             "with grouped CV the probe then predicts from the other constituent, and the training folds hold "
             "that colour only with the other shapes (and vice versa). Training samples of each model (the "
             "trainer's fixed grid): <code>models/&lt;model&gt;_samples/</code>.</p>")

    o.append("<h2>Exploration: every hooked layer (Holm-corrected)</h2><table><tr><th class='l'>layer</th>"
             "<th>decodability vs coverage ρ [CI]</th><th>Holm p</th><th>claim 2, held-out ρ [CI]</th>"
             "<th>Holm p</th><th>claim 2, all compositions ρ [CI]</th><th>Holm p</th></tr>")
    for layer in agg["layers"]:
        rows = []
        for block in (dvc, c2, c2all):
            r = block["headline"] if layer == L else block["exploration"][layer]
            s = r["spearman"]
            holm_p = "pre-registered" if layer == L else _f(s.get("p_holm"), 3)
            rows.append(f"<td>{_f(s['r'])} {_ci(s['ci'])}</td><td>{holm_p}</td>")
        o.append(f"<tr><td class='l'>{'<b>' if layer == L else ''}{escape(layer)}{'</b>' if layer == L else ''}"
                 f"</td>{''.join(rows)}</tr>")
    o.append("</table>")

    if grids:
        o.append("<h2>Samples</h2><p class='muted'>Sample 0 of each prompt; rows: colours (red, green, blue, "
                 "yellow, purple, orange), columns: shapes (circle, square, triangle, cross). Held-out pairs: "
                 f"{escape(', '.join(design['heldout_pairs']))}.</p><div class='thumbs'>")
        for name, b64 in grids.items():
            o.append(f"<figure><img alt='{escape(name)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption>{escape(name)}</figcaption></figure>")
        o.append("</div>")
    o.append(f"<p class='muted'>Every number: <a href='sweep.json'>sweep.json</a>. Created {escape(res['created'])} "
             "by <code>t2i-audit mini sweep</code>.</p></body></html>")
    return str(Markup("".join(o)))
