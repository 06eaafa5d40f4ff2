"""No host read per denoising step in any capture hook (a CUDA-less stand-in for torch.cuda.set_sync_debug_mode).

On a GPU, a hook that calls ``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()``, ``float(t)``, ``int(t)``,
``bool(t)`` (or needs a data-dependent shape: ``nonzero``, boolean-mask indexing) makes the host wait until the
device has run everything queued: once per block per step, the GPU idles between kernels. Those are Python-level
tensor calls, so a ``TorchFunctionMode`` sees every one of them on CPU tensors as it would on CUDA ones.

What this proves: while the pipeline's loop runs (from the denoiser's first call until ``__call__`` returns), the
block, cross-attention and x0-preview recorders, the step callback and the joint-sequence row selection issue no
such read — counted per family, with a positive control (a hook that does read) to show the counter sees one per
step. What it does not: reads inside diffusers or torch themselves (counted and shown, not ours to change), and
syncs that only a real device shows (the caching allocator, an implicit copy) — benchmarks/gpu_accept.py counts
those with ``torch.cuda.set_sync_debug_mode`` on CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture.attention import AttentionRecorder, has_cross_attention
from t2i_audit.probes.capture.denoiser import run_hooked
from t2i_audit.probes.capture.preview import PreviewRecorder

READS = {"item", "tolist", "cpu", "numpy", "__array__", "__float__", "__int__", "__bool__", "__index__",
         "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}
TORCH_DIR = str(Path(torch.__file__).parent)
LIBRARIES = ("site-packages", "dist-packages")


def _is_read(func, args, kwargs) -> bool:
    name = getattr(func, "__name__", "")
    if name in READS:
        return True
    if name == "to":  # .to("cpu") / .to(torch.device("cpu")): a device→host copy for a CUDA tensor
        return any(a == "cpu" or (isinstance(a, torch.device) and a.type == "cpu")
                   for a in [*args[1:], kwargs.get("device")])
    if name == "__getitem__" and len(args) > 1:  # x[mask]: the result's size depends on the mask's values
        idx = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(torch.is_tensor(i) and i.dtype == torch.bool for i in idx)
    return False


class HostReads(TorchFunctionMode):
    """Counts host reads while ``active``, split by who issued them: the first frame outside torch is either a
    library's (diffusers, transformers) or ours (t2i_audit, or this test's control hook)."""

    def __init__(self):
        super().__init__()
        self.active = False
        self.ours: list[str] = []
        self.library: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.active and _is_read(func, args, kwargs):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(TORCH_DIR):
                frame = frame.f_back
            where = f"{frame.f_code.co_filename}:{frame.f_lineno} {getattr(func, '__name__', func)}" if frame else "?"
            (self.library if any(part in where for part in LIBRARIES) else self.ours).append(where)
        return func(*args, **kwargs)


def attach_recorders(steps, n):
    """The recorders `probe --early` attaches (capture/early.py replay_batch): cross-attention maps, x0 previews."""
    def attn(pipe, den, clock):
        return AttentionRecorder(den, clock, steps, n, type(pipe).__name__)

    def preview(pipe, _den, clock):
        return PreviewRecorder(pipe, clock, steps)

    return [attn, preview]


@contextlib.contextmanager
def loop_window(pipe, counter: HostReads):
    """``counter.active`` from the denoiser's first call until the pipeline's ``__call__`` returns."""
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    handle = denoiser.register_forward_pre_hook(lambda *_: setattr(counter, "active", True))
    real_call = type(pipe).__call__

    class Windowed(type(pipe)):
        @functools.wraps(real_call)  # run_hooked reads __call__'s signature for the step callback
        def __call__(self, *args, **kw):
            try:
                return real_call(self, *args, **kw)
            finally:
                counter.active = False

    Windowed.__name__ = type(pipe).__name__  # families.yaml looks the class up by name
    original = pipe.__class__
    pipe.__class__ = Windowed
    try:
        yield
    finally:
        pipe.__class__ = original
        handle.remove()


def hooked_replay(pipe, card, counter, steps=3, extra=()):
    recorders = attach_recorders(range(steps), 2)
    denoiser = getattr(pipe, "unet", None) or pipe.transformer
    attach = [*(recorders if has_cross_attention(denoiser) else recorders[1:]), *extra]
    with loop_window(pipe, counter), counter:
        out, info = run_hooked(pipe, ["a red cube left of a blue sphere", "a green cone"], [1, 2], steps=steps,
                               guidance=3.0, size=32, call_kwargs=card.call, attach=attach)
    return out, info


# tiny-sd: UNet blocks, cross-attention, DDIM x0; tiny-sd3: joint DiT, flow-matching x0;
# tiny-lumina2: one caption+image sequence whose image rows start after each caption's real tokens
@pytest.mark.parametrize("family", ["tiny-sd", "tiny-sd3", "tiny-lumina2"])
def test_capture_hooks_read_nothing_back_during_the_loop(family):
    card = resolve_model(family)
    pipe = load_pipeline(card, "cpu", "float32")
    counter = HostReads()
    out, info = hooked_replay(pipe, card, counter)
    assert out and info["n_steps"] == 3 and all(a.ndim == 2 for a in out.values())  # the capture ran, every step
    assert [a for a in info["attached"] if isinstance(a, PreviewRecorder)][0].latents.keys() == {0, 1, 2}
    assert counter.ours == [], counter.ours


def test_the_counter_sees_a_hook_that_reads_every_step():
    """Positive control: a recorder that reads a value back per denoiser call is counted once per step."""
    card = resolve_model("tiny-sd")
    pipe = load_pipeline(card, "cpu", "float32")

    @contextlib.contextmanager
    def reading(_pipe, denoiser, _clock):
        def read_back(_m, _i, out):
            float(out[0].abs().mean())  # one host read per denoiser call (a hook must return None)

        h = denoiser.register_forward_hook(read_back)
        try:
            yield
        finally:
            h.remove()

    counter = HostReads()
    hooked_replay(pipe, card, counter, steps=4, extra=[reading])
    assert len(counter.ours) == 4 and all("__float__" in w for w in counter.ours), counter.ours
