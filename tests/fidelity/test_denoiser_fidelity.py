"""Denoiser activations pinned to the generation they claim to describe, per tiny family.

* A replay with the settings the run recorded, hooks attached, decodes to the same PNG bytes as
  the run's images/ (the hooks do not perturb the trajectory, and it is the scored trajectory).
* The hooked tensor is the image stream: its token count is the latent token count, at a size
  where the text stream is larger (32 px) and one where it is not.
* Step labels are the pipeline's loop iterations and their timesteps are the scheduler's own.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from t2i_audit import api
from t2i_audit.families import pipeline_family
from t2i_audit.generate import _to_png, load_pipeline, plan_batches
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture.denoiser import extract_denoiser_activations, run_hooked, run_settings
from t2i_audit.rundir import RunDir

from .harness import FAMILIES

# the run's own settings differ from every tiny card's defaults (2 steps, 32 px): a replay that
# fell back to the card would not reproduce the images
RUN = dict(steps=3, guidance=4.0, size=48, batch_size=2, limit=2)
run_for = lambda family: {**RUN, **FAMILIES.get(family, {}).get("run", {})}  # noqa: E731  (harness overrides)
DIT_PATCH = {"tiny-sd3": 2, "tiny-flux": 2, "tiny-pixart": 2, "tiny-cogview4": 2, "tiny-lumina2": 2,
             "tiny-z-image": 2}  # patch_size (FLUX: 2x2 latent packing)


@pytest.fixture(scope="module")
def runs(repo_root, tmp_path_factory):
    torch.set_num_threads(1)
    made = {}

    def get(family):
        if family not in made:
            out = tmp_path_factory.mktemp(family)
            cfg = api.make_config(dict(model=family, prompts=[str(repo_root / "prompts/colors.yaml")],
                                       stages=["prompts", "generate"], out=str(out / "run"), device="cpu",
                                       **run_for(family)))
            made[family] = RunDir(api.run_audit(cfg, progress=False))
        return made[family]

    return get


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_replay_with_recorded_settings_reproduces_the_images(runs, family):
    rd = runs(family)
    card = resolve_model(family)
    s = run_settings(rd, card, "cpu")
    run = run_for(family)
    # batch-dependent pipelines (Kandinsky 5, CogView 4) are generated one image at a time, and replayed so
    assert (s["steps"], s["guidance"], s["size"]) == (3, 4.0, run["size"])
    dependent = (pipeline_family(card.pipeline) or {}).get("batch_dependent")
    assert s["batch_size"] == (1 if dependent else 2)
    records = {(r["prompt_id"], r["sample"]): r for r in rd.read_images()}
    pipe = load_pipeline(card, "cpu", s["dtype"])
    for batch in plan_batches(rd.read_prompts(), s["images_per_prompt"], s["batch_size"]):  # as generated
        recs = [records[(p["id"], k)] for p, k in batch]
        _, info = run_hooked(pipe, [p["text"] for p, _ in batch], [r["seed"] for r in recs],
                             steps=s["steps"], guidance=s["guidance"], size=s["size"], call_kwargs=s["call"],
                             at_steps=[-1], output_type="np")
        for rec, arr in zip(recs, info["images"]):
            png, _ = _to_png(arr)
            assert hashlib.sha256(png).hexdigest() == rec["sha256"], rec["path"]


@pytest.mark.parametrize("size", [32, 64])
@pytest.mark.parametrize("family", sorted(DIT_PATCH))
def test_hooked_tensor_is_the_image_stream(family, size):
    card = resolve_model(family)
    pipe = load_pipeline(card, "cpu", "float32")
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=2.0, size=size,
                           call_kwargs=card.call, at_steps=[0])
    latent_tokens = (size // pipe.vae_scale_factor // DIT_PATCH[family]) ** 2
    assert info["image_positions"] and set(info["image_positions"].values()) == {latent_tokens}
    config = pipe.transformer.config  # Lumina2: hidden_size, Z-Image: dim
    width = getattr(pipe.transformer, "inner_dim", None) or config.get("hidden_size") or config.get("dim") or \
        config.num_attention_heads * config.attention_head_dim
    assert all(v.shape == (1, width) for v in out.values())


def test_unet_blocks_pool_the_feature_maps():
    pipe = load_pipeline(resolve_model("tiny-sd"), "cpu", "float32")
    _, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=2.0, size=64, at_steps=[0])
    side = 64 // pipe.vae_scale_factor
    assert info["image_positions"]["down0"] == (side // 2) ** 2  # after its downsampler
    assert info["image_positions"]["up1"] == side ** 2


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_step_labels_are_loop_iterations_with_scheduler_timesteps(family):
    card = resolve_model(family)
    pipe = load_pipeline(card, "cpu", "float32")
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=3, guidance=2.0, size=32, call_kwargs=card.call)
    # SanaSprintPipeline loops over timesteps[:-1] (SCMScheduler ends its schedule with the terminal 0)
    scheduled = [float(t) for t in pipe.scheduler.timesteps][:FAMILIES[family].get("loop_timesteps")]
    assert info["n_steps"] == len(scheduled)
    assert list(info["timesteps"].values()) == pytest.approx(scheduled)
    assert {k.split("__")[1][:4] for k in out} == {f"t{i:03d}" for i in range(len(scheduled))}


def test_pndm_last_label_is_the_last_step():
    """SD 1.5's PNDM (skip_prk_steps) makes N + 1 denoiser calls for N steps: the last of them is the
    last step, and counting steps as range(N) would never reach it."""
    from diffusers import PNDMScheduler

    pipe = load_pipeline(resolve_model("tiny-sd"), "cpu", "float32")
    pipe.scheduler = PNDMScheduler.from_config(pipe.scheduler.config, skip_prk_steps=True)
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=2, guidance=2.0, size=32, at_steps=[-1])
    assert info["n_steps"] == 3 == len(pipe.scheduler.timesteps)
    assert set(info["timesteps"]) == {"t002"}
    assert info["timesteps"]["t002"] == float(pipe.scheduler.timesteps[-1])
    assert {k.split("__")[1] for k in out} == {"t002-cond", "t002-uncond"}


def test_stage_replays_the_runs_settings_not_the_cards(runs):
    rd = runs("tiny-flux")
    meta = extract_denoiser_activations(rd, "tiny-flux", timesteps=[0, -1], progress=False)
    assert meta["settings"]["steps"] == 3 and meta["settings"]["size"] == 48
    assert meta["loop_steps"] == 3 and meta["hooked_steps"] == [0, 2]
    assert set(meta["timesteps"]) == {"t000", "t002"}
    assert meta["image_positions"]["block00"] == (48 // 2 // 2) ** 2  # image tokens, not the 512 text tokens
    card = resolve_model("tiny-flux")
    pipe = load_pipeline(card, "cpu", "float32")
    images = rd.read_images()
    texts = {p["id"]: p["text"] for p in rd.read_prompts()}
    ref, _ = run_hooked(pipe, [texts[r["prompt_id"]] for r in images], [r["seed"] for r in images], steps=3,
                        guidance=4.0, size=48, call_kwargs=card.call, at_steps=[-1])
    stored = np.load(rd.activations_dir / "denoiser" / "single00__t002-cond.npy").astype(np.float32)
    np.testing.assert_allclose(stored, ref["single00__t002-cond"], rtol=2e-3, atol=2e-3)
