"""The per-snapshot tables (``runs``, ``categories``, ``comparisons``) from :func:`board.build.compute`'s numbers."""

from __future__ import annotations

import json

import pandas as pd

from . import settings, tables
from .ranks import OVERALL


def _int(v):
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None


def _float(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def run_frame(index: dict, numbers: dict, changed: dict) -> pd.DataFrame:
    rows = []
    for g in numbers["groups"]:
        for r in g["rows"]:
            e, o = r["entry"], r["overall"]
            cond, sub, samp = settings.conditions(e), settings.subject(e), settings.sampling(e)
            variant = {k: sub[k] for k in ("loras", "components") if k in sub}
            rows.append({
                "run_id": r["run_id"], "label": r["label"], "group": g["name"], "model": sub["model"],
                "model_revision": sub.get("revision"), "variant": json.dumps(variant) if variant else None,
                "suites": e.get("suites") or [], "folder": e.get("folder"), "added_utc": e.get("added_utc"),
                "images": e.get("images"), "scorers": e.get("scorers") or [],
                "judges": json.dumps(e.get("judges") or {}, sort_keys=True),
                "conditions": json.dumps(cond, sort_keys=True), "steps": _int(cond.get("steps")),
                "guidance": _float(cond.get("guidance")), "size": _int(cond.get("size")),
                "dtype": cond.get("dtype"), "scheduler": None if cond.get("scheduler") is None else str(cond["scheduler"]),
                "seed": _int(samp.get("seed")), "limit": _int(samp.get("limit")),
                "images_per_prompt": _int(samp.get("images_per_prompt")),
                "set_apart": "; ".join(g["apart"]) or None, "settings": r.get("settings"),
                "settings_study": _study(g, r["run_id"]), "shared_prompts": g["shared"],
                "rate": o["rate"], "lo": o["lo"], "hi": o["hi"], "rank": o["rank"], "rank_lo": o["rank_lo"],
                "rank_hi": o["rank_hi"], "changed_files": changed.get(r["run_id"], [])})
    return pd.DataFrame(rows, columns=[f.name for f in tables.SCHEMAS["runs"]])


def _study(g: dict, run_id: str) -> str | None:
    """``"S1: model-good at guidance, steps"``: the settings study the run belongs to, named with what varies."""
    st = next((st for st in g.get("studies") or [] if run_id in st["runs"]), None)
    return None if st is None else f"{st['name']}: {st['model']} at {', '.join(st['varies'])}"


def category_frame(numbers: dict) -> pd.DataFrame:
    rows = []
    for g in numbers["groups"]:
        for r in g["rows"]:
            for cat, c in [(OVERALL, r["overall"]), *r["categories"].items()]:
                d = g["deciding"].get(cat) or {}
                judge = d.get("scorer")
                ident = g["judges"].get(judge) or {}
                rows.append({"group": g["name"], "run_id": r["run_id"], "label": r["label"], "category": cat,
                             **{k: c.get(k) for k in ("n", "k", "rate", "lo", "hi", "rank", "rank_lo", "rank_hi",
                                                      "failed", "failures", "units")},
                             "judge": judge, "judge_model": ident.get("model"),
                             "judge_revision": ident.get("revision"), "protocol": ident.get("protocol"),
                             "decided_source": d.get("source"), "why": d.get("why"),
                             "judge_measured_on": c.get("judge_measured_on"), "judge_checked": c.get("judge_checked"),
                             "shared_prompts": g["shared"]})
    return pd.DataFrame(rows, columns=[f.name for f in tables.SCHEMAS["categories"]])


def comparison_frame(numbers: dict) -> pd.DataFrame:
    labels = numbers["labels"]
    rows = [{**{k: c.get(k) for k in ("group", "category", "a", "b", "diff", "lo", "hi", "p", "p_holm",
                                      "significant", "pairing", "units", "images")},
             "label_a": labels[c["a"]], "label_b": labels[c["b"]]} for c in numbers["comparisons"]]
    return pd.DataFrame(rows, columns=[f.name for f in tables.SCHEMAS["comparisons"]])
