"""Files users bring for tiny-sd (built once a session): LoRAs as training scripts write them, a fine-tuned
UNet as a folder and as one safetensors file, and the wrong files users also bring."""

from __future__ import annotations

from pathlib import Path


def build(root: Path) -> dict[str, Path]:
    import torch
    from diffusers import DiffusionPipeline
    from safetensors.torch import load_file, save_file

    from t2i_audit.tiny import materialize
    from t2i_audit.tiny.lora import build_lora

    root.mkdir(parents=True, exist_ok=True)
    out = {"lora": build_lora("tiny-sd", root / "lora")}
    sd = load_file(str(out["lora"]))
    # a second LoRA that reaches the UNet only (as one trained without --train_text_encoder)
    save_file({k: v.flip(0) for k, v in sd.items() if k.startswith("unet.")}, str(root / "lora-unet.safetensors"))
    out["lora_unet_only"] = root / "lora-unet.safetensors"
    # the same LoRA with one number changed: other bytes, another run
    edited = dict(sd)
    key = sorted(edited)[0]
    edited[key] = edited[key].clone()
    edited[key].view(-1)[0] += 1.0
    save_file(edited, str(root / "lora-edited.safetensors"))
    out["lora_edited"] = root / "lora-edited.safetensors"
    # a LoRA for a transformer family: no key names a tiny-sd component (diffusers loads nothing and warns)
    save_file({"transformer." + k.split(".", 1)[1]: v for k, v in sd.items() if k.startswith("unet.")},
              str(root / "lora-transformer.safetensors"))
    out["lora_other_family"] = root / "lora-transformer.safetensors"
    # unet-prefixed keys that name no module of this UNet
    save_file({k.replace("attn1", "attn9").replace("attn2", "attn8"): v for k, v in sd.items()
               if k.startswith("unet.")}, str(root / "lora-nomatch.safetensors"))
    out["lora_no_match"] = root / "lora-nomatch.safetensors"

    pipe = DiffusionPipeline.from_pretrained(materialize("tiny-sd"))
    g = torch.Generator("cpu").manual_seed(3)
    with torch.no_grad():  # a "fine-tuned" UNet: the base weights moved a little
        for p in pipe.unet.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    pipe.unet.save_pretrained(root / "unet-folder")
    out["unet_folder"] = root / "unet-folder"
    out["unet_file"] = root / "unet-folder" / "diffusion_pytorch_model.safetensors"
    pipe.text_encoder.save_pretrained(root / "text-encoder-folder")
    out["text_encoder_file"] = root / "text-encoder-folder" / "model.safetensors"  # another architecture for a UNet
    sdxl = DiffusionPipeline.from_pretrained(materialize("tiny-sdxl"))
    sdxl.unet.save_pretrained(root / "sdxl-unet")  # the same class, another shape (cross-attention width)
    out["other_unet_folder"] = root / "sdxl-unet"
    return out
