"""Cross-attention maps, slot tokens and x0 previews pinned to what the denoiser really computed, for every
tiny family whose denoiser has cross-attention modules (found with attention.has_cross_attention on the
denoiser each tiny card builds, so a new family is covered the day it joins the harness).

1. ``attention_probs`` of a module call, pushed through the module's own ``to_v`` / ``to_out``, gives the
   module's own output; the probabilities sum to 1 and the keys the pipeline masked get 0.
2. Capture (AttentionRecorder + PreviewRecorder) leaves the images byte-identical.
3. Slot positions (early.slot_positions) are the slot's tokens in the sequence the cross-attention's keys are.
4. Map grids follow the latent layout (UNet levels, DiT patches, non-square latents); grid_of refuses
   a count that does not tile the latent.
5. ``stop_after=k`` runs exactly k + 1 loop iterations and records what a full run records up to k.
6. The x0 preview at a DDIM step is the scheduler's own ``pred_original_sample`` of that step.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from t2i_audit.errors import AuditError
from t2i_audit.generate import _to_png, load_pipeline, output_images, pipeline_call_kwargs
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture.attention import AttentionRecorder, attention_probs, cross_attention_modules, grid_of, \
    has_cross_attention
from t2i_audit.probes.capture.denoiser import run_hooked
from t2i_audit.probes.capture.early import denoiser_rows, slot_positions
from t2i_audit.probes.capture.preview import PreviewRecorder

from .harness import FAMILIES

SIZE = 32
TEXTS = ["a red cube to the left of a blue sphere", "three green dogs"]
SEEDS = [3, 4]


def _cross_attention_families() -> list[str]:
    """Harness families whose denoiser (built on the meta device from the tiny card's config) has
    cross-attention modules."""
    import diffusers

    from t2i_audit.tiny import materialize

    found = []
    for family in sorted(FAMILIES):
        folder = materialize(family)
        index = json.loads((folder / "model_index.json").read_text())
        sub = "unet" if "unet" in index else "transformer"
        cls = getattr(diffusers, index[sub][1])
        with torch.device("meta"):
            denoiser = cls.from_config(cls.load_config(folder / sub))
        if has_cross_attention(denoiser):
            found.append(family)
    return found


CROSS = _cross_attention_families()


def test_the_cross_attention_families_are_found():
    assert {"tiny-sd", "tiny-sdxl", "tiny-pixart"} <= set(CROSS)
    assert not {"tiny-sd3", "tiny-flux", "tiny-qwen-image"} & set(CROSS)  # joint attention: no cross-attention module


@pytest.fixture(scope="module")
def pipes():
    torch.set_num_threads(1)
    made = {}

    def get(family):
        if family not in made:
            card = resolve_model(family)
            made[family] = (load_pipeline(card, "cpu", "float32"), card)
        return made[family]

    return get


def denoiser_of(pipe):
    return getattr(pipe, "unet", None) or pipe.transformer


def call(pipe, card, texts=TEXTS, seeds=SEEDS, steps=1, output_type="latent", **extra):
    """The pipeline called as the generate stage calls it."""
    gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
    kwargs, _ = pipeline_call_kwargs(type(pipe), list(texts), gens, steps=steps, guidance=4.0, size=SIZE,
                                     output_type=output_type, call=card.call)
    kwargs.update(extra)
    with torch.inference_mode():
        return pipe(**kwargs)


def first_calls(pipe, card, **kw) -> dict:
    """``name → (module, args, kwargs, output)`` of each cross-attention module's first call."""
    got = {}

    def keep(m, a, k, o, name):
        got.setdefault(name, (m, a, dict(k), o))  # returns None: a hook's return value would replace the output

    handles = [m.register_forward_hook(lambda m, a, k, o, name=name: keep(m, a, k, o, name), with_kwargs=True)
               for name, m in cross_attention_modules(denoiser_of(pipe)).items()]
    try:
        call(pipe, card, **kw)
    finally:
        for h in handles:
            h.remove()
    return got


# --- 1. probabilities = what the module computed ------------------------------------------------


def output_from_probs(attn, probs, hidden_states, encoder_hidden_states):
    """The module's output rebuilt from ``probs``: per head ``probs @ V``, heads joined, ``to_out``."""
    ehs = attn.norm_encoder_hidden_states(encoder_hidden_states) if attn.norm_cross else encoder_hidden_states
    b, heads, q, keys = probs.shape
    v = attn.to_v(ehs)
    head_dim = v.shape[-1] // heads
    v = v.view(b, keys, heads, head_dim).transpose(1, 2).reshape(b * heads, keys, head_dim)
    out = attn.batch_to_head_dim(torch.bmm(probs.reshape(b * heads, q, keys), v))
    out = attn.to_out[1](attn.to_out[0](out))
    if hidden_states.ndim == 4:
        out = out.transpose(-1, -2).reshape(hidden_states.shape)
    if attn.residual_connection:
        out = out + hidden_states
    return out / attn.rescale_output_factor


@pytest.mark.parametrize("family", CROSS)
def test_probabilities_give_back_the_modules_output(pipes, family):
    pipe, card = pipes(family)
    calls = first_calls(pipe, card)
    assert set(calls) == set(cross_attention_modules(denoiser_of(pipe)))
    masked_somewhere = False
    for name, (attn, args, kwargs, out) in calls.items():
        hs = kwargs.get("hidden_states", args[0] if args else None)
        ehs, mask = kwargs["encoder_hidden_states"], kwargs.get("attention_mask")
        with torch.inference_mode():
            probs = attention_probs(attn, hs, ehs, mask)
            again = output_from_probs(attn, probs, hs, ehs)
        assert (probs.shape[0], probs.shape[1], probs.shape[3]) == (ehs.shape[0], attn.heads, ehs.shape[1]), name
        torch.testing.assert_close(again, out, rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]), rtol=0, atol=1e-5)
        assert (probs >= 0).all()
        if mask is not None:  # (B, 1, keys) additive bias: the padding keys the pipeline masked
            dropped = mask[:, 0, :] < -1  # (B, keys)
            assert dropped.any() and (~dropped).any()
            masked_somewhere = True
            assert (probs.permute(0, 3, 1, 2)[dropped] == 0).all(), name  # every head, every query
    if family in ("tiny-pixart",):  # T5 padded to max_sequence_length, mask passed to the transformer
        assert masked_somewhere


@pytest.mark.parametrize("family", CROSS)
def test_recorded_maps_are_the_conditional_head_means(pipes, family):
    """AttentionRecorder's map of a grid = the mean over that grid's modules of the head-mean probabilities
    of the prompts' (conditional) rows, laid out (n, H, W, keys) row-major as the latent is."""
    pipe, card = pipes(family)
    den, n = denoiser_of(pipe), len(TEXTS)
    rec = AttentionRecorder(den, SimpleNamespace(step=0), [0], n, type(pipe).__name__)
    with rec:
        calls = first_calls(pipe, card)
    side = SIZE // pipe.vae_scale_factor
    want: dict[str, list] = {}
    uncond_differs, cfg = False, False
    for attn, args, kwargs, _out in calls.values():
        hs = kwargs.get("hidden_states", args[0] if args else None)
        with torch.inference_mode():
            probs = attention_probs(attn, hs, kwargs["encoder_hidden_states"], kwargs.get("attention_mask")).mean(1)
        if probs.shape[0] == 2 * n:  # [uncond, cond]
            cfg = True
            uncond_differs |= bool((probs[:n] - probs[n:]).abs().max() > 1e-4)
            probs = probs[n:]
        h, w = grid_of(probs.shape[1], (side, side))
        want.setdefault(f"{h}x{w}", []).append(probs.reshape(n, h, w, -1))
    maps = rec.maps()
    assert set(maps) == {(g, 0) for g in want}
    for grid, arrs in want.items():
        np.testing.assert_allclose(maps[(grid, 0)], torch.stack(arrs).mean(0).numpy(), rtol=1e-5, atol=1e-6)
    assert uncond_differs or not cfg  # so keeping the wrong half would have failed


def test_probabilities_are_not_a_tautology(pipes):
    """The rebuild check fails for probabilities that are not the module's own (here: another module's)."""
    pipe, card = pipes("tiny-sd")
    calls = list(first_calls(pipe, card).values())
    (attn, args, kwargs, out), (other, *_rest) = calls[0], calls[-1]
    hs, ehs = kwargs.get("hidden_states", args[0] if args else None), kwargs["encoder_hidden_states"]
    with torch.inference_mode():
        wrong = output_from_probs(attn, attention_probs(other, hs, ehs), hs, ehs)
    assert (wrong - out).abs().max() > 1e-3


# --- 2. capture leaves the images alone ---------------------------------------------------------

# preview.py once hid scheduler.step's signature (the pipeline then stopped passing generator= to Sana-Sprint's
# SCMScheduler) and read no sigma before a flow-matching scheduler's first step: both pinned below


def images_with(pipe, card, steps, attention=True, previews=True):
    recorders = {}

    def attn(pipe_, den, clock):
        recorders["attn"] = AttentionRecorder(den, clock, range(steps), len(TEXTS), type(pipe_).__name__)
        return recorders["attn"]

    def preview(pipe_, _den, clock):
        recorders["x0"] = PreviewRecorder(pipe_, clock, range(steps))
        return recorders["x0"]

    attach = ([attn] if attention else []) + ([preview] if previews else [])
    _, info = run_hooked(pipe, TEXTS, SEEDS, steps=steps, guidance=4.0, size=SIZE, call_kwargs=card.call,
                         output_type="np", attach=attach)
    return info["images"], recorders


def assert_same_images(plain, hooked):
    assert len(plain) == len(hooked) == len(TEXTS)
    for a, b in zip(plain, hooked):
        assert np.array_equal(np.asarray(a), np.asarray(b))
        assert _to_png(a)[0] == _to_png(b)[0]


@pytest.mark.parametrize("family", CROSS)
def test_attention_capture_does_not_change_the_images(pipes, family):
    pipe, card = pipes(family)
    steps = 2
    plain = output_images(call(pipe, card, steps=steps, output_type="np"))
    hooked, recorders = images_with(pipe, card, steps, previews=False)
    assert_same_images(plain, hooked)
    assert {s for _g, s in recorders["attn"].maps()} == set(range(steps))  # it did capture, at every step


@pytest.mark.parametrize("family", CROSS)
def test_capture_does_not_change_the_images(pipes, family):
    pipe, card = pipes(family)
    steps = 2
    plain = output_images(call(pipe, card, steps=steps, output_type="np"))
    hooked, recorders = images_with(pipe, card, steps)
    assert_same_images(plain, hooked)
    assert {s for _g, s in recorders["attn"].maps()} == set(range(steps))
    assert set(recorders["x0"].latents) == set(range(steps))
    assert "step" not in vars(pipe.scheduler)  # the wrapper is gone after the call


# --- 3. slot tokens -----------------------------------------------------------------------------


def record(text: str, words: dict[str, str]) -> dict:
    """A PromptRecord's text and ``spans`` (t2i_audit/prompts.py render: ``[start, end)`` of each slot's word)."""
    return {"text": text, "spans": {slot: [text.index(w), text.index(w) + len(w)] for slot, w in words.items()}}


PROMPTS = [record(TEXTS[0], {"c1": "red", "o1": "cube", "r": "to the left of", "c2": "blue", "o2": "sphere"}),
           record(TEXTS[1], {"n": "three", "c1": "green", "o1": "dogs"})]
# Sana's pipeline prepends its complex-human-instruction (459 tokens) and hands the transformer
# [token 0] + the last 299 rows: slot_positions maps tokenizer rows to key positions (early.denoiser_rows)
KEYS_ARE_NOT_TOKENS = {"tiny-sana", "tiny-sana-sprint"}


@pytest.mark.parametrize("family", CROSS)
def test_slot_positions_are_the_tokens_the_denoiser_attends_to(pipes, family):
    pipe, card = pipes(family)
    slots, words, length = slot_positions(pipe, TEXTS, PROMPTS, card.call)
    # the ids the pipeline's (first) text encoder received for the prompts, and the keys each cross-attention got
    ids, keys = [], {}

    def keep(name, k):
        keys.setdefault(name, k["encoder_hidden_states"])  # None: the output stays the module's

    h1 = pipe.text_encoder.register_forward_pre_hook(
        lambda _m, a, k: ids.append(k.get("input_ids", a[0] if a else None)), with_kwargs=True)
    handles = [m.register_forward_hook(lambda _m, a, k, o, name=name: keep(name, k), with_kwargs=True)
               for name, m in cross_attention_modules(denoiser_of(pipe)).items()]
    try:
        call(pipe, card)
    finally:
        for h in [h1, *handles]:
            h.remove()
    prompt_ids = ids[0]  # encode_prompt encodes the prompts before the negative prompts
    assert prompt_ids.shape[0] == len(TEXTS)
    # key i is tokenizer row rows[i] (Sana: token 0 and the last 299 rows of its 459-token instruction+prompt)
    rows = denoiser_rows(pipe, "text_encoder", prompt_ids.shape[1], card.call)
    assert (len(rows) < prompt_ids.shape[1]) == (family in KEYS_ARE_NOT_TOKENS)
    for b, p in enumerate(PROMPTS):
        assert set(slots[b]) == set(p["spans"])
        for slot, (s, e) in p["spans"].items():
            pos = slots[b][slot]
            assert pos == list(range(pos[0], pos[0] + len(pos))), slot  # one contiguous run
            decoded = pipe.tokenizer.decode(prompt_ids[b, [rows[k] for k in pos]].tolist()).strip()
            assert decoded == p["text"][s:e], (slot, decoded)
            assert set(pos) <= set(words[b])
        assert words[b] == sorted(words[b]) and len(words[b]) >= len(p["text"].split())
    n = len(TEXTS)
    for name, ehs in keys.items():
        cond = ehs[-n:]  # [uncond, cond] under CFG, the prompts alone without
        assert cond.shape[1] == length == len(rows), (name, cond.shape, length)
    assert max(max(v) for s in slots for v in s.values()) < length


# --- 4. map grids -------------------------------------------------------------------------------


def expected_grids(pipe, denoiser, height, width) -> dict[str, int]:
    """``"HxW" → number of modules`` at that grid, from the module names (UNet) or the patch size (DiT)."""
    lh, lw = height // pipe.vae_scale_factor, width // pipe.vae_scale_factor
    out = {}
    levels = len(getattr(denoiser.config, "block_out_channels", None) or [])
    for name in cross_attention_modules(denoiser):
        if levels:
            m = re.match(r"(down_blocks|up_blocks|mid_block)\.?(\d*)", name)
            level = {"down_blocks": lambda i: i, "up_blocks": lambda i: levels - 1 - i,
                     "mid_block": lambda _i: levels - 1}[m.group(1)](int(m.group(2) or 0))
            h, w = lh, lw
            for _ in range(level):  # each downsampler: conv stride 2, padding 1
                h, w = (h + 1) // 2, (w + 1) // 2
        else:
            patch = denoiser.config.patch_size
            h, w = lh // patch, lw // patch
        out[f"{h}x{w}"] = out.get(f"{h}x{w}", 0) + 1
    return out


@pytest.mark.parametrize("height,width", [(SIZE, SIZE), (SIZE, 2 * SIZE)])
@pytest.mark.parametrize("family", CROSS)
def test_map_grids_follow_the_latent(pipes, family, height, width):
    pipe, card = pipes(family)
    den = denoiser_of(pipe)
    clock = SimpleNamespace(step=0)
    rec = AttentionRecorder(den, clock, [0], len(TEXTS), type(pipe).__name__)
    with rec:
        call(pipe, card, height=height, width=width)
    want = expected_grids(pipe, den, height, width)
    maps = rec.maps()
    assert {g for g, _s in maps} == set(want)
    if getattr(den.config, "block_out_channels", None):  # a UNet: grid = (S / vae factor) / 2^level
        lat = height // pipe.vae_scale_factor
        assert {int(g.split("x")[0]) for g in want} <= {lat >> k for k in range(len(den.config.block_out_channels))}
    calls_per_step = 1  # CFG batched in one call for every cross-attention family here
    for (grid, step), arr in maps.items():
        h, w = (int(x) for x in grid.split("x"))
        assert w == h * width // height  # the latent's aspect
        assert arr.shape[:3] == (len(TEXTS), h, w) and arr.dtype == np.float32
        assert rec.counts[(grid, step)] == want[grid] * calls_per_step
        np.testing.assert_allclose(arr.sum(-1), 1.0, atol=1e-5)  # head- and module-means of distributions


def test_grid_of():
    assert grid_of(64, (16, 16)) == (8, 8)
    assert grid_of(256, (16, 16)) == (16, 16)
    assert grid_of(128, (16, 32)) == (8, 16)
    assert grid_of(32, (16, 32)) == (4, 8)
    assert grid_of(8, (32, 16)) == (4, 2)
    assert grid_of(15, (6, 10)) == (3, 5)
    for n, hw in [(12, (16, 16)), (100, (16, 32)), (63, (16, 16))]:
        with pytest.raises(AuditError, match="does not tile"):
            grid_of(n, hw)


# --- 5. stop_after ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", CROSS)
def test_stop_after_runs_k_plus_one_iterations_and_records_the_same(pipes, family):
    pipe, card = pipes(family)
    steps, k = 3, 1
    den = denoiser_of(pipe)

    def run(stop_after):
        seen = {"callbacks": 0, "denoiser_calls": 0}

        def counting(pipe_, den_, clock):
            inner = clock.step_end

            def step_end(i, t):
                seen["callbacks"] += 1
                inner(i, t)
            clock.step_end = step_end  # the step callback looks it up on the instance
            seen["attn"] = AttentionRecorder(den_, clock, range(steps), len(TEXTS), type(pipe_).__name__)
            return seen["attn"]

        h = den.register_forward_pre_hook(lambda *_: seen.__setitem__("denoiser_calls", seen["denoiser_calls"] + 1))
        try:
            pooled, info = run_hooked(pipe, TEXTS, SEEDS, steps=steps, guidance=4.0, size=SIZE,
                                      call_kwargs=card.call, attach=[counting], stop_after=stop_after)
        finally:
            h.remove()
        return pooled, info, seen

    full, full_info, full_seen = run(None)
    part, part_info, part_seen = run(k)
    assert full_seen["callbacks"] == full_info["n_steps"] > k + 1
    assert part_seen["callbacks"] == part_info["n_steps"] == k + 1
    assert part_seen["denoiser_calls"] == (k + 1) * full_seen["denoiser_calls"] // full_info["n_steps"]
    early = {n for n in full if int(n.split("__t")[1][:3]) <= k}
    assert set(part) == early and len(early) < len(full)
    for n in early:
        np.testing.assert_array_equal(part[n], full[n], err_msg=n)
    full_maps, part_maps = full_seen["attn"].maps(), part_seen["attn"].maps()
    assert set(part_maps) == {key for key in full_maps if key[1] <= k}
    for key, arr in part_maps.items():
        np.testing.assert_array_equal(arr, full_maps[key], err_msg=str(key))


# --- 6. x0 preview ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["tiny-sd", "tiny-pixart"])
def test_x0_preview_is_the_schedulers_prediction(pipes, family, monkeypatch):
    from diffusers import DDIMScheduler

    pipe, card = pipes(family)
    sched = pipe.scheduler
    assert type(sched) is DDIMScheduler
    steps = 3
    inputs = []  # what the pipeline handed scheduler.step, call by call (one call a loop iteration)
    real_step = DDIMScheduler.step

    def spy(self, model_output, timestep, sample, *args, **kwargs):
        inputs.append((model_output.clone(), int(timestep), sample.clone()))
        return real_step(self, model_output, timestep, sample, *args, **kwargs)

    monkeypatch.setattr(DDIMScheduler, "step", spy)
    got = {}

    def preview(pipe_, _den, clock):
        got["x0"] = PreviewRecorder(pipe_, clock, range(steps))
        return got["x0"]

    _, info = run_hooked(pipe, TEXTS, SEEDS, steps=steps, guidance=4.0, size=SIZE, call_kwargs=card.call,
                         attach=[preview], output_type="latent")
    latents = got["x0"].latents
    assert len(inputs) == steps == info["n_steps"] and set(latents) == set(range(steps))
    fresh = DDIMScheduler.from_config(sched.config)
    fresh.set_timesteps(steps)
    acp = fresh.alphas_cumprod
    for i, (eps, t, sample) in enumerate(inputs):
        assert t == int(fresh.timesteps[i])
        own = real_step(fresh, eps, t, sample, return_dict=True).pred_original_sample
        torch.testing.assert_close(latents[i], own.float(), rtol=0, atol=1e-6)
        # and by hand (epsilon prediction, eta 0): x0 = (x_t − √(1 − ᾱ_t) ε) / √ᾱ_t
        by_hand = (sample - (1 - acp[t]) ** 0.5 * eps) / acp[t] ** 0.5
        if sched.config.clip_sample:
            by_hand = by_hand.clamp(-sched.config.clip_sample_range, sched.config.clip_sample_range)
        torch.testing.assert_close(latents[i], by_hand.float(), rtol=1e-5, atol=1e-5)
    assert not torch.equal(latents[0], latents[steps - 1])
    # the last preview against the final latent of a plain run: DDIM's last step is √ᾱ_prev · x0 +
    # √(1 − ᾱ_prev) · ε, ᾱ_prev the final alpha (1 with set_alpha_to_one: the final latent is x0 itself)
    monkeypatch.undo()
    final = call(pipe, card, steps=steps, output_type="latent").images
    a_prev = fresh.final_alpha_cumprod
    eps_last = inputs[-1][0]
    torch.testing.assert_close(final, a_prev ** 0.5 * latents[steps - 1] + (1 - a_prev) ** 0.5 * eps_last,
                               rtol=1e-5, atol=1e-5)
    if sched.config.set_alpha_to_one:
        torch.testing.assert_close(final, latents[steps - 1], rtol=0, atol=1e-6)


def flow_preview(pipe, card, preview_steps, steps, monkeypatch):
    from diffusers import FlowMatchEulerDiscreteScheduler

    assert type(pipe.scheduler) is FlowMatchEulerDiscreteScheduler
    inputs = []
    real_step = FlowMatchEulerDiscreteScheduler.step

    def spy(self, model_output, timestep, sample, *args, **kwargs):
        inputs.append((model_output.clone(), float(timestep), sample.clone(), int(self.step_index or 0)))
        return real_step(self, model_output, timestep, sample, *args, **kwargs)

    monkeypatch.setattr(FlowMatchEulerDiscreteScheduler, "step", spy)
    got = {}

    def preview(pipe_, _den, clock):
        got["x0"] = PreviewRecorder(pipe_, clock, preview_steps)
        return got["x0"]

    run_hooked(pipe, TEXTS, SEEDS, steps=steps, guidance=4.0, size=SIZE, call_kwargs=card.call,
               attach=[preview], output_type="latent")
    monkeypatch.undo()
    return got["x0"].latents, inputs


FLOW = [f for f in CROSS if f == "tiny-sana"]  # the cross-attention family with a flow-matching scheduler


@pytest.mark.parametrize("family", FLOW)
def test_x0_preview_of_a_flow_matching_scheduler(pipes, family, monkeypatch):
    """x_t = (1 − σ) x0 + σ ε and v = ε − x0: x0 = x_t − σ_t v; at the last step σ_next = 0, so the
    pipeline's final latent is that step's x0."""
    pipe, card = pipes(family)
    steps = 3
    latents, inputs = flow_preview(pipe, card, range(1, steps), steps, monkeypatch)
    sigmas = pipe.scheduler.sigmas
    assert set(latents) == {1, 2} and len(inputs) == steps
    for i in latents:
        v, _t, sample, _idx = inputs[i]
        torch.testing.assert_close(latents[i], (sample - sigmas[i] * v).float(), rtol=1e-5, atol=1e-5)
    final = call(pipe, card, steps=steps, output_type="latent").images
    assert float(sigmas[steps]) == 0.0
    torch.testing.assert_close(final.float(), latents[steps - 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FLOW)
def test_x0_preview_at_the_first_flow_matching_step(pipes, family, monkeypatch):
    pipe, card = pipes(family)
    latents, inputs = flow_preview(pipe, card, [0], 2, monkeypatch)
    v, _t, sample, _idx = inputs[0]
    torch.testing.assert_close(latents[0], (sample - pipe.scheduler.sigmas[0] * v).float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", CROSS)
def test_x0_preview_is_decoded_as_the_pipeline_decodes(pipes, family):
    """decode_previews on the pipeline's own final latent gives the pipeline's own images (every family)."""
    from t2i_audit.probes.capture.preview import decode_previews

    pipe, card = pipes(family)
    latents = call(pipe, card, steps=2, output_type="latent").images
    images = output_images(call(pipe, card, steps=2, output_type="pil"))
    decoded = decode_previews(pipe, latents.float())
    for a, b in zip(images, decoded):
        assert np.array_equal(np.asarray(a), np.asarray(b))
