"""tiny-z-image: ZImagePipeline with a Qwen3 text encoder (chat template, hidden_states[-2], real tokens only)."""

from __future__ import annotations

from ..tokenizers import qwen3_tokenizer

CARDS = {
    "tiny-z-image": {
        "pipeline": "ZImagePipeline",
        "family": "z-image",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "qwen3"}],
        # the real Turbo card runs guidance 0.0 (no CFG); 2.0 here so the tiny exercises the CFG batch too;
        # max_sequence_length stays the __call__ default (512)
        "defaults": {"steps": 2, "guidance": 2.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
}


def _transformer():
    from diffusers import ZImageTransformer2DModel

    t = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=32, n_layers=2, n_refiner_layers=1,
        n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16, rope_theta=256.0, t_scale=1000.0,
        # axes_lens as ZImageTransformer2DModel's own default (transformer_z_image.py: [1024, 512, 512]): caption
        # positions run along axis 0 up to max_sequence_length (512) + 1, so a shorter axis fails on a long prompt
        axes_dims=[8, 4, 4], axes_lens=[1024, 512, 512])
    # as diffusers' test: x_pad_token / cap_pad_token start as torch.empty (NaN risk); fixed, they are saved
    t.x_pad_token.data.fill_(1.0)
    t.cap_pad_token.data.fill_(1.0)
    return t


def build(name: str) -> dict:
    # after diffusers tests/pipelines/z_image/test_z_image.py get_dummy_components (vocabulary = ours)
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler
    from transformers import Qwen3Config, Qwen3Model

    tok = qwen3_tokenizer()
    config = Qwen3Config(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id)
    return {
        "transformer": _seeded(name, "transformer", _transformer),
        "vae": _seeded(name, "vae", lambda: AutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
            up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"], block_out_channels=[32, 64], layers_per_block=1,
            latent_channels=16, norm_num_groups=32, sample_size=32, scaling_factor=0.3611, shift_factor=0.1159)),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Qwen3Model(config)),
        "tokenizer": tok,
    }


BUILDERS = {"z-image": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
