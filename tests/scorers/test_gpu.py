"""Opt-in GPU check (skipped without CUDA): every tiny scorer runs on the GPU, in float32 it
agrees with the CPU, and in the CUDA default float16 it runs without dtype errors."""

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from t2i_audit.scorers.stage import run_score_stage  # noqa: E402

from .scenes import draw, make_run, prompt  # noqa: E402

NAMES = ["tiny-clip", "tiny-clip-hf", "tiny-vqa", "tiny-vqascore", "tiny-detect", "tiny-gdino"]


def _values(rd, name):
    return [(r["kind"], r["question_id"], r["metric"], r["value"])
            for r in map(json.loads, rd.scores(name).read_text().splitlines())]


@pytest.mark.parametrize("name", NAMES)
def test_gpu_matches_cpu(tmp_path, monkeypatch, name):
    monkeypatch.setenv("T2I_AUDIT_TINY_DIR", str(tmp_path / "tiny"))
    p = prompt("red", "square", "blue", "circle", rel="left of")
    scenes = [(p, draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))]))] * 3
    fp32 = {name: {"model": {"dtype": "float32"}}}
    if "detect" in name or "gdino" in name:
        fp32[name]["options"] = {"attribute_model": {"dtype": "float32"}}
    runs = {}
    for dev in ("cpu", "cuda"):
        rd = make_run(tmp_path / dev, scenes)
        run_score_stage(rd, [name], device=dev, overrides=fp32, progress=False)
        runs[dev] = _values(rd, name)
    assert [v[:3] for v in runs["cpu"]] == [v[:3] for v in runs["cuda"]]
    for a, b in zip(runs["cpu"], runs["cuda"]):
        if a[3] is not None:
            assert b[3] == pytest.approx(a[3], abs=2e-3), a[:3]
    rd = make_run(tmp_path / "fp16", scenes)
    c = run_score_stage(rd, [name], device="cuda", progress=False)[name]  # default dtype on CUDA: float16
    assert c["scored"] == 3
