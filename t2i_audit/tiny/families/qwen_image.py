"""tiny-qwen-image: QwenImagePipeline with a Qwen2.5-VL text encoder (byte-level BPE, chat template)."""

from __future__ import annotations

from ..tokenizers import QWEN_SPECIALS, qwen_tokenizer

CARDS = {
    "tiny-qwen-image": {
        "pipeline": "QwenImagePipeline",
        "family": "qwen-image",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "qwen2.5-vl"}],
        "defaults": {"steps": 2, "guidance": 1.0, "size": 32, "dtype": "float32"},
        # as the real card: true CFG (two transformer calls a step) with a " " negative prompt
        "call": {"true_cfg_scale": 4.0, "negative_prompt": " "},
    },
}


def qwen2_5_vl_config(tok, *, hidden: int, layers: int, mrope_section: list, **text):
    """A tiny Qwen2.5-VL text encoder's config (diffusers' tests/pipelines/qwenimage get_dummy_components),
    special-token ids from ``tok``; also tiny-kandinsky5's and tiny-hunyuan-image's (``text``: extra text_config)."""
    from transformers import Qwen2_5_VLConfig

    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    return Qwen2_5_VLConfig(
        text_config={"hidden_size": hidden, "intermediate_size": hidden, "num_hidden_layers": layers,
                     "num_attention_heads": 2, "num_key_value_heads": 2, "rope_theta": 1000000.0,
                     "rope_scaling": {"mrope_section": mrope_section, "rope_type": "default", "type": "default"},
                     "vocab_size": len(tok), "bos_token_id": ids["<|endoftext|>"],
                     "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"], **text},
        vision_config={"depth": 2, "hidden_size": hidden, "intermediate_size": hidden, "num_heads": 2,
                       "out_hidden_size": hidden},
        hidden_size=hidden, vocab_size=len(tok), vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"], vision_token_id=ids["<|image_pad|>"],
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"])


def build(name: str) -> dict:
    # after diffusers tests/pipelines/qwenimage/test_qwenimage.py get_dummy_components (vocabulary = ours)
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    tok = qwen_tokenizer()
    config = qwen2_5_vl_config(tok, hidden=16, layers=2, mrope_section=[1, 1, 2])
    z_dim = 4
    return {
        # 4 latent channels packed 2x2 -> 16 transformer channels; joint_attention_dim = text hidden 16
        "transformer": _seeded(name, "transformer", lambda: QwenImageTransformer2DModel(
            patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
            num_attention_heads=3, joint_attention_dim=16, guidance_embeds=False, axes_dims_rope=(8, 4, 4))),
        "vae": _seeded(name, "vae", lambda: AutoencoderKLQwenImage(
            base_dim=z_dim * 6, z_dim=z_dim, dim_mult=[1, 2, 4], num_res_blocks=1,
            temperal_downsample=[False, True], latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim)),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Qwen2_5_VLForConditionalGeneration(config)),
        "tokenizer": tok,
    }


BUILDERS = {"qwen-image": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
