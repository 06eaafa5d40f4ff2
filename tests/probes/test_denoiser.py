"""Denoiser hooks on the tiny SD pipeline (random weights), and the stage on a tiny-sd card."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from probe_data import make_prompt, make_prompts

from t2i_audit.probes.capture.denoiser import denoiser_blocks, pool_output, run_hooked
from t2i_audit.errors import AuditError
from t2i_audit.rundir import RunDir, append_jsonl, atomic_write_jsonl, read_jsonl


@pytest.fixture(scope="module")
def pipe():
    from t2i_audit.generate import load_pipeline
    from t2i_audit.models import resolve_model

    torch.set_num_threads(1)
    return load_pipeline(resolve_model("tiny-sd"), "cpu", "float32")


def test_pool_output_takes_the_image_stream_by_block_class():
    x4 = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    assert torch.equal(pool_output(x4)[0], x4.mean(dim=(2, 3)))
    assert pool_output(x4)[1] == 16
    text, img = torch.randn(2, 9, 7), torch.randn(2, 4, 7)  # the text stream is the larger one here
    pooled, n = pool_output((text, img), "FluxTransformerBlock")
    assert torch.equal(pooled, img.mean(1)) and n == 4
    assert torch.equal(pool_output((x4, (torch.randn(2, 3, 4, 4),)), "DownBlock2D")[0], x4.mean(dim=(2, 3)))
    with pytest.raises(AuditError, match="UnknownBlock returns a tuple"):
        pool_output((text, img), "UnknownBlock")


def test_blocks_of_the_unet(pipe):
    assert list(denoiser_blocks(pipe.unet)) == ["down0", "down1", "mid", "up0", "up1"]


def test_cfg_halves_are_labelled(pipe):
    """Same seed, two prompts: at step 0 the unconditional halves are identical, the conditional differ."""
    texts = [make_prompt("red", "cube", "blue", "sphere")["text"], make_prompt("green", "dog", "purple", "cup")["text"]]
    out, _ = run_hooked(pipe, texts, [7, 7], steps=2, guidance=5.0, size=32, at_steps=[0, 1])
    assert set(out) == {f"{b}__t{s:03d}-{h}" for b in ["down0", "down1", "mid", "up0", "up1"]
                        for s in (0, 1) for h in ("cond", "uncond")}
    for b in ["down0", "down1", "mid", "up0", "up1"]:
        u, c = out[f"{b}__t000-uncond"], out[f"{b}__t000-cond"]
        assert u.shape == (2, pipe.unet.config.block_out_channels[0 if b in ("down0", "up1") else -1])
        np.testing.assert_allclose(u[0], u[1], atol=1e-6)
        if b == "down0":  # a DownBlock2D has no cross-attention: at step 0 the text cannot reach it
            np.testing.assert_allclose(c, u, atol=1e-6)
        else:
            assert not np.allclose(c[0], c[1], atol=1e-4)
    # a batch gives what one prompt alone gives (one CPU generator per image)
    alone, _ = run_hooked(pipe, texts[1:], [7], steps=2, guidance=5.0, size=32, at_steps=[1])
    np.testing.assert_allclose(alone["mid__t001-cond"][0], out["mid__t001-cond"][1], atol=1e-5)


def test_without_guidance_only_cond(pipe):
    out, _ = run_hooked(pipe, ["a red cube"], [1], steps=2, guidance=1.0, size=32, at_steps=[1])
    assert out and all(k.endswith("t001-cond") for k in out)


def test_stage_with_denoiser_on_a_card(tmp_path):
    from t2i_audit.probes import run_probe_stage

    rd = RunDir(tmp_path / "run")
    prompts = make_prompts(30, seed=2)
    atomic_write_jsonl(rd.prompts, prompts)
    append_jsonl(rd.scores("s"), [{"prompt_id": p["id"], "sample": 0, "kind": "prompt",
                                   "verdict": p["slots"]["o1"] in ("cube", "dog", "cat")} for p in prompts])
    res = run_probe_stage(rd.root, model="tiny-sd", denoiser=True, layers="last", poolings=("eos",), timesteps=[0, -1],
                          progress=False, n_boot=50, n_splits=3)
    meta = (rd.activations_dir / "denoiser" / "meta.json")
    assert meta.exists()
    fail = read_jsonl(rd.probes_dir / "failure.jsonl")
    encoders = {r["encoder"] for r in fail}
    assert encoders == {"text_encoder", "denoiser"}
    assert {r["pooling"] for r in fail if r["encoder"] == "denoiser"} == {"t000-cond", "t000-uncond",
                                                                        "t001-cond", "t001-uncond"}
    assert res["failure_prediction"]["n"] == 30
