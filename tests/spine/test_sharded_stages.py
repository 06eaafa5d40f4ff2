"""Score and probe stages split between Accelerate processes: 2 processes (torchrun on CPU, as
for generation) give the files 1 process gives, and a killed sharded scoring resumes.

One start-up per process count: tests/spine/sharded_cli.py runs `run` (prompts, generate, score,
probe) then `probe --denoiser` in the test's own process and in one torchrun group of 2, with 2-row
activation chunks so that 12 prompts make 6 part files per encoder for the two processes to share.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from t2i_audit.rundir import RunDir, read_jsonl

SCORER = "tiny-clip"
HERE = Path(__file__).parent


def _args(repo_root, out):
    return ["run", "--model", "tiny-sd", "--prompts", str(repo_root / "prompts/colors.yaml"), "--limit", "12",
            "--steps", "2", "--size", "32", "--batch-size", "2", "--device", "cpu", "--scorer", SCORER,
            "--stages", "prompts,generate,score,probe", "-q", "--out", str(out),
            "::", "probe", str(out), "--denoiser", "--quiet"]


@pytest.fixture(scope="module")
def runs(repo_root, tmp_path_factory, worker_id):
    """The same audit made by 1 process (this one) and by 2 (torchrun), each with one torch thread (CPU float
    results depend on the thread count, not on the process count). Built once per session, shared by the
    workers: about 25 CPU-s."""
    from tests.conftest import built_once

    from .sharded_cli import run_commands, small_parts

    def build(root):
        with small_parts(str(root / "parts.log")):
            run_commands(_args(repo_root, root / "one"))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PART_LOG": str(root / "parts.log")}
        two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                              str(29600 + os.getpid() % 1000), str(HERE / "sharded_cli.py"),
                              *_args(repo_root, root / "two")], env=env, capture_output=True, text=True, timeout=900)
        assert two.returncode == 0, two.stderr[-3000:]
        assert two.stdout.count("run directory:") == 1 and two.stdout.count("probes written") == 1  # main reports

    root = built_once(tmp_path_factory, worker_id, "sharded", build)
    return RunDir(root / "one"), RunDir(root / "two")


def test_scores_are_the_bytes_one_process_writes(runs):
    one, two = runs
    assert len(read_jsonl(one.scores(SCORER))) > 12  # a prompt record and per-slot records an image
    assert one.scores(SCORER).read_bytes() == two.scores(SCORER).read_bytes()
    assert not (two.scores_dir / "shards").exists()  # folded and removed
    m1, m2 = (r.read_manifest()["stages"]["score"] for r in runs)
    assert m2["world_size"] == 2 and m2["images_per_process"] == [6, 6]  # 6 batches of 2: 3 each
    assert m1["images_per_process"] == [12]
    for key in ("images", "scored", "records", "passed", "failed", "failures"):
        assert m1["scorers"][SCORER][key] == m2["scorers"][SCORER][key], key


@pytest.mark.parametrize("encoder", ["text_encoder", "denoiser"])
def test_activations_equal_and_both_processes_extracted(runs, encoder):
    one, two = (r.activations_dir / encoder for r in runs)
    m1, m2 = (json.loads((d / "meta.json").read_text()) for d in (one, two))
    assert m1 == m2 and m2["parts"] == 6
    writers = [line.split()[0] for line in (two.parents[2] / "parts.log").read_text().splitlines()
               if f"/two/activations/{encoder}/" in line]
    assert sorted(writers) == ["0", "0", "0", "1", "1", "1"]  # each process wrote its 3 parts
    assert m1["arrays"] == m2["arrays"] and len(m1["arrays"]) >= 10 and m1["n"] == 12
    for name in m1["arrays"]:
        a, b = np.load(one / f"{name}.npy"), np.load(two / f"{name}.npy")
        # NaN only where a prompt lacks the slot (single-object prompts have no c2/o2)
        assert a.shape[0] == 12 and np.isfinite(a).any(1).sum() >= 6, name
        assert np.array_equal(a, b, equal_nan=True), name
    assert (one / "index.jsonl").read_bytes() == (two / "index.jsonl").read_bytes()
    assert not (two / ".parts").exists()


def test_probe_fits_equal(runs):
    one, two = runs
    files = sorted(p.name for p in one.probes_dir.glob("*.jsonl"))
    assert files == ["correlation.jsonl", "decodability.jsonl", "failure.jsonl"]
    rows = read_jsonl(one.probes_dir / "decodability.jsonl")
    assert {r["encoder"] for r in rows} == {"text_encoder", "denoiser"}  # refit after `probe --denoiser`
    for name in files:
        assert (one.probes_dir / name).read_bytes() == (two.probes_dir / name).read_bytes(), name
    s1, s2 = (json.loads(r.summary.read_text())["probes"] for r in runs)
    assert s1["fit_key"] == s2["fit_key"] and s1["decodability_best_layer"] == s2["decodability_best_layer"]


def test_killed_sharded_scoring_resumes_to_the_same_bytes(runs, tmp_path):
    """What a SIGKILL of 2 scoring processes leaves — shards holding finished images out of order,
    one image's records without its prompt record (killed mid-append) and a torn last line, an
    image both in the merged file and in a shard (killed between the fold's rewrite and the shard's
    deletion) — is folded by the next run, which scores only the unfinished images."""
    from t2i_audit.scorers.stage import run_score_stage

    clean, _ = runs
    rd = RunDir(tmp_path / "killed")
    shutil.copytree(clean.root, rd.root)
    records = read_jsonl(clean.scores(SCORER))
    keys = list(dict.fromkeys((r["prompt_id"], r["sample"]) for r in records))
    group = {k: [r for r in records if (r["prompt_id"], r["sample"]) == k] for k in keys}

    def lines(ks):
        return "".join(json.dumps(r) + "\n" for k in ks for r in group[k])

    shards = rd.scores_dir / "shards"
    shards.mkdir()
    rd.scores(SCORER).write_text(lines(keys[4:6]))  # an earlier fold
    (shards / f"{SCORER}.rank0.jsonl").write_text(lines(keys[0:5]))  # keys[4] also merged
    partial = [r for r in group[keys[10]] if r["kind"] != "prompt"]
    assert partial
    (shards / f"{SCORER}.rank1.jsonl").write_text(
        lines(keys[6:10]) + "".join(json.dumps(r) + "\n" for r in partial) + '{"prompt_id": "tor')
    counts = run_score_stage(rd, [SCORER], batch_size=2, progress=False)[SCORER]
    # images 10 and 11 are one batch of 2, as in the clean run: the same numbers, batch for batch
    assert counts["scored"] == 2 and counts["resumed"] == 10
    assert rd.scores(SCORER).read_bytes() == clean.scores(SCORER).read_bytes()
    assert not shards.exists()
