"""Training outputs built offline with the writers' own functions (``save_pretrained``, ``save_lora_weights``,
``Accelerator.save_state``) from the tiny components, in the layouts diffusers' examples write."""

from __future__ import annotations

import os
from pathlib import Path



def tiny_base(name: str = "tiny-sd") -> Path:
    from t2i_audit.tiny import materialize

    return materialize(name)


def load_tiny(name: str = "tiny-sd"):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(str(tiny_base(name)))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def perturbed(module, seed: int, scale: float = 0.05):
    """``module`` with every float weight moved by seeded noise: a stand-in for a training step."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return module


def unet_lora_layers(unet, seed: int = 0):
    """A LoRA on the UNet's attention projections as the LoRA examples save it
    (examples/text_to_image/train_text_to_image_lora.py: get_peft_model_state_dict → convert_state_dict_to_diffusers);
    ``unet`` itself is left as it was (the adapter goes on a copy)."""
    import copy

    import torch
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    unet = copy.deepcopy(unet)
    unet.add_adapter(LoraConfig(r=2, lora_alpha=2, init_lora_weights="gaussian",
                                target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in unet.named_parameters():
            if "lora_B" in n:  # B starts at zero: make the adapter do something
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return convert_state_dict_to_diffusers(get_peft_model_state_dict(unet))


def save_components(folder: Path, **modules) -> Path:
    """``checkpoint-N/<name>/`` as a save_model_hook writes it (``model.save_pretrained(os.path.join(output_dir, name))``)."""
    for name, module in modules.items():
        module.save_pretrained(str(folder / name))
    return folder


def accelerate_save_state(folder: Path, *models) -> Path:
    """``accelerator.save_state(folder)`` of a bare loop: raw state dicts model.safetensors, model_1.safetensors …,
    an optimizer, random_states_0.pkl."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    acc = Accelerator(cpu=True)
    try:
        prepared = acc.prepare(*models)
        prepared = prepared if isinstance(prepared, tuple) else (prepared,)
        opt = acc.prepare(torch.optim.SGD(prepared[0].parameters(), lr=0.1))
        del opt
        acc.save_state(str(folder))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    return folder


def age(folder: Path, seconds: float = 3600) -> None:
    """Every file under ``folder`` modified ``seconds`` ago (a checkpoint training has finished writing)."""
    import time

    t = time.time() - seconds
    for p in [folder, *folder.rglob("*")]:
        os.utime(p, (t, t))

