"""GPU benchmark: one short prepared script for a single H200 with no internet, so it uses
random-weight real-size architectures built from their published configs.

  * SDXL-size UNet at 1024² (128² latents), 30 steps with CFG (batch doubled), bf16,
    batch 1 / 4 / 8, eager and torch.compile: seconds per image and the fraction of the
    chip's bf16 peak it reaches (FLOPs counted with torch's FlopCounterMode, not assumed).
  * Early-feature capture (pooled blocks every step, cross-attention maps at 10 % / 20 %) on that UNet:
    the loop with the hooks over the loop without (goal: under 1.10).
  * CLIP ViT-L/14-size scoring throughput (open_clip, random weights, bf16): images/s.
  * Probe fitting on SDXL-shaped activations (bench_probe_fit.py): the torch backend over the
    whole suite on the GPU, and both backends on a sample for the ratio.

    python benchmarks/gpu.py                 # on the GPU (≈5–8 min)
    python benchmarks/gpu.py --tiny --device cpu --steps 2   # check the script itself on CPU
"""

from __future__ import annotations

import argparse
import time

from _common import write

PEAK_BF16 = 790e12  # dense bf16 FLOP/s of one H200 (H100/H200 SXM datasheet, without sparsity)

SDXL_UNET = dict(  # stabilityai/stable-diffusion-xl-base-1.0 unet/config.json
    sample_size=128, in_channels=4, out_channels=4, layers_per_block=2,
    block_out_channels=(320, 640, 1280),
    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20), cross_attention_dim=2048,
    use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=256,
    projection_class_embeddings_input_dim=2816, norm_num_groups=32,
)
TINY_UNET = dict(SDXL_UNET, block_out_channels=(32, 64, 64), transformer_layers_per_block=(1, 1, 1),
                 attention_head_dim=(2, 4, 4), cross_attention_dim=64, addition_time_embed_dim=8,
                 projection_class_embeddings_input_dim=80, sample_size=16)


def unet_inputs(torch, cfg, batch, device, dtype, latent):
    b = 2 * batch  # classifier-free guidance: conditional and unconditional halves in one call
    text_dim = cfg["cross_attention_dim"]
    pooled = cfg["projection_class_embeddings_input_dim"] - 6 * cfg["addition_time_embed_dim"]
    return dict(
        sample=torch.randn(b, 4, latent, latent, device=device, dtype=dtype),
        encoder_hidden_states=torch.randn(b, 77, text_dim, device=device, dtype=dtype),
        added_cond_kwargs={"text_embeds": torch.randn(b, pooled, device=device, dtype=dtype),
                           "time_ids": torch.randn(b, 6, device=device, dtype=dtype)},
    )


def bench_unet(args, torch):
    from diffusers import UNet2DConditionModel
    from torch.utils.flop_counter import FlopCounterMode

    cfg = TINY_UNET if args.tiny else SDXL_UNET
    latent = cfg["sample_size"]
    dtype = torch.bfloat16 if args.device != "cpu" else torch.float32
    unet = UNet2DConditionModel(**cfg).to(args.device, dtype).eval()
    params = sum(p.numel() for p in unet.parameters())
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    with torch.no_grad():
        x = unet_inputs(torch, cfg, 1, args.device, dtype, latent)
        with FlopCounterMode(display=False) as fc:
            unet(timestep=torch.tensor(500, device=args.device), **x)
        flops_per_image = fc.get_total_flops() * args.steps  # one call = one image with CFG

    results = []
    modes = ["eager"] + ([] if args.no_compile else ["compile"])
    for mode in modes:
        model = torch.compile(unet, mode="max-autotune-no-cudagraphs") if mode == "compile" else unet
        for batch in args.batches:
            x = unet_inputs(torch, cfg, batch, args.device, dtype, latent)
            t = torch.tensor(500, device=args.device)
            with torch.no_grad():
                for _ in range(2 if mode == "eager" else 3):  # warm-up (and compilation)
                    model(timestep=t, **x)
                sync()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    model(timestep=t, **x)
                sync()
            s_per_image = (time.perf_counter() - t0) / batch
            results.append({"mode": mode, "batch": batch, "seconds_per_image": round(s_per_image, 4),
                            "tflops_per_s": round(flops_per_image / s_per_image / 1e12, 1),
                            "fraction_of_peak": round(flops_per_image / s_per_image / PEAK_BF16, 3)})
            print(results[-1], flush=True)
    return {"params": params, "latent": latent, "steps": args.steps,
            "tflop_per_image": round(flops_per_image / 1e12, 1), "runs": results}


def bench_capture(args, torch, reps: int = 3):
    """Early-feature capture during generation (t2i_audit/probes/capture/early.py): the UNet loop bare vs with the
    hooks `probe --early` uses — every block's pooled output every step, cross-attention maps recomputed at
    the 10 % and 20 % steps. Goal: under 10 % slower. Batch 4 (CFG doubles it), eager."""
    import contextlib

    from diffusers import UNet2DConditionModel

    from t2i_audit.probes.capture.attention import AttentionRecorder
    from t2i_audit.probes.capture.denoiser import BlockRecorder
    from t2i_audit.probes.capture.early import step_at

    cfg = TINY_UNET if args.tiny else SDXL_UNET
    dtype = torch.bfloat16 if args.device != "cpu" else torch.float32
    unet = UNet2DConditionModel(**cfg).to(args.device, dtype).eval()
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    batch, t = 4, torch.tensor(500, device=args.device)
    x = unet_inputs(torch, cfg, batch, args.device, dtype, cfg["sample_size"])
    hooked = sorted({step_at(f, args.steps) for f in (0.1, 0.2)})

    def loop(capture: bool) -> float:
        with contextlib.ExitStack() as stack, torch.no_grad():
            rec = stack.enter_context(BlockRecorder(unet)) if capture else None
            if capture:
                stack.enter_context(AttentionRecorder(unet, rec, hooked, batch))
            sync()
            t0 = time.perf_counter()
            for i in range(args.steps):
                unet(timestep=t, **x)
                if rec is not None:
                    rec.step_end(i, 500)
            sync()
            return time.perf_counter() - t0

    loop(False)
    bare, captured = [], []
    for i in range(reps):
        for capture in ((False, True) if i % 2 == 0 else (True, False)):
            (captured if capture else bare).append(loop(capture))
    ratio = sorted(captured)[reps // 2] / sorted(bare)[reps // 2]
    print({"capture_overhead_ratio": round(ratio, 3)}, flush=True)
    return {"batch": batch, "steps": args.steps, "hooked_steps": hooked, "bare_s": bare, "captured_s": captured,
            "capture_overhead_ratio": round(ratio, 3)}


def bench_clip(args, torch):
    import open_clip

    name = "ViT-B-32" if args.tiny else "ViT-L-14"
    model = open_clip.create_model(name, pretrained=None).to(args.device).eval()
    dtype = torch.bfloat16 if args.device != "cpu" else torch.float32
    model = model.to(dtype)
    size = model.visual.image_size[0] if isinstance(model.visual.image_size, tuple) else model.visual.image_size
    batch = 8 if args.tiny else 256
    images = torch.randn(batch, 3, size, size, device=args.device, dtype=dtype)
    tokens = open_clip.get_tokenizer(name)(["a photo of a red cube"] * batch).to(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    with torch.no_grad():
        for _ in range(2):
            model.encode_image(images), model.encode_text(tokens)
        sync()
        t0 = time.perf_counter()
        reps = 2 if args.tiny else 10
        for _ in range(reps):
            img = model.encode_image(images)
            txt = model.encode_text(tokens)
            (img @ txt.T).float().cpu()
        sync()
    return {"model": name, "batch": batch, "images_per_s": round(reps * batch / (time.perf_counter() - t0), 1)}


def bench_probe_fit(args, torch):
    """SDXL-shaped probe fitting (benchmarks/bench_probe_fit.py): torch backend on the GPU for the
    whole suite, and both backends on a small sample for the ratio (sklearn on one CPU thread)."""
    import bench_probe_fit

    a = bench_probe_fit.parser().parse_args(
        ["--device", args.device, "--sample", "1", "--reps", "1", "--batch", "69"]
        + ([] if args.tiny else ["--full"]) + (["--prompts", "300"] if args.tiny else []))
    return bench_probe_fit.run(a)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--tiny", action="store_true", help="small configs, to test the script on CPU")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()

    import torch

    torch.backends.cudnn.allow_tf32 = True
    info = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
            "torch": torch.__version__, "tiny": args.tiny}
    probes = bench_probe_fit(args, torch)  # first: it needs full-fp32 matmuls, set below for the UNet
    torch.backends.cuda.matmul.allow_tf32 = True
    unet = bench_unet(args, torch)
    capture = bench_capture(args, torch)
    clip = bench_clip(args, torch)
    write("gpu" if not args.tiny else "gpu_tiny_cpu_check",
          {**info, "sdxl_unet": unet, "early_capture": capture, "clip_scoring": clip, "probe_fit": probes,
           "peak_bf16_flops": PEAK_BF16,
           "note": "random weights, real-size architectures; UNet only (no VAE decode, no text encoders)"})


if __name__ == "__main__":
    main()
