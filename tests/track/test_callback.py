"""TrackCallback: a training loop's live weights audited in-process and appended to one track; the mini trainer
calls it and writes diffusers-layout checkpoints."""

from __future__ import annotations

import json

import pytest

from .outputs import load_tiny, perturbed


def test_callback_appends_each_call_to_the_track(tmp_path, repo_root):
    import torch

    from t2i_audit.rundir import RunDir
    from t2i_audit.scorers.registry import create_scorer
    from t2i_audit.track import TrackCallback

    pipe = load_tiny("tiny-sd")
    judge = type(create_scorer("tiny-qwen3-vl"))
    loads = []
    real = judge.load
    mp = pytest.MonkeyPatch()
    mp.setattr(judge, "load", lambda self, *a, **k: (loads.append(1), real(self, *a, **k))[1])
    try:
        cb = TrackCallback(tmp_path / "t", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2,
                           scorers=["tiny-qwen3-vl"], denoiser_samples=1, folds=2, every=5, page=False)
        torch.manual_seed(123)
        cb(0, pipeline=pipe)
        after_call = torch.rand(3)
        torch.manual_seed(123)
        assert torch.equal(torch.rand(3), after_call)  # the audit drew nothing from torch's global generator
        perturbed(pipe.unet, 7)  # a training step
        run = cb(5, pipeline=pipe)
        cb.write_page()
    finally:
        mp.undo()
    index = json.loads((tmp_path / "t" / "track.json").read_text())
    assert [(e["label"], e["step"], e["source"], e["status"]) for e in index["entries"]] == [
        ("step-0", 0, "in-process", "done"), ("step-5", 5, "in-process", "done")]
    assert len(loads) == 1  # the judge loaded once for both calls
    first, second = (RunDir(tmp_path / "t" / "runs" / f"step-{s}") for s in (0, 5))
    assert run == second.root
    assert [r["sha256"] for r in first.read_images()] != [r["sha256"] for r in second.read_images()]
    model = second.read_manifest()["model"]["name"]
    assert model.startswith("in-process:") and model != first.read_manifest()["model"]["name"]
    curves = json.loads((tmp_path / "t" / "curves.json").read_text())
    assert [c["label"] for c in curves["checkpoints"]] == ["step-0", "step-5"]
    assert cb.should(10) and not cb.should(11)


def test_callback_with_components_into_a_base(tmp_path, repo_root):
    import copy

    from t2i_audit.errors import AuditError
    from t2i_audit.rundir import RunDir
    from t2i_audit.track import TrackCallback

    unet = perturbed(copy.deepcopy(load_tiny("tiny-sd").unet), 3)
    cb = TrackCallback(tmp_path / "t", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2,
                       model="tiny-sd", scorers=["tiny-qwen3-vl"], denoiser_samples=0, page=False)
    run = RunDir(cb(1, unet=unet))
    assert len(run.read_images()) == 4 and run.read_manifest()["model"]["name"].startswith("in-process:")
    with pytest.raises(AuditError, match="no component vae2"):
        cb(2, vae2=unet)
    with pytest.raises(AuditError, match="model="):
        TrackCallback(tmp_path / "u", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2,
                      scorers=["tiny-qwen3-vl"], page=False)(3, unet=unet)


def test_mini_trainer_checkpoints_and_callback(tmp_path, monkeypatch, capsys):
    """`mini train-generator --checkpoint-every N --track DIR`: diffusers-layout checkpoints (raw and EMA), the
    untrained pipeline as step 0, and in-process audits appended to a track."""
    import sys

    from t2i_audit import cli
    from t2i_audit.track.discover import Base, discover

    monkeypatch.setattr(sys, "argv", ["t2i-audit", "mini", "train-generator", "--smoke", "--out", str(tmp_path / "gen"),
                                      "--checkpoint-every", "2", "--track", str(tmp_path / "track"), "--track-every",
                                      "3", "--track-limit", "2", "-q"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code in (0, None), capsys.readouterr().err
    index = json.loads((tmp_path / "track" / "track.json").read_text())
    assert [e["label"] for e in index["entries"]] == ["step-0", "step-3"]  # smoke training: 3 steps
    base = Base.of(json.loads((tmp_path / "gen_initial" / "model_index.json").read_text()), tmp_path / "gen_initial")
    found = discover(tmp_path / "gen", base, ema=True, settle=0)
    assert [(c.label, sorted(c.components), c.ema) for c in found.checkpoints] == [
        ("checkpoint-2", ["text_encoder", "unet"], True), ("final", ["text_encoder", "unet", "vae"], False)]
    assert found.checkpoints[0].components["unet"].name == "unet_ema"
    assert json.loads((tmp_path / "gen_initial" / "card.json").read_text())["steps"] == 0
