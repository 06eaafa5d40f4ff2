"""Fault drills: a full disk, a scorer that raises. The run fails, saying what happened and what it
skipped; nothing finished is lost; a rerun completes the work."""

import errno

import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError
from t2i_audit.rundir import RunDir, read_jsonl


def cfg(repo_root, out, **kw):
    base = dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=8, steps=2,
                batch_size=2, stages=["prompts", "generate"], out=str(out), device="cpu")
    return api.make_config({**base, **kw})


def shas(root):
    return {(r["prompt_id"], r["sample"]): r["sha256"] for r in RunDir(root).read_images()}


def test_disk_full_keeps_finished_images_and_resumes(repo_root, tmp_path, monkeypatch):
    from t2i_audit import generate

    real = generate.atomic_write_bytes
    calls = {"n": 0}

    def filling_disk(path, data):
        calls["n"] += 1
        if calls["n"] > 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(generate, "atomic_write_bytes", filling_disk)
    out = tmp_path / "full"
    with pytest.raises(AuditError, match="no space left on device.*rerun the same command to resume"):
        api.run_audit(cfg(repo_root, out), progress=False)
    run = RunDir(out)
    kept = read_jsonl(run.image_shard(0))
    assert len(kept) == 4  # two whole batches made it; the third was cut short
    assert all((out / r["path"]).exists() for r in kept)
    stage = run.read_manifest()["stages"]["generate"]
    assert stage["status"] == "failed" and "no space left" in stage["error"]

    monkeypatch.setattr(generate, "atomic_write_bytes", real)
    api.run_audit(cfg(repo_root, out), progress=False)
    assert run.read_manifest()["stages"]["generate"]["generated_now"] == 4
    clean = api.run_audit(cfg(repo_root, tmp_path / "clean"), progress=False)
    assert shas(out) == shas(clean) and len(shas(out)) == 8


def _score_lines(path):
    return sorted((r["prompt_id"], r["sample"], r["kind"], r.get("question_id"), r.get("metric"), r.get("verdict"))
                  for r in read_jsonl(path))


def test_scorer_that_raises_is_recorded_and_retried(repo_root, tmp_path, monkeypatch):
    from t2i_audit.scorers import run_score_stage
    from t2i_audit.scorers.vqa import BlipVqaScorer

    out = tmp_path / "run"
    api.run_audit(cfg(repo_root, out), progress=False)
    clean = tmp_path / "clean"
    api.run_audit(cfg(repo_root, clean), progress=False)
    run_score_stage(RunDir(clean), ["tiny-clip", "tiny-vqa"], batch_size=2, progress=False)

    real = BlipVqaScorer.answer
    calls = {"n": 0}

    def flaky(self, items, queries):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(self, items, queries)

    monkeypatch.setattr(BlipVqaScorer, "answer", flaky)
    run = RunDir(out)
    with pytest.raises(AuditError, match=r"scorer tiny-vqa failed on \S+ sample 0, \S+ sample 0 \(RuntimeError: "
                                         r"CUDA error: an illegal memory access.*6 image\(s\) left unscored"):
        run_score_stage(run, ["tiny-clip", "tiny-vqa"], batch_size=2, progress=False)
    stage = run.read_manifest()["stages"]["score"]
    counts = stage["scorers"]
    assert "illegal memory access" in counts["tiny-vqa"]["error"]
    assert counts["tiny-vqa"]["skipped"] == 6 and counts["tiny-clip"]["scored"] == 8
    assert stage["status"] == "done_with_errors" and "tiny-vqa" in stage["errors"]
    finished = _score_lines(run.scores("tiny-vqa"))
    assert {(k[0], k[1]) for k in finished} and len({(k[0], k[1]) for k in finished}) == 2

    monkeypatch.setattr(BlipVqaScorer, "answer", real)
    again = run_score_stage(run, ["tiny-clip", "tiny-vqa"], batch_size=2, progress=False)
    assert again["tiny-clip"]["scored"] == 0 and again["tiny-vqa"]["scored"] == 6
    for name in ("tiny-clip", "tiny-vqa"):
        assert _score_lines(run.scores(name)) == _score_lines(RunDir(clean).scores(name))
