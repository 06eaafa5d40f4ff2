"""Putting a checkpoint on a held pipeline in place of the previous one (the ``switch`` of a reuse.Session).

The previous variant comes off first: its LoRAs by the pipeline's own ``unload_lora_weights`` (diffusers
loaders/lora_base.py ``LoraBaseMixin.unload_lora_weights``: ``unload_lora`` on each denoiser, peft layers removed
from each text encoder — the base layers come back as they were), its replaced components by the base modules
kept aside when they were first replaced. Then the new variant goes on with the variants package's own loaders
(``load_component``: the component class's ``from_pretrained``, as ``run --component`` loads it; ``apply_loras``:
``load_lora_weights`` + ``set_adapters``, as ``run --lora``), so a checkpoint audited in a track gives the
images and verdicts a separate ``run`` with the same ``--component`` / ``--lora`` gives (tested).
"""

from __future__ import annotations

BASE_ATTR = "_t2i_audit_base_components"  # on the pipeline: component name -> the base module it had


def switch(pipe, held, card, dtype: str, device: str, text_only: bool):
    """Take ``held`` (a Variant) off ``pipe`` and put ``card.adapted`` on; returns the variant now held."""
    from ..variants.load import apply_loras, load_component

    want = card.adapted
    if held.loras:
        pipe.unload_lora_weights()
    pipe.t2i_loras = None
    originals = pipe.__dict__.setdefault(BASE_ATTR, {})
    for comp in held.components:
        if comp.name in originals:
            pipe.register_modules(**{comp.name: originals[comp.name]})
    for comp in want.components:
        if text_only and not comp.name.startswith("text_encoder"):
            continue  # the text-only pipeline has no denoiser to replace
        base_module = originals.setdefault(comp.name, getattr(pipe, comp.name))
        module = load_component(card, comp, dtype)
        module.to(_device_of(base_module, device))
        pipe.register_modules(**{comp.name: module})
    if want.loras:
        pipe.t2i_loras = apply_loras(pipe, want, text_only=text_only)
    _replace(pipe, card, device)
    return want


def _device_of(module, fallback: str):
    dev = getattr(module, "device", None)
    return dev if dev is not None and str(dev) != "meta" else fallback


def _replace(pipe, card, device: str) -> None:
    """Under CPU offload the accelerate hooks belong to the old modules: placed again, as it was loaded."""
    mode = ((getattr(pipe, "t2i_placement", None) or {}).get("offload") or {}).get("mode", "none")
    if mode != "none":
        from ..generate import place_pipeline

        place_pipeline(pipe, card, device, mode)
