"""``t2i-audit track`` as a user sees it on the terminal: with ``-q`` only its result — a table of success and
decodability per checkpoint, the numbers of curves.json — and nothing on stderr (diffusers' "No LoRA keys associated
to CLIPTextModel … open an issue" for a LoRA trained on the UNet alone was printed there); without ``-q`` the phases
after the last run's report (the denoiser capture, the page's probes) say what they do."""

from __future__ import annotations

import json
import sys

import pytest

from .outputs import age, load_tiny, unet_lora_layers
from .test_track import SUITE

NOISE = ("No LoRA keys", "open an issue", "Writing model shards", "DegenerateDataWarning", "stacktrace above",
         "Traceback")


def _main(argv, monkeypatch, capsys):
    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", *argv])
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    """A training output holding one checkpoint: a LoRA on the UNet only, as train_text_to_image_lora.py saves it."""
    from diffusers import StableDiffusionPipeline

    tmp = tmp_path_factory.mktemp("train-lora")
    pipe = load_tiny("tiny-sd")
    StableDiffusionPipeline.save_lora_weights(str(tmp / "train" / "checkpoint-3"),
                                              unet_lora_layers=unet_lora_layers(pipe.unet), safe_serialization=True)
    age(tmp / "train")
    (tmp / "suite.yaml").write_text(SUITE)
    return tmp


def test_track_q_prints_its_table_and_nothing_else(training, tmp_path, monkeypatch, capsys):
    argv = ["track", str(training / "train"), "--model", "tiny-sd", "--prompts", str(training / "suite.yaml"),
            "--steps", "2", "--size", "32", "--scorer", "tiny-qwen3-vl", "--device", "cpu", "--settle", "0",
            "--denoiser-samples", "1", "--folds", "2", "--out", str(tmp_path / "track")]
    code, out, err = _main([*argv, "-q"], monkeypatch, capsys)
    assert code == 0, err
    assert err == "", f"-q printed on stderr:\n{err}"
    curves = json.loads((tmp_path / "track" / "curves.json").read_text())
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["checkpoint", "step", "success"], out
    for c in curves["checkpoints"]:
        (row,) = [line for line in lines if line.split()[:1] == [c["label"]]]
        (all_,) = [r for r in c["success"] if r["category"] == "all" and r["split"] == "all"]
        assert f"{all_['rate']:.1%} [{all_['ci'][0]:.1%}, {all_['ci'][1]:.1%}] of {all_['n']}" in row, (c, out)
    assert [line.split()[0] for line in lines[2:4]] == ["base", "checkpoint-3"]
    assert out.rstrip().endswith(f"page: {tmp_path / 'track' / 'index.html'}")

    # the same command again without -q: everything is audited, the page is made again and says so
    code, out, err = _main(argv, monkeypatch, capsys)
    assert code == 0, err
    assert "[track] page: decodability probes (2-fold)" in err and "[track] page: checkpoint-3 (2/2)" in err, err
    assert not [n for n in NOISE if n in err], err
