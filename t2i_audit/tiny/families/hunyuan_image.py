"""tiny-hunyuan-image: HunyuanImagePipeline — Qwen2.5-VL in a chat template (34 rows dropped, padding rows kept with
their mask), a ByT5 glyph encoder that only reads quoted text, and CFG from a `guider` component."""

from __future__ import annotations

from ..tokenizers import qwen_tokenizer

CARDS = {
    "tiny-hunyuan-image": {
        "pipeline": "HunyuanImagePipeline",
        "family": "hunyuan-image",
        # the ByT5 encoder (text_encoder_2) sees only the prompt's quoted text (pipeline_hunyuanimage.py
        # extract_glyph_text), one prompt at a time, and is not called otherwise (families.yaml per_prompt); both are
        # stored, as for the real card (whose encoders come from model_index.json: T5EncoderModel -> t5)
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "qwen2.5-vl"},
                          {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": "t5"}],
        # guidance goes to distilled_guidance_scale (families.yaml guidance_arg), which this non-distilled transformer
        # ignores, as the real HunyuanImage-2.1's; CFG (cond, then uncond) comes from the guider's config.
        # No negative_prompt: __call__ encodes None as "" per prompt, while a str "" gives ONE row that
        # encode_prompt cannot .view() to a batch of 2
        "defaults": {"steps": 2, "guidance": 3.5, "size": 32, "dtype": "float32"},
        "call": {},
    }
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/hunyuan_image/test_hunyuan_image.py get_dummy_components (guidance_embeds
    # False + guider; vocabularies ours: tiny-qwen-image's tokenizer has the same template prefix, 34 tokens)
    from diffusers import (AdaptiveProjectedMixGuidance, AutoencoderKLHunyuanImage, FlowMatchEulerDiscreteScheduler,
                           HunyuanImageTransformer2DModel)
    from transformers import ByT5Tokenizer, Qwen2_5_VLForConditionalGeneration, T5Config, T5EncoderModel

    from .qwen_image import qwen2_5_vl_config  # imported here: family modules are registered while importing

    tok = qwen_tokenizer()
    # initializer_range 0.3 (default 0.02): hidden_states[-3] has no final norm, and at 0.02 its std (0.02) left the
    # prompt's effect on the image at 9e-5; at 0.3 the std is ~4 and swapping two words moves pixels by ~8e-3
    config = qwen2_5_vl_config(tok, hidden=32, layers=3, mrope_section=[2, 2, 4], initializer_range=0.3)
    byt5 = ByT5Tokenizer()  # bytes: no vocabulary file
    t5 = T5Config(d_model=32, d_kv=4, d_ff=16, num_layers=2, num_heads=2, relative_attention_num_buckets=8,
                  relative_attention_max_distance=32, vocab_size=len(byt5), feed_forward_proj="gated-gelu",
                  dense_act_fn="gelu_new", is_encoder_decoder=False, use_cache=False, tie_word_embeddings=False)
    return {
        "transformer": _seeded(name, "transformer", lambda: HunyuanImageTransformer2DModel(
            in_channels=4, out_channels=4, num_attention_heads=4, attention_head_dim=8, num_layers=1,
            num_single_layers=1, num_refiner_layers=1, patch_size=(1, 1), guidance_embeds=False,
            text_embed_dim=32, text_embed_2_dim=32, rope_axes_dim=(4, 4))),
        "vae": _seeded(name, "vae", lambda: AutoencoderKLHunyuanImage(
            in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64, 64, 64), layers_per_block=1,
            scaling_factor=0.476986, spatial_compression_ratio=8, sample_size=128)),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=7.0),
        # hidden_states[-3] is the conditioning layer: 3 decoder layers keep it an intermediate one
        "text_encoder": _seeded(name, "text_encoder", lambda: Qwen2_5_VLForConditionalGeneration(config)),
        "tokenizer": tok,
        "text_encoder_2": _seeded(name, "text_encoder_2", lambda: T5EncoderModel(t5)),
        "tokenizer_2": byt5,
        "guider": AdaptiveProjectedMixGuidance(),
        "ocr_guider": None,
    }


BUILDERS = {"hunyuan-image": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
