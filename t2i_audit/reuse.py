"""Loaded models kept across runs in one process: a training run's checkpoints audited one after another
(``t2i-audit track``, ``t2i_audit.track.TrackCallback``) load the base pipeline and the judges once.

Every loader asks the active :class:`Session` first — ``generate.load_pipeline``, the text-only
``probes.capture.pipeline_text.load_text_pipeline``, ``scorers.registry.create_scorer`` and
``models.resolve_model`` — and loads as always when there is none, so a plain ``run`` is untouched. Inside a
session each run is still a normal run (its own folder, identity, stages and files); only where its models come
from changes:

* a pipeline is loaded once per base model, device, dtype and placement; a run whose card carries a variant
  (``ModelCard.adapted``: a checkpoint's components or LoRAs) gets that pipeline with the previous run's variant
  taken off and its own put on by the session's ``switch`` (t2i_audit/track/swap.py), so the base weights are read
  from disk once and a checkpoint costs only its own files;
* the text encoders of activation extraction come from that same pipeline where it runs on the same device in the
  same dtype (its text encoders are the ones a text-only load would build);
* a scorer is created once per name, device and overrides, so ``Scorer.load`` runs once for every run;
* ``hold(card, pipe)`` registers a pipeline that exists only in memory (a training loop's live modules) under
  the card's name, for ``resolve_model`` and every loader.

``loads`` counts what was really loaded (tests and the benchmark read it). No torch at import.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections import Counter
from typing import Callable, Iterator, Optional

_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("t2i_audit_reuse_session", default=None)
_LOADING: contextvars.ContextVar = contextvars.ContextVar("t2i_audit_reuse_loading", default=False)


def active() -> Optional["Session"]:
    """The session loaders should ask, or None (none open, or the session itself is loading)."""
    return None if _LOADING.get() else _ACTIVE.get()


@contextlib.contextmanager
def _loading() -> Iterator[None]:
    token = _LOADING.set(True)  # the loader called from here does the real load
    try:
        yield
    finally:
        _LOADING.reset(token)


def _base_key(card) -> tuple:
    return (card.source, card.revision, card.variant)


class Session:
    """Pipelines, text pipelines and scorers loaded once; ``switch(pipe, held, card, dtype, device, text_only)`` puts
    ``card.adapted`` on a held pipeline in place of ``held`` and returns it (None: variants cannot be switched)."""

    def __init__(self, switch: Optional[Callable] = None):
        self.switch = switch
        self.loads: Counter = Counter()
        self._pipes: dict = {}  # key -> [pipe, the variant it holds now]
        self._scorers: dict = {}
        self._live: dict = {}  # card name -> (card, pipe)

    # --- pipelines ----------------------------------------------------------------------------
    def pipeline(self, card, device: str, dtype: str, *, offload, vae_tiling, load: Callable):
        if card.name in self._live:
            return self._live[card.name][1]
        key = ("pipeline", _base_key(card), device, dtype, offload, vae_tiling)
        return self._held(key, card, dtype, device, False,
                          lambda base: load(base, device, dtype, offload=offload, vae_tiling=vae_tiling))

    def text_pipeline(self, card, device: str, dtype: str, load: Callable):
        if card.name in self._live:
            return self._live[card.name][1]
        for key, (pipe, _held) in self._pipes.items():
            placed = ((getattr(pipe, "t2i_placement", None) or {}).get("offload") or {}).get("mode", "none")
            if key[0] == "pipeline" and key[1:4] == (_base_key(card), device, dtype) and placed == "none":
                return self._held(key, card, dtype, device, False, None)
        return self._held(("text", _base_key(card), device, dtype), card, dtype, device, True, load)

    def _held(self, key, card, dtype: str, device: str, text_only: bool, load: Optional[Callable]):
        if key not in self._pipes:
            base = card.with_variant(_no_variant())
            with _loading():
                pipe = load(base)
            self.loads[key[0]] += 1
            self._pipes[key] = [pipe, _no_variant()]
        entry = self._pipes[key]
        if entry[1] != card.adapted:
            if self.switch is None:
                raise RuntimeError("reuse.Session: a run with another variant and no switch to put it on")
            entry[1] = self.switch(entry[0], entry[1], card, dtype, device, text_only)
        return entry[0]

    def hold(self, card, pipe) -> None:
        """``pipe`` (in memory only) is what ``card.name`` resolves to and loads as."""
        self._live[card.name] = (card, pipe)

    def card(self, ref: str):
        held = self._live.get(ref)
        return held[0] if held else None

    # --- scorers ------------------------------------------------------------------------------
    def scorer(self, name: str, device: str, overrides, make: Callable):
        key = (name, device, json.dumps(overrides, sort_keys=True, default=str))
        if key not in self._scorers:
            with _loading():
                self._scorers[key] = make()
            self.loads[f"scorer:{name}"] += 1  # created; its weights load on first use (Scorer.load), once
        return self._scorers[key]


def _no_variant():
    from .variants import NO_VARIANT

    return NO_VARIANT


@contextlib.contextmanager
def reusing(session: Optional[Session] = None) -> Iterator[Session]:
    """Open ``session`` (a new one by default) for the block: loaders ask it first."""
    session = session or Session()
    token = _ACTIVE.set(session)
    try:
        yield session
    finally:
        _ACTIVE.reset(token)
