"""Generation through the real `run` path on every tiny pipeline family: determinism, batching,
processes, resume after SIGKILL, the writer lock."""

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from t2i_audit import api
from t2i_audit.rundir import RunDir, read_jsonl

from .. import warm

FAMILIES = ["tiny-sd", "tiny-sdxl", "tiny-sd3", "tiny-flux", "tiny-pixart"]


def cfg(repo_root, out, **kw):
    base = dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2,
                stages=["prompts", "generate"], out=str(out), device="cpu")
    return api.make_config({**base, **kw})


def shas(run_dir) -> dict:
    return {(r["prompt_id"], r["sample"]): r["sha256"] for r in RunDir(run_dir).read_images()}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_end_to_end(repo_root, tmp_path, family):
    root = api.run_audit(cfg(repo_root, tmp_path / "r", model=family, images_per_prompt=2), progress=False)
    run = RunDir(root)
    images = run.read_images()
    assert len(images) == 8
    m = run.read_manifest()
    assert m["stages"]["generate"]["status"] == "done" and m["model"]["name"] == family
    size = m["model"]["defaults"]["size"]
    for r in images:
        png = (run.root / r["path"]).read_bytes()
        assert hashlib.sha256(png).hexdigest() == r["sha256"]
        assert Image.open(run.root / r["path"]).size == (size, size)
    assert len({r["seed"] for r in images}) == 8
    assert (run.root / "run.yaml").exists() and "steps: 2" in (run.root / "run.yaml").read_text()


def test_rerun_is_byte_identical_and_resumes(repo_root, tmp_path):
    a = api.run_audit(cfg(repo_root, tmp_path / "a"), progress=False)
    b = api.run_audit(cfg(repo_root, tmp_path / "b"), progress=False)
    assert shas(a) == shas(b) and len(shas(a)) == 4
    api.run_audit(cfg(repo_root, tmp_path / "a"), progress=False)  # same dir again: nothing new
    assert RunDir(a).read_manifest()["stages"]["generate"]["generated_now"] == 0
    assert shas(a) == shas(b)


def test_more_samples_extend_a_run(repo_root, tmp_path):
    api.run_audit(cfg(repo_root, tmp_path / "a", images_per_prompt=1, limit=2), progress=False)
    first = shas(tmp_path / "a")
    api.run_audit(cfg(repo_root, tmp_path / "a", images_per_prompt=3, limit=2), progress=False)
    m = RunDir(tmp_path / "a").read_manifest()["stages"]["generate"]
    assert m["generated_now"] == 4 and m["images"] == 6
    assert all(shas(tmp_path / "a")[k] == v for k, v in first.items())


def test_batch_size_does_not_change_images(repo_root, tmp_path):
    """Same noise per image whatever the batch. On CPU oneDNN picks batch-dependent conv
    algorithms, so pixels may differ by one uint8 level (measured: ≤1 level, <1 % of pixels)."""
    one = api.run_audit(cfg(repo_root, tmp_path / "b1", batch_size=1, model="tiny-sdxl"), progress=False)
    four = api.run_audit(cfg(repo_root, tmp_path / "b4", batch_size=4, model="tiny-sdxl"), progress=False)
    r1, r4 = RunDir(one).read_images(), RunDir(four).read_images()
    assert [(r["prompt_id"], r["seed"]) for r in r1] == [(r["prompt_id"], r["seed"]) for r in r4]
    for x, y in zip(r1, r4):
        a = np.asarray(Image.open(Path(one) / x["path"]), dtype=int)
        b = np.asarray(Image.open(Path(four) / y["path"]), dtype=int)
        assert np.abs(a - b).max() <= 1 and (a != b).mean() < 0.01


def _argv(repo_root, out, n=40, steps=2):
    return ["run", "--model", "tiny-sd", "--prompts", str(repo_root / "prompts/colors.yaml"), "--limit", str(n),
            "--steps", str(steps), "--batch-size", "2", "--device", "cpu", "--stages", "prompts,generate", "-q",
            "--out", str(out)]


def _start(repo_root, out, log, n=40, steps=2):
    """`t2i-audit run` in a process of its own (tests/warm.py: forked after the imports)."""
    return warm.start(_argv(repo_root, out, n, steps), log=log)


def _wait_for_lines(path: Path, n: int, proc, log: Path, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        if not proc.is_alive():
            pytest.fail(f"run ended early: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    pytest.fail("no progress")


def test_sigkill_then_resume_equals_clean_run(repo_root, tmp_path):
    out, log = tmp_path / "killed", tmp_path / "run.log"
    shard = RunDir(out).image_shard(0)
    for lines in (2, 6, 11):  # kill at a few points of generation
        p = _start(repo_root, out, log)
        _wait_for_lines(shard, lines, p, log)
        p.kill()  # SIGKILL
        p.join()
        assert p.exitcode == -signal.SIGKILL
        json.loads((out / "manifest.json").read_text())  # whole files are never torn
        json.loads("[" + ",".join((out / "prompts.jsonl").read_text().splitlines()) + "]")
    p = _start(repo_root, out, log)
    p.join()
    assert p.exitcode == 0, log.read_text()
    api.run_audit(cfg(repo_root, tmp_path / "clean", limit=40, batch_size=2), progress=False)
    killed, clean = RunDir(out).read_images(), RunDir(tmp_path / "clean").read_images()
    assert len(killed) == 40 and len({(r["prompt_id"], r["sample"]) for r in killed}) == 40
    assert shas(out) == shas(tmp_path / "clean")
    for line in (out / "images.jsonl").read_text().splitlines():
        json.loads(line)
    assert not list(out.rglob("*.tmp"))


def test_second_writer_is_refused(repo_root, tmp_path):
    out, log = tmp_path / "busy", tmp_path / "first.log"
    p = _start(repo_root, out, log, n=400, steps=30)  # long enough to still be running
    try:
        _wait_for_lines(RunDir(out).image_shard(0), 1, p, log)
        os.kill(p.pid, signal.SIGSTOP)  # it holds the run's lock; stopped, it spends no CPU meanwhile
        second = tmp_path / "second.log"
        code = warm.run(_argv(repo_root, out, n=400, steps=30), log=second)
        assert code == 2
        assert "in use by pid" in second.read_text() and str(p.pid) in second.read_text()
    finally:
        p.kill()
        p.join()


def test_nan_and_black_images_are_flagged(repo_root, tmp_path, monkeypatch):
    """A decoder that emits NaN (fp16 overflow, in real life) must be recorded, not kept as fine."""
    import torch

    from t2i_audit import generate

    real = generate.load_pipeline

    def poisoned(card, device, dtype, **placement):
        pipe = real(card, device, dtype, **placement)
        pipe.vae.decoder.register_forward_hook(lambda m, i, out: torch.full_like(out, float("nan")))
        return pipe

    monkeypatch.setattr(generate, "load_pipeline", poisoned)
    root = api.run_audit(cfg(repo_root, tmp_path / "nan", limit=2), progress=False)
    images = RunDir(root).read_images()
    assert all("nan" in r["flags"] and "black" in r["flags"] for r in images)
    assert RunDir(root).read_manifest()["stages"]["generate"]["flags"] == {"nan": 2, "black": 2}


def test_to_png_flags():
    from t2i_audit.generate import _to_png

    _, flags = _to_png(np.full((4, 4, 3), 0.5, dtype=np.float32))
    assert flags == []
    _, flags = _to_png(np.zeros((4, 4, 3), dtype=np.float32))
    assert flags == ["black"]
