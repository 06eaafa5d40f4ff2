"""tiny-kandinsky5: Kandinsky5T2IPipeline with Qwen2.5-VL behind a Qwen2VLProcessor (chat template, 40 rows
dropped) and CLIP (pooled)."""

from __future__ import annotations

from ..tokenizers import kandinsky5_qwen_tokenizer

CARDS = {
    "tiny-kandinsky5": {
        "pipeline": "Kandinsky5T2IPipeline",
        "family": "kandinsky5",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "qwen2.5-vl"},
                          {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": "clip"}],
        "defaults": {"steps": 2, "guidance": 3.5, "size": 32, "dtype": "float32"},
        "call": {"negative_prompt": ""},  # as the real card
    },
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/kandinsky5/test_kandinsky5_t2i.py get_dummy_components (vocabularies ours).
    # Kandinsky5T2IPipeline.__call__ snaps any (width, height) not in self.resolutions (1024 px and six other
    # shapes, reset on every load) to the closest aspect ratio: 1024 x 1024 for a square, so the latents are
    # 128 x 128 whatever the size asked (4096 visual tokens: __call__'s rope positions assume patch 2); one visual
    # block, a small VAE without attention keep the tiny bearable (~1.5 s a step and prompt with CFG on 1 thread).
    from diffusers import FlowMatchEulerDiscreteScheduler, Kandinsky5Transformer3DModel
    from transformers import (CLIPTextModel, Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor,
                              Qwen2VLProcessor, Qwen2VLVideoProcessor)

    from .qwen_image import qwen2_5_vl_config  # imported here: family modules are registered while importing

    tok, tok2 = kandinsky5_qwen_tokenizer(), clip_tokenizer()
    qwen = qwen2_5_vl_config(tok, hidden=32, layers=2, mrope_section=[2, 2, 4])
    return {
        "vae": _seeded(name, "vae", lambda: _vae(latent_channels=16, blocks=(8, 16), scaling_factor=0.3611,
                                                 shift_factor=0.1159, mid_block_add_attention=False,
                                                 use_quant_conv=False, use_post_quant_conv=False,
                                                 force_upcast=True)),
        "text_encoder": _seeded(name, "text_encoder", lambda: Qwen2_5_VLForConditionalGeneration(qwen)),
        # the real tokenizer component is a Qwen2VLProcessor (pipeline_kandinsky_t2i.py __init__; diffusers'
        # tests/pipelines/kandinsky5/test_kandinsky5_t2i.py uses AutoProcessor of a Qwen2-VL): the pipeline calls it as
        # tokenizer(text=..., images=None, videos=None), and its tokenizer's padding_side decides where padding goes
        "tokenizer": Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                                      video_processor=Qwen2VLVideoProcessor()),
        "text_encoder_2": _seeded(name, "text_encoder_2",
                                  lambda: CLIPTextModel(_clip_config(tok2, hidden=16, projection=16))),
        "tokenizer_2": tok2,
        "transformer": _seeded(name, "transformer", lambda: _modulated(Kandinsky5Transformer3DModel(
            in_visual_dim=16, in_text_dim=32, in_text_dim2=16, time_dim=16, out_visual_dim=16, patch_size=(1, 2, 2),
            model_dim=16, ff_dim=32, num_text_blocks=1, num_visual_blocks=1, axes_dims=(1, 1, 2), visual_cond=False,
            attention_type="regular"))),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=7.0),
    }


def _modulated(transformer):
    """transformer_kandinsky.py initialises every Kandinsky5Modulation out_layer to zero (all gates shut: a fresh
    model ignores its text and makes the same image for every prompt); random small values open them."""
    import torch

    with torch.no_grad():
        for name, param in transformer.named_parameters():
            if ".modulation.out_layer." in f".{name}" or "_modulation.out_layer." in name:
                param.normal_(std=0.1)
    return transformer


BUILDERS = {"kandinsky5": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _clip_config, _seeded, _vae, clip_tokenizer  # noqa: E402
