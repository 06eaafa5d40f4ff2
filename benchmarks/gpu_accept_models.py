"""Random-weight pipeline and judge folders at the published sizes, for benchmarks/gpu_accept.py (no hub there).

Each folder is ``save_pretrained`` output that ``DiffusionPipeline.from_pretrained`` / ``AutoProcessor`` load as
they would a download. Configs, from the checkpoints' own config files:

* SDXL base — stabilityai/stable-diffusion-xl-base-1.0: unet/config.json (benchmarks/gpu.py ``SDXL_UNET``),
  vae/config.json (4 levels 128–512, 4 latent channels, scaling_factor 0.13025, force_upcast), text_encoder =
  CLIP ViT-L/14 text (768 wide, 12 layers, quick_gelu), text_encoder_2 = OpenCLIP ViT-bigG/14 text (1280 wide,
  32 layers, gelu), EulerDiscreteScheduler (scaled_linear 0.00085–0.012, leading spacing, steps_offset 1).
* SD3.5 Medium — stabilityai/stable-diffusion-3.5-medium: transformer/config.json (24 layers, 24 heads × 64,
  joint_attention_dim 4096, caption_projection_dim 1536, pooled 2048, pos_embed_max_size 384,
  dual_attention_layers 0–12, qk_norm rms_norm), the 16-channel VAE (scaling 1.5305, shift 0.0609, no quant
  convs), CLIP-L and CLIP-G with projection, T5 v1.1 XXL encoder (d_model 4096, d_ff 10240, 64 heads × 64,
  24 layers, gated-gelu), FlowMatchEulerDiscreteScheduler(shift=3.0).
* Qwen3-VL-8B-Instruct — config.json: text 36 layers × 4096 (intermediate 12288, 32 heads / 8 KV, head_dim 128,
  vocab 151936, rope_theta 5e6, interleaved M-RoPE [24, 20, 20], untied embeddings); vision 27 layers × 1152
  (intermediate 4304, 16 heads, patch 16, merge 2, out 4096, deepstack [8, 16, 24]).

Tokenizers are built here: CLIP from the vendored BPE with all 48,894 merges (ids identical to SD's tokenizer),
T5 and Qwen of the right kind in memory (t2i_audit/tiny). Weights are random, in bfloat16 (float16 random weights
overflow); ``tiny=True`` gives the tiny twins instead (CPU tests).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from gpu import SDXL_UNET

CLIP_MERGES_FULL = 48894  # bpe_simple_vocab_16e6: 256 bytes + 256 </w> + merges + 2 specials = 49,408 tokens
CLIP_L = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              projection_dim=768, hidden_act="quick_gelu")
CLIP_BIGG = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20,
                 projection_dim=1280, hidden_act="gelu")
SDXL_VAE = dict(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4, layers_per_block=2, norm_num_groups=32,
                sample_size=1024, scaling_factor=0.13025, force_upcast=True)
SD3_VAE = dict(SDXL_VAE, latent_channels=16, scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
               use_post_quant_conv=False)
SD35M_TRANSFORMER = dict(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24,
                         attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
                         caption_projection_dim=1536, pooled_projection_dim=2048, pos_embed_max_size=384,
                         dual_attention_layers=tuple(range(13)), qk_norm="rms_norm")
T5_XXL = dict(d_model=4096, d_ff=10240, d_kv=64, num_heads=64, num_layers=24, vocab_size=32128,
              feed_forward_proj="gated-gelu", relative_attention_num_buckets=32, relative_attention_max_distance=128,
              dropout_rate=0.0, is_encoder_decoder=False, use_cache=False)
QWEN3_VL_8B_TEXT = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                        rms_norm_eps=1e-6, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                         "mrope_section": [24, 20, 20], "mrope_interleaved": True})
QWEN3_VL_8B_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                          num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24])


def _clip_tokenizer(pad: str):
    from transformers import CLIPTokenizer

    from t2i_audit.tiny import clip_vocab_merges

    vocab, merges = clip_vocab_merges(CLIP_MERGES_FULL)
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77, pad_token=pad)


def _clip(cls, tok, spec: dict):
    from transformers import CLIPTextConfig

    return cls(CLIPTextConfig(vocab_size=len(tok), max_position_embeddings=77, layer_norm_eps=1e-5,
                              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.pad_token_id, **spec))


def sdxl_components() -> dict:
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    tok, tok2 = _clip_tokenizer("<|endoftext|>"), _clip_tokenizer("!")
    return {"unet": UNet2DConditionModel(**SDXL_UNET), "vae": AutoencoderKL(**SDXL_VAE),
            "text_encoder": _clip(CLIPTextModel, tok, CLIP_L), "tokenizer": tok,
            "text_encoder_2": _clip(CLIPTextModelWithProjection, tok2, CLIP_BIGG), "tokenizer_2": tok2,
            "scheduler": EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                                steps_offset=1, timestep_spacing="leading"),
            "image_encoder": None, "feature_extractor": None}


def sd35m_components() -> dict:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from t2i_audit.tiny import t5_tokenizer

    tok, tok2, tok3 = _clip_tokenizer("<|endoftext|>"), _clip_tokenizer("!"), t5_tokenizer()
    t5 = T5EncoderModel(T5Config(pad_token_id=tok3.pad_token_id, eos_token_id=tok3.eos_token_id,
                                 decoder_start_token_id=tok3.pad_token_id, **T5_XXL))
    return {"transformer": SD3Transformer2DModel(**SD35M_TRANSFORMER), "vae": AutoencoderKL(**SD3_VAE),
            "text_encoder": _clip(CLIPTextModelWithProjection, tok, CLIP_L), "tokenizer": tok,
            "text_encoder_2": _clip(CLIPTextModelWithProjection, tok2, CLIP_BIGG), "tokenizer_2": tok2,
            "text_encoder_3": t5, "tokenizer_3": tok3,
            "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0), "image_encoder": None, "feature_extractor": None}


def build_pipeline(kind: str, folder: Path, device: str, tiny: bool) -> dict:
    """Write the ``kind`` ("sdxl" | "sd35m") pipeline folder (once); returns what was built, how big, how fast."""
    if (folder / "model_index.json").is_file():
        return {"folder": str(folder), "reused": True}
    t0 = time.perf_counter()
    if tiny:
        from t2i_audit.tiny import materialize

        shutil.copytree(materialize({"sdxl": "tiny-sdxl", "sd35m": "tiny-sd3"}[kind]), folder)
        return {"folder": str(folder), "tiny": True, "seconds": round(time.perf_counter() - t0, 2)}
    import diffusers
    import torch

    torch.manual_seed(0)
    with torch.device(device):  # random init on the GPU: seconds, not minutes
        parts = sdxl_components() if kind == "sdxl" else sd35m_components()
    cls = diffusers.StableDiffusionXLPipeline if kind == "sdxl" else diffusers.StableDiffusion3Pipeline
    pipe = cls(**parts).to(dtype=torch.bfloat16)
    params = {n: sum(p.numel() for p in m.parameters()) for n, m in parts.items() if isinstance(m, torch.nn.Module)}
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    pipe.save_pretrained(tmp, max_shard_size="20GB")
    tmp.rename(folder)
    del pipe, parts
    torch.cuda.empty_cache() if device.startswith("cuda") else None
    return {"folder": str(folder), "params": params, "total_params_b": round(sum(params.values()) / 1e9, 3),
            "bytes_gb": round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**30, 2),
            "seconds": round(time.perf_counter() - t0, 2)}


JUDGE_REPO = "Qwen/Qwen3-VL-8B-Instruct"  # the `qwen3-vl-8b` scorer card's model id (cards/scorers/vlm.yaml)
SNAPSHOT = "0" * 40


def judge_cache_folder(hf_home: Path) -> Path:
    """Where huggingface_hub's offline cache looks for the card's ``Qwen/Qwen3-VL-8B-Instruct@main``: so every
    command that loads the judge by the card (score, probe --early's x0 judge, select's scoring) finds this one."""
    repo = hf_home / "hub" / ("models--" + JUDGE_REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    return repo / "snapshots" / SNAPSHOT


def build_judge(hf_home: Path, device: str, tiny: bool) -> dict:
    """The ``qwen3-vl-8b`` card's model as a random-weight Qwen3-VL in the HF cache under ``hf_home``: the real
    chat template, a Qwen-kind tokenizer (answer words single tokens), Qwen2-VL image processor geometry."""
    folder = judge_cache_folder(hf_home)
    if (folder / "config.json").is_file():
        return {"folder": str(folder), "reused": True}
    t0 = time.perf_counter()
    if tiny:
        from t2i_audit.tiny.scorers import materialize

        shutil.copytree(materialize("qwen3_vl")["id"], folder)
        return {"folder": str(folder), "tiny": True, "seconds": round(time.perf_counter() - t0, 2)}
    import torch
    from transformers import (Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor)
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from t2i_audit.scorers.chat_templates import QWEN3_VL
    from t2i_audit.tiny.scorers import qwen_tokenizer

    tok = qwen_tokenizer()
    ids = tok.convert_tokens_to_ids
    cfg = Qwen3VLConfig(
        text_config=dict(QWEN3_VL_8B_TEXT, bos_token_id=None, eos_token_id=ids("<|im_end|>"),
                         pad_token_id=tok.pad_token_id),
        vision_config=QWEN3_VL_8B_VISION, tie_word_embeddings=False,
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(cfg).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, max_shard_size="20GB")
    geom = dict(patch_size=16, merge_size=2, temporal_patch_size=2)
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**geom), tokenizer=tok,
                     video_processor=Qwen3VLVideoProcessor(**geom), chat_template=QWEN3_VL).save_pretrained(tmp)
    tmp.rename(folder)
    del model
    torch.cuda.empty_cache() if device.startswith("cuda") else None
    (folder / "built.json").write_text(json.dumps({"params": params}))
    return {"folder": str(folder), "params_b": round(params / 1e9, 3),
            "bytes_gb": round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**30, 2),
            "seconds": round(time.perf_counter() - t0, 2)}
