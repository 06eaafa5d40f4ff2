"""On whose images a judge's agreement was measured, and which ranked models it was never checked on.

A judge's errors differ from one generator to the next (a detector misses one model's style, a VQA judge is
fooled by another's artefacts), so the agreement the deciding rule weighs says little about a model whose images
were never labelled. Two sources say which images were checked:

* a run's own ``calibration/report.json`` (``t2i-audit calibrate``): measured on that run's images — its model;
* a scorer card's ``known_agreement.measured_on`` (t2i_audit/cards/scorers): the generators whose images the
  card's figure was measured on (the mini judges: ``[mini]``). A card without it measured elsewhere, on images
  it does not name: no ranked model counts as checked by it.

A variant (LoRA, components) is other weights: a check on the base model's images does not cover it.
"""

from __future__ import annotations

from .. import deciding as rule
from . import settings


def _checked_by_card(card: dict | None, entry: dict) -> bool:
    names = ((card or {}).get("known_agreement") or {}).get("measured_on") or []
    sub = settings.subject(entry)
    return sub["model"] in {str(n) for n in names} and not (sub.get("loras") or sub.get("components"))


def _checked_by_calibration(entry: dict, scorer: str, category: str) -> bool:
    report = entry.get("calibration")
    return isinstance(report, dict) and category in (rule.pool_calibration([report]).get(scorer) or {})


def judge_checks(entries: list[dict], deciding: dict, labels: dict, cards: dict) -> dict:
    """``{category: {"scorer", "measured_on", "unchecked": [run ids]}}`` for the categories a judge decides;
    ``measured_on``: the models whose images its agreement was measured on, in words."""
    out = {}
    for cat, d in sorted(deciding.items(), key=lambda kv: str(kv[0])):
        scorer = (d or {}).get("scorer")
        if not scorer:
            continue
        card = cards.get(scorer)
        by_card = [e for e in entries if _checked_by_card(card, e)]
        by_calib = [e for e in entries if _checked_by_calibration(e, scorer, cat)]
        named = ((card or {}).get("known_agreement") or {}).get("measured_on") or []
        parts = []
        if by_calib:
            parts.append("calibrate on " + ", ".join(labels[e["id"]] for e in by_calib))
        if named:
            parts.append("its card: images of " + ", ".join(map(str, named)))
        elif (card or {}).get("known_agreement"):
            parts.append("its card: images of generators it does not name")
        checked = {e["id"] for e in by_card + by_calib}
        out[str(cat)] = {"scorer": scorer, "measured_on": "; ".join(parts) or "never measured",
                         "unchecked": [e["id"] for e in entries if e["id"] not in checked]}
    return out
