"""The board page: one self-contained HTML file (CSS/JS inlined, thumbnails beside it, opens offline), made with
the report's templates, charts and thumbnails (:mod:`t2i_audit.report`).

Per group: a table sortable by any category or failure type (click a column head, or ``#sort=c:<category>`` /
``#sort=f:<type>`` in the address), success with CI bars and rank intervals, a link to each run's own report;
how the group is set apart from the first; the paired differences; which judge decided each category. Then the
images where the runs of a group disagree, filterable by category and failure type, and every run's settings.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from .. import deciding as rule
from ..report import charts
from ..report.html import page_href, render, static_assets
from ..report.thumbs import Thumbs
from ..rundir import atomic_write_text
from . import readers, settings, store
from .chart import rank_chart
from .ranks import N_BOOT


_rel = page_href  # every link into a run made safe: relative, ./-prefixed, URL-quoted


def _cell(c: dict) -> dict:
    ok = c["n"] > 0
    return {**c, "sort": c["rate"] if ok else -1, "bar": charts.ci_bar(c["rate"], c["lo"], c["hi"], 90) if ok else "",
            "rank_text": "—" if c["rank"] is None else (f"{c['rank']}" if c["rank_lo"] == c["rank_hi"] == c["rank"]
                                                        else f"{c['rank']} [{c['rank_lo']}–{c['rank_hi']}]")}


def _failure_types(g: dict) -> list[str]:
    found = {f["type"] for r in g["rows"] for f in r["overall"]["failures"]}
    return [t for t in charts.FAILURE_ORDER if t in found] + sorted(found - set(charts.FAILURE_ORDER))


def _group_rows(g: dict, out: Path, types: list[str]) -> list[dict]:
    rows = []
    for r in sorted(g["rows"], key=lambda r: (r["overall"]["rank"] is None, r["overall"]["rank"] or 0)):
        e, o = r["entry"], r["overall"]
        report = store.run_root(out, e) / "report" / "index.html"
        counts = {f["type"]: f["images"] for f in o["failures"]}
        rows.append({"run_id": r["run_id"], "label": r["label"], "folder": e.get("folder"),
                     "settings": r.get("settings"), "study": r.get("study"),
                     "unchecked": [c for c in g["categories"] if r["categories"][c].get("judge_checked") is False],
                     "href": _rel(report, out) if report.is_file() else None,
                     "overall": _cell(o), "cats": [_cell(r["categories"][c]) for c in g["categories"]],
                     "fails": [{"type": t, "n": counts.get(t, 0),
                                "share": counts.get(t, 0) / o["n"] if o["n"] else 0.0} for t in types]})
    return rows


def _comparisons(g: dict, numbers: dict) -> list[dict]:
    labels = numbers["labels"]
    return [{**c, "label_a": labels[c["a"]], "label_b": labels[c["b"]]}
            for c in numbers["comparisons"] if c["group"] == g["name"]]


def _question_texts(out: Path, wanted: dict) -> dict:
    """{(run, prompt, sample, judge): [(question, verdict)]} for the images on disagreement cards (``wanted``: run
    id -> (entry, {(prompt, sample, judge)}))."""
    found: dict = {}
    for rid, (e, keys) in wanted.items():
        rec = e["files"]["questions"]
        q = readers.read_table(out / rec["path"], rec["sha256"])
        q = q[q["prompt_id"].isin({k[0] for k in keys})]
        for pid, s, judge, text, v in zip(q["prompt_id"], q["sample"], q["judge"], q["question"], q["verdict"]):
            if (pid, int(s), judge) in keys:
                found.setdefault((rid, pid, int(s), judge), []).append((text, v))
    return found


def _card_rows(g: dict) -> dict:
    """{(key, sample): rows of the group's verdicts for that image, by run} for the disagreement cards."""
    v = g["verdicts"]
    want = {(d["key"], d["sample"]) for d in g["disagreements"]}
    picked = v[v["key"].isin({k for k, _ in want})]
    picked = picked[[(k, int(s)) in want for k, s in zip(picked["key"].tolist(), picked["sample"].tolist())]]
    return {(k, int(s)): {r["run_id"]: r for r in part.to_dict("records")}
            for (k, s), part in picked.groupby(["key", "sample"], sort=False)}


def _cards(g: dict, rows_of: dict, out: Path, thumbs: Thumbs, questions: dict) -> list[dict]:
    cards = []
    for d in g["disagreements"]:
        rows = rows_of[(d["key"], d["sample"])]
        first = next(iter(rows.values()))
        cells = []
        for r in g["rows"]:
            if r["run_id"] not in rows:
                continue
            x = rows[r["run_id"]]
            img = store.run_root(out, r["entry"]) / str(x["image_path"])
            qs = questions.get((r["run_id"], x["prompt_id"], int(x["sample"]), x["judge"]), [])
            cells.append({"label": r["label"], "verdict": x["image_verdict"], "seed": x["seed"],
                          "failure_types": list(x["failure_types"]) if x["failure_types"] is not None else [],
                          "thumb": thumbs.ensure(img, x["image_sha256"]) if img.is_file() else None,
                          "href": _rel(img, out), "questions": [{"text": t, "verdict": vv} for t, vv in qs]})
        types = sorted({t for c in cells for t in c["failure_types"]})
        cards.append({"group": g["name"], "text": first["prompt"], "category": first["category"],
                      "template": first["template"], "sample": d["sample"], "cells": cells,
                      "failures": "|" + "|".join(types) + "|"})
    return cards


def _runs_table(index: dict, numbers: dict, changed: dict) -> dict:
    group_of = {r["run_id"]: g["name"] for g in numbers["groups"] for r in g["rows"]}
    study_of = {r: f"{st['name']} ({', '.join(st['varies'])})" for g in numbers["groups"]
                for st in g.get("studies") or [] for r in st["runs"]}
    rows, keys = [], []
    for e in index["runs"]:
        cond = settings.conditions(e)
        keys += [k for k in cond if k not in keys]
        rows.append({"id": e["id"], "label": numbers["labels"][e["id"]], "group": group_of.get(e["id"]),
                     "study": study_of.get(e["id"]),
                     "folder": e.get("folder"), "cond": cond, "sampling": settings.sampling(e),
                     "judges": ", ".join(f"{k} ({settings.shown(j.get('model'))} {settings.shown(j.get('revision'))}"
                                         f"{', ' + j['protocol'] if j.get('protocol') else ''})"
                                         for k, j in (e.get("judges") or {}).items()),
                     "added": e.get("added_utc"), "changed": changed.get(e["id"], [])})
    return {"columns": keys, "rows": rows, "shown": settings.shown}


def render_page(out: Path, index: dict, numbers: dict, changed: dict, *, progress: bool = False) -> Path:
    thumbs = Thumbs(out)
    rows_of = {g["name"]: _card_rows(g) for g in numbers["groups"] if g["disagreements"]}
    wanted: dict = {}
    for g in numbers["groups"]:
        for rows in rows_of.get(g["name"], {}).values():
            for rid, x in rows.items():
                entry = next(r["entry"] for r in g["rows"] if r["run_id"] == rid)
                wanted.setdefault(rid, (entry, set()))[1].add((x["prompt_id"], int(x["sample"]), x["judge"]))
    questions = _question_texts(out, wanted)
    groups, cards = [], []
    for g in numbers["groups"]:
        types = _failure_types(g)
        rows = _group_rows(g, out, types)
        groups.append({"name": g["name"], "conditions_text": g["conditions_text"], "apart": g["apart"],
                       "categories": g["categories"], "types": types, "rows": rows,
                       "chart": rank_chart(rows, g["categories"]) if g["shared"] else "",
                       "studies": g.get("studies") or [],
                       "judge_checks": [{"category": c, **x, "unchecked": [numbers["labels"][r] for r in x["unchecked"]]}
                                        for c, x in (g.get("judge_checks") or {}).items()],
                       "shared": g["shared"], "by_text": g["by_text"], "n_runs": len(g["rows"]),
                       "deciding": rule.table({c: d for c, d in g["deciding"].items() if c in g["categories"]}),
                       "comparisons": _comparisons(g, numbers)})
        cards += _cards(g, rows_of.get(g["name"], {}), out, thumbs, questions)
    thumbs.prune()
    snap = index["snapshots"][-1]
    ctx = {"title": index["title"], "snapshot": snap["split"], "n_runs": len(index["runs"]),
           "rule": settings.RULE, "strict_settings": index.get("strict_settings", False),
           "groups": groups, "cards": cards,
           "card_categories": sorted({c["category"] for c in cards}, key=str),
           "card_types": sorted({t for c in cards for x in c["cells"] for t in x["failure_types"]}),
           "changed": [{"label": numbers["labels"].get(k, k), "files": v} for k, v in changed.items()],
           "runs": _runs_table(index, numbers, changed), "repo": index.get("repo"),
           "tables": ["runs", "categories", "comparisons", "questions", "images", "probes"],
           "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "n_boot": N_BOOT, **static_assets()}
    page = out / "index.html"
    atomic_write_text(page, render("board.html.j2", ctx))
    return page

