"""The shipped mini weights load through the normal paths and stay small."""

import json
from pathlib import Path

import pytest

from t2i_audit.mini import world

WEIGHTS = Path(__file__).resolve().parents[2] / "t2i_audit" / "mini" / "weights"


def test_shipped_weights_small_and_carded():
    total = sum(p.stat().st_size for p in WEIGHTS.rglob("*") if p.is_file() and "_samples" not in str(p))
    assert total < 20e6, total
    gen = json.loads((WEIGHTS / "generator" / "card.json").read_text())
    assert gen["heldout_pairs"] == [list(p) for p in world.HELDOUT_PAIRS]
    assert gen["steps"] > 0 and gen["cpu_seconds"] > 0 and gen["seed"] == 0
    judge = json.loads((WEIGHTS / "judge" / "card.json").read_text())
    assert judge["steps"] > 0 and judge["heldout_pairs"] == []
    assert set(judge["accuracy"]["per_category"]) == {"shape", "color", "color_binding", "shape_binding", "relation"}
    pixel = json.loads((WEIGHTS / "pixel" / "card.json").read_text())
    assert min(pixel["accuracy"]["per_category"].values()) == 1.0


def test_shipped_generator_loads_and_generates_32px():
    import torch
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(str(WEIGHTS / "generator"))
    assert type(pipe).__name__ == "StableDiffusionPipeline"
    assert not (WEIGHTS / "generator" / "tokenizer" / "tokenizer.json").exists()
    pipe.set_progress_bar_config(disable=True)
    im = pipe("a red circle", num_inference_steps=4, guidance_scale=3.0,
              generator=torch.Generator().manual_seed(0)).images[0]
    assert im.size == (32, 32)


def test_shipped_judge_loads_through_open_clip_and_clip_scorer():
    import open_clip

    from t2i_audit.mini.train_judge import MODEL_NAME, register
    from t2i_audit.scorers.base import ScoreItem
    from t2i_audit.scorers.registry import create_scorer

    register(json.loads((WEIGHTS / "judge" / "config.json").read_text()))
    model, _, _ = open_clip.create_model_and_transforms(MODEL_NAME, pretrained=str(WEIGHTS / "judge" / "model.safetensors"))
    assert model.visual.image_size == (32, 32)
    scorer = create_scorer("mini-judge").load()
    s = world.scene_for(["green", "purple"], ["triangle", "circle"], "left of")
    rec = world.scene_record(s, prompt_id="p1")
    recs = scorer.score([ScoreItem(rec, {"prompt_id": "p1", "sample": 0, "sha256": "x"}, image=world.render(s))])[0]
    assert recs[-1]["kind"] == "prompt" and recs[-1]["scorer"] == "mini-judge"
