"""The sweep's HTML page: self-contained (inline CSS, inline SVG charts, PNG grids as data URIs),
every number read from the sweep.json dict it is given."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from ..report.charts import PALETTE, line_chart, scatter

CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:24px auto;padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f7}td.l,th.l{text-align:left}.muted{color:#777}.warn{background:#fff4d6;padding:8px;border:1px solid #e6c65c}
tr.unfit td{background:#fbe9e9}.grid{stroke:#e6e6ea}.tl{font-size:10px;fill:#555}.al{font-size:11px;fill:#333}
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


def verdict(s: dict, y: str, x: str) -> str:
    if s["r"] is None or s["ci"][0] is None:
        return f"undetermined ({y} or {x} does not vary enough)."
    if s["ci"][0] > 0:
        return f"{y} rises with {x} (95 % CI of ρ above 0)."
    if s["ci"][1] < 0:
        return f"{y} FALLS with {x} (95 % CI of ρ below 0)."
    return f"no evidence of a monotone relation between {y} and {x} (95 % CI of ρ includes 0)."


def _rate(r: dict) -> str:
    return f"{_f(r['rate'])} {_ci(r['ci'])} <span class='muted'>({r['k']}/{r['n']})</span>"


def _design(res: dict) -> list[str]:
    cfg, design = res["config"], res["design"]
    covs = ", ".join(f"{c:.3g}" for c in cfg["coverages"])
    return [
        "<h2>Design</h2><ul>",
        f"<li>Space: {escape(design['space'])}. Held-out pairs, seen by <b>no</b> model: "
        f"{escape(', '.join(design['heldout_pairs']))}.</li>",
        f"<li>Coverage: {escape(design['coverage'])}. Coverages {escape(covs)}; seeds {escape(str(cfg['seeds']))}.</li>",
        f"<li>Scale: {escape(design['scale'])}; widths {escape(str(cfg['widths']))}.</li>",
        f"<li>Training (every model alike): {escape(design['compute'])}, AdamW lr {cfg['lr']} ({escape(cfg['lr_schedule'])}"
        f" after {cfg['warmup']} warmup steps), {escape(cfg['prediction_type'])} prediction, EMA {cfg['ema_decay']}, "
        f"text encoder width {cfg['text_width']} × {cfg['text_layers']} layers trained jointly, one CPU thread.</li>",
        f"<li>Evaluation: the 24 prompts × {cfg['samples']} judged samples, same seeds for every model, "
        f"{cfg['eval_steps']} DDIM steps, guidance {cfg['guidance']}; success = pixel judge (right shape in the right "
        "colour); 95 % Wilson intervals.</li>",
        f"<li><b>Fit</b>: {escape(design['fit'])}.</li>",
        f"<li>Decodability: linear probes per UNet block × sampling step (first / middle / last) for colour and shape, "
        f"grouped CV by composition ({cfg['n_splits']} folds over all 24 compositions, so a held-out composition is "
        "never in its probe's training fold), beside chance and a control task (one random label per composition); "
        f"read from {cfg.get('decode_samples', 0)} <b>other seeds</b> per prompt than the judged ones, beside a "
        "<b>text-encoder-only</b> reference (the same probe on the conditioning the UNet receives) and the headline "
        "probe on the judged seeds' own trajectories.</li>",
        "<li><b>The link is read within coverage</b>: success and decodability both rise with coverage, so pooled "
        "over coverages they correlate through coverage alone. Headline: Spearman within coverage (ranks centred "
        "per coverage), p from shuffles within coverage, CI resampling the held-out compositions; each coverage's "
        "ρ and the pooled ρ beside it.</li>",
        f"<li><b>Pre-registered headline layer: <code>{escape(design['headline_layer'])}</code></b> (UNet mid block, "
        f"middle sampling step); every other layer is exploration with Holm-corrected p-values. "
        f"{escape(design['preregistered'])}.</li></ul>",
    ]


def _within(res: dict) -> str:
    """A stratified_spearman result as one line: the within-stratum ρ, CI, p (shuffles), per stratum, pooled."""
    w = res["within"]
    if w.get("rho") is None:
        return "undefined (no variation within the strata)"
    per = ", ".join(f"{_f(p['stratum'])}: {_f(p['rho'])}" for p in res["per_stratum"])
    txt = f"ρ within {escape(res.get('strata', 'strata'))} = <b>{_f(w['rho'])}</b> {_ci(w.get('ci'))}"
    txt += f", p = {_f(w.get('p_perm'), 3)} ({w.get('n_perm')} shuffles within {escape(res.get('strata', 'strata'))}; "
    txt += f"observed at the {_f(100 * (w.get('observed_quantile_in_null') or 0), 1)} % point of the null), n = {res['n']}"
    return txt + f"; per {escape(res.get('strata', 'stratum'))}: {per}; pooled ρ = {_f(res['pooled']['rho'])} (beside)"


def _within_verdict(res: dict, y: str, x: str) -> str:
    w = res["within"]
    return verdict({"r": w["rho"], "ci": w.get("ci") or [None, None]}, y, x)


def _headline(agg: dict) -> list[str]:
    L = agg["headline_layer"]
    o = ["<h2>Headline (models that fit only)</h2><ul>"]
    for axis in ("coverage", "scale"):
        c = agg[f"heldout_success_vs_{axis}"]
        d = agg[f"decodability_vs_{axis}"]
        pooled = _corr_text(c["spearman_over_models"], c["spearman_ci_resampling_heldout_compositions"])
        o.append(f"<li><b>Held-out success vs {axis}</b> ({agg['n_models']} models): {_within(c['within'])}. "
                 f"<i>{escape(_within_verdict(c['within'], 'held-out success', axis))}</i> "
                 f"<span class='muted'>Pooled: {pooled}.</span></li>")
        o.append(f"<li>Held-out decodability (<code>{escape(L)}</code>) vs {axis}: {_within(d['within'])}.</li>")
    link = agg["decodability_success_link"]["readings"]
    den = link["denoiser"]
    o.append(f"<li><b>Decodability ↔ success per held-out composition, within coverage</b> (<code>{escape(L)}</code>, "
             f"other seeds than the judged): {_within(den)}. "
             f"<i>{escape(_within_verdict(den, 'success', 'decodability'))}</i></li>")
    names = {"text_encoder": "Text encoder only (what the conditioning already carries)",
             "judged_seeds": "Headline layer read from the judged seeds themselves (the earlier designs' reading)",
             "control": "Control task"}
    for key, label in names.items():
        if key in link:
            o.append(f"<li>{escape(label)}: {_within(link[key])}.</li>")
    o.append("</ul><table><tr><th>coverage</th><th>points</th><th>held-out success</th><th>denoiser decodability</th>"
             "<th>text-encoder decodability</th></tr>")
    for p in agg["decodability_success_link"]["per_coverage"]:
        o.append(f"<tr><td>{_f(p['coverage'])}</td><td>{p['n_points']}</td><td>{_f(p['success'])}</td>"
                 f"<td>{_f(p['denoiser_decodability'])}</td><td>{_f(p['text_decodability'])}</td></tr>")
    o.append("</table>")
    return o


def _charts(agg: dict) -> list[str]:
    L = agg["headline_layer"]
    per = agg["per_cell"]
    covs = sorted({p["coverage"] for p in per})
    widths = sorted({p["width"] for p in per})
    series = []
    for j, w in enumerate(widths):
        cells = {p["coverage"]: p for p in per if p["width"] == w}
        col = PALETTE[[5, 0, 2, 3][j % 4]]
        series.append({"label": f"held-out, w{w}", "colour": col,
                       "ys": [cells[c]["heldout"]["rate"] if c in cells else None for c in covs],
                       "band": ([cells[c]["heldout"]["ci"][0] if c in cells else None for c in covs],
                                [cells[c]["heldout"]["ci"][1] if c in cells else None for c in covs])})
        series.append({"label": f"held-out decodability {L}, w{w}", "colour": col, "dash": True,
                       "ys": [cells[c]["heldout_decodability"][L] if c in cells else None for c in covs]})
    o = ["<h2>Held-out success and decodability by coverage and width</h2><div class='figs'><div class='fig'>",
         str(line_chart([f"{c:.2f}" for c in covs], series, x_label="coverage (fraction of the 18 trainable pairs)",
                        y_label="rate", width=560, height=260)),
         "<br>solid: held-out success (Wilson 95 % band, seeds pooled) · dashed: held-out decodability at "
         f"{escape(L)} (mean p(true)); one colour per width</div>"]
    pts = [{"x": p["x"], "y": p["y"], "composition": f"{p['model']} {p['composition']}"}
           for p in agg["decodability_success_link"]["readings"]["denoiser"].get("points", [])]
    o.append("<div class='fig'>" + str(scatter(pts, x_label=f"decodability {L} (other seeds)", y_label="success")) +
             "<br>held-out compositions × models that fit (pooled here; the headline ρ is within coverage)</div></div>")
    o.append("<table><tr><th>width</th><th>coverage</th><th>seen pairs</th><th>models</th><th>held-out success</th>"
             "<th>seen success</th><th>outside coverage</th><th>held-out decodability " + str(escape(L)) + "</th></tr>")
    for p in per:
        o.append(f"<tr><td>{p['width']}</td><td>{_f(p['coverage'])}</td><td>{p['n_seen_pairs'][0]}</td>"
                 f"<td>{p['n_models']}</td><td>{_rate(p['heldout'])}</td><td>{_rate(p['seen'])}</td>"
                 f"<td>{_rate(p['uncovered'])}</td><td>{_f(p['heldout_decodability'][L])}</td></tr>")
    o.append("</table>")
    return o


def _models(res: dict, L: str) -> list[str]:
    o = ["<h2>Models</h2><table><tr><th class='l'>model (folder)</th><th>width</th><th>coverage</th><th>seed</th>"
         "<th>steps</th><th>CPU s (train)</th><th>fit</th><th>seen</th><th>held-out</th><th>outside coverage</th>"
         f"<th>colour acc. held-out ({escape(L)})</th><th>shape acc. held-out</th><th>control</th></tr>"]
    for m in res["models"]:
        link = f"<a href='{escape(m['folder'])}/'>{escape(m['name'])}</a>"
        head = f"<td class='l'>{link}</td><td>{m['width']}</td><td>{_f(m['coverage'])}</td><td>{m['seed']}</td>"
        if m["status"] != "evaluated":
            o.append(f"<tr>{head}<td colspan='9' class='l muted'>{escape(m['status'])}</td></tr>")
            continue
        e, d = m["eval"], m["eval"]["decodability"][L]
        fits = m["fit"]["fits"]
        o.append(f"<tr class='{'' if fits else 'unfit'}'>{head}<td>{m['train']['steps']}</td>"
                 f"<td>{_f(m['train']['cpu_seconds'], 0)}</td>"
                 f"<td>{'yes' if fits else '<b>NO — excluded</b>'}</td><td>{_rate(e['success']['seen'])}</td>"
                 f"<td>{_rate(e['success']['heldout'])}</td><td>{_rate(e['success']['uncovered'])}</td>"
                 f"<td>{_f(d['color']['heldout']['accuracy'])}</td><td>{_f(d['shape']['heldout']['accuracy'])}</td>"
                 f"<td>{_f(d['color']['control_accuracy'])} / {_f(d['shape']['control_accuracy'])}</td></tr>")
    o.append("</table><p class='muted'>Fit = success on the model's own training pairs ≥ the bar; a model below it "
             "is shown (red row) but left out of every claim above. Decodability columns: out-of-fold probe accuracy "
             "on the held-out compositions' items; chance 1/6 (colour), 1/4 (shape); control = accuracy on random "
             "labels per composition (all items). Training samples of each model (the trainer's fixed grid): "
             "<code>models/&lt;model&gt;_samples/</code>.</p>")
    return o


def _exploration(agg: dict) -> list[str]:
    L = agg["headline_layer"]
    blocks = [("decodability_vs_coverage", "vs coverage (pooled)"), ("decodability_vs_scale", "vs scale (pooled)")]
    link = agg["decodability_success_link"]
    o = ["<h2>Exploration: every hooked layer (Holm-corrected)</h2><table><tr><th class='l'>layer</th>"]
    o += [f"<th>{escape(t)} ρ [CI]</th><th>Holm p</th>" for _k, t in blocks]
    o.append("<th>↔ success within coverage ρ</th><th>Holm p</th></tr>")
    for layer in agg["layers"]:
        rows = []
        for key, _t in blocks:
            r = agg[key]["headline"] if layer == L else agg[key]["exploration"][layer]
            sp = r["spearman"]
            holm_p = "pre-registered" if layer == L else _f(sp.get("p_holm"), 3)
            rows.append(f"<td>{_f(sp['r'])} {_ci(sp['ci'])}</td><td>{holm_p}</td>")
        if layer == L:
            w = link["readings"]["denoiser"]["within"]
            rows.append(f"<td>{_f(w['rho'])} {_ci(w.get('ci'))}</td><td>pre-registered</td>")
        else:
            e = link["exploration"][layer]
            rows.append(f"<td>{_f(e['rho'])}</td><td>{_f(e['p_holm'], 3)}</td>")
        name = f"<b>{escape(layer)}</b>" if layer == L else escape(layer)
        o.append(f"<tr><td class='l'>{name}</td>{''.join(rows)}</tr>")
    o.append("</table>")
    return o


def render_page(res: dict, grids: dict[str, str]) -> str:
    agg, cfg = res["aggregate"], res["config"]
    o = [f"<!doctype html><html><head><meta charset='utf-8'><title>Mini-world sweep: coverage and scale</title>"
         f"<style>{CSS}</style></head><body>",
         "<h1>Coverage and scale → held-out success → decodability (mini world)</h1>",
         "<p>The claim of Redhardt, Akram &amp; Schug (2025) checked against ground truth: with enough coverage of "
         "the compositional space (and scale), networks generalise to compositions they never saw, and then the "
         "constituents are linearly decodable from their activations — decodability that tracks success. Here: the "
         "mini world's colour × shape space, the <b>denoiser's</b> (UNet) block activations, and only models that "
         "fit what they were taught.</p>"]
    n_done = sum(1 for m in res["models"] if m["status"] == "evaluated")
    if not res["complete"]:
        o.append(f"<p class='warn'>Incomplete: {n_done} of {res['models_expected']} models evaluated; the numbers "
                 "below use those only.</p>")
    if cfg.get("smoke"):
        o.append("<p class='warn'>SMOKE run (a few optimisation steps of a tiny model): the numbers are "
                 "meaningless; it only exercises the code path.</p>")
    if agg.get("excluded_unfit"):
        names = ", ".join(f"{e['name']} ({_f(e['seen_success'])})" for e in agg["excluded_unfit"])
        o.append(f"<p class='warn'>{len(agg['excluded_unfit'])} of {agg['n_models_evaluated']} evaluated models do "
                 f"not fit their own training pairs (seen success below {agg['fit_threshold']}) and are excluded "
                 f"from every claim: {escape(names)}.</p>")
    o += _design(res)
    cu = res.get("compute")
    if cu:
        o.append(f"<p class='muted'>Compute: {cu['models_counted']} models trained in {cu['train_cpu_seconds'] / 60:.0f} "
                 f"CPU-minutes and evaluated in {cu['eval_cpu_seconds'] / 60:.1f} (one thread each) — "
                 f"{cu['minutes_on_2_cores']:.0f} minutes on 2 cores with one job per core.</p>")
    if not agg.get("n_models"):
        o.append("<p>No model that fits has been evaluated yet: no claim is read.</p>")
    else:
        o += _headline(agg) + _charts(agg)
    if n_done:
        o += _models(res, agg.get("headline_layer") or res["design"]["headline_layer"])
    if agg.get("n_models"):
        o += _exploration(agg)
    if grids:
        o.append("<h2>Samples</h2><p class='muted'>Sample 0 of each prompt; rows: colours (red, green, blue, yellow, "
                 "purple, orange), columns: shapes (circle, square, triangle, cross). Held-out pairs: "
                 f"{escape(', '.join(res['design']['heldout_pairs']))}.</p><div class='thumbs'>")
        for name, b64 in grids.items():
            o.append(f"<figure><img alt='{escape(name)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption>{escape(name)}</figcaption></figure>")
        o.append("</div>")
    o.append(f"<p class='muted'>Every number: <a href='sweep.json'>sweep.json</a>. Created {escape(res['created'])} by "
             "<code>t2i-audit mini sweep</code>.</p></body></html>")
    return str(Markup("".join(o)))
