"""tiny-hidream: HiDreamImagePipeline with two CLIPs (pooled), T5 and Llama 3 (one layer per block)."""

from __future__ import annotations

from ..tokenizers import llama3_tokenizer

CARDS = {
    "tiny-hidream": {
        "pipeline": "HiDreamImagePipeline",
        "family": "hidream",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "clip"},
                          {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": "clip"},
                          {"name": "text_encoder_3", "tokenizer": "tokenizer_3", "kind": "t5"},
                          {"name": "text_encoder_4", "tokenizer": "tokenizer_4", "kind": "llama"}],
        "defaults": {"steps": 2, "guidance": 5.0, "size": 32, "dtype": "float32"},
        "call": {},  # max_sequence_length stays the __call__ default (128), as on the real cards
    },
}

WIDTH = 32  # every text encoder's width: CLIP hidden/projection, T5 d_model, Llama hidden


def build(name: str) -> dict:
    # after diffusers tests/pipelines/hidream_image/test_pipeline_hidream.py get_dummy_components (vocabularies
    # ours, built offline; CLIP with 128 positions: _get_clip_prompt_embeds pads to min(max_sequence_length, 218))
    from diffusers import FlowMatchEulerDiscreteScheduler, HiDreamImageTransformer2DModel
    from transformers import CLIPTextModelWithProjection, LlamaConfig, LlamaForCausalLM

    tok, tok2, tok3, tok4 = clip_tokenizer(), clip_tokenizer(), t5_tokenizer(), llama3_tokenizer()

    def clip(t):
        config = _clip_config(t, hidden=WIDTH, projection=WIDTH)
        config.max_position_embeddings = 128
        return CLIPTextModelWithProjection(config)

    llama = LlamaConfig(vocab_size=len(tok4), hidden_size=WIDTH, intermediate_size=37, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                        bos_token_id=tok4.bos_token_id, eos_token_id=tok4.eos_token_id,
                        pad_token_id=tok4.eos_token_id)
    return {
        # 1 double-stream + 1 single-stream block; llama_layers (0, 1): block i gets Llama hidden_states[1:][i];
        # caption_channels = [T5 width, Llama width]; text_emb_dim = the two CLIP projections concatenated
        "transformer": _seeded(name, "transformer", lambda: HiDreamImageTransformer2DModel(
            patch_size=8, in_channels=4, out_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=8,
            num_attention_heads=4, caption_channels=[WIDTH, WIDTH], text_emb_dim=2 * WIDTH, num_routed_experts=4,
            num_activated_experts=2, axes_dims_rope=(4, 2, 2), max_resolution=(128, 128), llama_layers=(0, 1))),
        # HiDreamImagePipeline.__call__ rescales any size to the area of default_sample_size (128) x vae_scale_factor
        # (the real model: 1024 px): latents are 128 x 128 whatever the size asked, so no attention in the VAE
        # and patch 8 in the transformer (256 image tokens) keep the tiny fast
        "vae": _seeded(name, "vae", lambda: _vae(blocks=(8, 16), scaling_factor=0.3611, shift_factor=0.1159,
                                                 mid_block_add_attention=False)),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: clip(tok)),
        "tokenizer": tok,
        "text_encoder_2": _seeded(name, "text_encoder_2", lambda: clip(tok2)),
        "tokenizer_2": tok2,
        "text_encoder_3": _seeded(name, "text_encoder_3", lambda: _t5_encoder(tok3, d_model=WIDTH)),
        "tokenizer_3": tok3,
        "text_encoder_4": _seeded(name, "text_encoder_4", lambda: LlamaForCausalLM(llama)),
        "tokenizer_4": tok4,
    }


BUILDERS = {"hidream": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _clip_config, _seeded, _t5_encoder, _vae, clip_tokenizer, t5_tokenizer  # noqa: E402
