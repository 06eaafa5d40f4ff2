"""Replaced components and combined LoRAs equal what diffusers makes of the same files (tiny-sd).

References are the libraries' own calls: a component folder through ``UNet2DConditionModel.from_pretrained``
and handed to ``DiffusionPipeline.from_pretrained(path, unet=...)`` (how diffusers' training scripts rebuild
a pipeline from a fine-tuned UNet); two LoRAs through two ``load_lora_weights`` and one
``set_adapters([...], adapter_weights=[...])``. A single-file component must equal its folder (the same
weights, the base config). ``apply_variant`` on an already loaded pipeline (a training loop's) must equal a
pipeline loaded with the variant.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.models import resolve_model

from .harness import PROMPTS
from .test_lora_fidelity import _encoded, _generate

TEXTS = [{"id": f"p{i}", "text": t, "spans": {}} for i, t in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def card():
    torch.set_num_threads(1)
    return resolve_model("tiny-sd")


def _ours(card, **variant):
    from t2i_audit.generate import load_pipeline

    return load_pipeline(card.with_variant(**variant), "cpu", "float32")


def test_replaced_unet_equals_from_pretrained_with_that_unet(card, variant_files):
    from diffusers import DiffusionPipeline, UNet2DConditionModel

    unet = UNet2DConditionModel.from_pretrained(variant_files["unet_folder"])
    bare = DiffusionPipeline.from_pretrained(card.pretrained_path(), unet=unet)
    bare.set_progress_bar_config(disable=True)
    expected = _generate(bare, card)
    assert np.abs(expected - _generate(_ours(card), card)).max() > 1e-3  # the fine-tune shows
    for source in ("unet_folder", "unet_file"):
        np.testing.assert_array_equal(_generate(_ours(card, components={"unet": str(variant_files[source])}), card),
                                      expected, err_msg=source)


def test_replaced_text_encoder_reaches_the_stored_arrays(card, variant_files, tmp_path):
    from diffusers import DiffusionPipeline
    from transformers import CLIPTextModel

    from t2i_audit.probes.capture.activations import extract_text_activations, load_array
    from t2i_audit.variants import resolve

    folder = tmp_path / "te"
    moved = CLIPTextModel.from_pretrained(variant_files["text_encoder_file"].parent)
    with torch.no_grad():
        for p in moved.parameters():
            p.mul_(1.1)
    moved.save_pretrained(folder)
    bare = DiffusionPipeline.from_pretrained(card.pretrained_path(), text_encoder=CLIPTextModel.from_pretrained(folder))
    expected = _encoded(bare, card)["text_encoder"]
    base = _encoded(_ours(card), card)["text_encoder"]
    assert all(not np.array_equal(base[n], a) for n, a in expected.items() if n != "h00__eos")  # the change shows
    extract_text_activations(TEXTS, tmp_path / "acts", "tiny-sd", poolings=("eos", "mean"), progress=False,
                             variant=resolve(components={"text_encoder": str(folder / "model.safetensors")}))
    for name, arr in expected.items():
        np.testing.assert_array_equal(load_array(tmp_path / "acts" / "text_encoder", name), arr, err_msg=name)


def test_two_loras_at_their_scales_equal_set_adapters(card, variant_files, tmp_path):
    from t2i_audit.generate import load_pipeline
    from t2i_audit.probes.capture.activations import extract_text_activations, load_array
    from t2i_audit.variants import resolve

    a, b = variant_files["lora"], variant_files["lora_unet_only"]  # b reaches the UNet only
    bare = load_pipeline(card, "cpu", "float32")
    bare.load_lora_weights(str(a.parent), weight_name=a.name, adapter_name="a")
    bare.load_lora_weights(str(b.parent), weight_name=b.name, adapter_name="b")
    bare.set_adapters(["a", "b"], adapter_weights=[0.6, -0.4])
    variant = resolve([f"{a}:0.6", f"{b}:-0.4"])
    np.testing.assert_array_equal(_generate(_ours(card, variant=variant), card), _generate(bare, card))
    extract_text_activations(TEXTS, tmp_path, "tiny-sd", poolings=("eos", "mean"), progress=False, variant=variant)
    for name, arr in _encoded(bare, card)["text_encoder"].items():
        np.testing.assert_array_equal(load_array(tmp_path / "text_encoder", name), arr, err_msg=name)


def test_apply_variant_to_a_loaded_pipeline_equals_loading_with_it(card, variant_files):
    from t2i_audit.generate import load_pipeline
    from t2i_audit.variants import resolve
    from t2i_audit.variants.load import apply_variant

    variant = resolve([f"{variant_files['lora']}:0.5"], {"unet": str(variant_files["unet_file"])})
    live = load_pipeline(card, "cpu", "float32")
    done = apply_variant(live, variant, card)
    assert done["components"] == ["unet"] and done["loras"][0]["layers"]["unet"] > 0
    np.testing.assert_array_equal(_generate(live, card), _generate(_ours(card, variant=variant), card))
