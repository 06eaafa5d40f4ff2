"""The one-run report: tables from the run's files → a context → one page that opens offline (CSS/JS inlined; the
thumbnails it shows lie beside it in ``thumbs/``).

jinja2 renders with ``autoescape=True``: every text from a suite, a model or a scorer is
escaped; only our own CSS/JS and the SVG built in :mod:`charts` (which escapes its texts)
are marked safe.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path

import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .. import analysis, stats
from . import charts
from .early_view import early_section
from .probes_view import probes_section
from .random_weights import random_weights_note
from .tables import RunData
from .thumbs import Thumbs

HERE = Path(__file__).parent
GALLERY_MAX = 600        # failure cards on the page (worst compositions first)
DISAGREE_MAX = 120       # scorer disagreements listed
HEAT_COLS_MAX = 40


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda v: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0%}"
    env.filters["pct1"] = lambda v: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1%}"
    env.filters["num"] = lambda v, d=3: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"
    env.filters["ci_bar"] = lambda r, width=160: charts.ci_bar(r["rate"], r["lo"], r["hi"], width)
    env.filters["ci_text"] = lambda r: analysis.ci_text(r["lo"], r["hi"])  # the one CI formatter of a rate
    env.filters["tojson_attr"] = lambda v: json.dumps(v, ensure_ascii=False)
    env.filters["diff_bar"] = lambda d: charts.diff_bar(d["diff"], d["lo"], d["hi"], significant=d.get("significant", False))
    env.filters["signed"] = lambda v: "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.1%}"
    env.globals["too_few"] = stats.too_few  # the one small-sample rule for every AUROC, rate and κ shown
    env.globals["rate_colour"] = charts.rate_colour
    env.globals["failure_colour"] = charts.failure_colour
    return env


def static_assets() -> dict:
    return {"css": Markup((HERE / "static" / "report.css").read_text()),
            "js": Markup((HERE / "static" / "report.js").read_text())}


def _records(df: pd.DataFrame) -> list[dict]:
    return df.to_dict("records") if len(df) else []


def headline(data: RunData) -> dict:
    im = data.images_df
    cats = analysis.rate_table(im, "category")
    tmpl = analysis.rate_table(im, ["category", "template"])
    rows = []
    for c in _records(cats):
        c["templates"] = [t for t in _records(tmpl) if t["category"] == c["category"]]
        rows.append(c)
    splits = []
    if "split" in im and im["split"].nunique() > 1:  # seen vs held-out compositions, the audit's key contrast
        by_cat = _records(analysis.rate_table(im, ["category", "split"]))
        for r in _records(analysis.rate_table(im, "split")):
            r["categories"] = [c for c in by_cat if c["split"] == r["split"]]
            splits.append(r)
    return {"overall": _records(analysis.rate_table(im, None))[0], "categories": rows, "splits": splits}


def heatmap(df: pd.DataFrame, row: str, col: str, title: str, note: str = "") -> dict | None:
    df = df[df["verdict"].notna() & df[row].notna() & df[col].notna()]
    if df.empty:
        return None
    df = df.assign(**{row: df[row].astype(str), col: df[col].astype(str)})
    cell = {(r[row], r[col]): r for r in _records(analysis.rate_table(df, [row, col]))}
    margin = {r[row]: r for r in _records(analysis.rate_table(df, row))}
    cols = list(df[col].value_counts().index[:HEAT_COLS_MAX])
    cols.sort()
    truncated = df[col].nunique() > len(cols)
    rows = []
    for rv in sorted(margin, key=lambda v: (_num_key(v), v)):
        cells = [_cell(margin[rv])] + [_cell(cell.get((rv, cv))) for cv in cols]
        rows.append({"label": rv, "cells": cells})
    return {"title": title, "note": note, "row_label": row, "cols": ["all"] + cols,
            "rows": rows, "truncated": truncated}


def _num_key(v: str):
    try:
        return (0, float(v))
    except ValueError:
        return (1, 0.0)


def _cell(r: dict | None) -> dict:
    if r is None:
        return {"text": "", "bg": "#f1f1f4", "fg": "#999", "title": "no data"}
    why = stats.too_few("rate", n=int(r["n"]), items="questions")
    if why:  # the counts, never a rate: grey like no data
        return {"text": f"{r['k']}/{r['n']}", "bg": "#f1f1f4", "fg": "#777", "title": f"{r['k']}/{r['n']}: {why}"}
    bg, fg = charts.rate_colour(r["rate"])
    return {"text": f"{r['rate']:.0%}", "bg": bg, "fg": fg,
            "title": f"{r['k']}/{r['n']} = {analysis.rate_text(r['rate'], r['lo'], r['hi'])}"}


def heatmaps(data: RunData) -> list[dict]:
    q = data.questions_df
    if q.empty:
        return []
    out = []
    attr = q[q["kind"] == "attribute"]
    for fam in sorted(attr["family"].dropna().unique()):
        out.append(heatmap(attr[attr["family"] == fam], "value", "object",
                           f"{fam} × object", f"share of “is the object {fam}?” questions passed"))
    rel = q[q["kind"] == "relation"]
    out.append(heatmap(rel, "value", "subject", "relation × subject object",
                       "share of relation questions passed"))
    cnt = q[q["kind"] == "count"]
    cnt = cnt.assign(number=cnt["number"].map(lambda v: None if v is None or v != v else str(int(v))))
    out.append(heatmap(cnt, "number", "object", "count × object",
                       "share of “exactly n?” questions passed"))
    ex = q[q["kind"] == "exists"]
    out.append(heatmap(ex, "category", "object", "object presence × category",
                       "share of “is there …?” questions passed"))
    return [h for h in out if h]


def failure_section(data: RunData) -> dict:
    fc = analysis.failure_counts(data.images_df) if len(data.images_df) else pd.DataFrame()
    rows, types = [], set()
    if len(fc):
        for cat, g in fc.groupby("category", sort=True):
            segs = [(t, int(n)) for t, n in zip(g["type"], g["images"]) if t]
            segs.sort(key=lambda s: (charts.FAILURE_ORDER.index(s[0]) if s[0] in charts.FAILURE_ORDER else 99, s[0]))
            types.update(t for t, _ in segs)
            rows.append({"category": cat, "failed": int(g["failed"].iloc[0]),
                         "scored": int(g["scored"].iloc[0]), "segments": segs,
                         "bar": charts.stacked_bar(segs) if segs else Markup("")})
    order = [t for t in charts.FAILURE_ORDER if t in types] + sorted(types - set(charts.FAILURE_ORDER))
    return {"rows": rows, "types": order}


def _concepts_of(p: dict) -> list[str]:
    return sorted({str(v) for v in (p.get("slots") or {}).values()})


def _qverdicts(data: RunData, scorer: str | None, pid: str, sample: int) -> list[dict]:
    p = data.prompts[pid]
    sd = data.scorers.get(scorer) if scorer else None
    out = []
    for q in p.get("questions", []):
        state = sd.question(pid, sample, q.get("id")) if sd else {"verdict": None, "value": None, "skipped_by": []}
        out.append({"text": q.get("text"), "kind": q.get("kind"), **state})
    return out


def gallery(data: RunData, thumbs: Thumbs, out_dir: Path, progress: bool) -> dict:
    im = data.images_df
    scored = im[im["verdict"].notna()]
    if scored.empty:
        return {"cards": [], "failed": 0, "shown": 0, "categories": [], "types": [], "concepts": [],
                "worst": []}
    comp = analysis.rate_table(scored, ["template", "composition"])
    crate = {(r["template"], r["composition"]): r for r in _records(comp)}
    failed = scored[scored["verdict"] == False].copy()  # noqa: E712
    failed["_rate"] = [crate[(t, c)]["rate"] for t, c in zip(failed["template"], failed["composition"])]
    failed["_n"] = [crate[(t, c)]["n"] for t, c in zip(failed["template"], failed["composition"])]
    failed = failed.sort_values(["_rate", "_n", "template", "composition", "prompt_id", "sample"],
                                ascending=[True, False, True, True, True, True])
    by_key = {(r["prompt_id"], r["sample"]): r for r in _records(im[["prompt_id", "sample", "path", "sha256", "verdict", "failure_types"]])}
    rows = _records(_gallery_pick(failed, GALLERY_MAX))
    it = rows
    if progress and len(rows) > 200:
        from tqdm import tqdm
        it = tqdm(rows, desc="thumbnails", unit="img", leave=False)
    cards = []
    for r in it:
        p = data.prompts[r["prompt_id"]]
        cr = crate[(r["template"], r["composition"])]
        twin = None
        tp = data.prompts.get(p.get("twin") or "")
        if tp is not None:
            t = by_key.get((tp["id"], r["sample"]))
            twin = {"text": tp.get("text"), "verdict": t["verdict"] if t else None,
                    "failure_types": t["failure_types"] if t else [],
                    "thumb": thumbs.ensure(data.rd.root / t["path"], t["sha256"]) if t else None,
                    "href": _rel(data.rd.root / t["path"], out_dir) if t else None}
        cards.append({
            "prompt_id": r["prompt_id"], "sample": r["sample"], "seed": r["seed"],
            "text": r["text"], "category": r["category"], "template": r["template"],
            "comp": f"{cr['k']}/{cr['n']}", "comp_rate": cr["rate"],
            "failure_types": r["failure_types"], "failures": r["failures"],
            "questions": _qverdicts(data, data.scorer_of(r["category"]), r["prompt_id"], r["sample"]),
            "concepts": _concepts_of(p), "twin": twin,
            "thumb": thumbs.ensure(data.rd.root / r["path"], r["sha256"]),
            "href": _rel(data.rd.root / r["path"], out_dir)})
    worst = sorted(crate.values(), key=lambda c: (c["rate"], -c["n"]))[:12]
    return {"cards": cards, "failed": len(failed), "shown": len(cards),
            "categories": sorted({c["category"] for c in cards}),
            "types": sorted({t for c in cards for t in c["failure_types"]}),
            "concepts": sorted({x for c in cards for x in c["concepts"]}), "worst": worst}


def _gallery_pick(failed: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The worst ``limit`` failures, but every category gets its share so filters never
    come up empty for a category that failed; page order stays worst-first."""
    if len(failed) <= limit:
        return failed
    cats = failed["category"].nunique()
    picked = failed.groupby("category", sort=False, group_keys=False).head(max(1, limit // cats))
    rest = failed.drop(picked.index)
    picked = pd.concat([picked, rest.head(limit - len(picked))])
    return failed.loc[failed.index.isin(picked.index)]


def page_href(path: Path, start: Path) -> str:
    """A link from a page in ``start`` to ``path``: relative, URL-quoted and starting with ``./`` or ``../``, so a
    folder or file named from data (a run folder called ``javascript:alert(1)``, a ``#`` or ``?`` in a name) is
    always a path, never a scheme, a fragment or a query. Every href a page builds from data goes through here."""
    from urllib.parse import quote

    rel = quote(Path(os.path.relpath(path, start)).as_posix(), safe="/")  # ':' → %3A: no scheme survives
    return rel if rel.startswith("../") else "./" + rel


_rel = page_href


def scorer_section(data: RunData, thumbs: Thumbs, out_dir: Path) -> dict:
    names = sorted(data.scorers)
    im, q = data.images_df, data.questions_df
    rates = []
    for n in names:
        r = _records(analysis.rate_table(im, None, verdict=f"verdict:{n}"))[0]
        decides = sorted(str(c) for c, d in data.deciding.items() if d.get("scorer") == n)
        r.update(name=n, model=data.scorers[n].model, primary=bool(decides), decides=decides)
        rates.append(r)
    pairs, disagreements = [], []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            img = analysis.agreement(im[f"verdict:{a}"], im[f"verdict:{b}"])
            qa = analysis.agreement(q[f"{a}.verdict"], q[f"{b}.verdict"]) if len(q) else analysis.agreement([], [])
            kinds = []
            if len(q):
                for kind, g in q.groupby("kind", sort=True):
                    kinds.append({"kind": kind, **analysis.agreement(g[f"{a}.verdict"], g[f"{b}.verdict"])})
            pairs.append({"a": a, "b": b, "image": img, "question": qa, "kinds": kinds})
    if len(names) >= 2 and len(im):
        cols = [f"verdict:{n}" for n in names]
        for r in _records(im):
            vs = [r[c] for c in cols if r[c] is not None]
            if len(set(vs)) > 1:
                qs = []
                for qq in data.prompts[r["prompt_id"]].get("questions", []):
                    v = {n: data.scorers[n].questions.get((r["prompt_id"], r["sample"], qq["id"]), (None,))[0]
                         for n in names}
                    if len({x for x in v.values() if x is not None}) > 1:
                        qs.append({"text": qq.get("text"), "verdicts": [v[n] for n in names]})
                disagreements.append({"text": r["text"], "prompt_id": r["prompt_id"],
                                      "sample": r["sample"], "category": r["category"],
                                      "verdicts": [r[c] for c in cols], "questions": qs,
                                      "thumb": None, "row": r})
        for d in disagreements[:DISAGREE_MAX]:
            d["thumb"] = thumbs.ensure(data.rd.root / d["row"]["path"], d["row"]["sha256"])
            d["href"] = _rel(data.rd.root / d["row"]["path"], out_dir)
    return {"names": names, "rates": rates, "pairs": pairs, "disagree_total": len(disagreements),
            "disagreements": disagreements[:DISAGREE_MAX]}


def scoring_section(data: RunData) -> dict:
    """Whether scoring ran, each scorer's judge protocol, and what each declined ("unsupported" is not
    "not run": a scorer that answers no question of a run still ran, and the page says why it gave no verdict)."""
    from ..scorers.protocols import declined, declined_text, run_protocols

    d = data.rd.scores_dir
    dec = declined(d) if d.is_dir() else {}
    prot = run_protocols(d) if d.is_dir() else {}
    return {"ran": bool(data.scorers),
            "protocols": {k: ", ".join(sorted(v)) for k, v in sorted(prot.items())},
            "declined": [{"name": n, "text": declined_text(n, s), "all": s["declined"] == s["asked"]}
                         for n, s in sorted(dec.items()) if s["declined"]]}


def _flatten(d, prefix="", depth=0) -> list[tuple[str, str]]:
    out = []
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and depth < 2 and v:
            out += _flatten(v, key + ".", depth + 1)
        else:
            out.append((key, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)))
    return out


def manifest_section(data: RunData) -> dict:
    from ..shareable import shareable

    m = shareable(dict(data.manifest), data.rd.root)  # the page is shared: no absolute path of this machine
    stages = m.pop("stages", {}) or {}
    flags: dict[str, int] = {}
    for imr in data.images:
        for f in imr.get("flags") or []:
            flags[f] = flags.get(f, 0) + 1
    return {"rows": _flatten(m), "stages": [(k, _flatten(v) if isinstance(v, dict) else [("", str(v))])
                                              for k, v in stages.items()],
            "flags": sorted(flags.items()), "images": len(data.images)}


def build_context(data: RunData, out_dir: Path, thumbs: Thumbs, progress: bool = False) -> dict:
    im = data.images_df
    return {
        "title": f"{data.label} · {', '.join(data.suites)}",
        "model": data.label, "suites": data.suites, "scorer": data.scorer,
        "random_weights": random_weights_note([data.manifest]),
        "deciding": deciding_rows(data),
        "verdict_sources": sorted({d["scorer"] for d in data.deciding.values() if d.get("scorer")}),
        "run_name": data.rd.root.name,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "n_prompts": len(data.prompts), "n_images": len(im),
        "n_scored": int(im["verdict"].notna().sum()) if len(im) else 0,
        "n_flagged": int(im["flags"].map(bool).sum()) if len(im) else 0,
        "headline": headline(data) if data.scorer and len(im) else None,
        "heatmaps": heatmaps(data) if data.scorer else [],
        "legend": charts.legend_gradient(),
        "failures": failure_section(data) if data.scorer else {"rows": [], "types": []},
        "concepts": _records(analysis.concept_rates(im, data.prompts).sort_values(["rate", "n"], ascending=[True, False]).head(30)) if data.scorer and len(im) else [],
        "gallery": gallery(data, thumbs, out_dir, progress),
        "scorers": scorer_section(data, thumbs, out_dir),
        "scoring": scoring_section(data),
        "probes": probes_section(data.rd.probes_dir),
        "early": early_section(data.rd, thumbs, out_dir, _rel),
        "manifest": manifest_section(data),
        "source": source_section(data),
        **static_assets(),
    }


def source_section(data: RunData) -> dict:
    """Where the images came from (t2i_audit/sources): refusals counted apart, sections that need the weights."""
    from ..shareable import shareable
    from ..sources.recording import report_section

    return shareable(report_section(data.rd, data.manifest), data.rd.root)  # shared, as the manifest section


def deciding_rows(data: RunData) -> list[dict]:
    """Which scorer decided each category of this run, and why (t2i_audit.deciding)."""
    from ..deciding import table

    cats = set(data.images_df["category"]) if len(data.images_df) else set(data.deciding)
    return table({c: d for c, d in sorted(data.deciding.items(), key=lambda kv: str(kv[0])) if c in cats})


def render(template: str, ctx: dict) -> str:
    return environment().get_template(template).render(**ctx)
