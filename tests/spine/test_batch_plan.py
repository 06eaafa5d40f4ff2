"""The fixed batch plan: an image is only ever made among the batch-mates the config planned.

CPU and GPU kernels round differently for another batch composition (an AVX-512/AMX CPU changed a
tiny-sd image's PNG bytes between a batch of 2 and a batch of 1; an AVX2 CPU did not), so a test
that compares bytes after a heal passes on one machine and fails on the next. These tests do not
rely on this CPU's rounding: they watch which prompts and seeds every pipeline call received, and
require every call to be exactly one planned batch — the property that makes bytes equal on any
machine — and then that the bytes are equal here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from t2i_audit import api, generate
from t2i_audit.errors import AuditError
from t2i_audit.generate import batch_member, image_seed, plan_batches
from t2i_audit.probes.capture import denoiser
from t2i_audit.rundir import RunDir, read_jsonl

BASE = dict(model="tiny-sd", limit=3, steps=2, size=32, images_per_prompt=2, batch_size=4,
            stages=["prompts", "generate"], device="cpu")


def cfg(repo_root, out, **kw):
    return api.make_config({**BASE, "prompts": [str(repo_root / "prompts/colors.yaml")], "out": str(out), **kw})


@pytest.fixture
def calls(monkeypatch):
    """Every generation call's (prompt, seed) list, recorded by wrapping the real pipeline."""
    seen: list[list[tuple[str, int]]] = []
    load = generate.load_pipeline

    def recording_load(card, device, dtype, **placement):
        pipe = load(card, device, dtype, **placement)
        real_call = type(pipe).__call__

        class Recording(type(pipe)):
            def __call__(self, *args, **kw):
                seen.append([(t, g.initial_seed()) for t, g in zip(kw["prompt"], kw["generator"])])
                return real_call(self, *args, **kw)

        pipe.__class__ = Recording
        Recording.__name__ = type(pipe).__mro__[1].__name__  # families.yaml looks the class up by name
        return pipe

    monkeypatch.setattr(generate, "load_pipeline", recording_load)
    monkeypatch.setattr(denoiser, "load_pipeline", recording_load, raising=False)
    return seen


def planned_calls(rd: RunDir, batch_size: int, images_per_prompt: int) -> list[list[tuple[str, int]]]:
    return [[(p["text"], image_seed(p["id"], k, 0)) for p, k in batch]
            for batch in plan_batches(rd.read_prompts(), images_per_prompt, batch_size)]


def shas(rd: RunDir) -> dict:
    return {(r["prompt_id"], r["sample"]): r["sha256"] for r in rd.read_images()}


@given(n_prompts=st.integers(0, 12), per_prompt=st.integers(1, 4), batch_size=st.integers(1, 9))
def test_plan_is_the_ordered_work_cut_every_batch_size(n_prompts, per_prompt, batch_size):
    prompts = [{"id": f"p{i}"} for i in range(n_prompts)]
    plan = plan_batches(prompts, per_prompt, batch_size)
    flat = [(p["id"], k) for batch in plan for p, k in batch]
    assert flat == [(f"p{i}", k) for i in range(n_prompts) for k in range(per_prompt)]
    assert all(len(b) == batch_size for b in plan[:-1]) and all(1 <= len(b) <= batch_size for b in plan)


def test_plan_refuses_a_batch_size_below_one():
    with pytest.raises(AuditError, match="batch size 0"):
        plan_batches([{"id": "p"}], 1, 0)


def test_records_name_their_planned_batch(repo_root, tmp_path, calls):
    rd = RunDir(api.run_audit(cfg(repo_root, tmp_path / "run"), progress=False))
    assert calls == planned_calls(rd, 4, 2)  # [p0/0 p0/1 p1/0 p1/1] [p2/0 p2/1]
    plan = plan_batches(rd.read_prompts(), 2, 4)
    for rec in rd.read_images():
        i = rec["batch"]
        assert (rec["prompt_id"], rec["sample"]) in [(p["id"], k) for p, k in plan[i]]
        assert rec["batch_members"] == [batch_member(p["id"], k) for p, k in plan[i]]


def test_heal_and_kill_mid_batch_regenerate_whole_planned_batches(repo_root, tmp_path, calls):
    """A damaged member and a member whose record a kill lost are made again among their planned
    batch-mates — never alone, never with the other batch's leftovers — and only they are written."""
    rd = RunDir(api.run_audit(cfg(repo_root, tmp_path / "run"), progress=False))
    before = shas(rd)
    recs = {(r["prompt_id"], r["sample"]): r for r in rd.read_images()}
    ids = [p["id"] for p in rd.read_prompts()]
    damaged = recs[(ids[1], 0)]  # batch 0's third member: truncated PNG
    png = rd.root / damaged["path"]
    png.write_bytes(png.read_bytes()[:40])
    lost = recs[(ids[2], 1)]  # batch 1's last member: its PNG is on disk, its record was never appended
    for f in [rd.images, *rd.root.glob("shards/images.rank*.jsonl")]:
        kept = [r for r in read_jsonl(f) if (r["prompt_id"], r["sample"]) != (ids[2], 1)]
        f.write_text("".join(json.dumps(r) + "\n" for r in kept))
    calls.clear()
    gen = api.run_audit(cfg(repo_root, tmp_path / "run"), progress=False)
    assert calls == planned_calls(rd, 4, 2)  # both batches, whole
    assert shas(RunDir(gen)) == before  # same machine, same plan: the same bytes
    counts = rd.read_manifest()["stages"]["generate"]
    assert counts["generated_now"] == 2 and counts["batches_run_now"] == 2
    assert lost["path"] in {r["path"] for r in rd.read_images()}


def test_resume_keeps_the_planned_batch_size(repo_root, tmp_path, calls):
    rd = RunDir(api.run_audit(cfg(repo_root, tmp_path / "run", limit=2), progress=False))
    before = shas(rd)
    first = rd.read_images()[0]
    (rd.root / first["path"]).unlink()
    calls.clear()
    api.run_audit(cfg(repo_root, tmp_path / "run", limit=2, batch_size=1), progress=False)
    assert calls == planned_calls(rd, 4, 2)  # the run's plan (batch 4), not the new --batch-size 1
    gen = rd.read_manifest()["stages"]["generate"]
    assert gen["planned_batch_size"] == 4 and "batch size 1 asked, 4 kept" in gen["plan_note"]
    assert shas(rd) == before


def test_denoiser_replay_runs_the_generations_batches(repo_root, tmp_path, calls):
    """``probe --denoiser`` replays the planned batches holding a sample 0 (whole), keeping sample 0's
    rows: the activations are those of the trajectories that made the scored images."""
    rd = RunDir(api.run_audit(cfg(repo_root, tmp_path / "run", limit=3, batch_size=3), progress=False))
    generated = list(calls)
    calls.clear()
    meta = denoiser.extract_denoiser_activations(rd, "tiny-sd", timesteps=[-1], progress=False)
    # plan: [p0/0 p0/1 p1/0] [p1/1 p2/0 p2/1] — both hold a sample 0
    assert calls == generated == planned_calls(rd, 3, 2)
    assert meta["n"] == 3 and meta["batch_size"] == 3
    arr = np.load(rd.activations_dir / "denoiser" / "mid__t001-cond.npy")
    assert arr.shape[0] == 3 and np.isfinite(arr).all()


def _run_cli(out, *extra, procs=1, monkeypatch=None, capsys=None):
    """``t2i-audit run`` by 1 process (this one, through the CLI's entry point) or by ``procs`` (torchrun)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    common = ["--model", "tiny-sd", "--prompts", "prompts/colors.yaml", "--limit", "7", "--steps", "2",
              "--size", "32", "--batch-size", "3", "--device", "cpu", "--stages", "prompts,generate", "-q",
              "--out", str(out), *extra]
    if procs == 1:
        from .test_command_properties import invoke

        code, said = invoke(["run", *common], Path(repo), monkeypatch, capsys)
        assert code == 0, said[-3000:]
        return
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_port",
                        str(29500 + os.getpid() % 1000), "-m", "t2i_audit", "run", *common],
                       capture_output=True, text=True, timeout=400, cwd=repo)
    assert r.returncode == 0, r.stderr[-3000:]


def test_uneven_split_and_resume_with_another_process_count_equal_one_process(tmp_path, monkeypatch, capsys):
    """7 prompts in batches of 3 over 2 processes ([0,1] and [2] batches): the same batches and bytes
    as 1 process; then a heal under 1 process of a run made by 2 gives them again."""
    _run_cli(tmp_path / "one", monkeypatch=monkeypatch, capsys=capsys)
    _run_cli(tmp_path / "two", procs=2)
    one, two = RunDir(tmp_path / "one"), RunDir(tmp_path / "two")
    assert {r["rank"] for r in two.read_images()} == {0, 1}
    assert shas(one) == shas(two)
    key = lambda r: (r["prompt_id"], r["sample"], r["batch"], tuple(r["batch_members"]))  # noqa: E731
    assert sorted(map(key, one.read_images())) == sorted(map(key, two.read_images()))
    for rec in two.read_images()[2:5]:  # members of two planned batches, made by different ranks
        (two.root / rec["path"]).unlink()
    _run_cli(tmp_path / "two", monkeypatch=monkeypatch, capsys=capsys)
    assert shas(one) == shas(two)
