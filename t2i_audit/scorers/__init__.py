"""Scorers: did each image compose what its prompt asked, slot by slot? (No torch at import.)

Python API (the CLI wraps these one to one):

* :func:`list_scorers` — the registry's cards, as dicts (no scorer class is imported);
* :func:`default_scorers` — a default set per prompt category, used by ``t2i-audit run``;
* :func:`run_score_stage` — score a run directory, resumably (see :mod:`.stage`);
* :func:`t2i_audit.scorers.calibrate.calibrate` / ``export_sheet`` — agreement with labels.

Write your own scorer by subclassing :class:`t2i_audit.scorers.base.Scorer` or
:class:`~t2i_audit.scorers.base.QuestionScorer` and adding a card (see ``base.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from .base import Answer, QuestionScorer, Scorer, ScoreItem  # noqa: F401  (pure python)
from .registry import create_scorer, get_card, load_cards  # noqa: F401

if TYPE_CHECKING:
    from ..rundir import RunDir

from ..deciding import category_default  # noqa: F401,E402  (re-exported: one place picks scorers)


def list_scorers(extra_cards: Iterable[str] = ()) -> list[dict]:
    """One dict per registered scorer: name, description, family, model, measures, range,
    higher_is_better, class, file."""
    out = []
    for name, c in sorted(load_cards(extra_cards).items()):
        m = c.get("model") or {}
        model = str(m.get("id", ""))
        if m.get("pretrained"):
            model += f" ({m['pretrained']})"
        out.append({"name": name, "description": c.get("description", ""),
                    "family": c.get("family", "custom"), "model": model,
                    "revision": m.get("revision"), "measures": c.get("measures", ""),
                    "range": c.get("range"), "higher_is_better": c.get("higher_is_better", True),
                    "class": c.get("class"), "file": c.get("_file"),
                    "known_agreement": c.get("known_agreement")})
    return out


def default_scorers(categories: set[str], *, tiny: bool = False) -> list[str]:
    """One scorer per kind of category: ``qwen3-vl-8b`` (a VLM judge) for attributes, bindings,
    relations and actions; ``geneval`` (detection; ``detect-owlv2`` if no geneval card is
    registered) for counts and positions. ``tiny``: the tiny random scorers of the same kinds,
    which build offline (for tiny model cards)."""
    cards = None if tiny else load_cards()
    names: list[str] = []
    for cat in sorted(categories or ()):
        n = category_default(cat, cards, tiny=tiny)
        if n not in names:
            names.append(n)
    return names


def run_score_stage(run_dir: "RunDir", scorers: list[str], *, device: str = "cpu",
                    batch_size: int | None = None, progress: bool = True,
                    overrides: dict | None = None, extra_cards: Iterable[str] = ()) -> dict:
    """Score ``run_dir`` with ``scorers``; returns counts per scorer and updates the manifest's
    ``score`` stage. ``overrides``: scorer name → partial card; ``extra_cards``: card files.
    ``batch_size``: None keeps the run's recorded one (else 16). See :mod:`.stage` for the resume rule."""
    from .stage import run_score_stage as _run

    return _run(run_dir, scorers, device=device, batch_size=batch_size, progress=progress,
                overrides=overrides, extra_cards=extra_cards)
