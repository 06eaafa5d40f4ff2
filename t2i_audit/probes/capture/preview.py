"""The x0 preview: the scheduler's predicted clean latent at a loop step, decoded by the pipeline's VAE.

The cheap reference a per-image probe has to beat: decode what the model would draw if it stopped
here and let the run's own judge look at it. During the pipeline call ``pipe.scheduler.step`` is
wrapped (nothing else changes: it is called exactly as the pipeline called it) and, at the chosen
steps, its ``pred_original_sample`` kept — DDIM / DDPM / Euler / PNDM-free schedulers return it;
flow-matching schedulers (FlowMatchEulerDiscreteScheduler) do not, and there ``x0 = x_t − σ_t · v``
(the flow-matching parameterisation ``x_t = (1 − σ) x0 + σ ε``, ``v = ε − x0``).

Decoding follows pipeline_stable_diffusion.py (diffusers 0.42.1, ``__call__``): ``vae.decode(latents
/ scaling_factor)`` (``+ shift_factor`` where the VAE config has one, as SD3 does), then the
pipeline's ``image_processor.postprocess``. Packed latents (FLUX's 2×2 token packing) are declined.
"""

from __future__ import annotations

import functools
from typing import Iterable

from ...errors import AuditError


def is_flow_matching(sched) -> bool:
    return "FlowMatch" in type(sched).__name__ or bool(getattr(sched.config, "use_flow_sigmas", False))


class PreviewRecorder:
    """Wraps ``pipe.scheduler.step`` for one call; ``latents[step]`` = the predicted clean latent, kept on the
    denoiser's device (decode_previews decodes it there)."""

    def __init__(self, pipe, clock, steps: Iterable[int]):
        self.pipe, self.clock, self.steps = pipe, clock, set(int(s) for s in steps)
        self.latents: dict[int, "object"] = {}
        self._orig = None

    def __enter__(self):
        sched = self.pipe.scheduler
        self._orig = sched.step
        orig = self._orig

        @functools.wraps(orig)  # pipelines read step()'s signature to decide on passing generator / eta
        def step(model_output, timestep, sample, *args, **kwargs):
            i = self.clock.step
            sigma = None
            if i in self.steps and getattr(sched, "sigmas", None) is not None:
                if sched.step_index is None and hasattr(sched, "_init_step_index"):
                    sched._init_step_index(timestep)  # what step() itself does first (flow matching at step 0)
                if sched.step_index is not None:
                    sigma = sched.sigmas[sched.step_index]  # before the step moves step_index on
            out = orig(model_output, timestep, sample, *args, **kwargs)
            if i in self.steps:
                x0 = getattr(out, "pred_original_sample", None) if not isinstance(out, tuple) else (
                    out[1] if len(out) > 1 else None)
                if x0 is None and sigma is not None and is_flow_matching(sched):
                    x0 = sample.float() - sigma.float() * model_output.float()
                if x0 is None:
                    raise AuditError(f"{type(sched).__name__}: no predicted clean sample to preview")
                self.latents[i] = x0.detach().float().clone()  # stays on the device: no host read in the loop
            return out

        object.__setattr__(sched, "step", step)  # an instance attribute shadows the method for this call
        return self

    def __exit__(self, *exc):
        try:
            del self.pipe.scheduler.step
        except AttributeError:
            pass


def decode_previews(pipe, latents):
    """PIL images of predicted clean latents ``(B, C, h, w)``, decoded as the pipeline decodes its output."""
    import torch

    if latents.ndim != 4:
        raise AuditError(f"{type(pipe).__name__}: x0 preview of packed latents {tuple(latents.shape)} is not supported")
    vae = pipe.vae
    cfg = vae.config
    z = latents / getattr(cfg, "scaling_factor", 1.0)
    if getattr(cfg, "shift_factor", None):
        z = z + cfg.shift_factor
    was = vae.dtype
    dtype = torch.float32 if getattr(cfg, "force_upcast", False) else was  # SDXL upcasts its fp16 VAE the same way
    if dtype != was:
        vae.to(dtype)
    try:
        with torch.inference_mode():
            image = vae.decode(z.to(vae.device, dtype), return_dict=False)[0]
    finally:
        if dtype != was:
            vae.to(was)
    return pipe.image_processor.postprocess(image.float(), output_type="pil")
