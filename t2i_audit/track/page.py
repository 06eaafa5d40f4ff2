"""The track page (``TRACK/index.html``, self-contained, opens offline) and its data: ``curves.json``,
``success.parquet`` / ``.csv``, ``decodability.parquet`` / ``.csv``. Built from files only, with the run report's
templates, styles and charts (t2i_audit/report)."""

from __future__ import annotations

import base64
import datetime as _dt
import io
from pathlib import Path
from typing import Optional

from . import index as ix
from .curves import N_BOOT, load_points, summarize

THUMBS_PER_ROW = 8
THUMB_MAX_PX = 64
SPLIT_NAMES = {"all": "all", "train": "seen", "heldout": "held-out"}


def write_track_page(root: Path, *, chance: Optional[float] = None, folds: int = 5, progress: bool = False,
                     dest: Optional[Path] = None) -> dict:
    """Analyse the track's runs and write the page and its tables into the track (or ``dest``: a copy to publish,
    without the links into the runs, which stay behind); returns the summary (curves.json)."""
    import pandas as pd

    from ..report.tables import write_tables
    from ..rundir import atomic_write_json, atomic_write_text
    from ..shareable import shareable

    root = Path(root)
    points = load_points(root, folds=folds, progress=progress)
    summary = summarize(points, chance=chance)
    summary["folds"] = folds
    index = ix.load_index(root)
    summary["skipped"] = [s.model_dump() for s in index.skipped]
    summary["failed"] = [{"label": e.label, "error": e.error} for e in index.entries if e.status == "failed"]
    out = Path(dest) if dest is not None else root
    # what is published names the checkpoints' folders relative to it (or ~), not by this machine's absolute paths
    summary = shareable(summary, out)
    atomic_write_json(out / "curves.json", summary)
    succ = [{"label": c["label"], "step": c["step"], **{k: v for k, v in r.items() if k != "ci"},
             "lo": r["ci"][0], "hi": r["ci"][1]} for c in summary["checkpoints"] for r in c["success"]]
    dec = [{"label": c["label"], "step": c["step"], **{k: v for k, v in r.items() if k != "ci"},
            "lo": r["ci"][0], "hi": r["ci"][1]} for c in summary["checkpoints"] for r in c["decodability"]]
    write_tables(pd.DataFrame(succ), out, "success")
    write_tables(pd.DataFrame(dec), out, "decodability")
    atomic_write_text(out / "index.html", render_page(root, points, summary, index, links=out == root, out=out))
    return summary


def _chart_series(checkpoints: list[dict], pick, colour: str, label: str, dash: bool = False) -> Optional[dict]:
    vals = [pick(c) for c in checkpoints]
    if all(v is None for v in vals):
        return None
    ys = [v["rate"] if v else None for v in vals]
    band = ([v["ci"][0] if v else None for v in vals], [v["ci"][1] if v else None for v in vals])
    return {"label": label, "ys": ys, "colour": colour, "band": band, "dash": dash}


def _row(rows: list[dict], **want) -> Optional[dict]:
    return next((r for r in rows if all(r.get(k) == v for k, v in want.items())), None)


def _decod(rows: list[dict], source: str, split: str) -> Optional[dict]:
    r = _row(rows, source=source, target="all", split=split)
    return {"rate": r["p_true"], "ci": r["ci"]} if r else None


def render_page(root: Path, points, summary: dict, index: ix.Index, *, links: bool = True,
                out: Optional[Path] = None) -> str:
    from ..report import charts
    from ..report.html import render, static_assets
    from ..shareable import shareable

    cps = summary["checkpoints"]
    xs = [c["label"] if c["step"] is None or c["label"] == "final" else
          ("base" if c["label"] == "base" else str(c["step"])) for c in cps]
    P = charts.PALETTE
    has_heldout = any(_row(c["success"], category="all", split="heldout") for c in cps)
    splits = ["all", "train", "heldout"] if has_heldout else ["all"]
    series = [x for x in (_chart_series(cps, lambda c, s=s: _row(c["success"], category="all", split=s), P[i],
                                        SPLIT_NAMES[s]) for i, s in enumerate(splits)) if x]
    chance = (summary.get("crossing") or {}).get("chance")
    refs = [(chance, "chance")] if chance is not None else []
    success_chart = charts.line_chart(xs, series, x_label="training step", y_label="success", refs=refs, width=720)
    cats = sorted({r["category"] for c in cps for r in c["success"] if r["category"] != "all"})
    cat_series = [x for x in (_chart_series(cps, lambda c, k=k: _row(c["success"], category=k, split="all"),
                                            P[i % len(P)], k) for i, k in enumerate(cats)) if x]
    category_chart = charts.line_chart(xs, cat_series, x_label="training step", y_label="success", width=720) \
        if len(cats) > 1 else None
    decod_charts = _decod_charts(cps, xs, summary.get("headline_source"), has_heldout)
    first = points[0].run if points else None
    ctx = {
        "title": f"track · {first.model if first else root.name}",
        "model": shareable(index.settings.get("model", first.model if first else ""), out or root),
        "suites": first.suites if first else [], "n_points": len(cps),
        "scorers": sorted({d.get("scorer") for p in points for d in p.run.deciding.values() if d.get("scorer")}),
        "hero": _hero(summary, cps), "success_keys": series, "success_chart": success_chart,
        "has_heldout": has_heldout, "category_charts": bool(category_chart), "category_chart": category_chart,
        "category_keys": cat_series, "decod_charts": decod_charts,
        "crossing": _crossing_view(summary, cps), "chance_from": summary.get("chance_from", ""),
        "rise": _rise_view(summary.get("rise")),
        "split_cols": [SPLIT_NAMES[s] for s in splits], "rows": _rows(points, cps, splits, summary, links),
        "decod_col": f"held-out {summary['headline_source'].split(':', 1)[1]}" if summary.get("headline_source")
        else "decodability",
        "thumbs_per_row": THUMBS_PER_ROW, "skipped": summary.get("skipped", []) + [
            {"label": f["label"], "reason": f["error"]} for f in summary.get("failed", [])],
        "n_boot": N_BOOT, "samples": index.settings.get("denoiser_samples", "—"),
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        **static_assets(),
    }
    ctx["css"] = ctx["css"] + "img.px{image-rendering:pixelated;margin:1px;border:1px solid #e2e4ea}td.thumbs{white-space:nowrap}"
    return render("track.html.j2", ctx)


def _decod_charts(cps: list[dict], xs: list, headline: Optional[str], has_heldout: bool) -> list[dict]:
    from ..report import charts

    sources = sorted({r["source"] for c in cps for r in c["decodability"]})
    # the headline denoiser layer and each text encoder's conditioning layer; every other block is in the tables
    shown = [s for s in sources if s == headline] + [s for s in sources if s.startswith("text:")]
    out = []
    for source in shown:
        splits = ("train", "heldout") if has_heldout else ("all",)
        series = [x for x in (_chart_series(cps, lambda c, s=s: _decod(c["decodability"], source, s), charts.PALETTE[i],
                                            SPLIT_NAMES[s]) for i, s in enumerate(splits)) if x]
        chances = [r.get("chance_uniform") for c in cps for r in c["decodability"]
                   if r["source"] == source and r["target"] != "all" and r["split"] == "all"]
        chances = [x for x in chances if x is not None]
        refs = [(sum(chances) / len(chances), "chance")] if chances else []
        kind, _, name = source.partition(":")
        title = f"{'Denoiser' if kind == 'denoiser' else 'Text encoder'} {name}" + (" (headline)" if source == headline else "")
        out.append({"title": title, "legend": series, "chart": charts.line_chart(
            xs, series, x_label="training step", y_label="p(true value)", refs=refs, width=720)})
    return out


def _hero(summary: dict, cps: list[dict]) -> list[dict]:
    from ..analysis import ci_text

    out = []
    split = "heldout" if any(_row(c["success"], category="all", split="heldout") for c in cps) else "all"
    for c in (cps[0], cps[-1]) if cps else ():
        r = _row(c["success"], category="all", split=split)
        if r:
            out.append({"label": f"{SPLIT_NAMES[split]} · {c['label']}", "value": f"{r['rate']:.0%}",
                        "note": ci_text(*r["ci"])})
    cr = summary.get("crossing")
    if cr:
        out.append({"label": "exceeds chance at", "value": _label_at(cps, cr.get("index")) or "never",
                    "note": f"chance {cr['chance']:.1%}"})
    rise = summary.get("rise")
    if rise:
        out.append({"label": "decodability vs success", "value": rise["decision"], "note": "half-rise lead"})
    return out


def _label_at(cps, i) -> Optional[str]:
    return None if i is None else cps[i]["label"]


def _crossing_view(summary: dict, cps: list[dict]) -> Optional[dict]:
    cr = summary.get("crossing")
    if not cr:
        return None
    lo, hi = cr.get("step_ci") or [None, None]
    text = f"steps {lo if lo is not None else 'never'}–{hi if hi is not None else 'never (within these checkpoints)'}"
    base = summary.get("crossing_base")
    vs_base = None
    if base:
        at = _label_at(cps, base.get("index"))
        vs_base = (f"against the base model's own held-out success ({base['chance']:.1%}): "
                   + (f"first above it at {at}, {base['rate']:.1%} [{base['ci'][0]:.1%}, {base['ci'][1]:.1%}]" if at
                      else "never above it with its 95 % CI"))
    return {**cr, "label": _label_at(cps, cr.get("index")), "step_text": text, "vs_base": vs_base}


def _rise_view(rise: Optional[dict]) -> Optional[dict]:
    if not rise:
        return None
    rows = [{"name": name, "first": rise[name]["curve"][0], "last": rise[name]["curve"][-1], "gain": rise[name]["gain"],
             "gain_ci": rise[name]["gain_ci"], "rises": rise[name]["rises"], "half": rise[name]["half_rise_step"]}
            for name in ("success", "decodability")]
    lead, ci = rise["lead"]["steps"], rise["lead"]["ci"]
    lead_text = "undefined (a curve does not rise)" if lead is None else (
        f"{lead:+d} steps" + (f" [{ci[0]:+.0f}, {ci[1]:+.0f}]" if ci[0] is not None else ""))
    return {"rows": rows, "lead_text": lead_text, "decision": rise["decision"], "source": rise["source"],
            "n_groups": rise["n_groups"]}


def _rows(points, cps: list[dict], splits: list[str], summary: dict, links: bool) -> list[dict]:
    from ..report import charts

    head = summary.get("headline_source")
    out = []
    for p, c in zip(points, cps):
        cells = []
        for s in splits:
            r = _row(c["success"], category="all", split=s)
            cells.append({"rate": r["rate"], "lo": r["ci"][0], "hi": r["ci"][1]} if r else None)
        counts: dict = {}
        for f in c["failures"]:
            if f.get("type"):
                counts[f["type"]] = counts.get(f["type"], 0) + int(f["images"])
        d = _decod(c["decodability"], head, "heldout") if head else None
        out.append({"label": c["label"], "step": c["step"], "layout": c["layout"], "ema": c["ema"], "splits": cells,
                    "failures": charts.stacked_bar(sorted(counts.items()), width=180) if counts else "",
                    "decod": d["rate"] if d else None, "thumbs": _thumbs(p), "run": _run_href(c["run"]) if links and c["run"] else None})
    return out


def _run_href(run: str) -> str:
    """The link to a checkpoint's run report (``runs/<label>``: named after the checkpoint folder, so made safe)."""
    from ..report.html import page_href

    return page_href(Path(run) / "report" / "index.html", Path("."))


def _thumbs(point) -> list[dict]:
    """The first sample of up to THUMBS_PER_ROW prompts (held-out first), as data URIs (the page stands alone)."""
    from PIL import Image

    df = point.run.images_df
    df = df[df["sample"] == 0]
    df = df.assign(_h=(df["split"] != "heldout")).sort_values(["_h", "prompt_id"]).head(THUMBS_PER_ROW)
    out = []
    for path, text in zip(df["path"], df["text"]):
        try:
            with Image.open(point.run.rd.root / path) as im:
                im = im.convert("RGB")
                if max(im.size) > THUMB_MAX_PX:
                    im.thumbnail((THUMB_MAX_PX, THUMB_MAX_PX))
                buf = io.BytesIO()
                im.save(buf, format="PNG")
        except OSError:
            continue
        out.append({"src": "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(), "alt": text,
                    "w": max(32, im.size[0])})
    return out
