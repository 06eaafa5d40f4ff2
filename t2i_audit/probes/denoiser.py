"""Denoiser activations during generation: forward hooks on UNet / transformer blocks.

For the prompts of a run (sample 0, with the seed images.jsonl recorded, else the generate
stage's own seed rule) the pipeline is run again with ``output_type="latent"`` (no VAE
decode). At the chosen denoising steps every block's output is averaged over space (UNet:
``B×C×H×W`` → ``B×C``) or tokens (DiT: ``B×N×C`` → ``B×C``). With classifier-free guidance
the pipeline runs ``[uncond, cond]`` as one batch: both halves are stored and labelled.

Stored like the text encoders, in ``activations/denoiser/``: arrays
``<block>__t<step>-cond.npy`` / ``<block>__t<step>-uncond.npy`` (float16), ``index.jsonl``,
``meta.json``. Blocks: ``down0``…, ``mid``, ``up0``… (UNet); ``block00``… (``transformer_blocks``),
``single00``… (FLUX's ``single_transformer_blocks``). Where a block returns a tuple, its
largest tensor is taken (UNet down blocks: the hidden states, not the skip list; SD3 / FLUX
joint blocks: the image stream, not the text stream).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl, read_jsonl
from .activations import merge_parts

CHUNK = 64


def denoiser_blocks(denoiser) -> dict:
    """Named blocks of a UNet2DConditionModel or a diffusion transformer."""
    blocks = {}
    for i, b in enumerate(getattr(denoiser, "down_blocks", None) or []):
        blocks[f"down{i}"] = b
    if getattr(denoiser, "mid_block", None) is not None:
        blocks["mid"] = denoiser.mid_block
    for i, b in enumerate(getattr(denoiser, "up_blocks", None) or []):
        blocks[f"up{i}"] = b
    for i, b in enumerate(getattr(denoiser, "transformer_blocks", None) or []):
        blocks[f"block{i:02d}"] = b
    for i, b in enumerate(getattr(denoiser, "single_transformer_blocks", None) or []):
        blocks[f"single{i:02d}"] = b
    if not blocks:
        raise AuditError(f"{type(denoiser).__name__}: no down/mid/up or transformer blocks to hook")
    return blocks


def pool_output(out):
    """Mean over space or tokens of a block output (the largest tensor if it is a tuple)."""
    import torch

    if isinstance(out, (tuple, list)):
        tensors = [t for t in out if isinstance(t, torch.Tensor)]
        if not tensors:
            return None
        out = max(tensors, key=lambda t: t.numel())
    if not isinstance(out, torch.Tensor):
        return None
    out = out.detach().float()
    if out.ndim == 4:
        return out.mean(dim=(2, 3))
    if out.ndim == 3:
        return out.mean(dim=1)
    return out.reshape(out.shape[0], -1)


class BlockRecorder:
    """Hooks that keep pooled block outputs at the chosen denoiser calls (= steps)."""

    def __init__(self, denoiser, steps: Sequence[int]):
        self.denoiser, self.steps = denoiser, set(steps)
        self.blocks = denoiser_blocks(denoiser)
        self.call = -1
        self.store: dict[tuple[str, int], "object"] = {}
        self.handles = []

    def __enter__(self):
        def pre(_module, _args, _kwargs=None):
            self.call += 1

        self.handles.append(self.denoiser.register_forward_pre_hook(pre))
        for name, block in self.blocks.items():
            def hook(_m, _inp, out, name=name):
                if self.call in self.steps:
                    pooled = pool_output(out)
                    if pooled is not None:
                        self.store[(name, self.call)] = pooled.cpu().numpy()
            self.handles.append(block.register_forward_hook(hook))
        return self

    def reset(self):
        self.call, self.store = -1, {}

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []


def _seeds(rd: RunDir, prompts: list[dict], base_seed: int) -> list[int]:
    from ..generate import image_seed

    recorded = {r["prompt_id"]: r["seed"] for r in rd.read_images() if r.get("sample") == 0}
    return [int(recorded.get(p["id"], image_seed(p["id"], 0, base_seed))) for p in prompts]


def run_hooked(pipe, texts: Sequence[str], seeds: Sequence[int], *, steps: int, guidance: float,
               size: int, at_steps: Sequence[int], call_kwargs: dict | None = None) -> dict[str, np.ndarray]:
    """One pipeline call; returns ``{"<block>__t<step>-<half>": (len(texts), dim)}``."""
    import torch

    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    if denoiser is None:
        raise AuditError(f"{type(pipe).__name__}: no unet or transformer to hook")
    gens = [torch.Generator("cpu").manual_seed(int(s)) for s in seeds]
    with BlockRecorder(denoiser, at_steps) as rec, torch.inference_mode():
        pipe(prompt=list(texts), generator=gens, num_inference_steps=steps, guidance_scale=guidance,
             height=size, width=size, output_type="latent", **(call_kwargs or {}))
        store = dict(rec.store)
    n, out = len(texts), {}
    for (block, step), arr in sorted(store.items()):
        if len(arr) == 2 * n:  # classifier-free guidance: [uncond, cond]
            out[f"{block}__t{step:03d}-uncond"] = arr[:n]
            out[f"{block}__t{step:03d}-cond"] = arr[n:]
        elif len(arr) == n:
            out[f"{block}__t{step:03d}-cond"] = arr
        else:
            raise AuditError(f"denoiser block {block}: batch {len(arr)} is neither {n} nor {2 * n}")
    return out


def extract_denoiser_activations(rd: RunDir | str | Path, model: str, *, device: str = "cpu",
                                 timesteps: Sequence[int] | None = None, batch_size: int = 4,
                                 base_seed: int = 0, progress: bool = True) -> dict:
    """Hook the denoiser while regenerating the run's prompts (sample 0); returns meta."""
    from ..generate import effective_dtype, load_pipeline
    from ..models import resolve_model

    rd = rd if isinstance(rd, RunDir) else RunDir(rd)
    prompts = rd.read_prompts()
    card = resolve_model(model)
    steps = int(card.defaults.get("steps", 30))
    guidance = float(card.defaults.get("guidance", 5.0))
    size = int(card.defaults.get("size", 512))
    at = sorted({range(steps)[int(t)] for t in (timesteps if timesteps is not None else (0, steps // 2, -1))})
    seeds = _seeds(rd, prompts, base_seed)
    ids = [p["id"] for p in prompts]
    key = hashlib.sha1(json.dumps([card.source, card.revision, steps, guidance, size, at, ids, seeds,
                                   sorted(card.call.items())], default=str).encode()).hexdigest()[:16]
    enc_dir = rd.activations_dir / "denoiser"
    meta_path = enc_dir / "meta.json"
    if meta_path.exists() and json.loads(meta_path.read_text()).get("key") == key:
        return json.loads(meta_path.read_text())
    dtype, _ = effective_dtype(card.defaults.get("dtype", "float32"), device)
    pipe = load_pipeline(card, device, dtype)
    parts = enc_dir / ".parts" / key
    parts.mkdir(parents=True, exist_ok=True)
    n_chunks = (len(ids) + CHUNK - 1) // CHUNK
    if progress:
        print(f"[probe] denoiser: {len(ids)} prompts x {steps} steps, hooks at steps {at} "
              f"({len(denoiser_blocks(pipe.unet if hasattr(pipe, 'unet') else pipe.transformer))} blocks)",
              file=sys.stderr)
    for c in range(n_chunks):
        part = parts / f"part_{c:05d}.npz"
        if part.exists():
            continue
        lo, hi = c * CHUNK, min((c + 1) * CHUNK, len(ids))
        acc: dict[str, list] = {}
        for b in range(lo, hi, batch_size):
            e = min(b + batch_size, hi)
            res = run_hooked(pipe, [p["text"] for p in prompts[b:e]], seeds[b:e], steps=steps,
                             guidance=guidance, size=size, at_steps=at, call_kwargs=card.call)
            for k, v in res.items():
                acc.setdefault(k, []).append(v)
        tmp = part.with_name(part.stem + ".tmp.npz")
        np.savez(tmp, **{k: np.concatenate(v).astype(np.float16) for k, v in acc.items()})
        tmp.replace(part)
        if progress:
            print(f"[probe] denoiser: {hi}/{len(ids)}", file=sys.stderr)
    names, _ = merge_parts(enc_dir, parts, n_chunks, len(ids))
    atomic_write_jsonl(enc_dir / "index.jsonl", ({"row": i, "prompt_id": pid} for i, pid in enumerate(ids)))
    meta = {"key": key, "fingerprint": key, "model": model, "kind": "denoiser", "n": len(ids),
            "layers": list(dict.fromkeys(n.split("__")[0] for n in names)),
            "poolings": list(dict.fromkeys(n.split("__")[1] for n in names)), "arrays": names,
            "dim": max(int(np.load(enc_dir / f"{n}.npy", mmap_mode="r").shape[1]) for n in names),
            "steps": steps, "guidance": guidance, "size": size, "hooked_steps": at, "truncated": [],
            "bytes": sum((enc_dir / f"{n}.npy").stat().st_size for n in names)}
    atomic_write_json(meta_path, meta)
    shutil.rmtree(enc_dir / ".parts", ignore_errors=True)
    return meta
