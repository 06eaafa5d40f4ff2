"""Denoiser activations during generation: forward hooks on UNet / transformer blocks.

For the prompts of a run (sample 0, with the seed images.jsonl recorded, else the generate
stage's own seed rule) the pipeline is run again **with the settings the run recorded**
(steps, guidance, size, dtype, call kwargs) **in the generation's planned batches**
(``generate.plan_batches``: the same batch-mates, so the replay is the trajectory of the scored
images; tests/fidelity/ decodes a replay and compares PNG bytes) and
``output_type="latent"`` (no VAE decode). Every block's *image stream* is averaged over space
(UNet: ``B×C×H×W`` → ``B×C``) or tokens (DiT: ``B×N×C`` → ``B×C``); where a block returns a
tuple, the image stream's position comes from families.yaml per block class (SD3 / FLUX joint
blocks return ``(text, image)``, and the text stream is the larger one at small sizes).

Steps are the pipeline's own loop iterations, counted by its step-end callback (PNDM makes 51
denoiser calls for 50 steps; the last label is the last iteration), and ``meta.json`` records
the scheduler's real timestep of each (``timesteps``). With classifier-free guidance batched as
``[uncond, cond]`` both halves are stored and labelled; pipelines that call the denoiser twice a
step (true CFG) are labelled per call from families.yaml.

Stored like the text encoders, in ``activations/denoiser/``: arrays
``<block>__t<step>-cond.npy`` / ``<block>__t<step>-uncond.npy`` (float16), ``index.jsonl``,
``meta.json``. Blocks: ``down0``…, ``mid``, ``up0``… (UNet); ``block00``… (``transformer_blocks``),
``single00``… (FLUX's ``single_transformer_blocks``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import AuditError
from ...families import block_lists, image_stream_index, joint_sequence, pipeline_family
from ...rundir import RunDir, atomic_write_json, atomic_write_jsonl
from ...safeload import read_cache_json, read_json
from ...generate import plan_batches
from .activations import array_hashes, arrays_intact, merge_parts, save_part

CHUNK = 64


def denoiser_blocks(denoiser) -> dict:
    """Named blocks of a UNet or diffusion transformer, from families.yaml ``block_lists``."""
    import torch

    blocks = {}
    for attr, label in block_lists().items():
        found = getattr(denoiser, attr, None)
        if isinstance(found, (torch.nn.ModuleList, list, tuple)):
            blocks.update({label.format(i=i): b for i, b in enumerate(found)})
        elif found is not None:
            blocks[label.format(i=0)] = found
    if not blocks:
        raise AuditError(f"{type(denoiser).__name__}: none of the block lists in families.yaml "
                         f"({', '.join(block_lists())}) to hook")
    return blocks


def image_stream(out, block_class: str):
    """The image-stream tensor of a block's output: the tensor itself, or its tuple position."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        idx = image_stream_index(block_class)
        if idx is None:
            raise AuditError(f"denoiser block {block_class} returns a tuple and families.yaml "
                             "(image_stream) does not say which entry is the image stream")
        return out[idx]
    return None


def pool_output(out, block_class: str = "Tensor"):
    """Mean over space or tokens of a block's image stream; ``(pooled, n_positions)``."""
    out = image_stream(out, block_class)
    if out is None:
        return None, 0
    out = out.detach().float()
    if out.ndim == 4:
        return out.mean(dim=(2, 3)), int(out.shape[2] * out.shape[3])
    if out.ndim == 3:
        return out.mean(dim=1), int(out.shape[1])
    return out.reshape(out.shape[0], -1), 1


class BlockRecorder:
    """Hooks that keep every block's pooled image stream per loop iteration and denoiser call.

    The pipeline's step-end callback (``step_end``) advances the iteration, so a step is what the
    pipeline's loop calls a step, however many denoiser calls it makes.

    Nothing is read back to the host while the loop runs (a ``.cpu()`` / ``.item()`` / ``float(tensor)``
    per block per step would stall a GPU's queue every call): the pooled vectors and the timesteps stay
    where the denoiser made them and :meth:`to_host` moves them in one copy after the loop
    (tests/probes/test_host_sync.py counts such reads while the loop runs).
    """

    def __init__(self, denoiser):
        self.denoiser = denoiser
        self.blocks = denoiser_blocks(denoiser)
        self.step, self.call_in_step = 0, -1
        self.store: dict[tuple[str, int, int], object] = {}  # device tensors until to_host()
        self.positions: dict[str, int] = {}
        self.timesteps: dict[int, object] = {}  # as the pipeline passed them (a device tensor) until to_host()
        self.handles = []

    def step_end(self, step: int, timestep) -> None:
        self.timesteps[int(step)] = timestep.detach().clone() if hasattr(timestep, "detach") else timestep
        self.step, self.call_in_step = int(step) + 1, -1

    def to_host(self) -> None:
        """Every stored vector and timestep as numpy / float, moved in one device→host copy."""
        self.store = dict(zip(self.store, tensors_to_host(list(self.store.values()))))
        steps = list(self.timesteps)
        values = [self.timesteps[s] for s in steps]
        moved = iter(tensors_to_host([v for v in values if hasattr(v, "detach")]))
        self.timesteps = {s: float(next(moved) if hasattr(v, "detach") else v) for s, v in zip(steps, values)}

    def __enter__(self):
        import torch

        joint = joint_sequence(type(self.denoiser).__name__)
        in_joint = {name: joint[attr] for attr, label in block_lists().items() if attr in joint
                    for name in self.blocks if _label_of(label, name)}
        rows = {}

        def pre(_module, args, kwargs):
            self.call_in_step += 1
            if in_joint:
                rows.update({layout: _image_rows(self.denoiser, layout, args, kwargs)
                             for layout in set(in_joint.values())})

        self.handles.append(self.denoiser.register_forward_pre_hook(pre, with_kwargs=True))
        for name, block in self.blocks.items():
            def hook(_m, _inp, out, name=name, cls=type(block).__name__):
                if name in in_joint:  # one caption+image sequence: keep the image rows only
                    out = _rows_from(out, *rows[in_joint[name]])
                pooled, n = pool_output(out, cls)
                if pooled is not None:
                    self.store[(name, self.step, self.call_in_step)] = pooled  # stays on the device
                    self.positions[name] = n
            self.handles.append(block.register_forward_hook(hook))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []


def tensors_to_host(tensors: list) -> list[np.ndarray]:
    """Tensors (any devices, shapes) as numpy arrays, with one device→host copy per device: flattened and
    concatenated there, copied once, cut apart here (float32)."""
    import torch

    out: list = [None] * len(tensors)
    by_device: dict = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():
        flat = torch.cat([tensors[i].detach().reshape(-1).float() for i in idx]).cpu().numpy()
        at = 0
        for i in idx:
            n = tensors[i].numel()
            out[i] = flat[at:at + n].reshape(tuple(tensors[i].shape))
            at += n
    return out


def _rows_from(out, starts, count: int):
    """``out[i, starts[i]:starts[i] + count]`` for every sample, as one gather on the device: ``starts`` may be a
    device tensor (caption lengths from the attention mask), never read back to the host."""
    import torch

    if not torch.is_tensor(starts):
        return torch.stack([out[i, s:s + count] for i, s in enumerate(starts)])
    idx = starts.long().view(-1, 1) + torch.arange(count, device=out.device).view(1, -1)  # the mask's device
    return out.gather(1, idx.unsqueeze(-1).expand(-1, -1, out.shape[-1]))


def _label_of(label: str, name: str) -> bool:
    """Is block ``name`` one of the blocks that block_lists label format ``label`` names?"""
    head = label.split("{")[0]
    return name == label or (name.startswith(head) and name[len(head):].isdigit())


def _image_rows(denoiser, layout: str, args, kwargs) -> tuple[object, int]:
    """(first image row per sample, image token count) in a joint caption+image sequence (families.yaml
    joint_sequence). The latents: Lumina2 ``hidden_states`` (B, C, H, W); Z-Image ``x``, a list of (C, F, H, W)."""
    if layout == "all_caption_rows_first":  # FLUX.2 / Chroma single blocks: cat([every caption row, packed tokens])
        packed = kwargs["hidden_states"]  # (B, image tokens, C): already packed by the pipeline
        return [int(kwargs["encoder_hidden_states"].shape[1])] * packed.shape[0], int(packed.shape[1])
    latent = kwargs.get("hidden_states", kwargs.get("x", args[0] if args else None))
    items = list(latent) if isinstance(latent, (list, tuple)) else list(latent.unbind(0))
    patch = (kwargs.get("patch_size") or getattr(denoiser.config, "patch_size", None)
             or inspect.signature(denoiser.forward).parameters["patch_size"].default)  # Z-Image: a forward kwarg
    count = (items[0].shape[-2] // patch) * (items[0].shape[-1] // patch)
    if layout == "image_first":
        return [0] * len(items), count
    if layout == "caption_first":  # after each caption's real tokens (counted on the device: no host read)
        return kwargs["encoder_attention_mask"].sum(1), count
    raise AuditError(f"families.yaml joint_sequence: unknown layout {layout!r}")


class StopReplay(Exception):
    """Raised by the step callback once the last step a replay needs is done (early features)."""


def _step_callback(pipe, recorder: BlockRecorder, stop_after: int | None = None) -> tuple[dict, str]:
    """Call kwargs that make the pipeline report each finished loop iteration to ``recorder`` (and stop
    the loop after iteration ``stop_after``: nothing later can change what was recorded up to it)."""
    params = inspect.signature(pipe.__call__).parameters

    def done(i, t):
        recorder.step_end(i, t)
        if stop_after is not None and int(i) >= stop_after:
            raise StopReplay

    if "callback_on_step_end" in params:
        # families.yaml callback_passes: sigma (CogView4 hands the callback sigmas[i]): the loop's t is timesteps[i]
        by_sigma = (pipeline_family(type(pipe).__name__) or {}).get("callback_passes") == "sigma"

        def on_step_end(_pipe, i, t, _kwargs):
            done(i, _pipe.scheduler.timesteps[i] if by_sigma else t)
            return {}
        return {"callback_on_step_end": on_step_end}, "callback_on_step_end"
    if "callback" in params and "callback_steps" in params:  # older pipelines (PixArt-Σ)
        return {"callback": lambda i, t, _latents: done(i, t), "callback_steps": 1}, "callback"
    return {}, "denoiser calls (the pipeline has no step callback)"


def _call_labels(pipe, n_calls: int) -> list[str]:
    """Labels of the denoiser calls within one step (true CFG calls it once per branch)."""
    if n_calls == 1:
        return [""]
    named = (pipeline_family(type(pipe).__name__) or {}).get("calls_per_step") or []
    return [f"-{named[j]}" if j < len(named) else f"-call{j}" for j in range(n_calls)]


def run_hooked(pipe, texts: Sequence[str], seeds: Sequence[int], *, steps: int, guidance: float,
               size: int, at_steps: Sequence[int] | None = None, call_kwargs: dict | None = None,
               output_type: str = "latent", attach: Sequence = (), stop_after: int | None = None,
               ) -> tuple[dict[str, np.ndarray], dict]:
    """One pipeline call with block hooks.

    Returns ``({"<block>__t<step>-<half>": (len(texts), dim)}, info)``; ``at_steps`` index the
    pipeline's loop iterations (negative ok; None = every step). ``info`` has the scheduler's
    timestep per stored step, the number of loop iterations, image-stream positions per block,
    and ``images`` when ``output_type`` is not ``"latent"``. ``attach``: more recorders, each made as
    ``make(pipe, denoiser, block_recorder)`` and entered for the call (capture/early.py: attention
    maps, x0 previews) and returned in ``info["attached"]``; ``stop_after``: end the loop after that
    iteration.
    """
    import contextlib

    import torch

    from ...generate import output_images, pipeline_call_kwargs

    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    if denoiser is None:
        raise AuditError(f"{type(pipe).__name__}: no unet or transformer to hook")
    gens = [torch.Generator("cpu").manual_seed(int(s)) for s in seeds]
    result = None
    with BlockRecorder(denoiser) as rec, contextlib.ExitStack() as stack, torch.inference_mode():
        attached = [stack.enter_context(make(pipe, denoiser, rec)) for make in attach]
        cb, counted_by = _step_callback(pipe, rec, stop_after)
        kwargs, _ = pipeline_call_kwargs(type(pipe), list(texts), gens, steps=steps, guidance=guidance, size=size,
                                         output_type=output_type, call=call_kwargs)  # as generate calls it
        try:
            result = pipe(**kwargs, **cb)
        except StopReplay:
            pass
    rec.to_host()  # the loop is over: one device→host copy
    if counted_by.startswith("denoiser calls"):  # one call = one step
        store = {(b, c, 0): v for (b, _s, c), v in rec.store.items()}
    else:
        store = rec.store
    n_steps = 1 + max(s for _b, s, _c in store) if store else 0
    if rec.timesteps and len(rec.timesteps) != n_steps:
        raise AuditError(f"{type(pipe).__name__}: {n_steps} steps hooked but {len(rec.timesteps)} reported")
    want = sorted({range(n_steps)[int(t)] for t in at_steps}) if at_steps is not None else list(range(n_steps))
    n, out = len(texts), {}
    for step in want:
        calls = sorted({c for (_b, s, c) in store if s == step})
        labels = _call_labels(pipe, len(calls))
        for (block, s, c), arr in sorted(store.items()):
            if s != step:
                continue
            tag = f"{block}__t{step:03d}"
            suffix = labels[calls.index(c)]
            if len(arr) == 2 * n:  # classifier-free guidance batched: [uncond, cond] (Z-Image: cfg_batch)
                first, second = (pipeline_family(type(pipe).__name__) or {}).get("cfg_batch") or ("uncond", "cond")
                out[f"{tag}-{first}{suffix}"] = arr[:n]
                out[f"{tag}-{second}{suffix}"] = arr[n:]
            elif len(arr) == n:  # one branch per call (or no guidance): the call's label
                out[f"{tag}{suffix or '-cond'}"] = arr
            else:
                raise AuditError(f"denoiser block {block}: batch {len(arr)} is neither {n} nor {2 * n}")
    info = {"n_steps": n_steps, "steps_counted_by": counted_by,
            "timesteps": {f"t{s:03d}": rec.timesteps.get(s) for s in want},
            "image_positions": dict(rec.positions)}
    if output_type != "latent" and result is not None:
        info["images"] = output_images(result)
    info["attached"] = attached
    return out, info


def _seed_of(rd: RunDir, base_seed: int):
    """(prompt id, sample) → the seed images.jsonl recorded, else the generate stage's own rule."""
    from ...generate import image_seed

    recorded = {(r["prompt_id"], r.get("sample", 0)): r["seed"] for r in rd.read_images()}
    return lambda pid, k: int(recorded.get((pid, k), image_seed(pid, k, base_seed)))


def run_settings(rd: RunDir, card, device: str) -> dict:
    """The generation settings the run recorded (manifest, else run.yaml, else the card's defaults)."""
    import yaml

    from ...generate import effective_dtype

    gen = (rd.read_manifest().get("stages") or {}).get("generate") or {}
    recorded = gen.get("settings")
    source = "manifest (generate stage)"
    if not recorded and rd.config.exists():
        recorded, source = yaml.safe_load(rd.config.read_text()) or {}, "run.yaml"
    if not recorded:
        recorded, source = {}, "model card defaults (the run recorded no generation settings)"
    d = card.defaults
    pick = lambda k, default: recorded.get(k) if recorded.get(k) is not None else default  # noqa: E731
    dtype = gen.get("dtype") if gen.get("device", "").split(":")[0] == device.split(":")[0] else None
    dtype = dtype or effective_dtype(pick("dtype", d.get("dtype", "float32")), device)[0]
    return {"steps": int(pick("steps", d["steps"])), "guidance": float(pick("guidance", d["guidance"])),
            "size": int(pick("size", d["size"])), "dtype": dtype, "seed": int(pick("seed", 0)),
            "batch_size": int(pick("batch_size", 4)), "images_per_prompt": int(pick("images_per_prompt", 1)),
            "call": dict(card.call), "source": source,
            "generated_on": gen.get("device")}


def extract_denoiser_activations(rd: RunDir | str | Path, model: str, *, device: str = "cpu",
                                 timesteps: Sequence[int] | None = None, batch_size: int | None = None,
                                 base_seed: int | None = None, progress: bool = True, state=None,
                                 variant=None) -> dict:
    """Hook the denoiser while replaying the run's prompts (sample 0) with its settings, in the
    generation's planned batches; returns meta (``{}`` on a non-main process).

    Under ``accelerate launch`` each process replays a contiguous share of the chunks into its own
    part files (``device`` is this process's); a chunk is a fixed run of whole planned batches
    whatever the process count, so every batch is the one generation made. The main process merges.
    ``variant``: the run's LoRAs / replaced components (t2i_audit.variants), applied as generation applied them.
    """
    from ...generate import load_pipeline
    from ...models import resolve_model
    from ...processes import process_state
    from ...variants import cache_key

    rd = rd if isinstance(rd, RunDir) else RunDir(rd)
    state = state or process_state(device)
    state.wait_for_everyone()  # no process reads what the main one is still merging
    prompts = rd.read_prompts()
    card = resolve_model(model).with_variant(variant)
    s = run_settings(rd, card, device)
    # The generation's own batches (generate.plan_batches): CPU and GPU kernels round differently for
    # other batch-mates, so only a replay of the planned batch is the trajectory of the scored image.
    # Batches holding a sample 0 are replayed whole; the rows of sample 0 are kept.
    batch_size = batch_size or s["batch_size"]
    plan = [b for b in plan_batches(prompts, s["images_per_prompt"], batch_size) if any(k == 0 for _, k in b)]
    at = list(timesteps) if timesteps is not None else [0, "mid", -1]
    seed_of = _seed_of(rd, s["seed"] if base_seed is None else base_seed)
    ids = [p["id"] for p in prompts]
    seeds = [[seed_of(p["id"], k) for p, k in b] for b in plan]
    key = hashlib.sha1(json.dumps([card.source, card.revision, s, at, ids, seeds, batch_size, 3, *cache_key(card)],
                                  default=str, sort_keys=True).encode()).hexdigest()[:16]
    enc_dir = rd.activations_dir / "denoiser"
    meta_path = enc_dir / "meta.json"
    meta = read_cache_json(meta_path)  # damaged: extracted again
    if meta and meta.get("key") == key and arrays_intact(enc_dir, meta):
        return meta
    main = state.is_main_process
    parts = enc_dir / ".parts" / key
    parts.mkdir(parents=True, exist_ok=True)
    per_chunk = max(1, CHUNK // batch_size)  # whole planned batches, whatever the process count
    n_chunks = (len(plan) + per_chunk - 1) // per_chunk
    with state.split_between_processes(list(range(n_chunks))) as share:
        missing = [c for c in share if not (parts / f"part_{c:05d}.npz").exists()]
    pipe = load_pipeline(card, device, s["dtype"]) if missing else None
    if progress and main:
        print(f"[probe] denoiser: {len(ids)} prompts replayed with {s['steps']} steps, guidance "
              f"{s['guidance']}, {s['size']} px, {s['dtype']} (from {s['source']}), hooks at {at}"
              + (f", {state.num_processes} processes" if state.num_processes > 1 else ""), file=sys.stderr)
    info: dict = {}
    for c in missing:
        part = parts / f"part_{c:05d}.npz"
        acc: dict[str, list] = {}
        for b in range(c * per_chunk, min((c + 1) * per_chunk, len(plan))):
            res, info = run_hooked(pipe, [p["text"] for p, _ in plan[b]], seeds[b], steps=s["steps"],
                                   guidance=s["guidance"], size=s["size"], at_steps=None, call_kwargs=s["call"])
            want = _resolve_steps(at, info["n_steps"])
            rows = [j for j, (_, k) in enumerate(plan[b]) if k == 0]
            for k, v in res.items():
                if int(k.split("__t")[1][:3]) in want:
                    acc.setdefault(k, []).append(v[rows])
        if not (parts / "info.json").exists():
            atomic_write_json(parts / "info.json", {k: v for k, v in info.items() if k not in ("images", "attached")})
        save_part(part, {k: np.concatenate(v).astype(np.float16) for k, v in acc.items()})
        if progress and main:
            print(f"[probe] denoiser: batch {min((c + 1) * per_chunk, len(plan))}/{len(plan)}", file=sys.stderr)
    state.wait_for_everyone()  # every part is on disk
    if not main:
        return {}
    info = read_json(parts / "info.json", finite=False)
    names, _ = merge_parts(enc_dir, parts, n_chunks, len(ids))
    hooked = sorted(_resolve_steps(at, info["n_steps"]))
    atomic_write_jsonl(enc_dir / "index.jsonl", ({"row": i, "prompt_id": pid} for i, pid in enumerate(ids)))
    meta = {"key": key, "fingerprint": key, "model": model, "kind": "denoiser", "n": len(ids),
            "layers": list(dict.fromkeys(n.split("__")[0] for n in names)),
            "poolings": list(dict.fromkeys(n.split("__")[1] for n in names)), "arrays": names,
            "dim": max(int(np.load(enc_dir / f"{n}.npy", mmap_mode="r").shape[1]) for n in names),
            "settings": {k: v for k, v in s.items()}, "steps": s["steps"], "guidance": s["guidance"],
            "size": s["size"], "loop_steps": info["n_steps"], "steps_counted_by": info["steps_counted_by"],
            "hooked_steps": hooked,
            "timesteps": {f"t{t:03d}": _timestep_of(info, t) for t in hooked},
            "image_positions": info["image_positions"], "batch_size": batch_size, "truncated": [],
            "parts": n_chunks,  # whole planned batches each; the process count is left out (the fit key hashes meta.json)
            "bytes": sum((enc_dir / f"{n}.npy").stat().st_size for n in names),
            "sha256": array_hashes(enc_dir, names)}
    atomic_write_json(meta_path, meta)
    shutil.rmtree(enc_dir / ".parts", ignore_errors=True)
    return meta


def _resolve_steps(at: Sequence, n_steps: int) -> set[int]:
    """Step indices (``"mid"`` = n_steps // 2, negative from the end) over the real loop length."""
    return {range(n_steps)[n_steps // 2 if t == "mid" else int(t)] for t in at}


def _timestep_of(info: dict, step: int):
    return (info.get("timesteps") or {}).get(f"t{step:03d}")
