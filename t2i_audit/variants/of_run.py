"""The variant of an existing run: what a command working on a run (``probe``, ``predict``, ``select``) uses — the
LoRAs / components its run.yaml records, checked against the bytes its manifest recorded and against what the
command line gives.

Its own module, not in ``variants/__init__``: it validates the recorded settings with ``api.make_config``, and
``api`` imports ``variants`` (an import circle through generate, models and reuse otherwise)."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from ..errors import AuditError
from . import NO_VARIANT, Variant, identity_of, resolve


def for_run(run, model: Optional[str] = None, loras: Optional[Iterable[str]] = None,
            components: Optional[Mapping[str, str]] = None, *, what: str = "run") -> Variant:
    """The variant a command working on an existing run uses: the one its run.yaml records (for the run's own
    model), its files still holding the bytes the run was made with (manifest.json ``model.adapted``). ``loras`` /
    ``components`` given on the command line must name the same files and scales, or are refused with the difference
    named.
    A ``model`` other than the run's gets only what the command line gives."""
    from ..rundir import RunDir
    from ..safeload import load_yaml

    rd = RunDir(run)
    given = resolve(loras or (), components or {}) if (loras or components) else None
    cfg = load_yaml(rd.config) if rd.config.exists() else None
    if not isinstance(cfg, dict) or (model is not None and cfg.get("model") not in (None, model)):
        return given or NO_VARIANT  # no recorded settings (a folder holding a probe file), or another model
    try:
        from ..api import make_config  # the recorded settings validated as `run --config` reads them, located

        recorded = make_config({"model": str(cfg.get("model") or model), "prompts": ["-"],
                                **{k: cfg[k] for k in ("loras", "components") if cfg.get(k) is not None}},
                               where=str(rd.config)).variant()
    except AuditError as e:
        raise AuditError(f"{rd.config}: the {what}'s recorded LoRAs / components cannot be used: {e}") from None
    card = rd.read_manifest().get("model")
    made = card.get("adapted") if isinstance(card, dict) and isinstance(card.get("adapted"), dict) else {}
    if identity_of(made) != recorded.identity():
        from ..resume import differences

        raise AuditError(f"{rd.root}: its LoRA / component files changed since the {what} was made ("
                         f"{'; '.join(differences(identity_of(made), recorded.identity()))}): the {what}'s images "
                         "were not made with these bytes")
    if given is not None and given.identity() != recorded.identity():
        from ..resume import differences

        raise AuditError(f"--lora / --component: the {what} {rd.root} was made with other ones ("
                         f"{'; '.join(differences(recorded.identity(), given.identity()))}); leave them out to use "
                         f"the {what}'s own")
    return recorded
