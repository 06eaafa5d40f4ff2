"""Auditing from inside a training loop, without saving or reloading the model::

    from t2i_audit.track import TrackCallback

    cb = TrackCallback("runs/my-track", prompts=["prompts/colors.yaml"], every=500, limit=48, scorers=["clip"])
    for step in range(max_steps):
        ...                                   # a training step
        if step % cb.every == 0:
            cb(step, pipeline=pipe)           # the pipeline as it is now (EMA weights swapped in, eval mode)
            # or: cb(step, unet=unet)         # components replacing those of ``model=``, loaded once

Each call is one normal run of the live weights (``TRACK/runs/step-<N>/``) on a fixed prompt subset, appended to the
track (index.py) and its page. The run's model is ``in-process:<sha256 of the weights>`` — every torch component's
state — so another step, or another training reaching the same step, is another run, and a run of these exact
weights resumes. The judges are created once for all calls; the torch random state is put back after each call, so
auditing does not change the training. Single process: call it on the main process only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional, Sequence

from ..errors import AuditError
from . import index as ix

IN_PROCESS = "in-process"


def weights_digest(pipe) -> str:
    """sha256 over every torch component's state (names, dtypes, shapes, bytes), in component order."""
    import torch

    h = hashlib.sha256()
    for comp, module in sorted(pipe.components.items()):
        if not isinstance(module, torch.nn.Module):
            continue
        for name, t in sorted(module.state_dict().items()):
            t = t.detach()
            h.update(f"{comp}.{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
            h.update(t.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def in_process_card(pipe, digest: str, base=None, *, steps=None, guidance=None, size=None, dtype="float32"):
    """A model card for a pipeline that exists only in memory: its settings from ``base``'s card, else from the
    pipeline's own ``__call__`` defaults (pipeline_defaults.py), its text encoders from its components."""
    from ..models import ModelCard
    from ..pipeline_defaults import call_defaults, default_size

    found = {k: v for k, (v, _) in call_defaults(type(pipe)).items()}
    found["size"] = default_size(pipe)[0]
    defaults = dict(base.defaults) if base is not None else {"dtype": dtype, **found}
    for k, v in (("steps", steps), ("guidance", guidance), ("size", size), ("dtype", dtype)):
        if v is not None:
            defaults[k] = v
    missing = [k for k in ("steps", "guidance", "size") if defaults.get(k) is None]
    if missing:
        raise AuditError(f"TrackCallback: {type(pipe).__name__} has no default {', '.join(missing)}; pass them")
    encoders = [{"name": n, "tokenizer": "tokenizer" + n[len("text_encoder"):], "kind": _kind(m)}
                for n, m in sorted(pipe.components.items()) if n.startswith("text_encoder") and m is not None]
    name = f"{IN_PROCESS}:{digest[:16]}"
    return ModelCard(name=name, repo=name, pipeline=type(pipe).__name__, defaults=defaults,
                     call=dict(base.call) if base is not None else {}, text_encoders_=tuple(encoders),
                     scorers=tuple(base.scorers) if base is not None else (),
                     sources={"steps": "TrackCallback", "guidance": "TrackCallback", "size": "TrackCallback"})


def _kind(module) -> str:
    from ..models import encoder_kind

    return encoder_kind(type(module).__name__)


class TrackCallback:
    """``cb(step, pipeline=pipe)`` / ``cb(step, unet=...)``: audit the live weights at ``step`` into the track ``out``.

    ``prompts``: suite files or PromptRecords .jsonl; ``limit``: the balanced subset ``run --limit`` takes (the
    same prompts at every call); ``every``: how often the loop should call (``should(step)`` says); ``model``: a
    base model whose pipeline is loaded once for component calls, whose card gives the settings and judges.
    """

    def __init__(self, out: str | Path, *, prompts: Sequence[str], every: int = 1, limit: Optional[int] = None,
                 model: Optional[str] = None, images_per_prompt: int = 1, seed: int = 0, steps: Optional[int] = None,
                 guidance: Optional[float] = None, size: Optional[int] = None, scorers: Optional[list[str]] = None,
                 device: Optional[str] = None, dtype: Optional[str] = None, batch_size: int = 4,
                 denoiser_samples: int = 4, folds: int = 5, chance: Optional[float] = None, page: bool = True,
                 progress: bool = False):
        from ..api import expand_suites, make_config
        from ..ownership import claim_output_dir
        from ..reuse import Session
        from .runner import TrackConfig, track_identity, write_prompts
        from .swap import switch

        if every < 1:
            raise AuditError(f"TrackCallback: every={every}: must be at least 1")
        self.out, self.every, self.page, self.progress = Path(out), every, page, progress
        self.cfg = make_config({"model": model or IN_PROCESS, "prompts": [str(p) for p in prompts], "limit": limit,
                                "images_per_prompt": images_per_prompt, "seed": seed, "steps": steps,
                                "guidance": guidance, "size": size, "scorers": scorers, "device": device or "auto",
                                "dtype": dtype, "batch_size": batch_size, "denoiser_samples": denoiser_samples,
                                "folds": folds, "chance": chance, "out": str(out)},
                               where="TrackCallback", schema=TrackConfig)
        self.records = expand_suites(self.cfg.prompts, limit, seed)
        self.base = None
        if model is not None:
            from ..models import resolve_model

            self.base = resolve_model(model)
        settings = track_identity(self.cfg, IN_PROCESS, _SettingsCard(self.base, steps, guidance, size, dtype),
                                  self.records)
        claim_output_dir(self.out, "track", command="track", settings=settings)
        write_prompts(self.out, self.records)
        self.settings = settings
        self.session = Session(switch=switch)
        self._pipe = None  # the base pipeline for component calls, loaded once

    def should(self, step: int) -> bool:
        return step % self.every == 0

    def __call__(self, step: int, pipeline=None, **components) -> Path:
        """Audit the weights as they are now; returns the step's run folder."""
        pipe = pipeline if pipeline is not None else self._with_components(components)
        if pipeline is not None and components:
            raise AuditError("TrackCallback: give pipeline= or components (unet=..., text_encoder=...), not both")
        with _kept_random_state():
            return self._audit(int(step), pipe)

    def _with_components(self, components: dict):
        if not components:
            raise AuditError("TrackCallback: give pipeline=pipe, or components (unet=...) with model= set")
        if self.base is None:
            raise AuditError("TrackCallback: components without a pipeline need model= (the base they go into)")
        if self._pipe is None:
            from ..generate import load_pipeline

            from ..generate import resolve_device

            dtype = self.cfg.dtype or self.base.defaults.get("dtype", "float32")
            self._pipe = load_pipeline(self.base, resolve_device(self.cfg.device), dtype)
        unknown = [n for n in components if n not in self._pipe.components]
        if unknown:
            raise AuditError(f"TrackCallback: {type(self._pipe).__name__} has no component {', '.join(unknown)}")
        self._pipe.register_modules(**components)  # the live modules themselves: nothing is copied
        return self._pipe

    def _audit(self, step: int, pipe) -> Path:
        from ..api import run_audit
        from ..reuse import reusing
        from ..rundir import RunLock
        from .page import write_track_page
        from .runner import capture_for

        # where and in which dtype the live pipeline runs, unless told (the run records what made its images)
        device = self.cfg.device if self.cfg.device != "auto" else str(getattr(pipe, "device", "cpu"))
        dtype = self.cfg.dtype or str(getattr(pipe, "dtype", "torch.float32")).replace("torch.", "")
        card = in_process_card(pipe, weights_digest(pipe), self.base, steps=self.cfg.steps,
                               guidance=self.cfg.guidance, size=self.cfg.size, dtype=dtype)
        label = f"step-{step}"
        entry = ix.Entry(label=label, step=step, order=[1, step, 2], source=IN_PROCESS, layout="in-process",
                         run=f"runs/{label}", activations=f"activations/{label}" if self.cfg.denoiser_samples else None)
        self.session.hold(card, pipe)
        with RunLock(self.out), reusing(self.session):
            index = ix.load_index(self.out)
            index.settings = self.settings
            cfg = self.cfg.model_copy(update={"model": card.name, "device": device, "dtype": dtype})
            run_dir = run_audit(cfg.run_config(entry, self.out), progress=self.progress)
            if cfg.denoiser_samples:
                capture_for(run_dir, self.out / entry.activations, cfg, self.records, card)
            entry.status = "done"
            index.put(entry)
            index.sessions.append({"step": step, "loads": dict(self.session.loads)})
            ix.save_index(self.out, index)
            if self.page:
                write_track_page(self.out, chance=self.cfg.chance, folds=self.cfg.folds)
        return run_dir

    def write_page(self) -> Path:
        from .page import write_track_page

        write_track_page(self.out, chance=self.cfg.chance, folds=self.cfg.folds)
        return self.out / "index.html"


class _SettingsCard:
    """What track_identity reads of a card (its defaults), before any pipeline exists to build one from."""

    def __init__(self, base, steps, guidance, size, dtype):
        d = dict(base.defaults) if base is not None else {}
        d.update({k: v for k, v in (("steps", steps), ("guidance", guidance), ("size", size), ("dtype", dtype))
                  if v is not None})
        self.defaults = {k: d.get(k) for k in ("steps", "guidance", "size", "dtype")}


class _kept_random_state:
    """torch's global random state (CPU and CUDA) as it was: the audit draws nothing the training would."""

    def __enter__(self):
        import torch

        self.cpu = torch.random.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        return self

    def __exit__(self, *exc):
        import torch

        torch.random.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
