"""tiny-chroma: ChromaPipeline, T5 only (no CLIP), a FLUX-like transformer with its own block classes.

pipeline_chroma.py ``_get_t5_prompt_embeds`` runs T5 *with* the tokenizer's mask (unlike FLUX) and hands the
transformer every row plus an attention mask of the real tokens and the first padding token; with guidance > 1
``__call__`` calls the transformer twice a step (prompt, then negative prompt).
"""

from __future__ import annotations


CARDS = {
    "tiny-chroma": {
        "pipeline": "ChromaPipeline",
        "family": "chroma",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "t5"}],
        "defaults": {"steps": 2, "guidance": 3.0, "size": 32, "dtype": "float32"},
        # as the real card: a negative prompt (true CFG: a second transformer call a step)
        "call": {"negative_prompt": "low quality, ugly, blurry"},
    },
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/chroma/test_pipeline_chroma.py get_dummy_components (tokenizer: ours);
    # 4 latent channels packed 2x2 -> 16 transformer channels; joint_attention_dim = T5 width 32
    from diffusers import ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler

    tok = t5_tokenizer()
    return {
        "transformer": _seeded(name, "transformer", lambda: ChromaTransformer2DModel(
            patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=[4, 4, 8], approximator_hidden_dim=32,
            approximator_layers=1, approximator_num_channels=16)),
        "vae": _seeded(name, "vae", lambda: _vae(blocks=(8, 16), use_quant_conv=False, use_post_quant_conv=False,
                                                 shift_factor=0.0609, scaling_factor=1.5035)),
        "text_encoder": _seeded(name, "text_encoder", lambda: _t5_encoder(tok, d_model=32)),
        "tokenizer": tok,
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "image_encoder": None,
        "feature_extractor": None,
    }


BUILDERS = {"chroma": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded, _t5_encoder, _vae, t5_tokenizer  # noqa: E402
