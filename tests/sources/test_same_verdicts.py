"""Identical images, identical verdicts, whatever their source: a mini run's own PNGs served by an endpoint, and the
same files handed to ``api.judge``, get the verdicts the local pipeline's run got. The endpoint's run is a full
``run``: the probe stage is skipped (said once), the report says which sections need weights, and ``probe``,
``probe --early``, ``select`` and ``predict`` refuse it with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2i_audit import api

from .serving import REPO, hosted_model

JUDGES = ["mini-pixel", "mini-judge"]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _verdicts(root: Path) -> dict:
    """(scorer, prompt, sample, kind, question) -> (verdict, value, failures, image sha256) of a run's scores."""
    out = {}
    for name in JUDGES:
        for r in _jsonl(root / "scores" / f"{name}.jsonl"):
            out[(name, r["prompt_id"], r["sample"], r["kind"], r["question_id"])] = (
                r["verdict"], r["value"], r["failures"], r["image_sha256"])
    return out


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The mini pipeline's run: 4 prompts, generated and scored by the mini world's judges."""
    out = tmp_path_factory.mktemp("local") / "run"
    return api.run_audit(api.RunConfig(model="mini", prompts=["mini"], limit=4, out=str(out), device="cpu",
                                       stages=["prompts", "generate", "score"]), progress=False)


@pytest.fixture(scope="module")
def served_run(local_run, tmp_path_factory):
    """The same prompts from an endpoint serving the local run's own PNG bytes for each (prompt, seed): every
    stage of `run`, probe included (skipped). Yields (run folder, the probe-skip message, the server's URL)."""
    texts = {p["id"]: p["text"] for p in _jsonl(local_run / "prompts.jsonl")}
    serve = {f"{texts[r['prompt_id']]}|{r['seed']}": str(local_run / r["path"]) for r in _jsonl(local_run / "images.jsonl")}
    tmp = tmp_path_factory.mktemp("served")
    with hosted_model(tmp / "server", serve=serve) as (base, log):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            root = api.run_audit(api.RunConfig(model=f"endpoint:{base}/mini", prompts=["mini"], limit=4, device="cpu",
                                               out=str(tmp / "run"), scorers=JUDGES), progress=False)
        assert len(log()) == 4
        yield root, err.getvalue(), base


def test_an_endpoint_serving_a_runs_images_gets_that_runs_verdicts(local_run, served_run):
    root = served_run[0]
    local, served = _verdicts(local_run), _verdicts(root)
    assert served == local and len(local) > 8
    assert {r["sha256"] for r in _jsonl(root / "images.jsonl")} == {r["sha256"] for r in _jsonl(local_run / "images.jsonl")}


def test_judge_in_your_loop_gives_a_runs_verdicts(local_run):
    prompts = {p["id"]: p for p in _jsonl(local_run / "prompts.jsonl")}
    images = _jsonl(local_run / "images.jsonl")
    records = [prompts[r["prompt_id"]] for r in images]
    results = api.judge([local_run / r["path"] for r in images], records, scorer=JUDGES, batch_size=4)
    by_texts = api.judge([local_run / r["path"] for r in images], [p["text"].upper() + "." for p in records],
                         scorer=JUDGES, suite="mini", batch_size=4)
    assert [r["by_scorer"] for r in by_texts] == [r["by_scorer"] for r in results]  # a text finds its record
    scores = {name: {(r["prompt_id"], r["sample"], r["kind"], r["question_id"]): r
                     for r in _jsonl(local_run / "scores" / f"{name}.jsonl")} for name in JUDGES}
    for img, res in zip(images, results):
        key = (img["prompt_id"], img["sample"])
        assert (res["prompt_id"], res["sample"]) == key
        for name in JUDGES:
            prompt = scores[name][(*key, "prompt", None)]
            assert res["by_scorer"][name]["verdict"] == prompt["verdict"]
            assert res["by_scorer"][name]["failures"] == prompt["failures"]
            assert res["by_scorer"][name]["questions"] == {
                q: r["verdict"] for (p, s, kind, q), r in scores[name].items() if (p, s) == key and kind == "question"}
        assert res["scorer"] in JUDGES and res["verdict"] == res["by_scorer"][res["scorer"]]["verdict"]
        assert [q["id"] for q in res["questions"]] == [q["id"] for q in prompts[key[0]]["questions"]]


def test_a_run_without_a_pipeline_skips_probes_once_and_its_report_says_why(served_run):
    root, stderr, _ = served_run
    assert stderr.count("[probe] skipped") == 1 and "needs the model's activations" in stderr
    stages = json.loads((root / "manifest.json").read_text())["stages"]
    assert stages["probe"]["status"] == "skipped" and stages["report"]["status"] == "done"
    assert not (root / "activations").exists()
    page = (root / "report" / "index.html").read_text()
    assert "Probes: needs weights." in page and "Early prediction: needs weights." in page
    summary = json.loads((root / "summary.json").read_text())["report"]
    assert summary["needs_weights"] == ["early", "probes"] and summary["refused"] == 0


@pytest.mark.parametrize("argv", [["probe", "RUN"], ["probe", "RUN", "--early"], ["select", "--from", "RUN"],
                                  ["predict", "--model", "MODEL", "--prompts", "mini", "--from", "RUN"],
                                  ["predict", "--model", "mini", "--prompts", "mini", "--from", "RUN"]])
def test_commands_that_need_activations_refuse_a_run_without_a_pipeline(served_run, argv, tmp_path):
    root, _, base = served_run
    argv = [str(root) if a == "RUN" else f"endpoint:{base}/mini" if a == "MODEL" else a for a in argv]
    if argv[0] == "predict":
        argv += ["--out", str(tmp_path / "risk.jsonl")]
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-m", "t2i_audit", *argv], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "needs the model's activations" in res.stderr and "no diffusers pipeline" in res.stderr
    assert "Traceback" not in res.stderr
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written
