"""tiny-sana: SanaPipeline with a Gemma 2 text encoder (complex human instruction, selected rows)."""

from __future__ import annotations

from ..tokenizers import gemma_tokenizer

CARDS = {
    "tiny-sana": {
        "pipeline": "SanaPipeline",
        "family": "sana",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "gemma2"}],
        "defaults": {"steps": 2, "guidance": 4.5, "size": 32, "dtype": "float32"},
        # the pipeline bins sizes to its 1024 px aspect-ratio table unless told not to (a 32 px tiny would
        # be generated at 1024 px); max_sequence_length stays the __call__ default (300), as on the real card
        "call": {"use_resolution_binning": False},
    }
}


def gemma2_config(tok):
    """The tiny Gemma 2 text encoder's config (diffusers' tests/pipelines/sana get_dummy_components; also
    tiny-sana-sprint's and tiny-lumina2's)."""
    from transformers import Gemma2Config

    return Gemma2Config(
        head_dim=16, hidden_size=8, initializer_range=0.02, intermediate_size=64, max_position_embeddings=8192,
        num_attention_heads=2, num_hidden_layers=2, num_key_value_heads=2, vocab_size=len(tok),
        attn_implementation="eager", pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id)


def dc_vae():
    """The tiny DC-AE of the SANA family (tiny-sana, tiny-sana-sprint)."""
    from diffusers import AutoencoderDC

    return AutoencoderDC(
        in_channels=3, latent_channels=4, attention_head_dim=2,
        encoder_block_types=("ResBlock", "EfficientViTBlock"),
        decoder_block_types=("ResBlock", "EfficientViTBlock"),
        encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
        encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
        encoder_layers_per_block=(1, 1), decoder_layers_per_block=[1, 1], downsample_block_type="conv",
        upsample_block_type="interpolate", decoder_norm_types="rms_norm", decoder_act_fns="silu",
        scaling_factor=0.41407)


def build(name: str) -> dict:
    # after diffusers tests/pipelines/sana/test_sana.py get_dummy_components (vocabulary = ours)
    from diffusers import FlowMatchEulerDiscreteScheduler, SanaTransformer2DModel
    from transformers import Gemma2Model

    tok = gemma_tokenizer()
    config = gemma2_config(tok)
    return {
        "transformer": _seeded(name, "transformer", lambda: SanaTransformer2DModel(
            patch_size=1, in_channels=4, out_channels=4, num_layers=1, num_attention_heads=2, attention_head_dim=4,
            num_cross_attention_heads=2, cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=8,
            sample_size=16)),
        "vae": _seeded(name, "vae", dc_vae),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=7.0),
        "text_encoder": _seeded(name, "text_encoder", lambda: Gemma2Model(config)),
        "tokenizer": tok,
    }


BUILDERS = {"sana": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
