"""The early-prediction section: reads ``probes/early.json``, ``probes/early_risk.jsonl`` (written by
``t2i-audit probe RUN --early``, t2i_audit/probes/early_stage.py), a ``selection.json`` at the run's root
(``t2i-audit select``) and the selection study (report/selection_view.py). Per category: AUROC of the
per-image probe by step with its CI band, the references beside it (prompt-only, text encoder, x0 preview
at the same step, the final image by another scorer), the probe minus each reference with a CI, the
feature families, held-out seeds; the simulated best-of-N selection; the riskiest and safest images by
out-of-fold risk with their verdicts. Missing or odd files give an empty section, never an error (like
probes_view)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..records import read_records
from . import charts
from .probes_view import _f  # a number or None (NaN, missing, text)
from .selection_view import selection_section

REF_COLOURS = {"prompt-only": "#D55E00", "text-encoder": "#009E73", "x0 preview": "#CC79A7"}
RANKED = 8


def _auc(block: dict | None) -> tuple:
    """(AUROC, CI low, CI high, why it is not a number): the study stores "too few" (stats.too_few) or skips."""
    a = (block or {}).get("auroc") or {}
    a = a if isinstance(a, dict) else {}
    ci = a.get("ci") or [None, None]
    return _f(a.get("auroc")), _f(ci[0]), _f(ci[1]), a.get("too_few") or (block or {}).get("skipped")


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _category(name: str, r: dict, loop_steps: int) -> dict:
    steps = list(r.get("steps") or {})
    xs = [f"{r['steps'][t].get('iterations')}/{loop_steps}" for t in steps]
    comp = [r["steps"][t]["families"]["probe"]["compositions"] for t in steps]
    probe = [_auc(c) for c in comp]
    series = [{"label": "per-image probe", "colour": "#0072B2", "ys": [p[0] for p in probe],
               "band": ([p[1] for p in probe], [p[2] for p in probe])}]
    ref_names = list(dict.fromkeys(k for c in comp for k in c.get("references") or {}))
    for i, ref in enumerate(ref_names):
        ys = [_auc((c.get("references") or {}).get(ref))[0] for c in comp]
        series.append({"label": ref, "ys": ys, "dash": ref.startswith("final"),
                       "colour": REF_COLOURS.get(ref, charts.PALETTE[(i + 3) % len(charts.PALETTE)])})
    rows = []
    for t, c in zip(steps, comp):
        st = r["steps"][t]
        fams = st["families"]
        diffs = []
        for ref in ref_names:
            d = ((c.get("references") or {}).get(ref) or {}).get("probe_minus_reference") or {}
            ci = d.get("ci") or [None, None]
            ref_auc = _auc((c.get("references") or {}).get(ref))
            diffs.append({"ref": ref, "diff": _f(d.get("diff")), "lo": _f(ci[0]), "hi": _f(ci[1]),
                          "ref_auroc": ref_auc[0], "too_few": _auc(c)[3] or ref_auc[3]})
        sel = fams["probe"].get("selection") or {}
        rows.append({"step": t, "x": f"{st.get('iterations')}/{loop_steps}", "fraction": _f(st.get("fraction")),
                     "probe": _auc(c), "attention": _auc(fams["attention"]["compositions"]),
                     "pooled": _auc(fams["pooled"]["compositions"]), "seeds": _auc(fams["probe"]["seeds"]),
                     "seeds_skipped": fams["probe"]["seeds"].get("skipped"),
                     "with_x0": _auc((fams.get("probe+x0") or {}).get("compositions")),
                     "diffs": diffs, "selection": sel,
                     "types": {k: _auc({"auroc": v}) for k, v in (fams["probe"].get("by_failure_type") or {}).items()}})
    vals = [v for s in series for v in s["ys"] if v is not None]
    chart = charts.line_chart(xs, series, y_range=(math.floor(min([0.4] + vals) * 10) / 10, 1.0),
                              y_label="AUROC", x_label="denoising steps read", refs=[(0.5, "chance 0.5")])
    return {"name": name, "n": r.get("n"), "failure_rate": _f(r.get("failure_rate")), "chart": chart,
            "legend": [{"label": s["label"], "colour": s["colour"], "dash": s.get("dash")} for s in series],
            "rows": rows, "refs": ref_names}


def _ranked(probes_dir: Path, rd, thumbs, out_dir: Path, rel) -> list[dict]:
    """Per category, at its earliest step: the riskiest and the safest images with their verdicts."""
    risks = read_records(probes_dir / "early_risk.jsonl", "early-risk")
    images = {(r["prompt_id"], r.get("sample", 0)): r for r in rd.read_images()} if rd.images.exists() else {}
    prompts = {p["id"]: p for p in rd.read_prompts()} if rd.prompts.exists() else {}
    out = []
    for cat in sorted({r["category"] for r in risks}):
        mine = [r for r in risks if r["category"] == cat]
        first = min(r["step"] for r in mine)
        mine = sorted((r for r in mine if r["step"] == first), key=lambda r: -r["risk"])

        def card(r):
            im = images.get((r["prompt_id"], r["sample"]))
            thumb = thumbs.ensure(rd.root / im["path"], im["sha256"]) if (im and thumbs is not None) else None
            return {"text": (prompts.get(r["prompt_id"]) or {}).get("text"), "risk": r["risk"], "failed": r["failed"],
                    "sample": r["sample"], "thumb": thumb,
                    "href": rel(rd.root / im["path"], out_dir) if im else None}
        out.append({"category": cat, "step": first, "riskiest": [card(r) for r in mine[:RANKED]],
                    "safest": [card(r) for r in mine[::-1][:RANKED]]})
    return out


def early_section(rd, thumbs=None, out_dir: Path | None = None, rel=None) -> dict:
    probes_dir = rd.probes_dir
    res = _read_json(probes_dir / "early.json")
    selection = _read_json(rd.root / "selection.json")
    study = selection_section(rd)
    if not isinstance(res, dict) or "categories" not in res:
        return {"ran": False, "selection_run": selection if isinstance(selection, dict) else None, "study": study}
    loop = res.get("loop_steps") or 0
    cats, skipped = [], []
    for name, r in sorted(res["categories"].items()):
        try:
            cats.append(_category(name, r, loop)) if "steps" in r else skipped.append((name, r.get("skipped")))
        except (KeyError, TypeError, IndexError):
            skipped.append((name, "unreadable entry"))
    ranked = _ranked(probes_dir, rd, thumbs, out_dir or rd.root, rel or (lambda p, s: str(p))) if thumbs else []
    return {"ran": True, "categories": cats, "skipped": skipped, "loop_steps": loop,
            "labels_from": res.get("labels_from") or {}, "setting": res.get("selection_setting") or {},
            "ranked": ranked, "selection_run": selection if isinstance(selection, dict) else None,
            "x0_judges": (res.get("features") or {}).get("x0_judges") or {}, "study": study}
