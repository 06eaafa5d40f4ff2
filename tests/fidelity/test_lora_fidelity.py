"""A run with a LoRA equals bare diffusers with the same LoRA, for every tiny family that has a loader.

The reference is diffusers' own API on the base pipeline a run loads (``generate.load_pipeline`` of the card,
itself pinned to ``from_pretrained`` by the other fidelity tests): ``pipe.load_lora_weights(folder,
weight_name=..., adapter_name=...)`` then ``pipe.set_adapters([...], adapter_weights=[scale])``. Ours is the
card with the variant (``card.with_variant``) through the run's loaders: ``load_pipeline`` for images, the
text-only pipeline of ``extract_text_activations`` for the stored arrays. The LoRAs are random but nonzero,
built from the tiny configs with peft and saved by the pipeline class's own ``save_lora_weights``
(``t2i_audit.tiny.lora``). Same machine, same kernels, same batch: equality is exact (stored arrays are
float16 of the same float32 numbers). A family without a LoRA loader skips with the reason on the skip.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.models import resolve_model
from t2i_audit.tiny import TINY_MODELS

from .harness import PROMPTS

SCALE = 0.7


def _loader(family: str):
    import diffusers

    cls = getattr(diffusers, TINY_MODELS[family]["pipeline"])
    return cls if hasattr(cls, "load_lora_weights") else None


def _generate(pipe, card) -> np.ndarray:
    from t2i_audit.generate import image_seed, output_images, pipeline_call_kwargs

    d = card.defaults
    gens = [torch.Generator("cpu").manual_seed(image_seed(f"p{i}", 0, 0)) for i in range(len(PROMPTS))]
    kwargs, _ = pipeline_call_kwargs(type(pipe), PROMPTS, gens, steps=d["steps"], guidance=d["guidance"],
                                     size=d["size"], output_type="np", call=card.call)
    with torch.inference_mode():
        return np.asarray(output_images(pipe(**kwargs)))


def _encoded(pipe, card) -> dict[str, dict[str, np.ndarray]]:
    """What extract_text_activations stores (eos, mean of every layer), computed on ``pipe``, as float16."""
    from t2i_audit.probes.capture.pipeline_text import PipelineTextEncoder

    res = PipelineTextEncoder(pipe, card.call).encode(PROMPTS, [{}] * len(PROMPTS), layers="all",
                                                      poolings=("eos", "mean"))
    return {enc: {k: np.asarray(v).astype(np.float16) for k, v in arrays.items() if not k.startswith("_")}
            for enc, arrays in res.items()}


@pytest.fixture(scope="module")
def lora_file(tmp_path_factory):
    from t2i_audit.tiny.lora import build_lora

    made = {}

    def get(family):
        if family not in made:
            made[family] = build_lora(family, tmp_path_factory.mktemp(f"lora-{family}"))
        return made[family]

    return get


@pytest.mark.parametrize("family", sorted(TINY_MODELS))
def test_run_with_a_lora_equals_diffusers_load_lora_weights(family, lora_file, tmp_path):
    from t2i_audit.generate import load_pipeline
    from t2i_audit.probes.capture.activations import extract_text_activations, load_activations, load_array
    from t2i_audit.variants import resolve
    from t2i_audit.variants.load import adapter_layers

    if _loader(family) is None:
        pytest.skip(f"{TINY_MODELS[family]['pipeline']} has no LoRA loader (load_lora_weights): --lora is refused")
    torch.set_num_threads(1)
    file = lora_file(family)
    card = resolve_model(family)
    variant = resolve([f"{file}:{SCALE}"])

    reference = load_pipeline(card, "cpu", "float32")  # the base a run loads: no adapter anywhere
    assert not any(adapter_layers(reference, "ref").values())
    base_image, base_text = _generate(reference, card), _encoded(reference, card)
    reference.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name="ref")
    reference.set_adapters(["ref"], adapter_weights=[SCALE])
    ref_image, ref_text = _generate(reference, card), _encoded(reference, card)
    reached = {k for k, v in adapter_layers(reference, "ref").items() if v}

    ours = load_pipeline(card.with_variant(variant), "cpu", "float32")
    assert {k for k, v in adapter_layers(ours, "t2i_audit_lora_0").items() if v} == reached
    image = _generate(ours, card)
    assert np.abs(ref_image - base_image).max() > 1e-3, "the LoRA changes nothing: the test would prove nothing"
    np.testing.assert_array_equal(image, ref_image)

    prompts = [{"id": f"p{i}", "text": t, "spans": {}} for i, t in enumerate(PROMPTS)]
    metas = extract_text_activations(prompts, tmp_path, family, poolings=("eos", "mean"), progress=False,
                                     variant=variant)
    for enc, arrays in ref_text.items():
        meta, _ = load_activations(tmp_path / enc)
        assert meta == metas[enc] and sorted(meta["arrays"]) == sorted(arrays)
        for name, expected in arrays.items():
            np.testing.assert_array_equal(load_array(tmp_path / enc, name), expected, err_msg=f"{family}/{enc}/{name}")
        moved = any(not np.array_equal(base_text[enc][n], a) for n, a in arrays.items())
        assert moved == (enc in reached), f"{enc}: LoRA layers {enc in reached}, states changed {moved}"
