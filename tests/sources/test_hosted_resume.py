"""A hosted run killed mid-way (SIGKILL, the run process) and run again: nothing recorded before the kill is asked
for again (the server counts every request), and the folder ends as an unkilled run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from t2i_audit import api

from .serving import REPO, hosted_model

LIMIT = 12


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:  # a torn last line: the kill's
            pass
    return out


def test_a_killed_hosted_run_resumes_without_asking_again_and_ends_as_an_unkilled_one(tmp_path):
    with hosted_model(tmp_path / "server", delay=0.4) as (base, log):
        model = f"endpoint:{base}/gen"
        cmd = [sys.executable, "-m", "t2i_audit", "run", "--model", model, "--prompts", "mini", "--limit", str(LIMIT),
               "--stages", "prompts,generate", "--concurrency", "2", "--device", "cpu", "--out", str(tmp_path / "run"),
               "-q"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        shard = tmp_path / "run" / "shards" / "images.rank0.jsonl"
        deadline = time.monotonic() + 120
        while len(_records(shard)) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the run recorded nothing in 120 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_at = time.time()
        recorded = {(r["prompt_id"], r["sample"]) for r in _records(shard)}
        assert 3 <= len(recorded) < LIMIT
        asked_before = len(log())
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        after = [r for r in log()[asked_before:] if r["t"] >= killed_at]
        # a fresh, unkilled run of the same command, for the folder it should have become
        fresh = api.run_audit(api.RunConfig(model=model, prompts=["mini"], limit=LIMIT, stages=["prompts", "generate"],
                                            device="cpu", concurrency=2, out=str(tmp_path / "fresh")), progress=False)
    texts = {p["id"]: p["text"] for p in map(json.loads, (tmp_path / "run" / "prompts.jsonl").read_text().splitlines())}
    asked_again = {r["text"] for r in after}
    assert not asked_again & {texts[pid] for pid, _ in recorded}, "an image recorded before the kill was asked again"
    assert len(after) <= LIMIT - len(recorded) + 2  # the rest (+ at most the 2 that were in flight at the kill)

    def folder(root: Path) -> list:
        recs = [json.loads(x) for x in (root / "images.jsonl").read_text().splitlines()]
        return [(r["prompt_id"], r["sample"], r["seed"], r["path"], r["sha256"], (root / r["path"]).read_bytes())
                for r in recs]

    assert folder(tmp_path / "run") == folder(fresh) and len(folder(fresh)) == LIMIT
    g = json.loads((tmp_path / "run" / "manifest.json").read_text())["stages"]["generate"]
    assert (g["status"], g["images"], g["reused"]) == ("done", LIMIT, len(recorded))
