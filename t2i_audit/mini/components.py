"""Builders for the mini generator's diffusers components (pixel-space UNet, identity VAE,
small CLIP text encoder, schedulers) and for saving/loading the pipeline folder."""

from __future__ import annotations

from pathlib import Path

SCHEDULER_KW = dict(
    num_train_timesteps=1000,
    beta_schedule="squaredcos_cap_v2",
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    clip_sample=False,
)
# Sampling defaults the model card should use (measured in the generator card).
DEFAULT_STEPS = 20
DEFAULT_GUIDANCE = 7.0


def build_unet(size: int = 32, block_out_channels=(32, 64, 64), cross_attention_dim: int = 64,
               layers_per_block: int = 1, attention_head_dim: int = 2):
    from diffusers import UNet2DConditionModel

    n = len(block_out_channels)
    down = ("DownBlock2D",) + ("CrossAttnDownBlock2D",) * (n - 1)
    up = ("CrossAttnUpBlock2D",) * (n - 1) + ("UpBlock2D",)
    return UNet2DConditionModel(
        sample_size=size, in_channels=3, out_channels=3, layers_per_block=layers_per_block,
        block_out_channels=tuple(block_out_channels), down_block_types=down, up_block_types=up,
        cross_attention_dim=cross_attention_dim, attention_head_dim=attention_head_dim,
        norm_num_groups=min(32, block_out_channels[0]),
    )


def build_text_encoder(vocab_size: int, bos_id: int, eos_id: int, width: int = 64, layers: int = 4,
                       heads: int = 4, max_positions: int = 77):
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers,
        num_attention_heads=heads, max_position_embeddings=max_positions, projection_dim=width,
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=eos_id, hidden_act="quick_gelu",
    )
    return CLIPTextModel(cfg)


def build_identity_vae():
    """An AutoencoderKL whose encode and decode are the identity on RGB (error ~1e-6).

    Trick: every residual branch is zeroed; conv_in writes (d*x, -d*x) channel pairs with
    d = 1e-6, so each GroupNorm group has mean 0 and variance far below its eps (1e-6): the
    norm becomes the linear map x -> x * d / sqrt(eps); its affine restores the scale and adds
    40, where SiLU is the identity; conv_out takes 40 away. Keep it in float32."""
    import torch
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=3, block_out_channels=(6,), layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
        norm_num_groups=3, sample_size=32, scaling_factor=1.0, mid_block_add_attention=False,
        force_upcast=True,
    )
    d, big = 1e-6, 40.0
    scale = (1e-6 ** 0.5) / d  # undo x * d / sqrt(eps)
    with torch.no_grad():
        for p in vae.parameters():
            p.zero_()

        def io_pairs(conv_in, conv_out, norm, n_out, out_offset=0):
            for r in range(3):
                conv_in.weight[2 * r, r, 1, 1] = d
                conv_in.weight[2 * r + 1, r, 1, 1] = -d
                norm.weight[2 * r] = scale
                norm.bias[2 * r] = big
                conv_out.weight[out_offset + r, 2 * r, 1, 1] = 1.0
                conv_out.bias[out_offset + r] = -big

        io_pairs(vae.encoder.conv_in, vae.encoder.conv_out, vae.encoder.conv_norm_out, 6)
        io_pairs(vae.decoder.conv_in, vae.decoder.conv_out, vae.decoder.conv_norm_out, 3)
        # encoder conv_out gives (mean, logvar): logvar channels 3..5 stay at 0 bias -> set very low
        vae.encoder.conv_out.bias[3:6] = -30.0
        for conv in (vae.quant_conv, vae.post_quant_conv):
            for c in range(conv.weight.shape[0]):
                conv.weight[c, c, 0, 0] = 1.0
        # every norm inside a residual branch: keep weights at 1 so nothing divides by zero
        for name, m in vae.named_modules():
            if isinstance(m, torch.nn.GroupNorm) and "conv_norm_out" not in name:
                m.weight.fill_(1.0)
    return vae


def train_scheduler():
    from diffusers import DDPMScheduler

    return DDPMScheduler(**SCHEDULER_KW)


def sample_scheduler():
    from diffusers import DDIMScheduler

    return DDIMScheduler(**SCHEDULER_KW, timestep_spacing="trailing", set_alpha_to_one=True, steps_offset=1)


def make_pipeline(unet, text_encoder, tokenizer, vae=None):
    from diffusers import StableDiffusionPipeline

    return StableDiffusionPipeline(
        vae=vae if vae is not None else build_identity_vae(), text_encoder=text_encoder, tokenizer=tokenizer,
        unet=unet, scheduler=sample_scheduler(), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )


def save_pipeline(pipe, folder: Path) -> None:
    """Save with the UNet in float16 (diffusers loads it back as float32); the text encoder
    stays float32 (transformers would load float16 weights as float16, which breaks a plain
    from_pretrained; it is small) and so does the VAE (see build_identity_vae); tokenizer
    without tokenizer.json."""
    import copy
    import shutil

    import torch

    from ..quiet import library_logs, no_library_bars
    from ..rundir import staged_into
    from .tokenizer import save_tokenizer

    with library_logs():  # diffusers warns "modules … should be kept in float32: []" (none): nothing to act on
        unet16 = copy.deepcopy(pipe.unet).to(torch.float16)
    from diffusers import StableDiffusionPipeline

    out = StableDiffusionPipeline(vae=pipe.vae, text_encoder=pipe.text_encoder, tokenizer=pipe.tokenizer, unet=unet16,
                                  scheduler=pipe.scheduler, safety_checker=None, feature_extractor=None,
                                  requires_safety_checker=False)
    # staged inside the folder, then moved over the entries it names (card.json and any other
    # file there stay): nothing outside the folder, and nothing we did not write, is deleted
    with staged_into(Path(folder)) as tmp, no_library_bars():  # no "Writing model shards" bars under -q
        out.save_pretrained(str(tmp), safe_serialization=True)
        shutil.rmtree(tmp / "tokenizer", ignore_errors=True)
        save_tokenizer(pipe.tokenizer, tmp / "tokenizer")


def load_pipeline(folder: Path, dtype=None):
    import torch
    from diffusers import DiffusionPipeline

    from ..quiet import no_library_bars

    with no_library_bars():  # "Loading pipeline components" bars ignored -q
        pipe = DiffusionPipeline.from_pretrained(str(folder), dtype=dtype or torch.float32)  # torch_dtype: deprecated
    pipe.set_progress_bar_config(disable=True)
    return pipe
