"""Random-but-nonzero LoRAs for the tiny families, in the file format users' training scripts write.

diffusers' own LoRA training scripts inject a peft ``LoraConfig`` into the denoiser (and text encoders),
train, then save ``get_peft_model_state_dict(model)`` of each through the pipeline class's
``save_lora_weights(save_directory, transformer_lora_layers=..., text_encoder_lora_layers=...)``
(examples/dreambooth/train_dreambooth_lora_sd3.py, train_dreambooth_lora_flux.py,
train_dreambooth_lora_lumina2.py). Here the "training" is a seeded random draw of the LoRA matrices, so
the file changes what the model computes, and the rest is the same calls.

Targets: the denoiser's attention projections (``to_q`` / ``to_k`` / ``to_v``, the module names of
diffusers' ``Attention``; Kandinsky 5's ``to_query`` …; else every Linear of an attention block) and,
for each text encoder the family's loader loads into, its ``q_proj`` / ``k_proj`` / ``v_proj`` /
``out_proj`` (the names diffusers' ``_load_lora_into_text_encoder`` reads ranks from: CLIP's).
"""

from __future__ import annotations

import inspect
from pathlib import Path

DENOISER_TARGETS = ("to_q", "to_k", "to_v", "to_query", "to_key", "to_value")  # diffusers Attention; Kandinsky 5
TEXT_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")
WEIGHT_NAME = "pytorch_lora_weights.safetensors"


def lora_components(pipeline_class) -> tuple[list[str], list[str]]:
    """(denoisers, text encoders) the class's LoRA loader loads into and its ``save_lora_weights`` takes."""
    saves = set(inspect.signature(pipeline_class.save_lora_weights).parameters)
    loadable = [c for c in getattr(pipeline_class, "_lora_loadable_modules", ()) if f"{c}_lora_layers" in saves]
    return ([c for c in loadable if not c.startswith("text_encoder")],
            [c for c in loadable if c.startswith("text_encoder")])


def _targets(module, suffixes, fallback_word: str | None) -> list[str]:
    import torch

    linear = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    found = [n for n in linear if n.rsplit(".", 1)[-1] in suffixes]
    if not found and fallback_word:
        found = [n for n in linear if fallback_word in n]
    return found


def _random_lora(module, targets: list[str], rank: int, seed: int, std: float) -> dict:
    """Inject a LoRA of ``rank`` on ``targets``, draw its matrices from a seeded generator, return its state dict."""
    import torch
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model

    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=rank, target_modules=targets), module, adapter_name="tiny")
    state = get_peft_model_state_dict(module, adapter_name="tiny")
    g = torch.Generator("cpu").manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=g) * std).to(v.dtype) for k, v in sorted(state.items())}


def build_lora(model: str, out_dir, *, rank: int = 4, seed: int = 0, std: float = 0.2, text_encoders: bool = True,
               denoiser: bool = True, weight_name: str = WEIGHT_NAME) -> Path:
    """A random LoRA for ``model`` (a tiny card, ``mini``, any model reference) saved by its pipeline class's
    ``save_lora_weights`` into ``out_dir/weight_name``; returns the file. ``text_encoders``: also the text
    encoders the family's loader supports (those with CLIP-named projections)."""
    import torch
    from diffusers import DiffusionPipeline

    from ..models import resolve_model

    card = resolve_model(model)
    pipe = DiffusionPipeline.from_pretrained(card.pretrained_path(), revision=card.revision)
    cls = type(pipe)
    denoisers, texts = lora_components(cls)
    layers: dict = {}
    for i, comp in enumerate(denoisers if denoiser else []):
        targets = _targets(getattr(pipe, comp), DENOISER_TARGETS, "attn")
        if targets:
            layers[f"{comp}_lora_layers"] = _random_lora(getattr(pipe, comp), targets, rank, seed + i, std)
    for i, comp in enumerate(texts if text_encoders else []):
        module = getattr(pipe, comp, None)
        targets = _targets(module, TEXT_TARGETS, None) if isinstance(module, torch.nn.Module) else []
        if targets:
            layers[f"{comp}_lora_layers"] = _random_lora(module, targets, rank, seed + 100 + i, std)
    if not layers:
        raise ValueError(f"{model}: no layer of {cls.__name__} to put a LoRA on")
    out = Path(out_dir)
    cls.save_lora_weights(save_directory=str(out), weight_name=weight_name, **layers)
    return out / weight_name
