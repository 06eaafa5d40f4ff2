"""Checkpoint discovery over the layouts diffusers' examples and Accelerate write, each built here with the
writers' own functions from tiny components; half-written checkpoints skipped and named."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from t2i_audit.track.discover import Base, discover

from .outputs import accelerate_save_state, age, load_tiny, perturbed, save_components, unet_lora_layers


def sd_base(folder: Path) -> Base:
    return Base.of(json.loads((folder / "model_index.json").read_text()), folder)


@pytest.fixture(scope="module")
def sd_pipe():
    return load_tiny("tiny-sd")


def test_component_folders_ema_and_step_order(tmp_path, tiny_sd_base, sd_pipe):
    """train_text_to_image.py's hook: checkpoint-N/unet (+ unet_ema); train_dreambooth.py's: unet + text_encoder.
    Numeric step order (checkpoint-10 after checkpoint-9), EMA only with --ema."""
    out = tmp_path / "out"
    save_components(out / "checkpoint-10", unet=sd_pipe.unet, unet_ema=perturbed(sd_pipe.unet, 1))
    save_components(out / "checkpoint-9", unet=sd_pipe.unet, text_encoder=sd_pipe.text_encoder)
    (out / "logs").mkdir()  # other folders a training run leaves are not checkpoints
    age(out)
    found = discover(out, sd_base(tiny_sd_base))
    assert [(c.label, c.step, c.layout) for c in found.checkpoints] == [
        ("checkpoint-9", 9, "components"), ("checkpoint-10", 10, "components")]
    assert set(found.checkpoints[0].components) == {"unet", "text_encoder"}
    assert found.checkpoints[1].components == {"unet": out / "checkpoint-10" / "unet"}
    assert any("--ema" in n for n in found.checkpoints[1].notes)
    ema = discover(out, sd_base(tiny_sd_base), ema=True).checkpoints[1]
    assert ema.components == {"unet": out / "checkpoint-10" / "unet_ema"} and ema.ema
    assert found.skipped == []


def test_lora_checkpoint_and_final_lora(tmp_path, tiny_sd_base, sd_pipe):
    """train_text_to_image_lora.py: save_lora_weights into checkpoint-N and, at the end, into OUTPUT itself."""
    from diffusers import StableDiffusionPipeline

    out = tmp_path / "out"
    layers = unet_lora_layers(sd_pipe.unet)
    StableDiffusionPipeline.save_lora_weights(str(out / "checkpoint-5"), unet_lora_layers=layers, safe_serialization=True)
    StableDiffusionPipeline.save_lora_weights(str(out), unet_lora_layers=layers, safe_serialization=True)
    age(out)
    found = discover(out, sd_base(tiny_sd_base))
    assert [(c.label, c.layout) for c in found.checkpoints] == [("checkpoint-5", "lora"), ("final", "lora")]
    assert found.checkpoints[0].loras == [out / "checkpoint-5" / "pytorch_lora_weights.safetensors"]
    assert found.checkpoints[1].step is None and found.checkpoints[1].components == {}


def test_transformer_checkpoint_of_a_dit(tmp_path):
    """train_dreambooth_flux.py's hook: checkpoint-N/transformer."""
    from t2i_audit.tiny import materialize

    pipe = load_tiny("tiny-flux")
    base = materialize("tiny-flux")
    out = tmp_path / "out"
    save_components(out / "checkpoint-3", transformer=pipe.transformer)
    age(out)
    (ck,) = discover(out, sd_base(base)).checkpoints
    assert ck.components == {"transformer": out / "checkpoint-3" / "transformer"}


def test_accelerate_save_state_raw_state_dicts(tmp_path, tiny_sd_base, sd_pipe):
    """A bare loop's accelerator.save_state: model.safetensors / model_1.safetensors, placed by tensor names."""
    import copy

    out = tmp_path / "out"
    accelerate_save_state(out / "checkpoint-7", copy.deepcopy(sd_pipe.text_encoder), copy.deepcopy(sd_pipe.unet))
    assert {"model.safetensors", "model_1.safetensors", "optimizer.bin", "random_states_0.pkl"} <= {
        p.name for p in (out / "checkpoint-7").iterdir()}
    age(out)
    (ck,) = discover(out, sd_base(tiny_sd_base)).checkpoints
    assert ck.layout == "accelerate"
    assert ck.components == {"text_encoder": out / "checkpoint-7" / "model.safetensors",
                             "unet": out / "checkpoint-7" / "model_1.safetensors"}
    # without a readable base folder, model.safetensors is the denoiser and model_1 cannot be placed
    bare = discover(out, Base(components=("unet", "text_encoder", "vae")))
    assert bare.checkpoints == [] and "model_1.safetensors" in bare.skipped[0].reason


def test_final_pipeline_and_automatic_naming(tmp_path, tiny_sd_base, sd_pipe):
    """The final save_pretrained pipeline (components that replace the base's), after accelerate's
    automatic-naming checkpoints (checkpoints/checkpoint_<i>)."""
    import copy

    out = tmp_path / "out"
    accelerate_save_state(out / "checkpoints" / "checkpoint_0", copy.deepcopy(sd_pipe.unet))
    sd_pipe.save_pretrained(str(out))
    age(out)
    found = discover(out, sd_base(tiny_sd_base))
    assert [c.label for c in found.checkpoints] == ["checkpoints/checkpoint_0", "final"]
    assert {"unet", "text_encoder", "vae"} <= set(found.checkpoints[1].components)
    # a final whose scheduler is not the base's is another model, not a step of this training
    cfg = out / "scheduler" / "scheduler_config.json"
    cfg.write_text(cfg.read_text().replace('"num_train_timesteps": 1000', '"num_train_timesteps": 999'))
    age(out)
    found = discover(out, sd_base(tiny_sd_base))
    assert [s.label for s in found.skipped] == ["final"] and "scheduler" in found.skipped[0].reason


def test_half_written_checkpoints_are_skipped_and_named(tmp_path, tiny_sd_base, sd_pipe):
    out = tmp_path / "out"
    good = save_components(out / "checkpoint-1", unet=sd_pipe.unet)
    weights = good / "unet" / "diffusion_pytorch_model.safetensors"
    # a safetensors file cut short, as while save_file is still writing it
    shutil.copytree(good, out / "checkpoint-2")
    cut = out / "checkpoint-2" / "unet" / "diffusion_pytorch_model.safetensors"
    cut.write_bytes(weights.read_bytes()[:-100])
    # config.json written, weights not yet (save_pretrained writes the config first)
    (out / "checkpoint-3" / "unet").mkdir(parents=True)
    shutil.copy(good / "unet" / "config.json", out / "checkpoint-3" / "unet")
    # a staging file left by a writer
    shutil.copytree(good, out / "checkpoint-4")
    (out / "checkpoint-4" / "unet" / "diffusion_pytorch_model.safetensors.tmp").write_bytes(b"x")
    # accelerate has written the optimizer but not yet its random states (written last)
    shutil.copytree(good, out / "checkpoint-5")
    (out / "checkpoint-5" / "optimizer.bin").write_bytes(b"")
    # a truncated torch.save archive (no end-of-archive record)
    accelerate_save_state(out / "checkpoint-6", sd_pipe.unet)
    (out / "checkpoint-6" / "model.safetensors").unlink()
    import torch

    torch.save(sd_pipe.unet.state_dict(), out / "checkpoint-6" / "pytorch_model.bin")
    data = (out / "checkpoint-6" / "pytorch_model.bin").read_bytes()
    (out / "checkpoint-6" / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    age(out)
    # complete but modified a second ago: training may still be writing into it
    shutil.copytree(good, out / "checkpoint-7", copy_function=shutil.copyfile)
    found = discover(out, sd_base(tiny_sd_base), settle=10)
    assert [c.label for c in found.checkpoints] == ["checkpoint-1"]
    reasons = {s.label: s.reason for s in found.skipped}
    assert set(reasons) == {f"checkpoint-{i}" for i in range(2, 8)}
    assert "truncated" in reasons["checkpoint-2"]
    assert "no weights file" in reasons["checkpoint-3"]
    assert ".tmp" in reasons["checkpoint-4"]
    assert "random_states" in reasons["checkpoint-5"]
    assert "end-of-archive" in reasons["checkpoint-6"]
    assert "s ago" in reasons["checkpoint-7"]
    later = discover(out, sd_base(tiny_sd_base), settle=10, now=time.time() + 60)
    assert [c.label for c in later.checkpoints] == ["checkpoint-1", "checkpoint-7"]
