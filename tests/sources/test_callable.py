"""A lab's own sampler as the model: `--model python:package.module:function` (imported) and `api.RunConfig(model=fn)`
(in memory). It gets batches of prompts, the per-image seeds a local run uses and the settings the user gave; its
images (PIL, bytes, arrays, tensors) are recorded as a pipeline's, and None is a refusal, not a failure."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError
from t2i_audit.generate import image_seed

from . import lab_sampler


def _cfg(model, out, **kw) -> api.RunConfig:
    return api.RunConfig(model=model, prompts=["mini"], limit=5, out=str(out), device="cpu",
                         stages=["prompts", "generate"], **kw)


def _jsonl(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_python_reference_runs_the_labs_sampler_with_a_runs_seeds(tmp_path):
    from PIL import Image

    from t2i_audit.mini.world import parse_caption, render

    lab_sampler.CALLS.clear()
    root = api.run_audit(_cfg("python:tests.sources.lab_sampler:sample", tmp_path / "run", batch_size=2, size=32),
                         progress=False)
    prompts = {p["id"]: p["text"] for p in _jsonl(root / "prompts.jsonl")}
    images = _jsonl(root / "images.jsonl")
    assert [len(c["prompts"]) for c in lab_sampler.CALLS] == [2, 2, 1]  # batches of --batch-size
    assert lab_sampler.CALLS[0]["settings"] == {"steps": None, "guidance": None, "size": 32}
    assert len(images) == 5
    for r in images:
        assert r["seed"] == image_seed(r["prompt_id"], r["sample"], 0)
        expected = render(parse_caption(prompts[r["prompt_id"]], random.Random(r["seed"])), 32)
        assert np.array_equal(np.asarray(Image.open(root / r["path"]).convert("RGB")), np.asarray(expected))
    m = json.loads((root / "manifest.json").read_text())
    assert m["model"]["source"] == "python:tests.sources.lab_sampler:sample"
    assert "your sampler's own default" in m["model"]["sources"]["steps"]
    # the same command again asks the sampler for nothing
    lab_sampler.CALLS.clear()
    api.run_audit(_cfg("python:tests.sources.lab_sampler:sample", tmp_path / "run", batch_size=2, size=32),
                  progress=False)
    assert lab_sampler.CALLS == []


def test_a_callable_in_memory_returns_arrays_bytes_tensors_or_none(tmp_path):
    from PIL import Image

    def sample(prompts, seeds, settings):  # one of each kind a lab's loop returns
        out = []
        for i, _ in enumerate(prompts):
            rgb = np.full((16, 16, 3), 40 * (i + 1), dtype="uint8")
            if i == 0:
                out.append(rgb)
            elif i == 1:
                buf = io.BytesIO()
                Image.fromarray(rgb).save(buf, format="JPEG")
                out.append(buf.getvalue())
            elif i == 2:
                out.append(rgb.transpose(2, 0, 1).astype("float32") / 255)  # C×H×W float
            elif i == 3:
                out.append(None)  # the sampler's own safety filter
            else:
                out.append(Image.fromarray(rgb))
        return out

    root = api.run_audit(_cfg(sample, tmp_path / "run", batch_size=5), progress=False)
    images = _jsonl(root / "images.jsonl")
    assert len(images) == 4 and sorted(r["path"][-4:] for r in images) == [".jpg", ".png", ".png", ".png"]
    refusals = _jsonl(root / "refusals.jsonl")
    assert [(r["reason"], r["sample"]) for r in refusals] == [("content_filter", 0)]
    g = json.loads((root / "manifest.json").read_text())["stages"]["generate"]
    assert (g["status"], g["refused"], g["missing"]) == ("done", 1, 0)
    assert "test_a_callable_in_memory" in json.loads((root / "manifest.json").read_text())["model"]["source"]


@pytest.mark.parametrize("returned, said", [
    (lambda n: [np.zeros((4, 4, 3), "uint8")] * (n - 1), "returned 1 images for 2 prompts"),
    (lambda n: [np.zeros((5, 5, 2), "uint8")] * n, "is not an image"),
    (lambda n: ["a path?"] * n, "returned a str"),
    (lambda n: 7, "returned int"),
])
def test_a_sampler_that_breaks_the_contract_is_told_how(tmp_path, returned, said):
    def sample(prompts, seeds, settings):
        return returned(len(prompts))

    with pytest.raises(AuditError, match=said):
        api.run_audit(_cfg(sample, tmp_path / "run", batch_size=2), progress=False)


def test_a_reference_that_does_not_import_is_said_before_anything_is_written(tmp_path):
    with pytest.raises(AuditError, match=r"cannot import 'no_such_lab.sampling' \(No module named 'no_such_lab'\)"):
        api.run_audit(_cfg("python:no_such_lab.sampling:sample", tmp_path / "a"), progress=False)
    with pytest.raises(AuditError, match="'tests.sources.lab_sampler' has no 'smaple'"):
        api.run_audit(_cfg("python:tests.sources.lab_sampler:smaple", tmp_path / "b"), progress=False)
    with pytest.raises(AuditError, match="expected python:package.module:function"):
        api.run_audit(_cfg("python:just_a_module", tmp_path / "c"), progress=False)
    assert not any((tmp_path / x).exists() for x in "abc")
