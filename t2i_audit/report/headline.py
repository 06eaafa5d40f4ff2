"""The run's headline as one line of text: what ``run`` prints beside its paths, from summary.json.

The same figures the report's headline shows (``summary.json["report"]``: overall, and seen vs held-out where
the suite has both splits), under the one small-sample rule (:func:`t2i_audit.stats.too_few`): below it the
counts are printed, never a rate.
"""

from __future__ import annotations

from .. import stats

SPLIT_NAMES = {"train": "seen", "heldout": "held out"}


def _rate(r: dict, items: str = "images") -> str:
    """" (42.1 %, 95 % CI 36.5–48.0 %)", or " (too few for a rate)" below the one small-sample rule."""
    why = stats.too_few("rate", n=int(r["n"]), items=items)
    if why or r.get("rate") is None:
        return f" ({stats.TOO_FEW} for a rate)"
    return f" ({100 * r['rate']:.1f} %, 95 % CI {100 * r['lo']:.1f}–{100 * r['hi']:.1f} %)"


def headline_text(report: dict | None) -> str | None:
    """``summary.json["report"]`` → "118 of 280 images pass every question (42.1 %, 95 % CI 36.5–48.0 %); seen
    90/189 (…), held out 28/91 (…)", led by "mini + my_lora@0.8 (sha256 1a2b3c): " for a run with a variant; None
    when the run has no scored image."""
    overall = (report or {}).get("overall")
    if not overall or not overall.get("n"):
        return None
    text = f"{overall['k']} of {overall['n']} images pass every question{_rate(overall)}"
    if report.get("variant"):  # a run with a LoRA / replaced component names it (variants/labels.py)
        from ..variants.labels import joined

        text = f"{joined(report.get('model'), report['variant'])}: {text}"
    splits = report.get("by_split") or {}
    if len(splits) > 1:
        order = list(SPLIT_NAMES)
        text += "; " + ", ".join(
            f"{SPLIT_NAMES.get(s, s)} {r['k']}/{r['n']}{_rate(r)}"
            for s, r in sorted(splits.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 9, kv[0])))
    if report.get("random_weights"):
        text += f". {report['random_weights']}"
    return text
