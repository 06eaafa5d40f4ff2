"""Cross-attention maps of a denoiser, as the denoiser computed them, at chosen loop steps.

A forward hook on every cross-attention module (diffusers ``Attention`` with ``is_cross_attention``:
the UNets of SD 1.5 / SDXL / the mini world, PixArt's ``attn2``) recomputes, at the steps asked
for, that call's attention probabilities from its own inputs with the module's own pieces —
``to_q`` / ``to_k`` (``norm_cross``, ``group_norm``, ``norm_q`` / ``norm_k`` where present, as
``AttnProcessor2_0`` applies them), ``prepare_attention_mask`` and ``get_attention_scores``
(``attn.scale``, the softmax over the keys; diffusers/models/attention_processor.py, 0.42.1,
``AttnProcessor.__call__``). The generation itself is untouched: the hook only reads, so the
images are byte-identical with and without capture (tests/fidelity pins this, and pins that
``probs @ to_v`` through ``to_out`` gives back the module's own output).

Joint-attention DiTs (SD3, FLUX, Qwen-Image …) have no cross-attention module: their maps are not
captured here (``has_cross_attention`` says so and callers report it).

Kept per image: the head-mean of the *conditional* half (classifier-free guidance batches
``[uncond, cond]``; families.yaml ``cfg_batch`` where a pipeline orders it otherwise), summed over
the modules of one spatial grid and divided by their number — ``(grid, step) → (n, H·W, keys)``.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ...errors import AuditError
from ...families import pipeline_family


def cross_attention_modules(denoiser) -> dict[str, object]:
    """Every diffusers ``Attention`` of the denoiser that attends to the text (``is_cross_attention``)."""
    from diffusers.models.attention_processor import Attention

    return {name: m for name, m in denoiser.named_modules()
            if isinstance(m, Attention) and getattr(m, "is_cross_attention", False)}


def has_cross_attention(denoiser) -> bool:
    return bool(cross_attention_modules(denoiser))


def attention_probs(attn, hidden_states, encoder_hidden_states, attention_mask=None):
    """``(B, heads, queries, keys)``: the probabilities this call of ``attn`` used, from its own q and k."""
    hs = hidden_states
    if hs.ndim == 4:  # a UNet block hands (B, C, H, W) to attentions without a transformer wrapper
        b, c, h, w = hs.shape
        hs = hs.view(b, c, h * w).transpose(1, 2)
    batch, keys = encoder_hidden_states.shape[0], encoder_hidden_states.shape[1]
    mask = attn.prepare_attention_mask(attention_mask, keys, batch) if attention_mask is not None else None
    if attn.group_norm is not None:
        hs = attn.group_norm(hs.transpose(1, 2)).transpose(1, 2)
    ehs = attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross else encoder_hidden_states
    q, k = attn.to_q(hs), attn.to_k(ehs)
    head_dim = k.shape[-1] // attn.heads
    # q/k norms per head (AttnProcessor2_0: after the head split) or across all heads (qk_norm
    # "rms_norm_across_heads", Sana-Sprint's attn2: SanaAttnProcessor2_0 applies them before it)
    norm_q, norm_k = getattr(attn, "norm_q", None), getattr(attn, "norm_k", None)
    if norm_q is not None and _norm_width(norm_q) == q.shape[-1] != head_dim:
        q, norm_q = norm_q(q), None
    if norm_k is not None and _norm_width(norm_k) == k.shape[-1] != head_dim:
        k, norm_k = norm_k(k), None
    q = q.view(batch, -1, attn.heads, head_dim).transpose(1, 2)
    k = k.view(batch, -1, attn.heads, head_dim).transpose(1, 2)
    if norm_q is not None:
        q = norm_q(q)
    if norm_k is not None:
        k = norm_k(k)
    q = q.reshape(batch * attn.heads, -1, head_dim)
    k = k.reshape(batch * attn.heads, -1, head_dim)
    probs = attn.get_attention_scores(q, k, mask)
    return probs.view(batch, attn.heads, probs.shape[1], probs.shape[2])


def _norm_width(norm) -> int | None:
    """The feature width a q/k norm normalises (LayerNorm ``normalized_shape``, diffusers RMSNorm ``dim``)."""
    shape = getattr(norm, "normalized_shape", None)
    if shape is None and isinstance(getattr(norm, "dim", None), tuple):  # torch.Size; LpNorm's dim is an axis
        shape = norm.dim
    return int(shape[-1]) if shape else None


def grid_of(n_queries: int, latent_hw: tuple[int, int]) -> tuple[int, int]:
    """(H, W) of a module's query grid: the latent's aspect, downsampled by a power of two (UNet levels,
    DiT patches)."""
    lh, lw = latent_hw
    f = math.sqrt(lh * lw / n_queries)
    h, w = round(lh / f), round(lw / f)
    if h * w != n_queries:
        raise AuditError(f"cross-attention with {n_queries} queries does not tile the {lh}x{lw} latent")
    return h, w


class AttentionRecorder:
    """Hooks on every cross-attention module; at ``steps`` (loop iterations, read off ``clock.step``,
    the BlockRecorder advanced by the pipeline's step callback) keeps the conditional half's head-mean
    maps, averaged over the modules of each grid."""

    def __init__(self, denoiser, clock, steps: Iterable[int], n_prompts: int, pipeline_class: str = ""):
        self.modules = cross_attention_modules(denoiser)
        self.denoiser, self.clock, self.steps, self.n = denoiser, clock, set(int(s) for s in steps), n_prompts
        order = (pipeline_family(pipeline_class) or {}).get("cfg_batch") or ("uncond", "cond")
        self.cond_half = list(order).index("cond")
        self.sums: dict[tuple[str, int], "object"] = {}
        self.counts: dict[tuple[str, int], int] = {}
        self.latent_hw: tuple[int, int] | None = None
        self.handles: list = []

    def __enter__(self):
        def pre(_m, args, kwargs):
            latent = kwargs.get("sample", kwargs.get("hidden_states", args[0] if args else None))
            self.latent_hw = tuple(latent.shape[-2:]) if latent.ndim == 4 else None

        self.handles.append(self.denoiser.register_forward_pre_hook(pre, with_kwargs=True))
        for module in self.modules.values():
            self.handles.append(module.register_forward_hook(self._hook, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _hook(self, attn, args, kwargs, _out):
        if self.clock.step not in self.steps:
            return
        hs = kwargs.get("hidden_states", args[0] if args else None)
        ehs = kwargs.get("encoder_hidden_states", args[1] if len(args) > 1 else None)
        if ehs is None:
            return
        probs = attention_probs(attn, hs, ehs, kwargs.get("attention_mask")).float().mean(1)  # head mean
        b = probs.shape[0]
        if b == 2 * self.n:
            probs = probs[self.cond_half * self.n:(self.cond_half + 1) * self.n]
        elif b != self.n:
            raise AuditError(f"cross-attention batch {b} is neither {self.n} nor {2 * self.n}")
        if self.latent_hw is None:
            raise AuditError(f"{type(self.denoiser).__name__}: the latent grid is unknown (no 4-D sample input)")
        h, w = grid_of(probs.shape[1], self.latent_hw)
        key = (f"{h}x{w}", self.clock.step)
        self.sums[key] = self.sums[key] + probs if key in self.sums else probs.clone()
        self.counts[key] = self.counts.get(key, 0) + 1

    def maps(self) -> dict[tuple[str, int], np.ndarray]:
        """``(grid, step) → (n, H, W, keys)`` float32: the mean over that grid's modules. The sums stay on the
        device during the loop (no host read per step); here they move in one copy."""
        from .denoiser import tensors_to_host

        keys = list(self.sums)
        arrays = tensors_to_host([self.sums[k] / self.counts[k] for k in keys])
        out = {}
        for (grid, step), arr in zip(keys, arrays):
            h, w = (int(x) for x in grid.split("x"))
            out[(grid, step)] = arr.reshape(arr.shape[0], h, w, arr.shape[-1])
        return out
