"""Pages made from random-weight test models say so, on every page (report, compare, label) and in ``run``'s
headline: a tiny twin's images are noise and its numbers describe no model, yet they look like any other run's.

A run is of a random-weight model when its manifest's model source is a tiny card (``tiny:<name>``, models.py);
the mini world's generator is trained, not random, and is not flagged.
"""

from __future__ import annotations

from typing import Iterable


def random_weight_models(manifests: Iterable[dict]) -> list[str]:
    """The tiny (random-weight) models among the runs' manifests, by card name."""
    out = set()
    for m in manifests:
        model = (m or {}).get("model") or {}
        if isinstance(model, dict) and str(model.get("source") or "").startswith("tiny:"):
            out.add(str(model.get("name") or model["source"][len("tiny:"):]))
    return sorted(out)


def random_weights_note(manifests: Iterable[dict]) -> str | None:
    """One sentence for the top of a page, or None when no run is of a random-weight model."""
    names = random_weight_models(manifests)
    if not names:
        return None
    what = "a tiny test model" if len(names) == 1 else "tiny test models"
    return (f"{', '.join(names)}: {what} with random weights (plumbing only) — its images are noise and no number "
            "here says anything about a real model.")
