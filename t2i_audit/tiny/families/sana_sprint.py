"""tiny-sana-sprint: SanaSprintPipeline — Sana's Gemma 2 encoder and instruction handling, a guidance-embedding
transformer (one call a step, no CFG) and the SCM (trigflow) scheduler."""

from __future__ import annotations

from ..tokenizers import gemma_tokenizer

CARDS = {
    "tiny-sana-sprint": {
        "pipeline": "SanaSprintPipeline",
        "family": "sana-sprint",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "gemma2"}],
        "defaults": {"steps": 2, "guidance": 4.5, "size": 32, "dtype": "float32"},
        # pipeline_sana_sprint.py __call__: use_resolution_binning would bin to its 1024 px table (a 32 px tiny
        # generated at 1024 px); intermediate_timesteps (default 1.3) makes check_inputs / SCMScheduler.set_timesteps
        # refuse any step count but 2 — without it the scheduler spaces linspace(max_timesteps, 0, steps + 1)
        "call": {"use_resolution_binning": False, "intermediate_timesteps": None},
    }
}


def build(name: str) -> dict:
    # after diffusers tests/pipelines/sana/test_sana_sprint.py get_dummy_components (qk_norm, guidance_embeds=True,
    # SCMScheduler()), with the text encoder and vocabulary of tiny-sana (t2i_audit/tiny/families/sana.py)
    from diffusers import SanaTransformer2DModel, SCMScheduler
    from transformers import Gemma2Model

    from .sana import dc_vae, gemma2_config  # imported here: family modules are registered while importing

    tok = gemma_tokenizer()
    config = gemma2_config(tok)
    return {
        "transformer": _seeded(name, "transformer", lambda: SanaTransformer2DModel(
            patch_size=1, in_channels=4, out_channels=4, num_layers=1, num_attention_heads=2, attention_head_dim=4,
            num_cross_attention_heads=2, cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=8,
            sample_size=32, qk_norm="rms_norm_across_heads", guidance_embeds=True)),
        "vae": _seeded(name, "vae", dc_vae),
        "scheduler": SCMScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Gemma2Model(config)),
        "tokenizer": tok,
    }


BUILDERS = {"sana-sprint": build}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
