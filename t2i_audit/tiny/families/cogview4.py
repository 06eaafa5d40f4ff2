"""tiny-cogview4: CogView4Pipeline with a GLM-4 text encoder (byte-level BPE, "[gMASK]<sop>", left padding)."""

from __future__ import annotations

from ..tokenizers import glm_tokenizer

CARDS = {
    "tiny-cogview4": {
        "pipeline": "CogView4Pipeline",
        "family": "cogview4",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "glm"}],
        # as the real card (guidance 3.5: CFG as two transformer calls a step); max_sequence_length stays the
        # __call__ default (1024)
        "defaults": {"steps": 2, "guidance": 3.5, "size": 32, "dtype": "float32"},
        "call": {},
    },
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/cogview4/test_cogview4.py get_dummy_components (vocabulary = ours; GlmModel
    # as the real THUDM/CogView4-6B text_encoder and CogView4Pipeline.__init__'s type, not GlmForCausalLM)
    from diffusers import AutoencoderKL, CogView4Transformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import GlmConfig, GlmModel

    tok = glm_tokenizer()
    config = GlmConfig(hidden_size=32, intermediate_size=8, num_hidden_layers=2, num_attention_heads=4, head_dim=8,
                       vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return {
        "transformer": _seeded(name, "transformer", lambda: CogView4Transformer2DModel(
            patch_size=2, in_channels=4, num_layers=2, attention_head_dim=4, num_attention_heads=4, out_channels=4,
            text_embed_dim=32, time_embed_dim=8, condition_dim=4)),
        "vae": _seeded(name, "vae", lambda: AutoencoderKL(
            block_out_channels=[32, 64], in_channels=3, out_channels=3,
            down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
            up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"], latent_channels=4, sample_size=128)),
        "scheduler": FlowMatchEulerDiscreteScheduler(base_shift=0.25, max_shift=0.75, base_image_seq_len=256,
                                                     use_dynamic_shifting=True, time_shift_type="linear"),
        "text_encoder": _seeded(name, "text_encoder", lambda: GlmModel(config)),
        "tokenizer": tok,
    }


BUILDERS = {"cogview4": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
