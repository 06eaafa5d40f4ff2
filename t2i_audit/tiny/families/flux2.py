"""tiny-flux2 (Flux2Pipeline: Mistral 3 text encoder through a PixtralProcessor chat template) and tiny-flux2-klein
(Flux2KleinPipeline: Qwen3, its chat template rendered as text, then tokenized prompt by prompt).

Both pipelines condition on several *intermediate* hidden states stacked on the feature axis
(pipeline_flux2.py ``_get_mistral_3_small_prompt_embeds``: hidden_states[10, 20, 30];
pipeline_flux2_klein.py ``_get_qwen3_prompt_embeds``: hidden_states[9, 18, 27]; ``text_encoder_out_layers``).
The tiny encoders have enough layers (30 and 28) for those real defaults, so the tiny runs the real layer
choice and ``joint_attention_dim`` is 3 x the text width, as on the real models (15360 = 3 x 5120, 7680 = 3 x 2560).
"""

from __future__ import annotations

# qwen3_tokenizer: the Qwen3 kind shared with tiny-z-image (byte-level BPE + Qwen3's chat template)
from ..tokenizers import MISTRAL_SPECIALS, mistral3_processor, qwen3_tokenizer

TEXT_WIDTH = 16  # hidden size of both tiny text encoders; the transformer gets 3 stacked layers = 48

CARDS = {
    "tiny-flux2": {
        "pipeline": "Flux2Pipeline",
        "family": "flux2",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "mistral3"}],
        # guidance-distilled like FLUX.2 [dev]: guidance goes in as an embedding, one transformer call a step
        "defaults": {"steps": 2, "guidance": 4.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
    "tiny-flux2-klein": {
        "pipeline": "Flux2KleinPipeline",
        "family": "flux2-klein",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": "qwen3"}],
        # is_distilled=False (as the klein -base variants): guidance > 1 is real CFG, two transformer calls a
        # step (prompt, then ""). The real klein-4B card is step-distilled (guidance 1.0: one call).
        "defaults": {"steps": 2, "guidance": 1.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
}


def _transformer(guidance_embeds: bool):
    from diffusers import Flux2Transformer2DModel

    # after diffusers tests/pipelines/flux2/test_pipeline_flux2*.py get_dummy_components; 4 latent channels
    # patchified 2x2 by the pipeline -> 16 transformer channels; text = 3 stacked layers of TEXT_WIDTH
    return Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=3 * TEXT_WIDTH, timestep_guidance_channels=256,
        axes_dims_rope=[4, 4, 4, 4], guidance_embeds=guidance_embeds)


def _vae():
    from diffusers import AutoencoderKLFlux2

    # two blocks: VAE scale factor 2 (latent side 16 at 32 px, packed 2x2 -> 8x8 image tokens)
    return AutoencoderKLFlux2(
        sample_size=32, in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
        latent_channels=4, norm_num_groups=8, use_quant_conv=False, use_post_quant_conv=False)


def build_flux2(name: str) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    processor = mistral3_processor()
    ids = {t: i for i, t in enumerate(MISTRAL_SPECIALS)}
    config = Mistral3Config(
        text_config={"model_type": "mistral", "vocab_size": len(processor.tokenizer), "hidden_size": TEXT_WIDTH,
                     "intermediate_size": 37, "max_position_embeddings": 1024, "num_attention_heads": 4,
                     "num_hidden_layers": 30, "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
                     "rope_theta": 1000000000.0, "sliding_window": None, "bos_token_id": ids["<s>"],
                     "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"]},
        vision_config={"model_type": "pixtral", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "intermediate_size": 37, "image_size": 30, "patch_size": 6, "num_channels": 3},
        bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"], image_seq_length=4,
        vision_feature_layer=-1, image_token_index=ids["[IMG]"])
    return {
        "transformer": _seeded(name, "transformer", lambda: _transformer(guidance_embeds=True)),
        "vae": _seeded(name, "vae", _vae),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Mistral3ForConditionalGeneration(config)),
        "tokenizer": processor,
    }


def build_klein(name: str) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = qwen3_tokenizer()
    config = Qwen3Config(
        intermediate_size=16, hidden_size=TEXT_WIDTH, num_hidden_layers=28, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=1024,
        bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.pad_token_id)
    return {
        "transformer": _seeded(name, "transformer", lambda: _transformer(guidance_embeds=False)),
        "vae": _seeded(name, "vae", _vae),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "text_encoder": _seeded(name, "text_encoder", lambda: Qwen3ForCausalLM(config)),
        "tokenizer": tok,
        "is_distilled": False,
    }


BUILDERS = {"flux2": build_flux2, "flux2-klein": build_klein}


# Imported last: t2i_audit.tiny registers this module while it is being imported (CARDS and
# BUILDERS must exist by then), and these helpers are only used inside the builders.
from .. import _seeded  # noqa: E402
