"""The regression gate, ``t2i-audit compare BASE CANDIDATE --fail-on-drop D``: one rule for the exit code and the
comparison page.

* **Same test as the page.** A category fails when CANDIDATE's success is lower than BASE's by more than D *and*
  the paired difference is significant with the p-value the page shows: paired bootstrap over prompt groups,
  Holm-corrected over the categories (one family: the categories of the comparison; compare.py ``_holm``). A
  drop whose raw p is 0.03 but whose Holm p is 0.16 is the page's "not significant" and does not fail the gate.
* **Inconclusive, not ok, on thin evidence** (exit :data:`EXIT_INCONCLUSIVE`): a category with fewer than
  :data:`MIN_UNITS` paired prompt groups, or a CANDIDATE missing some of BASE's prompts. Why 10 groups: the
  bootstrap resamples prompt groups, so they are its sample size; with n groups even an exact paired test (a
  sign test on the groups) cannot give a two-sided p below 2·0.5ⁿ. Holm's first step over k categories needs
  p < 0.05/k: n ≥ 7 for 3 categories, n ≥ 9 for 10, n = 10 for up to ~25. Below 10 groups a "no significant
  drop" is the arithmetic of small n, not evidence — and a bootstrap p there is too optimistic besides.
* **Fixed settings.** A gate compares weights at fixed settings; two runs whose model settings differ (the one
  rule of :mod:`t2i_audit.board.settings`) are refused unless ``--allow-different-settings``; their difference
  is named either way.
"""

from __future__ import annotations

import math

EXIT_OK, EXIT_DROP, EXIT_INCONCLUSIVE = 0, 1, 3
MIN_UNITS = 10  # paired prompt groups per category below which a category's verdict is "inconclusive"

GATE_RULE = (f"exit 1 when, in some category, CANDIDATE's success is lower than BASE's by more than D (a fraction: "
             "0.05 = 5 points; paired images, same prompt and sample) AND that drop is significant as the page "
             "shows it (paired bootstrap over prompt groups, Holm-corrected over the categories, p < 0.05). Exit "
             f"{EXIT_INCONCLUSIVE} (inconclusive) when no category fails but the evidence is thin: a category with "
             f"fewer than {MIN_UNITS} paired prompt groups, or CANDIDATE missing some of BASE's prompts. Exit 0 "
             "otherwise. Exit 2 (refused, nothing compared) on bad input or when BASE and CANDIDATE differ in "
             "their model settings (steps, guidance, size, scheduler, dtype, …) or protocol, unless "
             "--allow-different-settings (settings only). A table of the numbers per category is printed")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def gate_verdict(summary: dict, max_drop: float) -> dict:
    """``{"verdict": ok|fail|inconclusive, "exit": code, "rows": [...], "notes": [...]}`` from compare.json's
    summary (BASE the first run, CANDIDATE the second)."""
    base, cand = summary["models"][:2]
    alpha = summary.get("alpha", 0.05)
    rows = []
    for d in summary["by_category"]:
        if (d["a"], d["b"]) != (base, cand):
            continue
        r = summary["category_rates"].get(str(d["value"]), {})
        drop, p = d.get("diff"), d.get("p_holm")
        units = int(d.get("units") or 0)
        if units < MIN_UNITS:
            verdict = "inconclusive"
        elif _finite(drop) and drop > max_drop and _finite(p) and p < alpha:
            verdict = "FAIL"
        else:
            verdict = "ok"
        rows.append({"category": str(d["value"]), "base": (r.get(base) or {}).get("rate"),
                     "candidate": (r.get(cand) or {}).get("rate"), "drop": drop, "lo": d.get("lo"),
                     "hi": d.get("hi"), "p_holm": p, "units": units, "images": d.get("images"), "verdict": verdict})
    cov = summary.get("coverage") or {}
    seen = {r["category"] for r in rows}
    for cat in cov.get("base_categories") or []:  # no image of it with a verdict in both runs (all flagged …)
        if cat not in seen:
            rows.append({"category": cat, "base": None, "candidate": None, "drop": None, "lo": None, "hi": None,
                         "p_holm": None, "units": 0, "images": 0, "verdict": "inconclusive"})
    notes = []
    missing = cov.get("base_prompts", 0) - cov.get("shared_prompts", 0)
    if missing > 0:
        notes.append(f"CANDIDATE covers {cov['shared_prompts']} of BASE's {cov['base_prompts']} prompts "
                     f"({missing} missing): the gate speaks only of the prompts both runs have — generate CANDIDATE "
                     "on BASE's prompts (the same suite, --limit and images per prompt)")
    thin = [r["category"] for r in rows if r["verdict"] == "inconclusive"]
    if thin:
        notes.append(f"fewer than {MIN_UNITS} paired prompt groups in {', '.join(thin)}: too few to tell a drop "
                     "from chance after the correction over categories")
    if any(r["verdict"] == "FAIL" for r in rows):
        verdict, code = "fail", EXIT_DROP
    elif missing > 0 or thin:
        verdict, code = "inconclusive", EXIT_INCONCLUSIVE
    else:
        verdict, code = "ok", EXIT_OK
    return {"verdict": verdict, "exit": code, "rows": rows, "notes": notes, "max_drop": max_drop,
            "base": base, "candidate": cand, "min_units": MIN_UNITS}


def _pct(v) -> str:
    return f"{v:.1%}" if _finite(v) else "—"


def _pts(v) -> str:
    return f"{v * 100:+.1f}" if _finite(v) else "—"


def table(result: dict) -> list[str]:
    """The gate's numbers per category, as lm-evaluation-harness ends with its table."""
    head = ["category", "base", "candidate", "drop (pts)", "95% CI (pts)", "p (Holm)", "groups", "images", "verdict"]
    body = [[r["category"], _pct(r["base"]), _pct(r["candidate"]), _pts(r["drop"]),
             f"[{_pts(r['lo'])}, {_pts(r['hi'])}]", f"{r['p_holm']:.3f}" if _finite(r["p_holm"]) else "—",
             str(r["units"]), str(r["images"] if r["images"] is not None else "—"), r["verdict"]]
            for r in result["rows"]]
    from ..results_table import table as aligned

    return aligned(head, body)


def summary_line(result: dict) -> str:
    limit = f"{result['max_drop'] * 100:.1f} points"
    if result["verdict"] == "fail":
        n = sum(r["verdict"] == "FAIL" for r in result["rows"])
        return (f"gate: FAIL — {n} categor{'y' if n == 1 else 'ies'} of {result['candidate']} dropped below "
                f"{result['base']} by more than {limit}, significant after Holm over the categories")
    if result["verdict"] == "inconclusive":
        return (f"gate: INCONCLUSIVE (exit {EXIT_INCONCLUSIVE}) — no significant drop of more than {limit}, but "
                + "; ".join(result["notes"]))
    return (f"gate: ok — no category of {result['candidate']} is lower than {result['base']} by more than {limit} "
            "with a Holm-corrected p < 0.05")
