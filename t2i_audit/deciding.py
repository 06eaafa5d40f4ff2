"""Which scorer decides each prompt category: measured agreement, never name order. (No torch.)

One rule for the run report, ``compare``, ``probe`` (its success labels) and ``predict`` (which
names where those labels came from). Per category, among the scorers that gave verdicts on it
(in every run, for several runs):

1. a scorer *at chance* on the category never decides it: its card lists the category (or one of
   its aspects, see :func:`category_aspects`) under ``known_agreement.chance_on``, or its
   measured Cohen's κ on the category is <= ``CHANCE_KAPPA``;
2. evidence, strongest first:
   * ``calibrate`` results stored in the run(s) (``<run>/calibration/report.json``, prompt level,
     else question level, at least ``MIN_LABELS`` labels with a defined κ — labels of both kinds; several
     runs are pooled, n-weighted); over a card's measured agreement only from ``MIN_LABELS_OVER_CARD``
     labels on the category (below, the card stands and the reason says why);
   * the card's measured ``known_agreement`` (``per_category`` by category or aspect, the worst
     match, else ``overall``) — figures measured on *generated* images, not published notes;
   * none: the family preference per category below (the published ordering of human agreement:
     detection for counts and positions, GenEval; a VLM judge elsewhere, VQAScore / GenEval 2);
   within the strongest evidence the higher κ wins (accuracy where a κ is missing);
3. a tie left after that goes to the registry's default for the category, then to the scorer
   with more verdicts on it; only a tie on everything falls back to the name (and says so).

A card's structured ``known_agreement`` (a human note ``figure`` + ``source`` stays beside it)::

    known_agreement:
      figure: "97.5 % (κ 0.90) on 235 questions of 72 generated images"
      source: "measured in this project, ..."
      overall: {accuracy: 0.975, kappa: 0.90, n: 235}
      per_category: {color: {accuracy: 0.80, kappa: 0.21, n: 90}}   # category or aspect keys
      chance_on: [relation]                                         # never decides these
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from .records import read_document, read_records, score_records

MIN_LABELS = 10          # fewer calibrated labels than this on a category is no evidence
# labels on a category before calibrate's measured agreement replaces a card's measured known_agreement: at 80 %
# agreement and 50 % chance agreement κ's 95 % interval is ±0.22 with 50 labels (±0.35 with 20), narrow enough to
# tell a judge at chance (κ ≤ 0.10) from a substantial one (≥ 0.6); fewer would let a small, lopsided sample
# overturn a card measured on hundreds of questions (issue 37)
MIN_LABELS_OVER_CARD = 50
CHANCE_KAPPA = 0.10      # κ at or below this: no better than chance (Landis & Koch: "slight" < 0.2)

# family preference when no scorer has agreement evidence for the category
DETECT_FIRST = ("detect", "vlm", "vqa", "clip", "other")    # counts and positions (GenEval)
VLM_FIRST = ("vlm", "detect", "vqa", "clip", "other")       # attributes, bindings, relations, actions
SOURCE_RUN = "calibrate on this run"
SOURCE_RUNS = "calibrate on these runs"
SOURCE_CARD = "card known_agreement"
SOURCE_NONE = "no agreement evidence"

_ATTRIBUTE_WORDS = ("color", "colour", "shape", "texture", "material", "size", "attribute")


def category_aspects(category) -> set[str]:
    """What a category asks, from its name: itself plus count / spatial / relation / action /
    binding / attribute (and the attribute family, e.g. ``color``). ``color_spatial`` →
    {color_spatial, spatial, relation, color, attribute}."""
    c = str(category or "").lower()
    out = {c} if c else set()
    if "count" in c or "number" in c:
        out.add("count")
    if "spatial" in c or "position" in c:
        out |= {"spatial", "relation"}
    if "relation" in c:
        out.add("relation")
    if "action" in c:
        out.add("action")
    if "binding" in c:
        out |= {"binding", "attribute"}
    for w in _ATTRIBUTE_WORDS:
        if w in c:
            out |= {"attribute", "color" if w == "colour" else w}
    return out


def is_detection_category(category) -> bool:
    """Counts and positions: where detection agrees with people best (GenEval)."""
    return bool(category_aspects(category) & {"count", "spatial"})


# Defaults per category follow published agreement with people (README "Scorers"): detection for
# counts and positions (GenEval: its detector rules agree with human judgement), a VLM judge for
# attributes, bindings, relations and actions (VQAScore, GenEval 2's Soft-TIFA beat CLIPScore and
# detection there). CLIP stays registered (`--scorer clip`) but is never a default.
VLM_JUDGE = "qwen3-vl-8b"
DETECTOR = "geneval"
DETECTOR_FALLBACK = "detect-owlv2"  # the same GenEval rules on OWLv2 boxes, while no geneval card exists
# tiny model cards (random weights, offline) default to the tiny scorers of the same kinds
TINY_VLM_JUDGE = "tiny-qwen3-vl"
TINY_DETECTOR = "tiny-detect"


def category_default(category: str, cards: dict | None = None, *, tiny: bool = False) -> str:
    """The default scorer for one prompt category (counts and positions: detection)."""
    if not is_detection_category(category):
        return TINY_VLM_JUDGE if tiny else VLM_JUDGE
    if tiny:
        return TINY_DETECTOR
    if cards is None:
        from .scorers.registry import load_cards

        cards = load_cards()
    return DETECTOR if DETECTOR in cards else DETECTOR_FALLBACK


def scorer_kind(card: Mapping | None) -> str:
    """vlm (a VLM judge) | detect | vqa (BLIP-style VQA) | clip | other."""
    if not card:
        return "other"
    fam = str(card.get("family") or "").lower()
    if str(card.get("class") or "").endswith(":VlmJudge") or fam == "vlm":
        return "vlm"
    return fam if fam in ("detect", "vqa", "clip") else "other"


# --- evidence ---------------------------------------------------------------------------------
def _root(run) -> Path:
    from .rundir import RunDir

    return run.root if isinstance(run, RunDir) else Path(run)  # (a Path's own .root is "/")


def calibration_evidence(run_dirs: Iterable) -> dict:
    """{scorer: {category: {accuracy, kappa, n, level, runs}}} pooled over the runs' stored
    ``calibration/report.json`` (n-weighted means; a κ pooled this way is an approximation)."""
    reports = []
    for run in run_dirs:
        path = _root(run) / "calibration" / "report.json"
        if not path.exists():
            continue
        reports.append(read_document(path, "calibration"))  # written whole (atomically): damage is an edit, refused
    return pool_calibration(reports)


def pool_calibration(reports: Iterable[Mapping]) -> dict:
    """:func:`calibration_evidence` from calibration reports already read (the board keeps each run's)."""
    pooled: dict = {}
    for rep in reports:
        for name, entry in (rep.get("scorers") or {}).items():
            levels = entry.get("levels") or {}
            cats = set(levels.get("prompt") or {}) | set(levels.get("question") or {})
            for cat in cats - {"all"}:
                for level in ("prompt", "question"):
                    m = (levels.get(level) or {}).get(cat)
                    # κ undefined (constant labels) says nothing about agreement beyond chance: no evidence
                    if m and m.get("accuracy") is not None and m.get("kappa") is not None \
                            and (m.get("n") or 0) >= MIN_LABELS:
                        acc = pooled.setdefault(name, {}).setdefault(cat, {"level": level, "parts": []})
                        if acc["level"] == level:
                            acc["parts"].append(m)
                        break
    out: dict = {}
    for name, cats in pooled.items():
        for cat, acc in cats.items():
            parts = acc["parts"]
            n = sum(int(m["n"]) for m in parts)
            ks = [(m["kappa"], m["n"]) for m in parts if m.get("kappa") is not None]
            out.setdefault(name, {})[cat] = {
                "accuracy": sum(m["accuracy"] * m["n"] for m in parts) / n,
                "kappa": sum(k * w for k, w in ks) / sum(w for _, w in ks) if ks else None,
                "n": n, "level": acc["level"], "runs": len(parts)}
    return out


def card_evidence(card: Mapping | None, category) -> tuple[dict | None, str | None]:
    """(measured agreement on this category or None, why it is at chance or None)."""
    ka = (card or {}).get("known_agreement")
    if not isinstance(ka, Mapping):
        return None, None
    aspects = category_aspects(category)
    src = ka.get("source")
    chance = [a for a in ka.get("chance_on") or [] if str(a).lower() in aspects]
    if chance:
        return None, f"its card: at chance on {chance[0]} ({src})" if src else f"its card: at chance on {chance[0]}"
    per = {str(k).lower(): v for k, v in (ka.get("per_category") or {}).items() if isinstance(v, Mapping)}
    hits = [(k, per[k]) for k in sorted(aspects) if k in per]
    ev = None
    if hits:  # the worst matching aspect bounds a category that asks several things
        k, m = min(hits, key=lambda h: (_metric(h[1]), h[0]))
        ev = {**m, "on": k}
    elif isinstance(ka.get("overall"), Mapping):
        ev = {**ka["overall"], "on": "overall"}
    if ev is None or (ev.get("kappa") is None and ev.get("accuracy") is None):
        return None, None
    ev["source"] = src
    return ev, None


def _metric(m: Mapping) -> float:
    k = m.get("kappa")
    return float(k) if k is not None else float(m.get("accuracy") or 0.0)


def _chance_from_numbers(ev: Mapping | None) -> bool:
    return ev is not None and ev.get("kappa") is not None and float(ev["kappa"]) <= CHANCE_KAPPA


def _fmt(ev: Mapping) -> str:
    parts = []
    if ev.get("kappa") is not None:
        parts.append(f"κ {float(ev['kappa']):.2f}")
    if ev.get("accuracy") is not None:
        parts.append(f"accuracy {float(ev['accuracy']):.1%}")
    if ev.get("n"):
        parts.append(f"n {int(ev['n'])}")
    on = ev.get("on")
    return ", ".join(parts) + (f" ({on})" if on and on != "overall" else "")


# --- verdict counts ---------------------------------------------------------------------------
def decided_counts(run_dir) -> dict:
    """{scorer: {category: prompt verdicts given}} from ``scores/*.jsonl`` of one run (the
    category of the prompt in prompts.jsonl, else the record's own)."""
    root = _root(run_dir)
    cat_of = {p["id"]: p.get("category") for p in read_records(root / "prompts.jsonl", "prompts")}
    out: dict = {}
    scores = root / "scores"
    for path in sorted(scores.glob("*.jsonl")) if scores.is_dir() else []:
        counts = out.setdefault(path.stem, {})
        for r in score_records(path):
            if r.get("kind") == "prompt" and r.get("verdict") is not None:
                c = cat_of.get(r.get("prompt_id"), r.get("category"))
                counts[c] = counts.get(c, 0) + 1
    return out


# --- the rule ---------------------------------------------------------------------------------
def deciding_scorers(run_dirs, categories: Iterable | None = None, *,
                     decided: list[Mapping] | None = None, cards: Mapping | None = None,
                     defaults: Mapping | None = None, calibration: Mapping | None = None) -> dict:
    """``{category: {"scorer", "why", "agreement", "source", "excluded", "candidates"}}``.

    ``run_dirs``: one run (report, probe) or several (compare: the union of their calibration
    evidence; a scorer is a candidate only where it gave verdicts on the category in every run).
    ``decided``: per run ``{scorer: {category: verdicts}}`` (read from scores/ when omitted).
    ``cards``: the registry's cards (loaded when omitted). ``calibration``: the runs' pooled calibration
    evidence (:func:`pool_calibration`; read from the run folders when omitted). ``scorer`` is None where every
    candidate is at chance or no scorer gave a verdict; ``why`` says which.
    """
    runs = list(run_dirs) if isinstance(run_dirs, (list, tuple)) else [run_dirs]
    categories = None if categories is None else list(categories)
    if decided is None:
        decided = [decided_counts(r) for r in runs]
    if cards is None:
        from .scorers.registry import load_cards

        cards = load_cards()
    if defaults is None:
        defaults = {}
        for c in set(categories or ()) | {c for d in decided for s in d.values() for c in s}:
            defaults[c] = category_default(c, cards)
    if categories is None:
        categories = {c for d in decided for s in d.values() for c in s}
    calib = calibration_evidence(runs) if calibration is None else calibration
    source_calib = SOURCE_RUN if len(runs) == 1 else SOURCE_RUNS
    out = {}
    for cat in sorted(categories, key=lambda c: str(c)):
        names = set.intersection(*[{n for n, cs in d.items() if cs.get(cat)} for d in decided]) if decided else set()
        excluded, scored, set_aside = {}, [], {}
        for name in sorted(names):
            card = cards.get(name)
            cal = (calib.get(name) or {}).get(cat)
            cev, chance = card_evidence(card, cat)
            if chance:
                excluded[name] = chance
                continue
            if cal is not None and cev is not None and cal["n"] < MIN_LABELS_OVER_CARD:
                set_aside[name] = (f"{source_calib} ({_fmt({**cal, 'on': cat})}) set aside: fewer than "
                                   f"{MIN_LABELS_OVER_CARD} labels do not replace the card's measured agreement")
                cal = None
            if cal is not None:
                ev, tier, src = {**cal, "on": cat}, 2, source_calib
            elif cev is not None:
                ev, tier, src = cev, 1, SOURCE_CARD
            else:
                ev, tier, src = None, 0, SOURCE_NONE
            if _chance_from_numbers(ev):
                excluded[name] = f"{src}: at chance ({_fmt(ev)})"
                continue
            scored.append({"name": name, "tier": tier, "ev": ev, "source": src,
                           "kind": scorer_kind(card),
                           "n": min(d.get(name, {}).get(cat, 0) for d in decided)})
        out[cat] = _pick(cat, scored, excluded, defaults.get(cat))
        if set_aside:
            out[cat]["why"] = (out[cat].get("why") or "") + "; " + "; ".join(
                f"{n}: {w}" for n, w in sorted(set_aside.items()))
    return out


def _pick(cat, scored: list[dict], excluded: dict, default: str | None) -> dict:
    res = {"scorer": None, "agreement": None, "source": SOURCE_NONE, "excluded": excluded,
           "candidates": sorted([s["name"] for s in scored] + list(excluded))}
    if not scored:
        res["why"] = ("no scorer gave verdicts on this category" if not excluded else
                      "no scorer decides: " + "; ".join(f"{n} — {w}" for n, w in sorted(excluded.items())))
        return res
    top = max(s["tier"] for s in scored)
    best = [s for s in scored if s["tier"] == top]
    pref = DETECT_FIRST if is_detection_category(cat) else VLM_FIRST
    if top > 0:
        use_kappa = all(s["ev"].get("kappa") is not None for s in best)
        val = (lambda s: float(s["ev"]["kappa"])) if use_kappa else (lambda s: float(s["ev"].get("accuracy") or 0))
        key = lambda s: (-val(s), s["name"] != default, -s["n"])  # noqa: E731
    else:
        key = lambda s: (pref.index(s["kind"]), s["name"] != default, -s["n"])  # noqa: E731
    ranked = sorted(best, key=lambda s: (key(s), s["name"]))
    win = ranked[0]
    tie = len(ranked) > 1 and key(ranked[1]) == key(win)
    others = [s for s in scored if s is not win]
    if top > 0:
        why = f"highest measured agreement ({win['source']}): {_fmt(win['ev'])}"
        beaten = [f"{s['name']} {_fmt(s['ev'])}" if s["ev"] else f"{s['name']} (no evidence)"
                  for s in others]
    else:
        kinds = " > ".join(pref[:4])
        why = (f"no agreement evidence: family preference for "
               f"{'count/position' if pref is DETECT_FIRST else 'attribute/binding/relation/action'} "
               f"categories ({kinds}; published agreement, README 'Scorers'): {win['kind']}")
        beaten = [f"{s['name']} ({s['kind']})" for s in others]
    if beaten:
        why += "; vs " + ", ".join(beaten)
    if excluded:
        why += "; left out: " + "; ".join(f"{n} — {w}" for n, w in sorted(excluded.items()))
    if tie:
        why += "; an exact tie, broken by name"
    ag = None
    if win["ev"]:
        ag = {k: win["ev"].get(k) for k in ("accuracy", "kappa", "n", "on", "level", "source") if win["ev"].get(k) is not None}
    res.update(scorer=win["name"], why=why, agreement=ag, source=win["source"])
    return res


def forced(categories: Iterable, scorer: str) -> dict:
    """The same shape when the user names the scorer (``--scorer``)."""
    return {c: {"scorer": scorer, "why": f"chosen with --scorer {scorer}", "agreement": None,
                "source": "--scorer", "excluded": {}, "candidates": [scorer]} for c in categories}


def primary(deciding: Mapping, weights: Mapping | None = None) -> str | None:
    """The scorer that decides the most (weighted) categories — one name for summaries."""
    counts: dict = {}
    for cat, d in deciding.items():
        if d.get("scorer"):
            counts[d["scorer"]] = counts.get(d["scorer"], 0) + (weights or {}).get(cat, 1)
    return max(sorted(counts), key=lambda n: counts[n]) if counts else None


def table(deciding: Mapping) -> list[dict]:
    """Rows for a page: category, scorer, source, agreement text, why."""
    return [{"category": c, "scorer": d.get("scorer"), "source": d.get("source"),
             "agreement": _fmt(d["agreement"]) if d.get("agreement") else "—", "why": d.get("why")}
            for c, d in deciding.items()]
