"""Smoke trainings (a few steps) produce folders that load through the normal paths."""

import json

import numpy as np
import pytest

from t2i_audit.mini import world


def test_identity_vae_roundtrip():
    import torch

    from t2i_audit.mini.components import build_identity_vae

    vae = build_identity_vae()
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        z = vae.encode(x).latent_dist.mode()
        y = vae.decode(z).sample
    assert float((z - x).abs().max()) < 1e-4
    assert float((y - x).abs().max()) < 1e-4


def test_generator_smoke_folder_loads_and_generates(tmp_path):
    from diffusers import DiffusionPipeline

    from t2i_audit.mini.train_generator import smoke_config, train_generator

    card = train_generator(tmp_path / "gen", smoke_config(), log=lambda m: None)
    assert card["steps"] == 3 and card["heldout_pairs"] == [list(p) for p in world.HELDOUT_PAIRS]
    assert json.loads((tmp_path / "gen" / "card.json").read_text())["seed"] == 0
    assert not (tmp_path / "gen" / "tokenizer" / "tokenizer.json").exists()
    pipe = DiffusionPipeline.from_pretrained(str(tmp_path / "gen"))
    assert type(pipe).__name__ == "StableDiffusionPipeline"
    pipe.set_progress_bar_config(disable=True)
    import torch

    im = pipe("a red circle", num_inference_steps=2, generator=torch.Generator().manual_seed(0)).images[0]
    assert im.size == (32, 32)
    im2 = pipe("a red circle", num_inference_steps=2, generator=torch.Generator().manual_seed(0)).images[0]
    assert np.array_equal(np.asarray(im), np.asarray(im2))
    assert list((tmp_path / "gen_samples").glob("grid_*.png"))


def test_judge_smoke_deterministic_and_loads_in_clip_scorer(tmp_path):
    from safetensors.torch import load_file

    from t2i_audit.mini.train_judge import load_judge, smoke_config, train_judge
    from t2i_audit.scorers.base import ScoreItem
    from t2i_audit.scorers.registry import create_scorer

    train_judge(tmp_path / "a", smoke_config(), log=lambda m: None)
    train_judge(tmp_path / "b", smoke_config(), log=lambda m: None)
    wa, wb = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)
    model, preprocess, tok = load_judge(tmp_path / "a")
    assert preprocess(world.render(world.scene_for(["red"], ["circle"]))).shape == (3, 32, 32)
    scorer = create_scorer("mini-judge", overrides={"model": {
        "config": str(tmp_path / "a" / "config.json"), "pretrained": str(tmp_path / "a" / "model.safetensors")}}).load()
    s = world.scene_for(["red", "blue"], ["circle", "square"], "above")
    rec = world.scene_record(s, prompt_id="p1")
    recs = scorer.score([ScoreItem(rec, {"prompt_id": "p1", "sample": 0, "sha256": "x"}, image=world.render(s))])[0]
    assert recs[-1]["kind"] == "prompt"
    assert {r["metric"] for r in recs if r["kind"] == "metric"} >= {"clipscore", "foil:swap_color"}


def test_cli_smoke(tmp_path):
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    r = CliRunner().invoke(app, ["mini", "train-judge", "--smoke", "--out", str(tmp_path / "j")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "j" / "model.safetensors").exists()
    r = CliRunner().invoke(app, ["mini", "train-generator", "--out", str(tmp_path / "g")])
    assert r.exit_code != 0 and "--steps" in str(r.exception)
    r = CliRunner().invoke(app, ["mini", "render", "a red circle above a blue cross", "--out", str(tmp_path / "x.png")])
    assert r.exit_code == 0 and (tmp_path / "x.png").exists()


def test_training_without_out_writes_into_the_current_folder_never_the_shipped_weights(tmp_path, monkeypatch):
    """Before, --out defaulted to the package's own weights: `mini train-judge --smoke` in an installed wheel
    replaced the shipped judge that every later mini run scores with."""
    import hashlib

    from typer.testing import CliRunner

    from t2i_audit.cli import app
    from t2i_audit.mini.cli import WEIGHTS

    shipped = WEIGHTS / "judge" / "model.safetensors"
    before = hashlib.sha256(shipped.read_bytes()).hexdigest()
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["mini", "train-judge", "--smoke"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "mini-judge" / "model.safetensors").is_file() and "-> mini-judge" in r.output
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == before
