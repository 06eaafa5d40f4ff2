"""Continue scanned trajectories from their latents instead of regenerating them.

A scan runs a batch of seeds to loop index ``s`` and stops (``denoiser.run_hooked(stop_after=s)``).
``SnapshotRecorder`` keeps, at the end of iteration ``s``, everything the pipeline's loop carries into
iteration ``s + 1``:

* the **latents** the scheduler's ``step`` returned (what the loop variable holds: diffusers' SD / SDXL /
  PixArt loops, ``pipeline_stable_diffusion.py`` 0.42.1 ``__call__`` step 7, reassign ``latents`` from
  ``scheduler.step(...)[0]`` and the callback changes nothing);
* the **scheduler's state** (a deep copy of its attributes: DDIM's schedule, Euler's ``_step_index``,
  PNDM's ``ets`` history, DPM-Solver's ``model_outputs``);
* each image's **generator state** (a stochastic sampler draws from it in later steps).

``continue_batch`` calls the pipeline once more, as ``generate`` does, but with ``prepare_latents``
returning the snapshot's latents, ``scheduler.set_timesteps`` restoring the snapshot's state and handing
the loop only the iterations after ``s`` (the scheduler gets its full schedule back before the first
denoiser call, so its own indexing is untouched), and the generators at their snapshot states.

**What the bytes then depend on.** A continued image is a function of the model, the sampler settings,
its seed, the batch it was scanned in (iterations 0…s ran among those batch-mates) and the batch it
was finished in (iterations s+1…T−1, and the VAE decode), on one machine and thread count. Continued in
the batch it was scanned in, it is byte-identical to the uninterrupted image
(tests/probes/test_selection_continuation.py); finished among other batch-mates it differs from that
image as any image made in another batch does (generate's batch-size note), no more. Nothing is read
back from disk: a snapshot is the exact float tensors, held in memory between scan and finish.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

from ..errors import AuditError

_WRAPPED = ("step", "set_timesteps")  # instance attributes our wrappers add: never part of the state


@dataclass
class Snapshot:
    step: int
    latents: "object"  # torch.Tensor (B, …)
    scheduler: dict
    generators: list | None  # per-row torch.Generator states, or None (no per-image generators)

    def _per_row(self, v) -> bool:
        import torch

        return isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(self.latents.shape)

    def rows(self, idx: Sequence[int]) -> "Snapshot":
        """The snapshot of some rows (per-row state — latents, generators, scheduler history shaped like the
        latents — selected; the rest shared)."""
        idx = list(idx)

        def pick(v):
            if self._per_row(v):
                return v[idx]
            if isinstance(v, (list, tuple)) and v and all(self._per_row(x) for x in v):
                return type(v)(x[idx] for x in v)
            return v
        gens = [self.generators[i] for i in idx] if self.generators is not None else None
        return Snapshot(self.step, self.latents[idx], {k: pick(v) for k, v in self.scheduler.items()}, gens)

    @staticmethod
    def concat(parts: Sequence["Snapshot"]) -> "Snapshot":
        """Rows of several snapshots as one batch; their shared state must agree (same step, same schedule)."""
        import torch

        first = parts[0]
        if any(p.step != first.step for p in parts):
            raise AuditError(f"snapshots at loop steps {sorted({p.step for p in parts})}: continue one step at a time")
        state = {}
        for k, v in first.scheduler.items():
            vals = [p.scheduler.get(k) for p in parts]
            if first._per_row(v):
                state[k] = torch.cat(vals)
            elif isinstance(v, (list, tuple)) and v and all(first._per_row(x) for x in v):
                state[k] = type(v)(torch.cat(xs) for xs in zip(*vals))
            elif all(_same(v, w) for w in vals[1:]):
                state[k] = v
            else:
                raise AuditError(f"scheduler state {k!r} differs between the snapshots: they cannot share a batch")
        gens = None if any(p.generators is None for p in parts) else [g for p in parts for g in p.generators]
        return Snapshot(first.step, torch.cat([p.latents for p in parts]), state, gens)


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and bool(
            torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - objects without a usable ==: compare identity
        return a is b


def _state(sched) -> dict:
    return copy.deepcopy({k: v for k, v in vars(sched).items() if k not in _WRAPPED})


class SnapshotRecorder:
    """Attached to ``run_hooked`` (``make(pipe, denoiser, clock)``): at the end of loop iteration ``step``
    (``clock.step``, advanced by the pipeline's step callback) keeps a ``Snapshot``."""

    def __init__(self, pipe, clock, step: int):
        self.pipe, self.clock, self.step = pipe, clock, int(step)
        self.snapshot: Snapshot | None = None
        self._had = None

    def __enter__(self):
        sched = self.pipe.scheduler
        self._had = vars(sched).get("step")
        orig = sched.step

        import functools

        @functools.wraps(orig)  # pipelines read step()'s signature (eta, generator)
        def step(model_output, timestep, sample, *args, **kwargs):
            out = orig(model_output, timestep, sample, *args, **kwargs)
            if self.clock.step == self.step:
                latents = out[0] if isinstance(out, tuple) else out.prev_sample
                gens = kwargs.get("generator")
                states = [g.get_state() for g in gens] if isinstance(gens, (list, tuple)) else None
                self.snapshot = Snapshot(self.step, latents.detach().clone(), _state(sched), states)
            return out

        object.__setattr__(sched, "step", step)
        return self

    def __exit__(self, *exc):
        sched = self.pipe.scheduler
        if self._had is not None:
            object.__setattr__(sched, "step", self._had)
        else:
            vars(sched).pop("step", None)


def snapshot_maker(step: int, holder: dict):
    """An ``attach`` entry for ``run_hooked`` / ``early.replay_batch``: the recorder lands in ``holder["snap"]``."""
    def make(pipe, _denoiser, clock):
        holder["snap"] = SnapshotRecorder(pipe, clock, step)
        return holder["snap"]
    return make


def continue_batch(pipe, texts: Sequence[str], snap: Snapshot, *, steps: int, guidance: float, size: int,
                   call: dict | None = None, output_type: str = "np"):
    """Finish the snapshot's rows (prompts ``texts``, one per row) from its step to the end, as the
    pipeline would have; returns the images (``generate.output_images``)."""
    import torch

    from ..generate import output_images, pipeline_call_kwargs

    if len(texts) != snap.latents.shape[0]:
        raise AuditError(f"{len(texts)} prompts for a snapshot of {snap.latents.shape[0]} rows")
    gens = [torch.Generator("cpu") for _ in texts]
    for g, st in zip(gens, snap.generators or []):
        g.set_state(st)
    kwargs, _ = pipeline_call_kwargs(type(pipe), list(texts), gens, steps=steps, guidance=guidance, size=size,
                                     output_type=output_type, call=call)
    sched = pipe.scheduler
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    orig_set = sched.set_timesteps
    full: dict = {}

    def set_timesteps(*a, **k):
        orig_set(*a, **k)
        fresh = sched.timesteps
        vars(sched).update(copy.deepcopy(snap.scheduler))
        if not _same(fresh, sched.timesteps):
            raise AuditError(f"continuing at step {snap.step}: the schedule differs from the scan's "
                             f"({len(fresh)} vs {len(sched.timesteps)} timesteps); same steps and scheduler needed")
        full["timesteps"] = sched.timesteps
        sched.timesteps = sched.timesteps[snap.step + 1:]  # what retrieve_timesteps hands the loop

    def give_back_schedule(_module, _args, _kwargs):
        if "timesteps" in full:
            sched.timesteps = full.pop("timesteps")

    object.__setattr__(sched, "set_timesteps", set_timesteps)
    pipe.prepare_latents = lambda *a, **k: snap.latents.clone()  # exactly the scanned latents, no rescaling
    handle = denoiser.register_forward_pre_hook(give_back_schedule, with_kwargs=True)
    try:
        with torch.inference_mode():
            out = pipe(**kwargs)
    finally:
        handle.remove()
        vars(sched).pop("set_timesteps", None)
        vars(pipe).pop("prepare_latents", None)
        if "timesteps" in full:
            sched.timesteps = full.pop("timesteps")
    return output_images(out)
