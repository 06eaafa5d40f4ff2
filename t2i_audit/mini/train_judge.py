"""Train the mini open_clip judge on EVERY composition of the mini world.

Architecture: a custom open_clip config (32 px ViT, patch 4; 4-layer text tower, bundled
SimpleTokenizer), registered with ``open_clip.add_model_config``. Each step renders fresh
scenes; texts are full captions and partial phrases (see :mod:`.descriptions`) plus one hard
negative per image (colours or shapes swapped between the objects, relation reversed, one
attribute changed). The loss is a sigmoid (SigLIP-style) loss over all image x text pairs
of the batch with EXACT labels from the scene truth, so partial phrases true of several
images are never pushed apart. Output folder: ``config.json`` + ``model.safetensors``
(float16) + ``card.json``; load with :func:`load_judge` or the normal open_clip scorer.

    python -m t2i_audit.mini.train_judge --out t2i_audit/mini/weights/judge --minutes 30
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..ownership import claim_output_dir
from ..rundir import staged_into
from .descriptions import holds, negative_desc, positive_desc
from .world import render_batch, sample_scene

MODEL_NAME = "mini-judge"


def judge_model_cfg(width: int = 128, layers: int = 4, text_width: int = 64, text_layers: int = 4,
                    embed_dim: int = 64, context_length: int = 32) -> dict:
    return {
        "embed_dim": embed_dim,
        "vision_cfg": {"image_size": 32, "layers": layers, "width": width, "patch_size": 4, "head_width": 32},
        "text_cfg": {"context_length": context_length, "vocab_size": 49408, "width": text_width,
                     "heads": 4, "layers": text_layers},
    }


@dataclass
class JudgeConfig:
    seed: int = 0
    batch: int = 128
    lr: float = 1e-3
    warmup: int = 100
    steps: int | None = None
    minutes: float | None = None
    threads: int = 1
    checkpoint_minutes: float = 10.0
    width: int = 128
    layers: int = 4
    text_width: int = 64
    text_layers: int = 4
    embed_dim: int = 64
    init: str | None = None                       # continue from this judge folder's weights
    kind_weights: tuple = (0.2, 0.3, 0.5)         # single / pair / spatial scenes
    relation_negatives: float = 0.35              # P(reversed relation | description has one)


def register(cfg: dict, name: str = MODEL_NAME) -> None:
    from ..scorers.clip_models import register_open_clip_config

    register_open_clip_config(name, cfg)


def load_judge(folder: Path | str, device: str = "cpu"):
    """(model, preprocess, tokenizer) of a judge folder, through open_clip's own loaders."""
    from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing

    folder = Path(folder)
    register(json.loads((folder / "config.json").read_text()))
    model, _, preprocess = open_clip.create_model_and_transforms(
        MODEL_NAME, pretrained=str(folder / "model.safetensors"), device=device)
    return model.float().eval(), preprocess, open_clip.get_tokenizer(MODEL_NAME)


def _save(model, folder: Path, cfg: dict, card: dict) -> None:
    from safetensors.torch import save_file

    with staged_into(folder) as tmp:  # replaces these three files only; nothing else in the folder
        sd = {k: v.detach().to("cpu").half().contiguous() for k, v in model.state_dict().items()}
        save_file(sd, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        # no "accuracy" here: new weights invalidate it; `t2i-audit mini eval-judges` writes it
        (tmp / "card.json").write_text(json.dumps(card, indent=2))


def train_judge(out: Path | str, config: JudgeConfig | None = None, log=print) -> dict:
    import torch
    import torch.nn.functional as F

    from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing

    cfg = config or JudgeConfig()
    if cfg.steps is None and cfg.minutes is None:
        raise ValueError("give steps or minutes")
    out = claim_output_dir(out, "mini-judge")  # before training: refuse a folder that is not ours at once
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    mcfg = judge_model_cfg(cfg.width, cfg.layers, cfg.text_width, cfg.text_layers, cfg.embed_dim)
    register(mcfg)
    model, _, preprocess = open_clip.create_model_and_transforms(MODEL_NAME, pretrained=None)
    previous = None
    if cfg.init:
        from safetensors.torch import load_file

        model.load_state_dict({k: v.float() for k, v in load_file(str(Path(cfg.init) / "model.safetensors")).items()})
        previous = json.loads((Path(cfg.init) / "card.json").read_text())
        previous.pop("accuracy", None)
        previous.pop("scorer_agreement", None)
    tokenizer = open_clip.get_tokenizer(MODEL_NAME)
    mean = torch.tensor(preprocess.transforms[-1].mean).view(1, 3, 1, 1)
    std = torch.tensor(preprocess.transforms[-1].std).view(1, 3, 1, 1)
    bias = torch.nn.Parameter(torch.tensor(-5.0))
    with torch.no_grad():
        model.logit_scale.fill_(2.3)  # log 10
    opt = torch.optim.AdamW(list(model.parameters()) + [bias], lr=cfg.lr, weight_decay=0.05)
    t0, c0 = time.time(), time.process_time()
    last = t0
    step, losses = 0, []

    def card(final: bool) -> dict:
        return {"kind": "mini-judge", "model": MODEL_NAME, "seed": cfg.seed, "steps": step, "final": final,
                "wall_seconds": round(time.time() - t0, 1), "cpu_seconds": round(time.process_time() - c0, 1),
                "threads": cfg.threads, "config": asdict(cfg), "heldout_pairs": [],
                "training_data": "fresh renders of every composition (t2i_audit.mini.world.sample_scene), "
                                 "captions + partial phrases + hard negatives, exact-label sigmoid loss",
                "loss_last100": round(sum(losses[-100:]) / max(1, len(losses[-100:])), 4),
                "parameters": sum(p.numel() for p in model.parameters()),
                "previous_stage": previous}

    model.train()
    while True:
        if (cfg.steps is not None and step >= cfg.steps) or (cfg.minutes is not None and time.time() - t0 >= cfg.minutes * 60):
            break
        scenes = [sample_scene(rng, kind_weights=cfg.kind_weights) for _ in range(cfg.batch)]
        pos = [positive_desc(s, rng) for s in scenes]
        neg = [negative_desc(s, d, rng, cfg.relation_negatives) for s, d in zip(scenes, pos)]
        descs = pos + neg
        texts = [d.text(rng) for d in descs]
        labels = torch.tensor([[1.0 if holds(s, d) else 0.0 for d in descs] for s in scenes])
        x = torch.from_numpy(render_batch(scenes)).permute(0, 3, 1, 2).float().div(255.0)
        x = (x - mean) / std
        img = F.normalize(model.encode_image(x), dim=-1)
        txt = F.normalize(model.encode_text(tokenizer(texts)), dim=-1)
        logits = model.logit_scale.exp() * img @ txt.T + bias
        loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / cfg.batch
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        losses.append(loss.item())
        if step % 50 == 0:
            log(f"step {step} loss {sum(losses[-50:]) / 50:.4f} wall {time.time() - t0:.0f}s")
        if time.time() - last > cfg.checkpoint_minutes * 60:
            _save(model, out, mcfg, card(False))
            last = time.time()
            log(f"checkpoint step {step}")
    info = card(True)
    _save(model, out, mcfg, info)
    return info


def smoke_config(seed: int = 0) -> JudgeConfig:
    return JudgeConfig(seed=seed, steps=3, batch=8, width=32, layers=1, text_width=32, text_layers=1,
                       embed_dim=16, checkpoint_minutes=1e9)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int)
    p.add_argument("--minutes", type=float)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--init", help="continue from this judge folder (a second stage)")
    p.add_argument("--relation-stage", action="store_true",
                   help="stage-2 mix: 80%% spatial scenes, reversed-relation negatives 80%%")
    a = p.parse_args(argv)
    extra = dict(kind_weights=(0.1, 0.1, 0.8), relation_negatives=0.8, lr=3e-4, warmup=20) if a.relation_stage else {}
    cfg = smoke_config(a.seed) if a.smoke else JudgeConfig(seed=a.seed, steps=a.steps, minutes=a.minutes,
                                                           batch=a.batch, threads=a.threads, init=a.init, **extra)
    if cfg.steps is None and cfg.minutes is None:
        p.error("give --steps or --minutes (or --smoke)")
    train_judge(a.out, cfg, log=lambda m: print(m, flush=True))


if __name__ == "__main__":
    main()
