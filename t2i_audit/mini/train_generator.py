"""Train the mini text-to-image model on fresh renders, with colour-shape pairs held out.

A pixel-space UNet2DConditionModel (v-prediction, cosine schedule rescaled to zero terminal
SNR) and its own small CLIP text encoder are trained jointly from scratch on the diffusion
loss, on scenes that never contain a held-out (colour, shape) pair; 10 % of captions are
dropped for classifier-free guidance; an EMA of the weights is what gets saved. Deterministic
from the seed for a given number of steps. The output folder is a StableDiffusionPipeline
(`DiffusionPipeline.from_pretrained(folder)`) plus `card.json`.

For ``t2i-audit track`` (training checkpoints): ``checkpoint_every=N`` also writes
``OUT/checkpoint-<step>/`` every N steps in the layout of diffusers' training examples (see
:func:`write_checkpoint`), ``save_initial`` the untrained pipeline (step 0, the track's base) to
``OUT_initial/``, and ``callback`` (a :class:`t2i_audit.track.TrackCallback`) audits the EMA weights
in-process every ``callback.every`` steps. None of them changes the training: the noise, timesteps and
scenes come from their own seeded generators.

    python -m t2i_audit.mini.train_generator --out t2i_audit/mini/weights/generator --minutes 80
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..ownership import claim_output_dir
from ..rundir import atomic_write_text
from .world import HELDOUT_PAIRS, caption, render_batch, sample_scene

GRID_PROMPTS = (
    "a red circle", "a blue triangle", "a green square", "an orange cross",
    "a yellow square", "a purple circle", "a red square and a blue circle", "a green triangle and an orange circle",
    "a blue circle to the left of a yellow cross", "a purple cross above a green circle",
    "an orange triangle below a red circle", "a yellow triangle to the right of a blue cross",
    # held-out pairs
    "a red triangle", "a blue square", "a yellow circle to the left of a red square", "a green cross above a purple circle",
)


@dataclass
class GeneratorConfig:
    seed: int = 0
    size: int = 32
    batch: int = 32
    lr: float = 8e-4
    warmup: int = 50
    steps: int | None = None          # stop after this many steps …
    minutes: float | None = None      # … or after this much wall time (whichever first)
    ema_decay: float = 0.999
    caption_dropout: float = 0.1
    block_out_channels: tuple[int, ...] = (32, 64, 64)
    attention_heads: int = 2          # head dim 32: SDPA on CPU is slow with tiny heads
    text_width: int = 64
    text_layers: int = 4
    threads: int = 1                  # >1 thread on a shared 2-core box spins in OpenMP
    device: str = "cpu"               # noise and data are drawn on the CPU either way (same draws)
    checkpoint_minutes: float = 10.0
    heldout: tuple[tuple[str, str], ...] = HELDOUT_PAIRS
    kind_weights: tuple[float, float, float] = (0.2, 0.3, 0.5)
    single_size: tuple[float, float] = (0.36, 0.5)      # a single object's side, fraction of the image
    single_centre: tuple[float, float] = (0.38, 0.62)   # each coordinate of its centre
    prediction_type: str = "v_prediction"  # or "epsilon" / "sample" (x0); the saved sampler predicts the same
    lr_schedule: str = "constant"     # or "cosine": after warmup, decay to 0 at `steps` (needs steps)
    text_max_length: int = 77         # tokens the prompt is padded to (the saved tokenizer's model_max_length)
    fused_adam: bool = False          # torch's fused AdamW kernel (fewer tiny ops on CPU; rounds differently)
    extra: dict = field(default_factory=dict)


class _EMA:
    def __init__(self, modules, decay: float):
        import torch

        self.decay = decay
        self.params = [p for m in modules for p in m.parameters()]
        self.shadow = [p.detach().clone() for p in self.params]
        self.torch = torch

    def update(self, step: int) -> None:
        d = min(self.decay, (1 + step) / (10 + step))
        with self.torch.no_grad():
            for s, p in zip(self.shadow, self.params):
                s.mul_(d).add_(p.detach(), alpha=1 - d)

    def swap(self) -> None:
        with self.torch.no_grad():
            for s, p in zip(self.shadow, self.params):
                tmp = p.detach().clone()
                p.copy_(s)
                s.copy_(tmp)


PREDICTION_TYPES = ("v_prediction", "epsilon", "sample")
LR_SCHEDULES = ("constant", "cosine")


def learning_rate(cfg: GeneratorConfig, step: int) -> float:
    """Linear warmup, then constant or cosine decay to 0 at cfg.steps."""
    import math

    lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup)
    if cfg.lr_schedule == "cosine" and step >= cfg.warmup:
        frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        lr = cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
    return lr


def diffusion_target(prediction_type: str, x0, noise, a):
    """What the UNet is trained to output at x_t = sqrt(a) x0 + sqrt(1-a) noise (as diffusers'
    DDPMScheduler.get_velocity and DDIMScheduler.step read each prediction_type)."""
    if prediction_type == "v_prediction":
        return a.sqrt() * noise - (1 - a).sqrt() * x0
    if prediction_type == "epsilon":
        return noise
    return x0


def _images_tensor(scenes, size):
    import torch

    arr = render_batch(scenes, size)
    return torch.from_numpy(arr).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def save_grid(pipe, path: Path, prompts=GRID_PROMPTS, seed: int = 0, steps: int | None = None,
              guidance: float | None = None, scale: int = 4) -> None:
    """Generate one image per prompt and write them as a 4-wide PNG grid (upscaled)."""
    import torch
    from PIL import Image

    from .components import DEFAULT_GUIDANCE, DEFAULT_STEPS

    gens = [torch.Generator().manual_seed(seed + i) for i in range(len(prompts))]
    imgs = pipe(list(prompts), num_inference_steps=steps or DEFAULT_STEPS,
                guidance_scale=guidance or DEFAULT_GUIDANCE, generator=gens).images
    w, h = imgs[0].size
    cols = 4
    rows = (len(imgs) + cols - 1) // cols
    grid = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), (128, 128, 128))
    for i, im in enumerate(imgs):
        grid.paste(im, ((i % cols) * (w + 2), (i // cols) * (h + 2)))
    grid = grid.resize((grid.width * scale, grid.height * scale), Image.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    grid.save(path)


def write_checkpoint(folder: Path, modules: dict, ema_modules: dict | None = None) -> Path:
    """``folder`` (``OUT/checkpoint-<step>``) in the layout diffusers' training examples write: one
    ``save_pretrained`` folder per trained model — examples/dreambooth/train_dreambooth.py
    ``save_model_hook`` writes ``unet/`` and ``text_encoder/`` — and the EMA weights beside them as
    examples/text_to_image/train_text_to_image.py ``save_model_hook`` writes ``unet_ema/``
    (``EMAModel.save_pretrained``); the EMA of the text encoder, which this trainer also keeps, goes to
    ``text_encoder_ema/`` by the same rule. Staged inside ``OUT`` and renamed into place, so a reader never
    sees a half-written checkpoint of ours (training scripts that write in place are detected by
    ``t2i_audit.track.discover``)."""
    from ..quiet import no_library_bars
    from ..rundir import staged_into

    with staged_into(folder.parent) as stage, no_library_bars():  # no "Writing model shards" bars under -q
        tmp = stage / folder.name
        for name, module in modules.items():
            module.save_pretrained(str(tmp / name), safe_serialization=True)
        for name, module in (ema_modules or {}).items():
            module.save_pretrained(str(tmp / f"{name}_ema"), safe_serialization=True)
    return folder


def train_generator(out: Path | str, config: GeneratorConfig | None = None, log=print, *,
                    checkpoint_every: int | None = None, save_initial: bool = False, callback=None) -> dict:
    """Train and save the pipeline folder at `out` (checkpointed every
    `checkpoint_minutes`); returns the card dict (also written to out/card.json).

    ``checkpoint_every``: also write ``out/checkpoint-<step>/`` every that many steps (raw and EMA
    weights, :func:`write_checkpoint`); ``save_initial``: the untrained pipeline to ``out_initial/``;
    ``callback``: called as ``callback(step, pipeline=pipe)`` with the EMA weights every
    ``callback.every`` steps (and at step 0), in-process."""
    import torch

    from .components import (DEFAULT_GUIDANCE, DEFAULT_STEPS, SCHEDULER_KW, build_text_encoder,
                             build_unet, make_pipeline, save_pipeline, train_scheduler)
    from .tokenizer import build_tokenizer

    cfg = config or GeneratorConfig()
    if cfg.steps is None and cfg.minutes is None:
        raise ValueError("give steps or minutes")
    if cfg.prediction_type not in PREDICTION_TYPES:
        raise ValueError(f"prediction_type {cfg.prediction_type!r}: one of {', '.join(PREDICTION_TYPES)}")
    if cfg.lr_schedule not in LR_SCHEDULES or (cfg.lr_schedule == "cosine" and cfg.steps is None):
        raise ValueError(f"lr_schedule {cfg.lr_schedule!r}: one of {', '.join(LR_SCHEDULES)} (cosine needs steps)")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every {checkpoint_every}: must be at least 1")
    out = claim_output_dir(out, "mini-generator")  # before training: refuse a folder that is not ours at once
    samples = claim_output_dir(out.parent / f"{out.name}_samples", "mini-samples")
    initial = claim_output_dir(out.parent / f"{out.name}_initial", "mini-generator") if save_initial else None
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tokenizer = build_tokenizer(cfg.text_max_length)
    text_encoder = build_text_encoder(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id,
                                      width=cfg.text_width, layers=cfg.text_layers)
    unet = build_unet(cfg.size, cfg.block_out_channels, cross_attention_dim=cfg.text_width,
                      attention_head_dim=cfg.attention_heads)
    dev = torch.device(cfg.device)
    unet.to(dev)
    text_encoder.to(dev)
    sched = train_scheduler()
    alphas = sched.alphas_cumprod.float()
    params = list(unet.parameters()) + list(text_encoder.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01, **({"fused": True} if cfg.fused_adam else {}))
    ema = _EMA([unet, text_encoder], cfg.ema_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    t_start, cpu_start = time.time(), time.process_time()
    last_ckpt = t_start
    step, losses = 0, []
    card = {}

    def ema_pipeline():
        pipe = make_pipeline(unet, text_encoder, tokenizer)
        if cfg.prediction_type != pipe.scheduler.config.prediction_type:
            pipe.scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config, prediction_type=cfg.prediction_type)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    @contextlib.contextmanager
    def ema_weights():
        """The EMA weights in the modules (eval mode) for the block's duration, the trained ones after."""
        ema.swap()
        unet.eval()
        text_encoder.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            ema.swap()
            unet.train()
            text_encoder.train()

    def checkpoint(final: bool, folder: Path = out, grid: bool = True) -> dict:
        info = {
            "kind": "mini-generator", "pipeline": "StableDiffusionPipeline", "seed": cfg.seed, "steps": step,
            "final": final, "wall_seconds": round(time.time() - t_start, 1),
            "cpu_seconds": round(time.process_time() - cpu_start, 1), "threads": cfg.threads,
            "heldout_pairs": [list(p) for p in cfg.heldout], "config": _jsonable(asdict(cfg)),
            "scheduler": {**SCHEDULER_KW, "prediction_type": cfg.prediction_type, "sampler": "DDIMScheduler",
                          "timestep_spacing": "trailing"},
            "defaults": {"num_inference_steps": DEFAULT_STEPS, "guidance_scale": DEFAULT_GUIDANCE,
                         "height": cfg.size, "width": cfg.size},
            "final_loss_ema100": round(sum(losses[-100:]) / max(1, len(losses[-100:])), 5),
            "parameters": {"unet": sum(p.numel() for p in unet.parameters()),
                           "text_encoder": sum(p.numel() for p in text_encoder.parameters())},
            "training_data": "fresh renders from t2i_audit.mini.world.sample_scene, excluding heldout_pairs",
        }
        with ema_weights():
            pipe = ema_pipeline()
            save_pipeline(pipe, folder)
            atomic_write_text(folder / "card.json", json.dumps(info, indent=2))
            if grid:
                save_grid(pipe, samples / f"grid_{step:06d}.png")
        log(f"checkpoint step {step} -> {folder}")
        return info

    def step_hooks() -> None:
        """What runs after a step (and before the first): diffusers-layout checkpoints, the audit callback."""
        if checkpoint_every and step and step % checkpoint_every == 0:
            live = {"unet": unet, "text_encoder": text_encoder}
            with torch.no_grad():
                raw = {k: copy.deepcopy(m) for k, m in live.items()}  # the trained weights, before the EMA swap
            with ema_weights():  # ``live`` holds the EMA weights here
                write_checkpoint(out / f"checkpoint-{step}", raw, ema_modules=live)
            log(f"checkpoint-{step} -> {out}")
        if callback is not None and step % callback.every == 0:
            with ema_weights():
                callback(step, pipeline=ema_pipeline())

    if initial is not None:
        checkpoint(final=True, folder=initial, grid=False)  # step 0: the untrained pipeline, the track's base
    step_hooks()

    while True:
        elapsed = (time.time() - t_start) / 60
        if (cfg.steps is not None and step >= cfg.steps) or (cfg.minutes is not None and elapsed >= cfg.minutes):
            break
        scenes = [sample_scene(rng, exclude=cfg.heldout, kind_weights=cfg.kind_weights, single_size=cfg.single_size,
                               single_centre=cfg.single_centre) for _ in range(cfg.batch)]
        texts = ["" if rng.random() < cfg.caption_dropout else caption(s) for s in scenes]
        x0 = _images_tensor(scenes, cfg.size)
        ids = tokenizer(texts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                        return_tensors="pt").input_ids.to(dev)
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, sched.config.num_train_timesteps, (cfg.batch,), generator=gen)
        a = alphas[t].view(-1, 1, 1, 1).to(dev)
        x0, noise, t = x0.to(dev), noise.to(dev), t.to(dev)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        target = diffusion_target(cfg.prediction_type, x0, noise, a)
        for g in opt.param_groups:
            g["lr"] = learning_rate(cfg, step)
        cond = text_encoder(ids)[0]
        pred = unet(xt, t, cond).sample
        loss = torch.nn.functional.mse_loss(pred, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ema.update(step)
        step += 1
        losses.append(loss.item())
        if step % 25 == 0:
            log(f"step {step} loss {sum(losses[-25:]) / 25:.4f} wall {time.time() - t_start:.0f}s")
        step_hooks()
        if time.time() - last_ckpt > cfg.checkpoint_minutes * 60:
            card = checkpoint(final=False)
            last_ckpt = time.time()
    card = checkpoint(final=True)
    return card


def _jsonable(d):
    return json.loads(json.dumps(d, default=list))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int)
    p.add_argument("--minutes", type=float)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint-minutes", type=float, default=10.0)
    p.add_argument("--smoke", action="store_true", help="3 steps of a tiny model (CI)")
    a = p.parse_args(argv)
    cfg = smoke_config(a.seed) if a.smoke else GeneratorConfig(
        seed=a.seed, steps=a.steps, minutes=a.minutes, batch=a.batch, threads=a.threads,
        checkpoint_minutes=a.checkpoint_minutes)
    if cfg.steps is None and cfg.minutes is None:
        p.error("give --steps or --minutes (or --smoke)")
    train_generator(a.out, cfg, log=lambda m: print(m, flush=True))


def smoke_config(seed: int = 0) -> GeneratorConfig:
    return GeneratorConfig(seed=seed, steps=3, batch=4, block_out_channels=(8, 16), attention_heads=2, text_width=16,
                           text_layers=1, threads=1, checkpoint_minutes=1e9)


if __name__ == "__main__":
    main()
