"""The binding study's capture: one replay of every image's first steps, keeping what the head mean loses.

Like probes/capture/early.py, every image of a run is replayed **in the generation's planned batches** with the
run's recorded settings and stopped after the last step read (``run_hooked(stop_after=…)``). Attached:

* ``HeadMaps`` — every cross-attention module's probabilities per head, recomputed from the module's own
  q/k by ``attention.attention_probs`` (pinned to diffusers' processor by tests/fidelity), conditional half;
* ``CFGGap`` — the denoiser's output halves ``[uncond, cond]`` (families.yaml ``cfg_batch``): the gap
  ``‖ε_c − ε_u‖`` over channels per latent pixel at the steps read, and its mean square at *every* step up
  to the last (accumulated: CFG-Rejection's ASD). v-prediction outputs are turned into ε differences by
  ``ε = α_t v + σ_t x_t`` (diffusers' DDIM ``step``: the x_t term cancels, so ε_c − ε_u = α_t (v_c − v_u)).
  With zero terminal SNR (the mini scheduler's ``rescale_betas_zero_snr``) α_t = 0 at the first step, so the
  gap is 0 there for every prompt: the accumulated gap starts at the second step;
* the x0 preview (``preview.PreviewRecorder``, decoded as the pipeline decodes).

``binding_features`` reduces them per image and step; stored as ``activations/trajectory/<family>__t<step>.npy``
(``heads``, ``rawmaps``, ``overlap``, ``cfg``, ``x0colour``) with ``index.jsonl`` and ``meta.json`` (key, names
of every column, sha256 of every array), in resumable parts like every activation.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from typing import Sequence

import numpy as np

from ...errors import AuditError
from ...families import pipeline_family
from ...rundir import RunDir, atomic_write_json, atomic_write_jsonl
from . import binding_features as bf

FAMILIES = ("heads", "rawmaps", "overlap", "cfg", "x0colour")
FORMAT = 1
CHUNK = 64


class HeadMaps:
    """Per-head cross-attention maps of the conditional half at ``steps``: ``maps[(module, step)]`` =
    ``(n, heads, H, W, keys)``."""

    def __init__(self, denoiser, clock, steps, n: int, pipeline_class: str):
        from ..capture.attention import cross_attention_modules

        self.modules = cross_attention_modules(denoiser)
        self.denoiser, self.clock, self.steps, self.n = denoiser, clock, set(steps), n
        order = (pipeline_family(pipeline_class) or {}).get("cfg_batch") or ("uncond", "cond")
        self.cond = list(order).index("cond")
        self.maps: dict[tuple[str, int], np.ndarray] = {}
        self.latent_hw = None
        self.handles = []

    def __enter__(self):
        def pre(_m, args, kwargs):
            latent = kwargs.get("sample", kwargs.get("hidden_states", args[0] if args else None))
            self.latent_hw = tuple(latent.shape[-2:])

        self.handles.append(self.denoiser.register_forward_pre_hook(pre, with_kwargs=True))
        for name, module in self.modules.items():
            self.handles.append(module.register_forward_hook(
                lambda m, a, k, o, name=name: self._hook(name, m, a, k), with_kwargs=True))
        return self

    def _hook(self, name, attn, args, kwargs):
        from ..capture.attention import attention_probs, grid_of

        if self.clock.step not in self.steps:
            return
        hs = kwargs.get("hidden_states", args[0] if args else None)
        ehs = kwargs.get("encoder_hidden_states", args[1] if len(args) > 1 else None)
        probs = attention_probs(attn, hs, ehs, kwargs.get("attention_mask")).float()
        if probs.shape[0] == 2 * self.n:
            probs = probs[self.cond * self.n:(self.cond + 1) * self.n]
        h, w = grid_of(probs.shape[2], self.latent_hw)
        arr = probs.cpu().numpy()
        self.maps[(name, self.clock.step)] = arr.reshape(arr.shape[0], arr.shape[1], h, w, arr.shape[-1])

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []


class CFGGap:
    """The conditional − unconditional output gap, in ε units, per loop step."""

    def __init__(self, pipe, denoiser, clock, steps, n: int):
        self.pipe, self.denoiser, self.clock, self.steps, self.n = pipe, denoiser, clock, set(steps), n
        order = (pipeline_family(type(pipe).__name__) or {}).get("cfg_batch") or ("uncond", "cond")
        self.cond = list(order).index("cond")
        self.asd: dict[int, np.ndarray] = {}
        self.maps: dict[int, np.ndarray] = {}
        self.handle = None

    def __enter__(self):
        self.handle = self.denoiser.register_forward_hook(self._hook, with_kwargs=True)
        return self

    def _alpha(self, timestep) -> float:
        sched = self.pipe.scheduler
        if getattr(sched.config, "prediction_type", "epsilon") != "v_prediction":
            return 1.0
        t = int(timestep.flatten()[0]) if hasattr(timestep, "flatten") else int(timestep)
        return float(sched.alphas_cumprod[t] ** 0.5)

    def _hook(self, _m, args, kwargs, out):
        pred = out[0] if isinstance(out, tuple) else getattr(out, "sample", out)
        if pred.shape[0] != 2 * self.n:
            raise AuditError(f"CFG gap: denoiser batch {pred.shape[0]} is not 2 x {self.n} (guidance off?)")
        c = pred[self.cond * self.n:(self.cond + 1) * self.n].float()
        u = pred[(1 - self.cond) * self.n:(2 - self.cond) * self.n].float()
        gap = (c - u) * self._alpha(kwargs.get("timestep", args[1] if len(args) > 1 else None))
        step = self.clock.step
        self.asd[step] = (gap ** 2).mean(dim=tuple(range(1, gap.ndim))).cpu().numpy()
        if step in self.steps:
            self.maps[step] = gap.norm(dim=1).cpu().numpy()

    def __exit__(self, *exc):
        self.handle.remove()


def replay(pipe, batch: list[tuple[dict, int]], seeds: list[int], s: dict, steps: list[int]) -> dict[str, np.ndarray]:
    """One planned batch: ``{"<family>__t<step>": (len(batch), columns)}`` and ``_names`` per family."""
    from ..capture.denoiser import run_hooked
    from ..capture.early import slot_positions
    from ..capture.preview import PreviewRecorder, decode_previews

    prompts = [p for p, _ in batch]
    texts = [p["text"] for p in prompts]
    held: dict = {}

    def make(kind):
        def mk(pipe_, den, clock):
            held[kind] = {"heads": lambda: HeadMaps(den, clock, steps, len(texts), type(pipe_).__name__),
                          "gap": lambda: CFGGap(pipe_, den, clock, steps, len(texts)),
                          "x0": lambda: PreviewRecorder(pipe_, clock, steps)}[kind]()
            return held[kind]
        return mk

    run_hooked(pipe, texts, seeds, steps=s["steps"], guidance=s["guidance"], size=s["size"], at_steps=steps,
               call_kwargs=s["call"], attach=[make("heads"), make("gap"), make("x0")], stop_after=max(steps))
    slots, words, _ = slot_positions(pipe, texts, prompts, s["call"])
    modules = sorted({m for m, _ in held["heads"].maps})
    out: dict[str, list] = {}
    for step in steps:
        per_mod = {m: held["heads"].maps[(m, step)] for m in modules}
        by_grid: dict[str, list] = {}
        for m, a in per_mod.items():
            by_grid.setdefault(f"{a.shape[2]}x{a.shape[3]}", []).append(a.mean(1))  # head mean
        grids = {g: np.mean(v, axis=0) for g, v in by_grid.items()}  # module mean per grid: (n, H, W, keys)
        finest = max(grids, key=lambda g: int(g.split("x")[0]))
        previews = [np.asarray(im.convert("RGB"), float) for im in decode_previews(pipe, held["x0"].latents[step])]
        asd_cum = sum(held["gap"].asd[i] for i in range(step + 1))
        rows = {f: [] for f in FAMILIES}
        for b, p in enumerate(prompts):
            sk = bf.slot_keys(p, slots[b])
            one = {m: a[b] for m, a in per_mod.items()}
            rows["heads"].append(bf.heads(one, slots[b], words[b], p))
            rows["rawmaps"].append(bf.rawmaps({g: a[b] for g, a in grids.items()}, sk, words[b], p))
            rows["overlap"].append(bf.overlap(one, sk, words[b]))
            rows["cfg"].append(bf.cfg(held["gap"].maps[step][b], float(held["gap"].asd[step][b]), float(asd_cum[b]),
                                      grids[finest][b], sk, words[b]))
            rows["x0colour"].append(bf.x0colour(previews[b], grids[finest][b], sk, words[b], p))
        for f, v in rows.items():
            out.setdefault(f"{f}__t{step:03d}", []).append(np.stack(v).astype(np.float32))
    n_heads = {m: per_mod[m].shape[1] for m in modules}
    names = {"heads": bf.heads_names(modules, n_heads), "rawmaps": bf.rawmaps_names(grids),
             "overlap": bf.overlap_names(modules), "cfg": list(bf.CFG), "x0colour": list(bf.X0COLOUR)}
    return {k: np.concatenate(v) for k, v in out.items()}, names, modules


def extract(rd: RunDir, model: str, *, fractions: Sequence[float], device: str = "cpu", progress: bool = True,
            variant=None) -> dict:
    """Replay every image of the run (planned batches) and store the binding families; resumable. ``variant``:
    the run's LoRAs / replaced components (t2i_audit.variants)."""
    from ...generate import load_pipeline, plan_batches
    from ...models import resolve_model
    from ...variants import cache_key
    from ...safeload import read_json
    from ..capture.activations import array_hashes, arrays_intact, merge_parts, save_part
    from ..capture.denoiser import run_settings
    from ..capture.early import step_at

    prompts = rd.read_prompts()
    images = {(r["prompt_id"], int(r.get("sample", 0))): r for r in rd.read_images()}
    if not images:
        raise AuditError(f"{rd.images}: no images; run the generate stage first")
    card = resolve_model(model).with_variant(variant)
    s = run_settings(rd, card, device)
    steps = sorted({step_at(f, s["steps"]) for f in fractions})
    plan = [[(p, k) for p, k in b if (p["id"], k) in images]
            for b in plan_batches(prompts, s["images_per_prompt"], s["batch_size"])]
    plan = [b for b in plan if b]
    rows = [(p["id"], k) for b in plan for p, k in b]
    seeds = [[int(images[(p["id"], k)]["seed"]) for p, k in b] for b in plan]
    key = hashlib.sha1(json.dumps([card.source, card.revision, s, steps, rows, seeds, FORMAT, *cache_key(card)],
                                  default=str, sort_keys=True).encode()).hexdigest()[:16]
    out_dir = rd.activations_dir / "trajectory"
    meta_path = out_dir / "meta.json"
    if meta_path.exists():
        meta = read_json(meta_path)
        if meta.get("key") == key and arrays_intact(out_dir, meta):
            return meta
    parts = out_dir / ".parts" / key
    parts.mkdir(parents=True, exist_ok=True)
    per_chunk = max(1, CHUNK // s["batch_size"])
    n_chunks = (len(plan) + per_chunk - 1) // per_chunk
    missing = [c for c in range(n_chunks) if not (parts / f"part_{c:05d}.npz").exists()]
    pipe = load_pipeline(card, device, s["dtype"]) if missing else None
    names = modules = None
    for c in missing:
        acc: dict[str, list] = {}
        for b in range(c * per_chunk, min((c + 1) * per_chunk, len(plan))):
            got, names, modules = replay(pipe, plan[b], seeds[b], s, steps)
            for k, v in got.items():
                acc.setdefault(k, []).append(v)
        save_part(parts / f"part_{c:05d}.npz", {k: np.concatenate(v) for k, v in acc.items()})
        if names is not None and not (parts / "names.json").exists():
            atomic_write_json(parts / "names.json", {"names": names, "modules": modules})
        if progress:
            print(f"[trajectory] chunk {c + 1}/{n_chunks}", file=sys.stderr)
    info = read_json(parts / "names.json")
    stored, _ = merge_parts(out_dir, parts, n_chunks, len(rows))
    atomic_write_jsonl(out_dir / "index.jsonl", ({"row": i, "prompt_id": pid, "sample": k}
                                                 for i, (pid, k) in enumerate(rows)))
    meta = {"key": key, "kind": "trajectory", "model": model, "n": len(rows), "format": FORMAT, "steps": steps,
            "loop_steps": s["steps"], "fractions": list(fractions), "arrays": stored, "columns": info["names"],
            "modules": info["modules"], "settings": s, "sha256": array_hashes(out_dir, stored)}
    atomic_write_json(meta_path, meta)
    shutil.rmtree(out_dir / ".parts", ignore_errors=True)
    return meta


def load(rd: RunDir) -> tuple[dict[str, np.ndarray], list[tuple[str, int]], dict]:
    from ..capture.early import load_feature_folder

    return load_feature_folder(rd.activations_dir / "trajectory", "no trajectory features; run "
                               f"`t2i-audit probe {rd.root} --early --binding` first")
