"""tiny-lumina2: Lumina2Pipeline with a Gemma 2 text encoder (system prompt + " <Prompt Start> " + prompt)."""

from __future__ import annotations

from ..tokenizers import gemma_tokenizer

CARDS = {
    "tiny-lumina2": {
        "pipeline": "Lumina2Pipeline",
        "family": "lumina2",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "gemma2"}],
        # as the real card (guidance 4.0: CFG as two transformer calls a step); system_prompt,
        # max_sequence_length (256), cfg_normalization and cfg_trunc_ratio stay the __call__ defaults
        "defaults": {"steps": 2, "guidance": 4.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/lumina2/test_pipeline_lumina2.py get_dummy_components (vocabulary = ours;
    # Gemma2Model as the real Alpha-VLLM/Lumina-Image-2.0 text_encoder, the Sana tiny's Gemma 2 config)
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, Lumina2Transformer2DModel
    from transformers import Gemma2Model

    from .sana import gemma2_config  # imported here: family modules are registered while importing

    tok = gemma_tokenizer()
    config = gemma2_config(tok)
    return {
        "transformer": _seeded(name, "transformer", lambda: Lumina2Transformer2DModel(
            sample_size=4, patch_size=2, in_channels=4, hidden_size=8, num_layers=2, num_attention_heads=1,
            num_kv_heads=1, multiple_of=16, ffn_dim_multiplier=None, norm_eps=1e-5, scaling_factor=1.0,
            axes_dim_rope=[4, 2, 2], cap_feat_dim=8)),
        # the test's one-block VAE does not downsample, but Lumina2Pipeline.__init__ fixes vae_scale_factor = 8
        # (a 32 px call would decode 4 px images): four blocks downsample by 8, as the real VAE
        "vae": _seeded(name, "vae", lambda: AutoencoderKL(
            sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4, 4, 4, 4), layers_per_block=1,
            down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
            latent_channels=4, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
            shift_factor=0.0609, scaling_factor=1.5035)),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Gemma2Model(config)),
        "tokenizer": tok,
    }


BUILDERS = {"lumina2": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
