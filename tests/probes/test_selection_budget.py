"""`select --study` and `select --budget` end to end on the shipped mini generator (a 32-prompt × 4-seed fitted
run at 4 steps; select on --limit 6), on the SD 1.5 twin (plumbing: random weights), and the refusal of seeds
the fitted run used."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from t2i_audit import api, stats
from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.generate import image_seed
from t2i_audit.select import budget as budget_run
from t2i_audit.select import freshness
from t2i_audit.select.policies import Staged, Whole
from t2i_audit.rundir import RunDir, read_jsonl

STEPS = 4


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, worker_id, repo_root):
    """The fitted, probed and studied run, built once per session and shared by the xdist workers (about 4
    CPU-minutes: it was built again by every worker that ran a test of this module). Tests read it; the browser
    test adds the run's report/ only."""
    from tests.conftest import built_once

    root = built_once(tmp_path_factory, worker_id, "selection-fitted", lambda folder: _fit(folder, repo_root))
    rd = RunDir(root / "run")
    rd.study_output = (root / "study_output.txt").read_text()
    return rd


def _fit(folder, repo_root):
    from t2i_audit.probes.early_stage import run_early_stage

    out = folder / "run"
    # whole twin groups: 8 spatial and 8 colour-binding pairs (a prompt and its swap twin)
    records = api.expand_suites([str(repo_root / "prompts/mini.yaml")])
    picked = []
    for cat, n_groups in (("spatial", 8), ("color_binding", 8)):
        groups: dict = {}
        for p in (r for r in records if r["category"] == cat):
            groups.setdefault(p.get("twin_id") or p["id"], []).append(p)
        picked += [p for g in list(groups.values())[:n_groups] for p in g]
    src = out.parent / "prompts.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in picked))
    cfg = api.make_config(dict(model="mini", prompts=[str(src)], images_per_prompt=4, steps=STEPS,
                               scorers=["mini-pixel", "mini-judge"], stages=["prompts", "generate", "score"], out=str(out),
                               device="cpu"))
    rd = RunDir(api.run_audit(cfg, progress=False))
    with pytest.MonkeyPatch.context() as mp:  # 8-16 prompts a category are "too few" for a printed AUROC
        mp.setattr(stats, "MIN_PER_CLASS", 1)
        mp.setattr(stats, "MIN_UNITS", 1)
        run_early_stage(rd, model="mini", fractions=(0.2, 0.5), n_boot=20, progress=False)
    # the command a user runs: the binding capture and study, then the selection study (5 folds, 2,000 resamples)
    res = CliRunner().invoke(app, ["select", "--from", str(rd.root), "--study", "--binding", "--bootstrap", "200",
                                   "--shuffles", "3", "--quiet"])
    assert res.exit_code == 0, res.output
    (folder / "study_output.txt").write_text(res.output)


def test_study_curves_controls_and_runnable_outcomes(fitted):
    res = json.loads((fitted.probes_dir / "selection.json").read_text())
    assert res["loop_steps"] == STEPS and res["seeds_per_prompt"] == 4 and res["steps"] == [0, 1]
    assert res["preregistered"]["registered_on"] == "2026-12-05" and len(res["preregistered"]["file_sha256"]) == 64
    fitted_cats = [c for c, r in res["categories"].items() if "policies" in r]
    assert fitted_cats
    for cat in fitted_cats:
        r = res["categories"][cat]
        whole = [w["mean"] for w in r["whole_images"]]
        assert len(whole) == 4 and all(a <= b + 1e-12 for a, b in zip(whole, whole[1:]))  # more images never hurt
        fams = {p["family"] for p in r["policies"]}
        assert {"random", "whole images", "probe", "x0", "x0-fitted"} <= fams
        for p in r["policies"]:
            assert 0 <= p["success"] <= 1 and p["cost"]["iterations"] > 0
        assert set(r["budgets"]) == {str(b) for b in res["budgets"]}
        assert {"auroc", "lift_over_random"} <= set(r["permutation_control"])
        null = r["permutation_control"]["null"]  # a null distribution, not one shuffle
        assert r["permutation_control"]["n_shuffles"] == 3 and 0 <= null["auroc"]["observed_quantile_in_null"] <= 1
        assert null["auroc"]["p"] in (0.25, 0.5, 0.75, 1.0)  # (1 + k) / (1 + 3)
        # the oracle named, the non-oracle baseline beside it, seconds on every row (the measured units)
        assert any(p["oracle"] for p in r["policies"]) and not any(p["oracle"] for p in r["policies"]
                                                                     if p["family"] != "whole images")
        assert {p["spec"]["n"] for p in r["policies"] if p["spec"]["kind"] == "whole-judged"
                and p["spec"]["judge"] == "mini-judge"} == {2, 3, 4}
        assert all(p["seconds"] > 0 and p["gap_seconds_ci"] is not None for p in r["policies"]
                   if p["family"] not in ("random",))
        assert r["frontiers_seconds"] and len(r["whole_images_seconds"]) == 4
        assert "seen prompts" in r["seen_vs_unseen"] and "unseen prompts" in r["seen_vs_unseen"]
    # the headline scans 6 seeds: this run has 4, so it says so instead of a number
    assert "skipped" in res["categories"]["spatial"]["headline"]
    rows = list(read_jsonl(fitted.probes_dir / "selection_outcomes.jsonl"))
    kinds = {json.dumps(r["policy"], sort_keys=True) for r in rows}
    assert any('"whole"' in k for k in kinds) and any('"staged"' in k for k in kinds)
    assert all('"rungs": [[' in k and k.count("], [") == 0 for k in kinds if '"staged"' in k)  # one rung: runnable


def test_seen_seeds_are_refused(fitted, tmp_path):
    prompts = fitted.read_prompts()[:3]
    assert freshness.check(fitted.root, prompts, 4, 1) == 0
    with pytest.raises(AuditError, match="--allow-seen"):
        freshness.check(fitted.root, prompts, 4, 0)
    assert freshness.check(fitted.root, prompts, 4, 0, allow_seen=True) == 12
    assert freshness.fresh_base_seed(fitted.root, prompts, 4) == 1
    res = CliRunner().invoke(app, ["select", "--from", str(fitted.root), "--limit", "6", "--budget", "7",
                                   "--seed", "0", "--out", str(tmp_path / "sel")])
    assert isinstance(res.exception, AuditError)  # cli.main prints it as "error: …", exit 2
    assert "images of the --from run" in str(res.exception) and "--allow-seen" in str(res.exception)
    assert not (tmp_path / "sel").exists()  # refused before any work
    res = CliRunner().invoke(app, ["select", "--from", str(fitted.root), "--limit", "6", "--of", "2",
                                   "--seed", "0", "--out", str(tmp_path / "old")])
    assert isinstance(res.exception, AuditError) and "--allow-seen" in str(res.exception)  # the --of path too


def _check_budget_run(out, fitted_root, limit: int, loop_steps: int):
    res = json.loads((out / "selection.json").read_text())
    rd = RunDir(out)
    rows = list(read_jsonl(out / "selection.jsonl"))
    images = {(r["prompt_id"], r["sample"]): r for r in rd.read_images()}
    # every finished seed is on disk, nothing else is; no seed of the fitted run was scanned
    assert {(r["prompt_id"], r["sample"]) for r in rows if r["roles"]} == set(images)
    used, _ = freshness.used_seeds(fitted_root)
    assert not {(r["prompt_id"], r["seed"]) for r in rows} & used
    assert all(r["seed"] == image_seed(r["prompt_id"], r["sample"], res["base_seed"]) for r in rows)
    # what the denoiser actually ran equals the accounting: every scanned seed to its step, finished ones on
    spent = res["spent"]
    assert spent["loop_iterations"] == pytest.approx(spent["loop_iterations_expected"])
    assert spent["vae_decodes"] == len(images) and spent["judge_calls"] == len(images)
    assert res["n_prompts"] == limit and sum(c["success"]["n_prompts"] for c in res["categories"].values()) == limit
    return res, rows


def test_select_budget_end_to_end_on_mini(fitted, tmp_path):
    out = tmp_path / "sel"
    res = CliRunner().invoke(app, ["select", "--from", str(fitted.root), "--limit", "6", "--budget", "7",
                                   "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    got, _ = _check_budget_run(out, fitted.root, 6, STEPS)
    assert got["base_seed"] == 1 and got["seeds_seen_by_the_fitted_run"] == 0
    for cat, c in got["categories"].items():
        assert c["chosen_on_prompts"] >= 5 and c["cost_per_prompt"]["iterations"] <= 7
    assert "budget 7 loop iterations per prompt, base seed 1" in res.output
    # after a kill, verify advises the select --budget command that resumes it (not `run --config`)
    from t2i_audit.ownership import resume_command

    advice = resume_command(out)
    assert advice.startswith("t2i-audit select --from") and "--budget 7 --seed 1" in advice and "--out" in advice


def test_a_probe_policy_scans_ranks_and_continues(fitted, tmp_path, monkeypatch):
    """The probe path with the choice fixed (the choice itself is tested in test_selection_policies): per prompt
    3 seeds scanned to step 2 of 4, the lowest-risk one continued, a random one and the whole-image baseline too;
    the unseen-prompt mode refits the probe without the scored prompts' twin groups."""
    pol = Staged("probe", 3, ((1, 1),))
    monkeypatch.setattr(budget_run, "choose_for_budget", lambda f, b, records: {
        str(c): {"policy": pol, "fell_back": False, "prompts": 0, "expected_success_there": 0.0}
        for c in {p.get("category") for p in records}})
    cfg = api.make_config(dict(model="mini", prompts=[str(fitted.prompts)], limit=4, out=str(tmp_path / "sel"),
                               device="cpu"))
    res = budget_run.budget_select_run(cfg, fitted.root, budget=8, holdout=True, progress=False, n_boot=50)
    got, rows = _check_budget_run(tmp_path / "sel", fitted.root, 4, STEPS)
    assert res["holdout"] and res["fitted_images_left_out"] > 0 and res["prompts_seen_by_the_probe"] == 0
    assert pol.cost(STEPS).iterations == 3 * 2 + 2 == got["categories"][next(iter(got["categories"]))][
        "cost_per_prompt"]["iterations"]
    for pid in {r["prompt_id"] for r in rows}:
        mine = sorted((r for r in rows if r["prompt_id"] == pid), key=lambda r: r["sample"])
        assert len(mine) == 3 and all(r["scan_step"] == 1 for r in mine)
        kept = [r["sample"] for r in mine if "kept" in r["roles"]]
        assert kept == [min(mine[:3], key=lambda r: (r["risk"], r["sample"]))["sample"]]
        assert sum("random" in r["roles"] for r in mine) == 1
        assert [r["sample"] for r in mine if "whole" in r["roles"]] == [0, 1, 2]  # every scanned seed finished
    # the baselines are expectations over the finished seeds, not one draw: best of 2 (8 iterations) over the
    # 3 pairs of 3 seeds, one random seed = their mean
    from math import comb

    from t2i_audit.probes.early_stage import image_verdicts

    out = RunDir(tmp_path / "sel")
    verdicts, _, _ = image_verdicts(out, out.read_prompts())
    for cat, c in got["categories"].items():
        pids = [p["id"] for p in out.read_prompts() if str(p.get("category")) == cat]
        fails = [sum(not verdicts[(pid, k)]["verdict"] for k in range(3)) for pid in pids]
        assert c["whole_images_at_same_cost"]["mean"] == pytest.approx(np.mean([1 - comb(f, 2) / 3 for f in fails]))
        assert c["random_seed"]["mean"] == pytest.approx(np.mean([1 - f / 3 for f in fails]))


TINY_SUITE = """suite: tiny-budget
version: 1
concepts:
  objects: {family: object, values: [apple, cup, dog]}
  colors: {family: color, values: [red, blue, green]}
templates:
  - {name: single, category: color, text: "a photo of {c1.a} {o1}", slots: {c1: colors, o1: objects},
     expect: {objects: [{id: o1, color: c1}]}}
"""


def test_select_budget_on_a_tiny_twin(tmp_path):
    """The SD 1.5 twin (random weights: the probe and the study's outcomes are synthetic here — this proves the
    plumbing of scan, snapshot, continuation, score and accounting on another family, not a prediction)."""
    from t2i_audit.probes.capture.early import extract_early_features, load_early
    from t2i_audit.probes.early_stage import _clean
    from t2i_audit.probes.fit.linear import onehot_constituents
    from t2i_audit.probes.fit.per_image import design, export_probe
    from t2i_audit.rundir import atomic_write_json, atomic_write_jsonl

    suite = tmp_path / "suite.yaml"
    suite.write_text(TINY_SUITE)
    cfg = api.make_config(dict(model="tiny-sd", prompts=[str(suite)], images_per_prompt=2, steps=3,
                               stages=["prompts", "generate"], out=str(tmp_path / "src"), device="cpu"))
    src = RunDir(api.run_audit(cfg, progress=False))
    meta = extract_early_features(src, "tiny-sd", fractions=(0.5,), previews=False, progress=False)
    arrays, rows, _ = load_early(src)
    by_id = {p["id"]: p for p in src.read_prompts()}
    onehot, names = onehot_constituents([by_id[pid] for pid, _ in rows])
    X = design(arrays, 1, "probe", slice(None), onehot)
    probe = export_probe(X, np.arange(len(rows)) % 2, np.array([pid for pid, _ in rows]))
    src.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(src.probes_dir / "early_probes.json", _clean(
        {"onehot": names, "steps": meta["steps"], "settings": meta["settings"], "categories": {"color": {"t001": probe}}}))
    pol = Staged("probe", 2, ((1, 1),))
    atomic_write_json(src.probes_dir / "selection.json", {"loop_steps": 3, "seeds_per_prompt": 2})
    outcomes = [{"category": "color", "prompt_id": p["id"], "group": p["composition"], "policy": q.as_dict(),
                 "iterations": q.cost(3).iterations, "success": s}
                for p in src.read_prompts() for q, s in ((Whole(1), 0.0), (Whole(2), 0.0), (pol, 1.0))]
    atomic_write_jsonl(src.probes_dir / "selection_outcomes.jsonl", outcomes)
    out = tmp_path / "sel"
    cfg = api.make_config(dict(model="tiny-sd", prompts=[str(src.prompts)], limit=3, out=str(out), device="cpu"))
    res = budget_run.budget_select_run(cfg, src.root, budget=5, progress=False, n_boot=20)
    assert res["categories"]["color"]["policy"] == pol.name  # clearly ahead of whole images on the other prompts
    _check_budget_run(out, src.root, 3, 3)


def test_selection_study_renders_in_a_browser(fitted, tmp_path):
    """The report's selection section as a person sees it: headless Chromium, no console errors; per studied
    category a success-against-cost chart (the whole-image curve and the probe's frontier drawn), the budget
    table, the controls; the binding table from binding.json."""
    import shutil
    import subprocess

    from t2i_audit.report import render_report

    res = json.loads((fitted.probes_dir / "selection.json").read_text())
    studied = [c for c, r in res["categories"].items() if "policies" in r]
    bound = [c for c, r in json.loads((fitted.probes_dir / "binding.json").read_text())["categories"].items()
             if "steps" in r]
    page = render_report(fitted.root, progress=False)
    chromium = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)),
                    None)
    if chromium is None:
        pytest.skip("no Chromium binary")
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom",
                        page.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert not [line for line in r.stderr.splitlines() if ":CONSOLE" in line and "ERROR" in line.upper()]
    dom = r.stdout
    section = dom[dom.index('id="selection-study"'):]
    section = section[:section.index("</section>")]
    # success against loop iterations and against measured seconds, the oracle named on both
    assert section.count('<svg class="chart pareto"') == 2 * len(studied)
    assert section.count('aria-label="success against measured seconds per prompt"') == len(studied)
    assert section.count("whole images, best of n by the final judge (oracle)</title></polyline>") == 2 * len(studied)
    assert section.count("probe (best at each cost)</title></polyline>") == 2 * len(studied)
    assert section.count('<table class="plain sel-budgets small">') == len(studied)
    assert "Permutation control" in section and "Seen vs unseen prompts" in section
    assert "Pre-registered (2026-12-05" in section
    assert section.count('<table class="plain sel-binding">') == len(bound) > 0  # AUROC by step per family
    assert "<td>rawmaps</td>" in section and "<td>cfg</td>" in section


def test_study_command_with_binding(fitted):
    """`select --from RUN --study --binding` (the fixture ran it): the binding capture (every image replayed in
    its planned batch, stored like every activation), the AUROC-by-step table, the selection study with the CFG
    score, budgets in whole images' worth of this run's steps."""
    from t2i_audit.probes.studies.trajectory import FAMILIES, load

    arrays, rows, meta = load(fitted)
    assert len(rows) == 32 * 4 and meta["steps"] == [0, 1]
    for fam in FAMILIES:
        assert arrays[f"{fam}__t001"].shape == (len(rows), len(meta["columns"][fam]))
    b = json.loads((fitted.probes_dir / "binding.json").read_text())
    spatial = b["categories"]["spatial"]
    assert set(spatial["steps"]) == {"t000", "t001"} and "rawmaps" in spatial["first_readable"]
    fams = spatial["steps"]["t001"]["families"]
    assert {"probe", "heads", "rawmaps", "overlap", "cfg", "x0colour", "x0", "x0-fitted"} <= set(fams)
    assert all(0 <= f["auroc"]["auroc"] <= 1 and "p_holm" in f for f in fams.values())
    sel = json.loads((fitted.probes_dir / "selection.json").read_text())
    assert "cfg" in sel["categories"]["spatial"]["auroc"]  # the CFG-difference reference, once captured
    assert sel["budgets"] == [4, 6, 7, 8, 10, 12, 16]  # 1, 1.5, 1.8, 2, 2.5, 3, 4 images of 4 steps (4 seeds)
    out = fitted.study_output
    assert "binding study written" in out and "selection study written" in out
    assert "spatial (pre-registered): the pre-registered policy scans 6 seeds; this run has 4" in out


def test_study_names_steps_as_probe_early_does(fitted):
    """One numbering for a loop step (issue 37: `probe --early` printed "4/20", `select --study` "step 3"): the
    study's progress names the steps `probe --early` read, as iterations done of the loop."""
    import re

    from t2i_audit.probes.capture.early import step_label

    early = json.loads((fitted.probes_dir / "early.json").read_text())
    read = {step_label(st["iterations"] - 1, early["loop_steps"]) for r in early["categories"].values()
            for st in (r.get("steps") or {}).values()}
    assert read == {f"step 1/{STEPS}", f"step 2/{STEPS}"}
    res = CliRunner().invoke(app, ["select", "--from", str(fitted.root), "--study", "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    assert set(re.findall(r"\[selection\] \w+ (step \d+/\d+): risks", res.output)) == read, res.output
    assert f"is k of the {STEPS} loop iterations" in res.output
