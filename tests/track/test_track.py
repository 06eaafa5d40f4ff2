"""``t2i-audit track`` end to end on tiny-sd: a UNet checkpoint and a LoRA checkpoint written with the writers'
own functions; the base and the judges loaded once; each checkpoint's run equal to a separate ``run`` with the same
``--component`` / ``--lora``; a rerun audits only what is new and names what is half-written; the page and tables."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from t2i_audit import api
from t2i_audit.rundir import RunDir, read_jsonl

from .outputs import age, load_tiny, perturbed, save_components, unet_lora_layers

SETTINGS = dict(model="tiny-sd", steps=2, size=32, scorers=["tiny-qwen3-vl"], device="cpu", settle=0,
                denoiser_samples=1, folds=2)
# 4 prompts, one composition held out (as a training run never saw it)
SUITE = """suite: track-test
version: 1
concepts:
  shapes: {family: object, values: [circle, square]}
  colors: {family: color, values: [red, blue]}
templates:
  - name: single
    category: color
    text: "{c1.a} {o1}"
    slots: {c1: colors, o1: shapes}
    expect:
      objects:
        - {id: o1, color: c1}
heldout:
  bind: [color, object]
  compositions:
    - [red, square]
"""


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("suite") / "track-test.yaml"
    path.write_text(SUITE)
    return str(path)


def track_config(suite: str, out: Path, **kw):
    from t2i_audit.track.runner import TrackConfig

    return api.make_config({**SETTINGS, "prompts": [suite], "out": str(out), **kw}, schema=TrackConfig)


class Counted:
    """Wraps a real loader and counts its calls (the loader still does all its work)."""

    def __init__(self, monkeypatch, owner, name: str, classmethod_: bool = False):
        self.n = 0
        real = getattr(owner, name)

        def wrapper(*a, **k):
            self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(owner, name, classmethod(lambda cls, *a, **k: wrapper(*a, **k)) if classmethod_ else wrapper)


@pytest.fixture(scope="module")
def tracked(suite, tmp_path_factory):
    """A training output with checkpoint-2 (a UNet), tracked; then checkpoint-3 (a LoRA) and a half-written
    checkpoint-4 added and the same command rerun — with every pipeline and judge load counted."""
    from diffusers import DiffusionPipeline, StableDiffusionPipeline

    from t2i_audit.scorers.registry import create_scorer
    from t2i_audit.track.runner import run_track

    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("track")
    out, root = tmp / "train", tmp / "track"
    pipe = load_tiny("tiny-sd")
    save_components(out / "checkpoint-2", unet=perturbed(copy.deepcopy(pipe.unet), 1))
    age(out)
    pipelines = Counted(mp, DiffusionPipeline, "from_pretrained", classmethod_=True)
    judge_cls = type(create_scorer("tiny-qwen3-vl"))
    judges = Counted(mp, judge_cls, "load")
    try:
        run_track(out, track_config(suite, root), progress=False)
        first = {"pipelines": pipelines.n, "judges": judges.n}
        images_before = (root / "runs/checkpoint-2/images.jsonl").read_bytes()
        StableDiffusionPipeline.save_lora_weights(str(out / "checkpoint-3"), unet_lora_layers=unet_lora_layers(pipe.unet),
                                                  safe_serialization=True)
        shutil.copytree(out / "checkpoint-2", out / "checkpoint-4")
        w = out / "checkpoint-4" / "unet" / "diffusion_pytorch_model.safetensors"
        w.write_bytes(w.read_bytes()[:-64])  # still being written
        age(out / "checkpoint-3")  # finished writing a while ago (checkpoint-2 keeps its times: not audited again)
        age(out / "checkpoint-4")
        run_track(out, track_config(suite, root), progress=False)
        second = {"pipelines": pipelines.n - first["pipelines"], "judges": judges.n - first["judges"]}
    finally:
        mp.undo()
    return {"out": out, "root": root, "first": first, "second": second, "images_before": images_before,
            "index": json.loads((root / "track.json").read_text())}


def test_base_and_judges_load_once_per_invocation(tracked):
    # before: every run loaded its pipeline (generation, text encoders) and created and loaded its judges
    assert tracked["first"] == {"pipelines": 1, "judges": 1}  # base + checkpoint-2: one load each
    assert tracked["second"] == {"pipelines": 1, "judges": 1}  # checkpoint-3 in a new invocation
    sessions = tracked["index"]["sessions"]
    assert [s["audited"] for s in sessions] == [["base", "checkpoint-2"], ["checkpoint-3"]]


def test_rerun_audits_only_the_new_checkpoint_and_names_the_half_written(tracked):
    idx = tracked["index"]
    assert [(e["label"], e["step"], e["layout"], e["status"]) for e in idx["entries"]] == [
        ("base", 0, "base", "done"), ("checkpoint-2", 2, "components", "done"), ("checkpoint-3", 3, "lora", "done")]
    assert [s["label"] for s in idx["skipped"]] == ["checkpoint-4"]
    assert "truncated" in idx["skipped"][0]["reason"]
    curves = json.loads((tracked["root"] / "curves.json").read_text())
    assert curves["crossing"]["n_groups"] == 1 and curves["rise"]["n_groups"] == 1  # the held-out composition
    assert (tracked["root"] / "runs/checkpoint-2/images.jsonl").read_bytes() == tracked["images_before"]
    assert not (tracked["root"] / "runs/checkpoint-4").exists()
    page = (tracked["root"] / "index.html").read_text()
    assert "checkpoint-4" in page and "truncated" in page


def test_each_checkpoint_run_equals_a_separate_run(tracked, suite, tmp_path):
    """Same images (bytes) and verdicts as `run --component unet=…` / `run --lora …` made alone."""
    out, root = tracked["out"], tracked["root"]
    for label, variant in (("checkpoint-2", {"components": {"unet": str(out / "checkpoint-2/unet")}}),
                           ("checkpoint-3", {"loras": [str(out / "checkpoint-3/pytorch_lora_weights.safetensors")]}),
                           ("base", {})):
        cfg = api.make_config({k: v for k, v in SETTINGS.items() if k in ("model", "steps", "size", "scorers", "device")}
                              | {"prompts": [suite], "out": str(tmp_path / label),
                                 "stages": ["prompts", "generate", "score"], **variant})
        alone = RunDir(api.run_audit(cfg, progress=False))
        tracked_run = RunDir(root / "runs" / label)
        shas = lambda rd: [(r["prompt_id"], r["sample"], r["sha256"]) for r in rd.read_images()]  # noqa: E731
        assert shas(alone) == shas(tracked_run), label
        verdicts = lambda rd: [(r["prompt_id"], r["sample"], r.get("verdict")) for r in  # noqa: E731
                               read_jsonl(rd.scores("tiny-qwen3-vl")) if r.get("kind") == "prompt"]
        assert verdicts(alone) == verdicts(tracked_run) != [], label
    # the checkpoints really differ from the base (the test above would hold trivially otherwise)
    base, ck = RunDir(root / "runs/base").read_images(), RunDir(root / "runs/checkpoint-2").read_images()
    assert [r["sha256"] for r in base] != [r["sha256"] for r in ck]


def test_each_checkpoint_is_a_normal_run(tracked):
    from t2i_audit.ownership import folder_maker
    from t2i_audit.verify import verify_run

    for label in ("base", "checkpoint-2", "checkpoint-3"):
        run = tracked["root"] / "runs" / label
        assert folder_maker(run).kind == "run" and folder_maker(run).command == "run"
        assert verify_run(run)["ok"], label
        assert (run / "report" / "index.html").is_file()
    cfg = (tracked["root"] / "runs/checkpoint-3/run.yaml").read_text()
    assert "pytorch_lora_weights.safetensors" in cfg


def test_progress_names_the_checkpoint_being_generated(tracked, suite, tmp_path, capsys):
    """Each run's generation line names its checkpoint (the variant it was made with), not only the base model
    every checkpoint shares; the images are those the track made without progress lines."""
    from t2i_audit.track.runner import run_track

    out = tmp_path / "train"
    shutil.copytree(tracked["out"] / "checkpoint-2", out / "checkpoint-2")
    run_track(out, track_config(suite, tmp_path / "track"), progress=True)
    said = capsys.readouterr().err
    sha = json.loads((tmp_path / "track/runs/checkpoint-2/manifest.json").read_text())["model"]["adapted"]
    assert f"generate tiny-sd + unet=checkpoint-2/unet (sha256 {sha['components']['unet']['sha256'][:6]}):" in said
    assert "generate tiny-sd:" in said  # the base
    shas = lambda run: [r["sha256"] for r in RunDir(run).read_images()]  # noqa: E731
    assert shas(tmp_path / "track/runs/checkpoint-2") == shas(tracked["root"] / "runs/checkpoint-2")


def test_curves_and_tables(tracked):
    import pandas as pd

    root = tracked["root"]
    curves = json.loads((root / "curves.json").read_text())
    assert [c["label"] for c in curves["checkpoints"]] == ["base", "checkpoint-2", "checkpoint-3"]
    for c in curves["checkpoints"]:
        overall = next(r for r in c["success"] if r["category"] == "all" and r["split"] == "all")
        assert overall["n"] == 4 and 0 <= overall["ci"][0] <= overall["rate"] <= overall["ci"][1] <= 1
        sources = {r["source"] for r in c["decodability"]}
        assert "denoiser:mid@middle" in sources and any(s.startswith("text:text_encoder:") for s in sources)
    success = pd.read_parquet(root / "success.parquet")
    assert set(success["label"]) == {"base", "checkpoint-2", "checkpoint-3"}
    assert {"category", "split", "k", "n", "rate", "lo", "hi"} <= set(success.columns)
    decod = pd.read_parquet(root / "decodability.parquet")
    assert {"source", "target", "split", "p_true", "lo", "hi"} <= set(decod.columns)
    html = (root / "index.html").read_text()
    for text in ("Composition over training", "Success over training", "Decodability of the constituents",
                 "checkpoint-3", "data:image/png;base64,"):
        assert text in html


def _main(argv, monkeypatch, capsys) -> tuple[int, str]:
    import sys

    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return e.value.code, capsys.readouterr().err


def test_track_cli_refuses_with_located_errors(tmp_path, repo_root, monkeypatch, capsys):
    suite = str(repo_root / "prompts/colors.yaml")
    code, err = _main(["track", str(tmp_path / "nope"), "--model", "tiny-sd", "--prompts", suite,
                       "--out", str(tmp_path / "t")], monkeypatch, capsys)
    assert code == 2 and "OUTPUT_DIR" in err and "not found" in err and "Traceback" not in err
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "mine.txt").write_text("x")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "x").write_text("")
    code, err = _main(["track", str(tmp_path / "train"), "--model", "tiny-sd", "--prompts", suite,
                       "--out", str(tmp_path / "foreign")], monkeypatch, capsys)
    assert code == 2 and "not made by t2i-audit" in err
    assert sorted(p.name for p in (tmp_path / "foreign").iterdir()) == ["mine.txt"]
    assert not (tmp_path / "t").exists()


def test_published_copy_with_a_given_chance(tracked, tmp_path):
    """A copy of the page elsewhere (reports/): no links into runs that stay behind; a given chance is shown beside
    the base model's own rate."""
    from t2i_audit.track.page import write_track_page

    summary = write_track_page(tracked["root"], chance=0.01, folds=2, dest=tmp_path)
    assert summary["chance_from"] == "given (--chance)" and summary["crossing"]["chance"] == 0.01
    assert "crossing_base" in summary  # the same rule against what the base model scores
    html = (tmp_path / "index.html").read_text()
    assert "against the base model&#39;s own held-out success" in html or "against the base model's own" in html
    assert "/report/index.html" not in html and (tmp_path / "success.csv").is_file()
