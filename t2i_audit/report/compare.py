"""Models side by side: pair images by prompt and sample, compare success with paired
bootstrap CIs, correct for multiple comparisons (Holm), rank, show disagreements.

Pairing key: the prompt id (stable hash of suite, version, template, slots). Runs of
different suites have disjoint ids, so with ``allow_different_suites`` prompts are matched by
(template, prompt text) instead, and only the shared ones are compared; the page says so.
An image pair counts only when every run has a verdict for it (flagged/unscored images drop
out of all runs alike, so rates stay paired). The bootstrap resamples prompt groups
(``scenes.prompt_groups``: prompts showing one scene, and swap twins, move together), not single prompts.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from .. import analysis
from ..board.settings import model_settings as settings_of
from ..board.settings import settings_text
from . import run_rule
from .. import deciding as rule
from ..errors import AuditError
from ..ownership import claim_output_dir
from ..rundir import RunDir, atomic_write_json, atomic_write_text
from ..scenes import prompt_groups
from ..shareable import shareable_path
from .html import page_href, render, static_assets
from .tables import choose_scorer, decided_by_category, load_run, write_tables
from .thumbs import Thumbs

ALPHA = 0.05
N_BOOT = 2000
DISAGREE_MAX = 200


def _labels(runs) -> list[str]:
    labels = [r.label for r in runs]  # the model with its variant: a base and a LoRA run never read alike
    out = [f"{lab} ({r.rd.root.name})" if labels.count(lab) > 1 else lab for lab, r in zip(labels, runs)]
    return [f"{lab} #{i + 1}" if out.count(lab) > 1 else lab for i, lab in enumerate(out)]


def _have_images(runs) -> None:
    """A run without images has nothing to compare: said as that, with the command that makes them — not as a
    scorer missing, whose advice ("run the same scorer on each") cannot help before there are images."""
    import shlex

    empty = [r for r in runs if not r.images]
    if empty:
        r = empty[0]
        how = "`" + shlex.join(["t2i-audit", "run", "--config", str(r.rd.config), "--out", str(r.rd.root),
                                "--stages", "prompts,generate,score"]) + "`"
        raise AuditError(f"{r.rd.root}: no images to compare (images.jsonl {'is empty' if r.rd.images.exists() else 'is missing'}"
                         f"{f'; so are {len(empty) - 1} other run(s)' if len(empty) > 1 else ''}): make them with {how} "
                         f"(it generates and scores them), then compare")


def _deciding(runs, wanted: str | None) -> dict:
    """The scorer deciding each category: ``wanted`` everywhere, or the one rule of
    :mod:`t2i_audit.deciding` on the union of the runs' evidence (the run reports use the same)."""
    cats = sorted({p.get("category") for r in runs for p in r.prompts.values()}, key=str)
    if wanted is not None:
        for r in runs:
            choose_scorer(r.scorers, wanted, r.rd.scores_dir)  # raises with did-you-mean
        return rule.forced(cats, wanted)
    names = [set(r.scorers) for r in runs]
    if not (set.intersection(*names) if names else set()):
        detail = "; ".join(f"{r.rd.root}: {', '.join(sorted(r.scorers)) or 'none'}" for r in runs)
        raise AuditError(f"no scorer has scored every run ({detail}); run the same scorer on each")
    return rule.deciding_scorers([r.rd for r in runs], cats,
                                 decided=[decided_by_category(r.prompts, r.scorers) for r in runs])


def _same_protocols(runs) -> None:
    """Judged under different protocols (question wording, answer words, aggregation;
    t2i_audit/cards/protocols.yaml), two runs' scores are different measurements: refuse, naming both."""
    from ..scorers.protocols import run_protocols

    seen: dict[str, tuple] = {}
    for r in runs:
        for scorer, names in sorted(run_protocols(r.rd.scores_dir).items()):
            if len(names) > 1:
                raise AuditError(f"{r.rd.root}: scorer {scorer} mixes judge protocols {', '.join(sorted(names))} "
                                 f"in one run; rescore it under one protocol")
            (name,) = names
            first = seen.setdefault(scorer, (r.rd.root, name))
            if first[1] != name:
                raise AuditError(f"scorer {scorer} judged the runs under different protocols: {first[0]} under "
                                 f"{first[1]!r}, {r.rd.root} under {name!r}; their scores do not compare - rescore "
                                 "one run with the other's protocol")


def _image_counts(run) -> dict:
    counts: dict = {}
    for c in run.images_df["category"] if len(run.images_df) else []:
        counts[c] = counts.get(c, 0) + 1
    return counts


def _keyed(run, by_text: bool) -> dict:
    """key -> {"prompt": rec, "samples": {sample: row}} with row = images_df record."""
    out = {}
    for r in run.images_df.to_dict("records"):
        p = run.prompts[r["prompt_id"]]
        key = f"{p.get('template')}|{p.get('text')}" if by_text else r["prompt_id"]
        out.setdefault(key, {"prompt": p, "samples": {}})["samples"][int(r["sample"])] = r
    return out


def _distinct(run_dirs: list) -> None:
    """One run given twice (or under two names) would compare a model with itself: every difference 0."""
    seen: dict[str, object] = {}
    for d in run_dirs:
        key = os.path.realpath(d)
        if key in seen:
            same = "" if str(seen[key]) == str(d) else f" (the same folder as {seen[key]})"
            raise AuditError(f"{d}: given twice{same}; compare needs two or more different runs")
        seen[key] = d


def compare(run_dirs: list, out_dir, *, allow_different_suites: bool = False,
            scorer: str | None = None, seed: int = 0) -> Path:
    return compare_with_summary(run_dirs, out_dir, allow_different_suites=allow_different_suites,
                                scorer=scorer, seed=seed)[0]


def compare_with_summary(run_dirs: list, out_dir, *, allow_different_suites: bool = False,
                         scorer: str | None = None, seed: int = 0,
                         fixed_settings: bool = False) -> tuple[Path, dict]:
    """:func:`compare`, returning (page, what compare.json holds). ``fixed_settings`` (the gate): refuse runs whose
    protocol or model settings differ from the first run's, before anything is written."""
    if len(run_dirs) < 2:
        raise AuditError(f"compare needs at least two runs, got {len(run_dirs)}")
    run_dirs = [d.root if isinstance(d, RunDir) else d for d in run_dirs]  # paths or RunDir objects
    _distinct(run_dirs)
    runs = [load_run(d) for d in run_dirs]
    _have_images(runs)
    _same_protocols(runs)
    deciding = _deciding(runs, scorer)
    runs = [load_run(d, deciding=deciding) for d in run_dirs]
    scorer = rule.primary(deciding, _image_counts(runs[0]))
    labels = _labels(runs)
    suites = [r.suites for r in runs]
    different = any(s != suites[0] for s in suites[1:])
    if different and not allow_different_suites:
        detail = "; ".join(f"{r.rd.root}: {', '.join(s)}" for r, s in zip(runs, suites))
        raise AuditError(f"runs are of different suites ({detail}); pass "
                         "--allow-different-suites to compare only the prompts they share")
    entries = run_rule.entries(runs, labels)
    setting_diffs = run_rule.differences(entries, runs, allow_different_suites=allow_different_suites)
    if fixed_settings:
        run_rule.refuse_other_settings(setting_diffs, labels[0])
    keyed = [_keyed(r, by_text=different) for r in runs]
    shared_keys = sorted(set.intersection(*(set(k) for k in keyed)))
    if not shared_keys:
        raise AuditError("the runs share no prompt" + (" (matched by template and text)" if different else ""))
    out = claim_output_dir(out_dir, "compare")  # never write over a folder that is not a comparison

    # paired images: (key, sample) with a verdict in every run
    pairs = []
    for key in shared_keys:
        samples = set.intersection(*(set(k[key]["samples"]) for k in keyed))
        for s in sorted(samples):
            rows = [k[key]["samples"][s] for k in keyed]
            if all(r["verdict"] is not None for r in rows):
                pairs.append((key, s, rows))
    if not pairs:
        chosen = ", ".join(f"{c}: {d['scorer']}" for c, d in deciding.items())
        raise AuditError(f"no image has a verdict in every run from the scorer deciding its category "
                         f"({chosen}); score the runs first")
    p0 = {key: keyed[0][key]["prompt"] for key in shared_keys}
    # the bootstrap unit: prompts showing one scene, with swap twins (scenes.prompt_groups), never half of a group
    unit = dict(zip(shared_keys, prompt_groups([p0[key] for key in shared_keys])))
    pair_df = pd.DataFrame([{"key": key, "unit": unit[key], "sample": s, "prompt": p0[key].get("text"),
                             "category": p0[key].get("category"), "template": p0[key].get("template"),
                             **{f"verdict:{lab}": bool(r["verdict"]) for lab, r in zip(labels, rows)},
                             **{f"prompt_id:{lab}": r["prompt_id"] for lab, r in zip(labels, rows)}}
                            for key, s, rows in pairs])

    groups = [("overall", "all", pair_df)]
    for col in ("category", "template"):
        for val, g in pair_df.groupby(col, sort=True):
            groups.append((col, val, g))
    rates, diffs = [], []
    t = 0
    for kind, val, g in groups:
        per_unit = g.groupby("unit")
        for lab in labels:
            k, n = int(g[f"verdict:{lab}"].sum()), len(g)
            rate, lo, hi = analysis.wilson(k, n)
            rates.append({"group": kind, "value": val, "model": lab, "n": n, "k": k,
                          "rate": rate, "lo": lo, "hi": hi})
        sums = {lab: per_unit[f"verdict:{lab}"].agg(["sum", "count"]) for lab in labels}
        for a, b in combinations(labels, 2):
            res = analysis.paired_bootstrap(sums[a]["sum"].to_numpy(), sums[a]["count"].to_numpy(),
                                            sums[b]["sum"].to_numpy(), sums[b]["count"].to_numpy(),
                                            n_boot=N_BOOT, seed=seed + t)
            t += 1
            diffs.append({"group": kind, "value": val, "a": a, "b": b, **res, "images": len(g)})
    _holm(diffs)

    overall = {r["model"]: r for r in rates if r["group"] == "overall"}
    ranking = []
    for lab in sorted(labels, key=lambda m: -overall[m]["rate"]):
        wins = sum(1 for d in diffs if d["group"] == "overall" and d["significant"] and
                   ((d["a"] == lab and d["diff"] > 0) or (d["b"] == lab and d["diff"] < 0)))
        losses = sum(1 for d in diffs if d["group"] == "overall" and d["significant"] and
                     ((d["a"] == lab and d["diff"] < 0) or (d["b"] == lab and d["diff"] > 0)))
        ranking.append({"model": lab, **overall[lab], "wins": wins, "losses": losses})
    for i, r in enumerate(ranking):  # tied rank while not significantly separated
        r["rank"] = 1 if i == 0 else (ranking[i - 1]["rank"] if not _sep(diffs, ranking[i - 1]["model"], r["model"]) else i + 1)

    thumbs = Thumbs(out)
    disagree = []
    for key, s, rows in pairs:
        vs = [bool(r["verdict"]) for r in rows]
        if len(set(vs)) < 2:
            continue
        disagree.append((key, s, rows))
    cards = []
    for key, s, rows in disagree[:DISAGREE_MAX]:
        cells = []
        for run, lab, r in zip(runs, labels, rows):
            path = run.rd.root / r["path"]
            sd = run.scorers[run.scorer_of(p0[key].get("category"))]
            qs = [{"text": q.get("text"), **sd.question(r["prompt_id"], s, q.get("id"))}
                  for q in run.prompts[r["prompt_id"]].get("questions", [])]
            cells.append({"model": lab, "verdict": r["verdict"], "failure_types": r["failure_types"],
                          "thumb": thumbs.ensure(path, r["sha256"]),
                          "href": page_href(path, out), "questions": qs})
        cards.append({"text": p0[key].get("text"), "category": p0[key].get("category"),
                      "template": p0[key].get("template"), "sample": s, "cells": cells})
    thumbs.prune()

    tables = {
        "rates": write_tables(pd.DataFrame(rates), out, "rates"),
        "differences": write_tables(pd.DataFrame(diffs), out, "differences"),
        "pairs": write_tables(pair_df, out, "pairs"),
    }
    note = None
    if different:
        n_all = [len(k) for k in keyed]
        note = (f"Runs are of different suites; only the {len(shared_keys)} prompts they share "
                f"(matched by template and prompt text) are compared — of "
                + ", ".join(f"{n} in {lab}" for n, lab in zip(n_all, labels)) + ".")
    deciding_out = {str(c): {k: d.get(k) for k in ("scorer", "source", "agreement", "why")}
                    for c, d in deciding.items()}
    protocols = _protocol_names(runs)
    summary = {"models": labels, "scorer": scorer, "protocols": protocols,
               "runs": [shareable_path(str(r.rd.root), out) for r in runs],  # relative: the page is shared
               "deciding": deciding_out,
               "suites": suites, "different_suites": different, "shared_prompts": len(shared_keys),
               "paired_images": len(pairs), "disagreements": len(disagree),
               "coverage": {"base_prompts": len(keyed[0]), "shared_prompts": len(shared_keys),
                            "base_categories": sorted({str(v["prompt"].get("category")) for v in keyed[0].values()}),
                            "prompts": {lab: len(k) for lab, k in zip(labels, keyed)}},
               "settings": {e["id"]: settings_of(e) for e in entries}, "settings_differences": setting_diffs,
               "correction": "holm within each family: overall, categories, templates", "alpha": ALPHA, "n_boot": N_BOOT, "seed": seed,
               "ranking": [{k: r[k] for k in ("rank", "model", "rate", "lo", "hi", "n", "wins", "losses")} for r in ranking],
               "differences": [d for d in diffs if d["group"] == "overall"],
               "by_category": [d for d in diffs if d["group"] == "category"],
               "category_rates": {str(r["value"]): {} for r in rates if r["group"] == "category"},
               "tables": tables,
               "note": note}
    for r in rates:
        if r["group"] == "category":
            summary["category_rates"][str(r["value"])][r["model"]] = {k: r[k] for k in ("n", "k", "rate", "lo", "hi")}
    atomic_write_json(out / "compare.json", summary)
    used = set(pair_df["category"])
    from .random_weights import random_weights_note

    from ..board.settings import RULE

    ctx = {"title": " vs ".join(labels), "labels": labels, "scorer": scorer, "note": note, "protocols": protocols,
           "rule": RULE, "settings_differences": {k: v for k, v in setting_diffs.items() if v["settings"] or v["protocol"]},
           "run_settings": {e["id"]: settings_text(e) for e in entries},
           "random_weights": random_weights_note([r.manifest for r in runs]),
           "deciding": rule.table({c: d for c, d in deciding.items() if c in used}),
           "verdict_sources": sorted({d["scorer"] for c, d in deciding.items() if c in used and d.get("scorer")}),
           "runs": [{"label": lab, "root": r.rd.root.name, "suites": ", ".join(s)}
                    for lab, r, s in zip(labels, runs, suites)],
           "shared": len(shared_keys), "paired": len(pairs), "ranking": ranking,
           "rows": _rows(groups, rates, diffs, labels), "cards": cards,
           "disagree_total": len(disagree), "categories": sorted({c["category"] for c in cards}),
           "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "alpha": ALPHA, "n_boot": N_BOOT, **static_assets()}
    page = out / "index.html"
    atomic_write_text(page, render("compare.html.j2", ctx))  # modes follow the umask (rundir)
    return page, summary


def _holm(diffs: list[dict]) -> None:
    """Holm's correction within each family of the page (overall; the categories; the templates), every pair of
    runs together: the p the page shows is the p the gate (report/gate.py) decides by."""
    for kind in sorted({d["group"] for d in diffs}):
        family = [d for d in diffs if d["group"] == kind]
        for d, pa in zip(family, analysis.holm([d["p"] for d in family])):
            d["p_holm"] = float(pa)
            d["significant"] = bool(np.isfinite(pa) and pa < ALPHA)


def _protocol_names(runs) -> dict:
    """{scorer: judge protocol} (checked equal across the runs by _same_protocols)."""
    from ..scorers.protocols import run_protocols

    out: dict = {}
    for r in runs:
        out.update({k: sorted(v)[0] for k, v in run_protocols(r.rd.scores_dir).items()})
    return dict(sorted(out.items()))


def _sep(diffs, a, b) -> bool:
    return any(d["group"] == "overall" and d["significant"] and {d["a"], d["b"]} == {a, b} for d in diffs)


def _rows(groups, rates, diffs, labels) -> list[dict]:
    out = []
    for kind, val, _ in groups:
        rr = {r["model"]: r for r in rates if r["group"] == kind and r["value"] == val}
        dd = [d for d in diffs if d["group"] == kind and d["value"] == val]
        out.append({"kind": kind, "value": val, "rates": [rr[lab] for lab in labels], "diffs": dd,
                    "n": rr[labels[0]]["n"]})
    return out


def read_compare(out_dir) -> dict:
    return json.loads((Path(out_dir) / "compare.json").read_text())
