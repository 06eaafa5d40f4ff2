"""The coverage sweep (t2i-audit mini sweep): design invariants, statistics pinned to scipy,
and a --smoke run end to end (2 coverages × 1 seed, a few steps)."""

import json
import math
import re

import numpy as np
import pytest

from t2i_audit.mini import sweep, sweep_stats, world


def test_coverage_subsets_nested_cover_constituents_and_never_touch_heldout():
    for seed in (0, 1, 2):
        prev: list = []
        for cov in (1 / 3, 0.5, 0.75, 1.0):
            seen = sweep.seen_pairs(cov, seed)
            assert seen[:len(prev)] == prev  # nested for one seed
            assert not set(seen) & set(world.HELDOUT_PAIRS)
            assert {c for c, _ in seen} == set(world.COLORS) and {s for _, s in seen} == set(world.SHAPES)
            prev = seen
        assert len(prev) == 18 and set(prev) == set(sweep.TRAINABLE_PAIRS)
    assert [len(sweep.seen_pairs(c, 0)) for c in (1 / 3, 0.5, 0.75, 1.0)] == [6, 9, 14, 18]
    assert sweep.pair_order(0) != sweep.pair_order(1)
    with pytest.raises(ValueError, match="coverage"):
        sweep.seen_pairs(0.0, 0)


def test_generator_config_excludes_heldout_and_uncovered_pairs_with_equal_compute():
    a, b = sweep.generator_config(sweep.SweepConfig(), 0.5, 0), sweep.generator_config(sweep.SweepConfig(), 1.0, 0)
    assert set(world.HELDOUT_PAIRS) <= set(a.heldout) and set(b.heldout) == set(world.HELDOUT_PAIRS)
    assert len(a.heldout) == 24 - 9 and a.steps == b.steps and a.batch == b.batch and a.seed == b.seed
    assert a.kind_weights == (1.0, 0.0, 0.0)


def test_training_order_puts_extreme_coverages_first():
    order = sweep.training_order(sweep.SweepConfig(coverages=(0.5, 1 / 3, 1.0, 0.75), seeds=(0, 1)))
    assert order[:4] == [(1 / 3, 0), (1.0, 0), (0.5, 0), (0.75, 0)] and order[4:6] == [(1 / 3, 1), (1.0, 1)]


def test_holm_matches_hand_computation():
    # sorted 0.005·4=0.02, 0.01·3=0.03, 0.03·2=0.06, 0.04·1=0.04 → running max 0.06
    assert np.allclose(sweep_stats.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = sweep_stats.holm([0.5, float("nan"), 0.6])
    assert math.isnan(out[1]) and np.allclose([out[0], out[2]], [1.0, 1.0])


def _fake_model(name, cov, seed, rng, layers):
    comps = []
    for c, s in sweep.ALL_PAIRS:
        key = f"{c} {s}"
        split = "heldout" if (c, s) in world.HELDOUT_PAIRS else "seen"
        k = int(rng.integers(0, 11))
        comps.append({"composition": key, "split": split, "k": k, "n": 10, "success": k / 10,
                      "decodability": {L: float(rng.random()) for L in layers}})
    succ = {}
    for s in ("heldout", "seen", "uncovered"):
        k = sum(c["k"] for c in comps if c["split"] == s)
        n = sum(c["n"] for c in comps if c["split"] == s)
        succ[s] = {"k": k, "n": n, "rate": k / n if n else None, "ci": [None, None]}
    return {"name": name, "coverage": cov, "seed": seed, "n_seen_pairs": 6, "status": "evaluated",
            "eval": {"layers": layers, "success": succ, "per_composition": comps}}


def test_aggregate_numbers_equal_scipy_on_the_same_points():
    from scipy.stats import spearmanr

    layers = ["down0@middle", "mid@first", "mid@middle", "up0@last"]
    rng = np.random.default_rng(3)
    models = [_fake_model(f"m{i}", cov, seed, rng, layers)
              for i, (cov, seed) in enumerate([(c, s) for c in (1 / 3, 0.5, 0.75, 1.0) for s in (0, 1)])]
    agg = sweep_stats.aggregate(models, sweep.SweepConfig(n_boot=200, n_perm=200), "mid@middle")
    assert agg["headline_layer"] == "mid@middle" and agg["n_models"] == 8
    c1 = agg["claim1_heldout_success_vs_coverage"]["spearman_over_models"]["spearman"]
    held = [m["eval"]["success"]["heldout"]["rate"] for m in models]
    assert c1["r"] == pytest.approx(spearmanr([m["coverage"] for m in models], held)[0], abs=1e-4)
    assert c1["ci"][0] <= c1["r"] <= c1["ci"][1] and 0 < c1["p_perm"] <= 1
    c2 = agg["claim2_decodability_vs_success_heldout"]
    pts = c2["headline"]["points"]
    assert len(pts) == 8 * 6 and {p["composition"] for p in pts} == {f"{c} {s}" for c, s in world.HELDOUT_PAIRS}
    assert c2["headline"]["spearman"]["r"] == pytest.approx(
        spearmanr([p["x"] for p in pts], [p["y"] for p in pts])[0], abs=1e-4)
    assert set(c2["exploration"]) == set(layers) - {"mid@middle"}
    raw = [c2["exploration"][L]["spearman"]["p_perm"] for L in sorted(c2["exploration"])]
    assert [c2["exploration"][L]["spearman"]["p_holm"] for L in sorted(c2["exploration"])] == pytest.approx(
        sweep_stats.holm(raw), abs=1e-4)
    per = agg["claim1_heldout_success_vs_coverage"]["per_coverage"]
    assert [p["coverage"] for p in per] == [round(1 / 3, 4), 0.5, 0.75, 1.0] and all(p["n_models"] == 2 for p in per)
    k = sum(m["eval"]["success"]["heldout"]["k"] for m in models[:2])
    h0 = per[0]["heldout"]
    assert h0["k"] == k and h0["ci"][0] <= h0["rate"] <= h0["ci"][1]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    out = tmp_path_factory.mktemp("sweep")
    res = CliRunner().invoke(app, ["mini", "sweep", "--out", str(out), "--smoke"])
    assert res.exit_code == 0, res.output
    return out, res.output


def _ordered(ci, rate):
    return ci[0] is None or ci[0] - 1e-9 <= rate <= ci[1] + 1e-9


def test_smoke_sweep_end_to_end(smoke_run):
    out, output = smoke_run
    data = json.loads((out / "sweep.json").read_text())
    assert data["config"]["smoke"] and data["complete"] and data["models_expected"] == 2
    assert [m["coverage"] for m in data["models"]] == [0.5, 1.0]
    held = {f"{c} {s}" for c, s in world.HELDOUT_PAIRS}
    for m in data["models"]:
        assert set(m["heldout_pairs"]) == held and not held & set(m["seen_pairs"])
        card = json.loads((out / m["folder"] / "card.json").read_text())
        # what the trainer excluded = held-out ∪ pairs outside the coverage
        assert {f"{c} {s}" for c, s in card["heldout_pairs"]} == held | set(m["uncovered_pairs"])
        assert len(m["seen_pairs"]) == m["n_seen_pairs"] == round(m["coverage"] * 18)
        e = m["eval"]
        assert e["success"]["heldout"]["n"] == 6 * data["config"]["samples"]
        for s in ("heldout", "seen", "uncovered"):
            r = e["success"][s]
            if r["n"]:
                assert _ordered(r["ci"], r["rate"]) and r["rate"] == pytest.approx(r["k"] / r["n"], abs=1e-4)
        assert "mid@middle" in e["layers"] and len(e["layers"]) % 3 == 0
        d = e["decodability"]["mid@middle"]
        assert 0 <= d["color"]["heldout"]["accuracy"] <= 1
        assert d["color"]["chance_uniform"] == pytest.approx(1 / 6, abs=1e-3)
        assert sorted(c["composition"] for c in e["per_composition"] if c["split"] == "heldout") == sorted(held)
    agg = data["aggregate"]
    assert agg["headline_layer"] == "mid@middle" and agg["n_models"] == 2
    page = (out / "index.html").read_text()
    assert "Pre-registered headline layer" in page and "SMOKE run" in page
    r = data["models"][0]["eval"]["success"]["heldout"]
    assert f"({r['k']}/{r['n']})" in page and "https://" not in page and "<script src" not in page
    assert len(re.findall(r"<svg class=\"chart\"", page)) == 2 and "&lt;svg" not in page  # not escaped
    assert "data:image/png;base64," in page


def test_smoke_success_equals_plain_pipeline_call_judged_again(smoke_run):
    """The hooked generation's images are the pipeline's own: regenerate one composition's samples
    with a plain pipeline call and the same seeds; the pixel judge gives the stored count."""
    import torch

    from t2i_audit.mini.components import load_pipeline
    from t2i_audit.mini.pixel_judge import prompt_passes

    out, _ = smoke_run
    data = json.loads((out / "sweep.json").read_text())
    cfg, m = data["config"], data["models"][0]
    pipe = load_pipeline(out / m["folder"])
    pipe.set_progress_bar_config(disable=True)
    prompts = sweep.eval_prompts()
    i = 2  # "a red triangle": held-out
    assert prompts[i]["text"] == "a red triangle"
    gens = [torch.Generator().manual_seed(7919 * k + i) for k in range(cfg["samples"])]
    ims = pipe([prompts[i]["text"]] * cfg["samples"], generator=gens, num_inference_steps=cfg["eval_steps"],
               guidance_scale=cfg["guidance"], height=32, width=32).images
    stored = next(c for c in m["eval"]["per_composition"] if c["composition"] == "red triangle")
    assert stored["k"] == sum(prompt_passes(im, prompts[i]) for im in ims) and stored["n"] == cfg["samples"]


def test_smoke_sweep_resumes_without_retraining(smoke_run):
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    out, _ = smoke_run
    before = json.loads((out / "sweep.json").read_text())
    res = CliRunner().invoke(app, ["mini", "sweep", "--out", str(out), "--smoke"])
    assert res.exit_code == 0, res.output
    assert res.output.count("done, skipped") == 2 and "evaluating" not in res.output
    after = json.loads((out / "sweep.json").read_text())
    assert after["models"] == before["models"]


def test_bootstrap_ci_where_scipy_gives_nan_equals_a_scipy_loop_over_defined_resamples():
    from scipy.stats import spearmanr

    x, y = [1 / 3, 0.5, 0.75, 1.0, 1 / 3, 0.5], [0.25, 0.0, 0.0, 0.0, 0.1, 0.0]  # mostly ties at 0
    res = sweep_stats._corr(x, y, sweep.SweepConfig(n_boot=300, n_perm=300))["spearman"]
    assert res["r"] == pytest.approx(spearmanr(x, y)[0], abs=1e-4)
    assert res["ci_method"].endswith("dropped") and 0 < res["ci_resamples_used"] < 300
    idx = np.random.default_rng(0).integers(0, 6, (300, 6))
    xa, ya = np.asarray(x)[idx], np.asarray(y)[idx]
    rs = [spearmanr(a, b)[0] for a, b in zip(xa, ya) if np.ptp(a) > 0 and np.ptp(b) > 0]
    assert len(rs) == res["ci_resamples_used"]
    assert res["ci"] == pytest.approx(list(np.quantile(rs, [0.025, 0.975])), abs=1e-4)
