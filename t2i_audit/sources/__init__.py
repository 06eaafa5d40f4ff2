"""Where a run's images come from when no diffusers pipeline makes them.

A model reference with one of :data:`PREFIXES` (``endpoint:URL``, ``openai:MODEL``, ``python:module:function``,
and ``images:DIR`` — what ``run --images DIR`` makes: images made elsewhere, :mod:`.folder`) resolves to a
:class:`~t2i_audit.models.ModelCard` whose ``kind`` names its source module here. A source may add to its run's
identity before the run folder is claimed (:func:`source_identity`: a folder, its images' sha256). Every source writes what ``generate.py`` writes — ``images/<prompt_id>/<sample>.*``
and the records of images.jsonl — so scoring, reports, comparisons and boards never know the difference; only the
stages that need the model's activations (probes, early prediction, selection) need a pipeline, and say so.

Each kind is one module with ``make_images(run, prompts, card, settings, *, state, progress) -> dict`` (the
stage's counts, as ``generate.generate_images`` returns them) and, for a model reference, ``card_for(ref)``.
Modules are imported on first use, so listing sources costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Optional

# model-reference prefix -> the card's kind
PREFIXES = {"endpoint:": "endpoint", "openai:": "openai", "python:": "python", "images:": "images"}
# card kind -> module of this package that makes (or reads) its images
MODULES = {"images": "folder", "endpoint": "hosted", "openai": "hosted", "python": "callable"}


def _module(kind: str):
    return importlib.import_module(f"{__name__}.{MODULES[kind]}")


def resolve_source(ref: str):
    """The card of a model reference that names a source (None: not one, e.g. a card name or a pipeline)."""
    for prefix, kind in PREFIXES.items():
        if ref.startswith(prefix):
            return _module(kind).card_for(ref)
    return None


def make_images(run, prompts: list[dict], card, settings, *, state=None, progress: bool = True) -> dict:
    """The generate stage for a card without a pipeline: its source's images, recorded as a pipeline's are."""
    return _module(card.kind).make_images(run, prompts, card, settings, state=state, progress=progress)


def check_config(card, cfg):
    """The card as the run uses it, after its source refused what it cannot take (before anything is written)."""
    check = getattr(_module(card.kind), "check_config", None)
    return (check(card, cfg) or card) if check is not None else card


def refuse_without_pipeline(what: str, *, model: Optional[str] = None, run=None) -> None:
    """Exit 2 (AuditError) when ``what`` (a command that needs activations) is asked of a model without a pipeline:
    the ``model`` reference given, or the model whose images ``run`` holds (its manifest; a run of images made
    elsewhere has no activations to relate them to, whichever pipeline is named). Loads no model: a reference's
    source prefix, or the card kind the manifest recorded, decides it."""
    from ..errors import AuditError

    cards = [resolve_source(model)] if model else []
    if run is not None:
        from pathlib import Path

        from ..records import read_document

        recorded = read_document(Path(run) / "manifest.json", "manifest").get("model")
        if isinstance(recorded, dict) and recorded.get("kind") not in (None, "pipeline"):
            from types import SimpleNamespace  # what needs_pipeline reads of a card, as the manifest recorded it

            cards.append(SimpleNamespace(has_pipeline=False, source=recorded.get("source")
                                         or f"{recorded['kind']}:{recorded.get('target')}"))
    for card in cards:
        why = needs_pipeline(card, what) if card is not None else None
        if why:
            raise AuditError(f"{why}; give a model that has one (a card name, hf:org/repo or a pipeline folder)")


def source_identity(card, prompts: list[dict], images_per_prompt: int, out=None, **kw) -> dict:
    """What a source adds to its run's identity before the run folder is claimed (a folder: its images' sha256;
    ``out``: the run folder, which must not lie inside what the source reads; ``suite``: the records a --limit run
    drew its prompts from; ``progress``); {} for a source that adds none."""
    fn = getattr(_module(card.kind), "identity", None)
    return fn(card, prompts, images_per_prompt, out, **kw) if fn is not None else {}


def needs_pipeline(card, what: str) -> Optional[str]:
    """Why ``what`` (a stage or command) cannot run on ``card``'s run; None when it can."""
    if card.has_pipeline:
        return None
    return (f"{what} needs the model's activations, and {card.source} has no diffusers pipeline to read them from "
            "(images made elsewhere, a hosted model or your own sampler); generation, scoring and reports work")
