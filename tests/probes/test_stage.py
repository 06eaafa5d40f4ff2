"""The probe stage end to end on a run directory with a tiny model, and `predict`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from probe_data import make_prompts

from t2i_audit.errors import AuditError
from t2i_audit.probes import predict_failures, run_probe_stage
from t2i_audit.ownership import claim_output_dir
from t2i_audit.rundir import RunDir, append_jsonl, atomic_write_json, atomic_write_jsonl, read_jsonl


def _make_run(root, prompts, *, scorer="clip-foil", fail=lambda p: p["slots"]["c1"] in ("red", "blue")):
    rd = RunDir(claim_output_dir(root, "run"))  # `probe RUN` writes into a run's folder only
    atomic_write_jsonl(rd.prompts, prompts)
    rows = []
    for p in prompts:
        for sample in range(2):
            rows.append({"prompt_id": p["id"], "sample": sample, "image_sha256": "x", "scorer": scorer,
                         "kind": "prompt", "question_id": None, "metric": None, "value": 0.0,
                         "verdict": not fail(p), "failures": [], "truncated": False, "extra": {}})
            rows.append({"prompt_id": p["id"], "sample": sample, "kind": "question", "verdict": False})
    append_jsonl(rd.scores(scorer), rows)
    atomic_write_json(rd.summary, {"scores": {"kept": True}})
    return rd


@pytest.fixture(scope="module")
def probed(tiny_clip_dir, tmp_path_factory):
    prompts = make_prompts(120, seed=0)
    rd = _make_run(tmp_path_factory.mktemp("run"), prompts)
    res = run_probe_stage(rd.root, model=str(tiny_clip_dir), seed=0, layers="0,final", progress=False,
                          n_boot=200)
    return rd, prompts, res


def test_stage_writes_probes_summary_and_manifest(probed, tiny_clip_dir):
    rd, prompts, res = probed
    dec = read_jsonl(rd.probes_dir / "decodability.jsonl")
    encs = {"text_encoder": ["h00", "final"]}
    n_pool = 6  # eos, mean, slot-c1, slot-c2, slot-o1, slot-o2
    assert len(dec) == sum(len(v) for v in encs.values()) * n_pool * 4
    row = next(r for r in dec if r["encoder"] == "text_encoder" and r["layer"] == "h00"
               and r["pooling"] == "slot-c1" and r["target"] == "c1")
    # layer 0 at the slot's own tokens is the token embedding: its value is perfectly decodable
    assert row["accuracy"] == 1.0 and row["family"] == "color" and row["n_classes"] == 6
    assert row["control_accuracy"] < 0.45 and row["chance"] < 0.3
    fail = read_jsonl(rd.probes_dir / "failure.jsonl")
    assert len(fail) == sum(len(v) for v in encs.values()) * 2
    assert all(r["baseline_auroc"]["auroc"] > 0.95 for r in fail)  # the label is a function of c1
    assert all(0 < r["failure_rate"] < 1 for r in fail)
    corr = read_jsonl(rd.probes_dir / "correlation.jsonl")
    assert {r["unit"] for r in corr} == {"composition", "binding"}
    summary = json.loads(rd.summary.read_text())
    assert summary["scores"] == {"kept": True}  # other keys untouched
    s = summary["probes"]
    assert s["scorers"] == ["clip-foil"] and s["n_labelled_prompts"] == 120
    assert s["failure_prediction"]["verdict"] and "auroc_ci" in s["failure_prediction"]
    assert "spearman" in s["correlation"]
    assert s["encoders"]["text_encoder"]["dim"] == 32
    assert (rd.root / s["files"][-1]).name == "failure_probe.json"
    stage = rd.read_manifest()["stages"]["probe"]
    assert stage["status"] == "done" and stage["n_prompts"] == 120
    assert (rd.activations_dir / "text_encoder" / "final__eos.npy").exists()


def test_stage_is_idempotent(probed, tiny_clip_dir):
    rd, prompts, first = probed
    before = (rd.probes_dir / "decodability.jsonl").read_bytes()
    mtime = (rd.activations_dir / "text_encoder" / "final__eos.npy").stat().st_mtime_ns
    again = run_probe_stage(rd.root, model=str(tiny_clip_dir), seed=0, layers="0,final", progress=False,
                            n_boot=200)
    assert (rd.probes_dir / "decodability.jsonl").read_bytes() == before
    assert (rd.activations_dir / "text_encoder" / "final__eos.npy").stat().st_mtime_ns == mtime  # not redone
    assert again == first and rd.read_manifest()["stages"]["probe"]["reused"] is True


def test_stage_is_deterministic_given_seed(tiny_clip_dir, tmp_path):
    prompts = make_prompts(80, seed=6)
    out = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        rd = _make_run(tmp_path / name, prompts)
        res = run_probe_stage(rd.root, model=str(tiny_clip_dir), seed=seed, layers="last",
                              poolings=("eos", "slot"), progress=False, n_boot=100)
        out.append(((rd.probes_dir / "decodability.jsonl").read_bytes(),
                    (rd.probes_dir / "failure.jsonl").read_bytes(), res["failure_prediction"]))
    assert out[0] == out[1]
    assert out[0][0] != out[2][0]  # another seed: other folds


def test_predict_ranks_unseen_prompts(probed, tiny_clip_dir, tmp_path):
    rd, prompts, _ = probed
    new = make_prompts(None, seed=0)[240:300] + prompts[:5]
    src = tmp_path / "new.jsonl"
    atomic_write_jsonl(src, new)
    out = tmp_path / "risk.jsonl"
    ranked = predict_failures(str(tiny_clip_dir), src, rd.root, out)
    assert read_jsonl(out) == ranked and len(ranked) == 65
    risks = [r["risk"] for r in ranked]
    assert risks == sorted(risks, reverse=True) and [r["rank"] for r in ranked] == list(range(1, 66))
    seen = {r["prompt_id"] for r in ranked if r["seen_in_run"]}
    assert seen == {p["id"] for p in prompts[:5]}
    assert predict_failures(str(tiny_clip_dir), src, rd.root, tmp_path / "again.jsonl") == ranked


def test_predict_names_slot_values_the_fitted_run_never_had(probed, tiny_clip_dir, tmp_path, capsys):
    # before: a probe fitted on one vocabulary ranked prompts of another without a word
    rd, prompts, _ = probed
    novel = {**prompts[0], "id": "novel", "text": "a photo of a chartreuse zeppelin",
             "slots": {**prompts[0]["slots"], "c1": "chartreuse", "o1": "zeppelin"}}
    src = tmp_path / "new.jsonl"
    atomic_write_jsonl(src, prompts[:3] + [novel])
    ranked = predict_failures(str(tiny_clip_dir), src, rd.root, tmp_path / "risk.jsonl")
    assert {r["prompt_id"]: r["unseen_values"] for r in ranked} == {
        **{p["id"]: [] for p in prompts[:3]}, "novel": ["chartreuse", "zeppelin"]}
    err = capsys.readouterr().err
    assert "note: 1 of 4 prompts have slot values the probe of" in err and "(chartreuse, zeppelin)" in err


def test_predict_refuses_a_different_model(probed, tmp_path):
    from tiny_encoders import build_tiny_clip

    rd, prompts, _ = probed
    other = build_tiny_clip(tmp_path / "other", seed=1, layers=2)
    src = tmp_path / "new.jsonl"
    atomic_write_jsonl(src, prompts[:3])
    with pytest.raises(AuditError, match="differs from the one the probe"):
        predict_failures(str(other), src, rd.root, tmp_path / "x.jsonl")


def test_missing_probe_and_unknown_scorer_are_user_errors(tiny_clip_dir, tmp_path):
    rd = _make_run(tmp_path / "run", make_prompts(30))
    with pytest.raises(AuditError, match="no fitted failure probe"):
        predict_failures(str(tiny_clip_dir), rd.prompts, rd.root, tmp_path / "x.jsonl")
    with pytest.raises(AuditError, match="no scores for scorer 'vqa'"):
        run_probe_stage(rd.root, model=str(tiny_clip_dir), scorer="vqa", layers="last", progress=False)


def test_unscored_run_gives_decodability_only(tiny_clip_dir, tmp_path):
    rd = RunDir(tmp_path / "run")
    atomic_write_jsonl(rd.prompts, make_prompts(60))
    res = run_probe_stage(rd.root, model=str(tiny_clip_dir), layers="last", poolings=("eos",), progress=False)
    assert "skipped" in res["failure_prediction"] and "skipped" in res["correlation"]
    assert len(read_jsonl(rd.probes_dir / "decodability.jsonl")) == 1 * 4
    assert read_jsonl(rd.probes_dir / "failure.jsonl") == []


def test_cli_probe_and_predict(tiny_clip_dir, tmp_path):
    import typer
    from typer.testing import CliRunner

    from t2i_audit.probes.cli import register

    app = typer.Typer()
    register(app)
    prompts = make_prompts(80, seed=5)
    rd = _make_run(tmp_path / "run", prompts)
    r = CliRunner().invoke(app, ["probe", str(rd.root), "--model", str(tiny_clip_dir), "--layers", "last",
                                 "--poolings", "eos", "--quiet", "--folds", "4", "--bootstrap", "100"])
    assert r.exit_code == 0, r.output
    assert "failure prediction (text_encoder/final/eos)" in r.output and "prompt-only baseline" in r.output
    src = tmp_path / "new.jsonl"
    atomic_write_jsonl(src, make_prompts(None, seed=5)[80:84])
    r = CliRunner().invoke(app, ["predict", "--model", str(tiny_clip_dir), "--prompts", str(src),
                                 "--from", str(rd.root), "--top", "2"])
    assert r.exit_code == 0, r.output
    assert "4 prompts ranked" in r.output and (tmp_path / "new.risk.jsonl").exists()
    import re

    assert len(re.findall(r"\b[12]  \d\.\d{3}  a photo of", r.output)) == 2  # --top 2
    assert read_jsonl(rd.probes_dir / "failure.jsonl")[0]["n_folds"] == 4
    r = CliRunner().invoke(app, ["probe", str(tmp_path / "nowhere"), "--model", str(tiny_clip_dir)])
    assert r.exit_code != 0
    r = CliRunner().invoke(app, ["probe", str(rd.root), "--model", str(tiny_clip_dir), "--timesteps", "a,b"])
    assert r.exit_code != 0 and "--timesteps 'a,b': expected comma-separated integers" in str(r.exception)


SUITE = """
suite: probe-test
version: 1
concepts:
  objects: {family: object, values: [cube, sphere, dog, cup]}
  colors: {family: color, values: [red, green, blue, orange]}
templates:
  - name: two_objects
    category: color_binding
    text: "a photo of {c1.a} {o1} and {c2.a} {o2}"
    slots: {c1: colors, o1: objects, c2: colors, o2: objects}
    constraints: ["o1 != o2", "c1 != c2"]
    expect:
      objects:
        - {id: o1, color: c1}
        - {id: o2, color: c2}
"""


def test_predict_from_a_suite_yaml(probed, tiny_clip_dir, tmp_path):
    rd, _, _ = probed
    suite = tmp_path / "new.yaml"
    suite.write_text(SUITE)
    ranked = predict_failures(str(tiny_clip_dir), suite, rd, tmp_path / "risk.jsonl")
    assert len(ranked) == 4 * 4 * 3 * 3
    assert any(r["text"].startswith("a photo of an orange") for r in ranked)  # the suite's own text
    assert all(0.0 <= r["risk"] <= 1.0 for r in ranked)


def test_predict_limit_ranks_the_subset_run_limit_takes(probed, tiny_clip_dir, tmp_path):
    import typer
    from typer.testing import CliRunner

    from t2i_audit.api import expand_suites
    from t2i_audit.probes.cli import register

    rd, _, _ = probed
    suite = tmp_path / "new.yaml"
    suite.write_text(SUITE)
    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["predict", "--model", str(tiny_clip_dir), "--prompts", str(suite),
                                 "--from", str(rd.root), "--limit", "10", "--out", str(tmp_path / "risk.jsonl")])
    assert r.exit_code == 0, r.output
    assert "10 prompts ranked" in r.output
    got = {x["prompt_id"] for x in read_jsonl(tmp_path / "risk.jsonl")}
    assert got == {p["id"] for p in expand_suites([str(suite)], limit=10)}  # the prompts `run --limit 10` takes
    r = CliRunner().invoke(app, ["predict", "--model", str(tiny_clip_dir), "--prompts", str(suite),
                                 "--from", str(rd.root), "--limit", "0", "--out", str(tmp_path / "r0.jsonl")])
    assert r.exit_code == 2 and "--limit" in r.output and not (tmp_path / "r0.jsonl").exists()
