"""The sweep (t2i-audit mini sweep): design invariants, the fit bar, statistics pinned to scipy,
resumable workers, and a --smoke run end to end (2 coverages × 1 width × 1 seed, a few steps)."""

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
    cfg = sweep.SweepConfig()
    a, b = sweep.generator_config(cfg, 16, 0.5, 0), sweep.generator_config(cfg, 32, 1.0, 0)
    assert set(world.HELDOUT_PAIRS) <= set(a.heldout) and set(b.heldout) == set(world.HELDOUT_PAIRS)
    assert len(a.heldout) == 24 - 9 and a.steps == b.steps and a.batch == b.batch and a.seed == b.seed
    assert a.kind_weights == (1.0, 0.0, 0.0) and a.size == b.size == cfg.size
    assert a.block_out_channels == (16, 32, 32) and b.block_out_channels == (32, 64, 64)
    assert a.text_width == b.text_width and a.prediction_type == b.prediction_type == cfg.prediction_type


def test_model_jobs_put_extreme_coverages_first_with_every_width():
    cfg = sweep.SweepConfig(coverages=(0.5, 1 / 3, 1.0, 0.75), seeds=(0, 1), widths=(16, 32))
    jobs = sweep.model_jobs(cfg)
    assert jobs[:4] == [(16, 1 / 3, 0), (32, 1 / 3, 0), (16, 1.0, 0), (32, 1.0, 0)]
    assert [j[1] for j in jobs[4:8]] == [0.5, 0.5, 0.75, 0.75] and jobs[8] == (16, 1 / 3, 1)
    assert len(jobs) == len(set(jobs)) == 16
    assert len({sweep.model_name(*j) for j in jobs}) == 16


def test_default_sweep_is_the_issue_grid():
    cfg = sweep.SweepConfig()
    assert len(cfg.coverages) >= 4 and len(cfg.widths) >= 2 and len(cfg.seeds) >= 3
    assert sweep.FIT_THRESHOLD == cfg.fit_threshold == 0.80
    assert (sweep.HEADLINE_BLOCK, sweep.HEADLINE_STEP) == ("mid", "middle")


def test_pixel_judge_exact_on_renders_at_sweep_size():
    """The sweep's resolution keeps the pixel judge exact on renders: every pair's true caption
    passes, a caption with another colour or another shape fails."""
    import random

    from t2i_audit.mini.pixel_judge import prompt_passes

    cfg, rng = sweep.SweepConfig(), random.Random(5)
    size = cfg.size
    for k in range(8):
        for c, s in sweep.ALL_PAIRS:
            # the objects the sweep's models are taught (its object_size), and the world's default size
            scene = (world.sample_scene(rng, "single", exclude=[p for p in sweep.ALL_PAIRS if p != (c, s)],
                                        single_size=cfg.object_size, single_centre=cfg.object_centre)
                     if k % 2 else world.scene_for([c], [s], rng=rng))
            im = world.render(scene, size)
            assert im.size == (size, size)
            assert prompt_passes(im, world.scene_record(world.scene_for([c], [s])))
            for c2, s2 in ((next(x for x in world.COLORS if x != c), s), (c, next(x for x in world.SHAPES if x != s))):
                assert not prompt_passes(im, world.scene_record(world.scene_for([c2], [s2])))


@pytest.mark.parametrize("prediction_type", ["v_prediction", "epsilon", "sample"])
def test_training_target_is_what_diffusers_ddim_reads_back_as_x0(prediction_type):
    """x_t is DDPMScheduler.add_noise's, the v target its get_velocity, and for every prediction
    type DDIMScheduler.step (the sweep's sampler) recovers x0 from the target (diffusers'
    scheduling_ddim.py: pred_original_sample per prediction_type)."""
    import torch
    from diffusers import DDIMScheduler

    from t2i_audit.mini.components import sample_scheduler, train_scheduler
    from t2i_audit.mini.train_generator import diffusion_target

    sched = train_scheduler()
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(1, 3, 8, 8, generator=g) * 2 - 1
    noise = torch.randn(1, 3, 8, 8, generator=g)
    ddim = DDIMScheduler.from_config(sample_scheduler().config, prediction_type=prediction_type)
    ddim.set_timesteps(10)
    for t in ddim.timesteps:
        a = sched.alphas_cumprod[t].float().view(-1, 1, 1, 1)
        if prediction_type == "epsilon" and a.item() == 0:
            continue  # zero terminal SNR: x_t is pure noise, epsilon cannot give x0 (why v / sample)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        assert torch.allclose(xt, sched.add_noise(x0, noise, t.view(1)), atol=1e-6)
        target = diffusion_target(prediction_type, x0, noise, a)
        if prediction_type == "v_prediction":
            assert torch.allclose(target, sched.get_velocity(x0, noise, t.view(1)), atol=1e-6)
        back = ddim.step(target, t, xt).pred_original_sample
        assert torch.allclose(back, x0, atol=2e-4), (prediction_type, int(t))


def test_learning_rate_schedules():
    from t2i_audit.mini.train_generator import GeneratorConfig, learning_rate

    const = GeneratorConfig(lr=1e-3, warmup=10, steps=100)
    assert [learning_rate(const, s) for s in (0, 4, 9, 50, 99)] == [1e-3 * min(1.0, (s + 1) / 10)
                                                                    for s in (0, 4, 9, 50, 99)]
    cos = GeneratorConfig(lr=1e-3, warmup=10, steps=100, lr_schedule="cosine")
    lrs = [learning_rate(cos, s) for s in range(100)]
    assert lrs[:10] == [learning_rate(const, s) for s in range(10)] and lrs[10] == pytest.approx(1e-3)
    assert lrs[55] == pytest.approx(0.5e-3) and all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[99] < 1e-6


def test_holm_matches_hand_computation():
    # sorted 0.005·4=0.02, 0.01·3=0.03, 0.03·2=0.06, 0.04·1=0.04 → running max 0.06
    assert np.allclose(sweep_stats.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = sweep_stats.holm([0.5, float("nan"), 0.6])
    assert math.isnan(out[1]) and np.allclose([out[0], out[2]], [1.0, 1.0])


def _fake_model(name, cov, seed, rng, layers, width=16, seen_rate=None):
    comps = []
    for c, s in sweep.ALL_PAIRS:
        key = f"{c} {s}"
        split = "heldout" if (c, s) in world.HELDOUT_PAIRS else "seen"
        k = int(rng.integers(0, 11)) if split == "heldout" or seen_rate is None else round(10 * seen_rate)
        comps.append({"composition": key, "split": split, "k": k, "n": 10, "success": k / 10,
                      "decodability": {L: float(rng.random()) for L in layers},
                      "control_decodability": {L: float(rng.random()) for L in layers},
                      "decodability_judged_seeds": {"mid@middle": float(rng.random())},
                      "text_decodability": float(rng.random())})
    succ = {}
    for s in ("heldout", "seen", "uncovered"):
        k = sum(c["k"] for c in comps if c["split"] == s)
        n = sum(c["n"] for c in comps if c["split"] == s)
        succ[s] = {"k": k, "n": n, "rate": k / n if n else None, "ci": [None, None]}
    return {"name": name, "coverage": cov, "seed": seed, "width": width, "n_seen_pairs": 6, "status": "evaluated",
            "eval": {"layers": layers, "success": succ, "per_composition": comps},
            "fit": sweep.fit_verdict(succ["seen"], sweep.FIT_THRESHOLD)}


LAYERS = ["down0@middle", "mid@first", "mid@middle", "up0@last"]
GRID = [(w, c, s) for w in (16, 32) for c in (1 / 3, 0.5, 0.75, 1.0) for s in (0, 1)]


def test_aggregate_numbers_equal_scipy_on_the_same_points():
    """Every headline is the within-stratum figure (coverage within width, width within coverage, the link
    within coverage) and equals scipy on the same points; the pooled figures stand beside."""
    from scipy.stats import pearsonr, rankdata, spearmanr

    rng = np.random.default_rng(3)
    models = [_fake_model(f"m{i}", cov, seed, rng, LAYERS, width=w, seen_rate=0.9)
              for i, (w, cov, seed) in enumerate(GRID)]
    agg = sweep_stats.aggregate(models, sweep.SweepConfig(n_boot=200, n_perm=200), "mid@middle")
    assert agg["headline_layer"] == "mid@middle" and agg["n_models"] == 16 and agg["excluded_unfit"] == []
    held = np.array([m["eval"]["success"]["heldout"]["rate"] for m in models])

    def centred(v, strata):
        v, strata = np.asarray(v, float), np.asarray(strata)
        out = np.zeros(len(v))
        for s_ in set(strata.tolist()):
            m = strata == s_
            out[m] = rankdata(v[m]) - rankdata(v[m]).mean()
        return out

    for axis, key, other in (("coverage", "coverage", "width"), ("scale", "width", "coverage")):
        c = agg[f"heldout_success_vs_{axis}"]
        c1 = c["spearman_over_models"]["spearman"]
        assert c1["r"] == pytest.approx(spearmanr([m[key] for m in models], held)[0], abs=1e-4)
        x, st = [m[key] for m in models], [m[other] for m in models]
        assert c["within"]["strata"] == other
        assert c["within"]["within"]["rho"] == pytest.approx(pearsonr(centred(x, st), centred(held, st))[0], abs=1e-4)
        assert c["within"]["within"]["n_perm"] == 200 and 0 < c["within"]["within"]["p_perm"] <= 1
    link = agg["decodability_success_link"]
    den = link["readings"]["denoiser"]
    pts = den["points"]
    assert len(pts) == 16 * 6 and {p["composition"] for p in pts} == {f"{c} {s}" for c, s in world.HELDOUT_PAIRS}
    x, y, cov = [p["x"] for p in pts], [p["y"] for p in pts], [p["coverage"] for p in pts]
    assert den["within"]["rho"] == pytest.approx(pearsonr(centred(x, cov), centred(y, cov))[0], abs=1e-4)
    assert den["pooled"]["rho"] == pytest.approx(spearmanr(x, y)[0], abs=1e-4)
    for p in den["per_stratum"]:
        m = np.array(cov) == p["stratum"]
        assert p["rho"] == pytest.approx(spearmanr(np.array(x)[m], np.array(y)[m])[0], abs=1e-4)
    assert den["strata"] == "coverage" and den["n_clusters"] == 6 and den["within"]["ci"][0] is not None
    text = [c["text_decodability"] for m in models for c in m["eval"]["per_composition"] if c["split"] == "heldout"]
    assert link["readings"]["text_encoder"]["within"]["rho"] == pytest.approx(
        pearsonr(centred(text, cov), centred(y, cov))[0], abs=1e-4)
    assert set(link["readings"]) == {"denoiser", "text_encoder", "judged_seeds", "control"}
    assert set(link["exploration"]) == set(LAYERS) - {"mid@middle"}
    raw = [link["exploration"][L]["p_perm"] for L in sorted(link["exploration"])]
    assert [link["exploration"][L]["p_holm"] for L in sorted(link["exploration"])] == pytest.approx(
        sweep_stats.holm(raw), abs=1e-4)
    assert [p["coverage"] for p in link["per_coverage"]] == [1 / 3, 0.5, 0.75, 1.0]
    per = agg["per_coverage"]
    assert [p["coverage"] for p in per] == [1 / 3, 0.5, 0.75, 1.0] and all(p["n_models"] == 4 for p in per)
    assert [(p["width"], p["n_models"]) for p in agg["per_width"]] == [(16, 8), (32, 8)]
    assert len(agg["per_cell"]) == 8 and all(p["n_models"] == 2 for p in agg["per_cell"])
    k = sum(m["eval"]["success"]["heldout"]["k"] for m in models if m["coverage"] == 1 / 3)
    h0 = per[0]["heldout"]
    assert h0["k"] == k and h0["ci"][0] <= h0["rate"] <= h0["ci"][1]


def test_the_link_is_read_within_coverage_not_through_it():
    """Success and decodability both rise with coverage and are unrelated within it: the pooled ρ is large, the
    within-coverage headline is not (the confound issue 35 found in the committed sweep)."""
    rng = np.random.default_rng(5)
    models = [_fake_model(f"m{i}", cov, seed, rng, LAYERS, width=w, seen_rate=0.9)
              for i, (w, cov, seed) in enumerate(GRID)]
    for m in models:
        for c in m["eval"]["per_composition"]:
            c["success"] = min(1.0, m["coverage"] * 0.8 + 0.1 * rng.random())
            c["decodability"]["mid@middle"] = m["coverage"] * 0.5 + 0.1 * rng.random()
    den = sweep_stats.aggregate(models, sweep.SweepConfig(n_boot=200, n_perm=500), "mid@middle")[
        "decodability_success_link"]["readings"]["denoiser"]
    assert den["pooled"]["rho"] > 0.8
    assert abs(den["within"]["rho"]) < 0.25 and den["within"]["p_perm"] > 0.01


def test_a_model_below_the_fit_bar_is_flagged_and_excluded_from_every_claim():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(4)
    models = [_fake_model(f"m{i}", cov, seed, rng, LAYERS, width=w, seen_rate=0.9)
              for i, (w, cov, seed) in enumerate(GRID)]
    models[3] = _fake_model("unfit", 0.5, 1, rng, LAYERS, width=16, seen_rate=0.7)
    assert models[3]["fit"] == {"fits": False, "threshold": 0.8, "seen_success": 0.7}
    assert models[2]["fit"]["fits"] and sweep.fit_verdict({"rate": 0.8}, 0.8)["fits"]
    agg = sweep_stats.aggregate(models, sweep.SweepConfig(n_boot=200, n_perm=200), "mid@middle")
    assert agg["n_models_evaluated"] == 16 and agg["n_models"] == 15
    assert agg["excluded_unfit"] == [{"name": "unfit", "seen_success": 0.7}]
    fit = [m for m in models if m["name"] != "unfit"]
    c1 = agg["heldout_success_vs_coverage"]["spearman_over_models"]
    assert c1["n"] == 15 and c1["spearman"]["r"] == pytest.approx(
        spearmanr([m["coverage"] for m in fit], [m["eval"]["success"]["heldout"]["rate"] for m in fit])[0], abs=1e-4)
    pts = agg["decodability_success_link"]["readings"]["denoiser"]["points"]
    assert len(pts) == 15 * 6 and "unfit" not in {p["model"] for p in pts}
    cell = next(p for p in agg["per_cell"] if p["width"] == 16 and p["coverage"] == 0.5)
    assert cell["n_models"] == 1 and cell["seeds"] == [0]
    from t2i_audit.mini.sweep_page import render_page

    res = {"aggregate": agg, "config": json.loads(json.dumps(vars(sweep.SweepConfig()), default=list)),
           "design": {"space": "s", "heldout_pairs": ["red triangle"], "coverage": "c", "scale": "w", "compute": "x",
                      "fit": "f", "headline_layer": "mid@middle", "preregistered": "p"},
           "models": models, "models_expected": 16, "complete": True, "created": "now"}
    for m in models:
        m.update(folder=f"models/{m['name']}", train={"steps": 1, "cpu_seconds": 1.0})
        for L in LAYERS:
            m["eval"].setdefault("decodability", {})[L] = {
                t: {"heldout": {"accuracy": 0.5}, "control_accuracy": 0.2} for t in ("color", "shape")}
    page = render_page(res, {})
    assert "1 of 16 evaluated models do not fit" in page and "unfit (0.70)" in page
    assert page.count("NO — excluded") == 1


def _sweep_cli(*args):
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    return CliRunner().invoke(app, ["mini", "sweep", *map(str, args)])


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """2 models (2 coverages × 1 width × 1 seed), fit bar 0 so that the claims are computed."""
    out = tmp_path_factory.mktemp("sweep")
    res = _sweep_cli("--out", out, "--smoke", "--fit-threshold", 0)
    assert res.exit_code == 0, res.output
    return out, res.output


def _ordered(ci, rate):
    return ci[0] is None or ci[0] - 1e-9 <= rate <= ci[1] + 1e-9


def test_smoke_sweep_end_to_end(smoke_run):
    out, output = smoke_run
    data = json.loads((out / "sweep.json").read_text())
    assert data["config"]["smoke"] and data["complete"] and data["models_expected"] == 2
    assert [m["coverage"] for m in data["models"]] == [0.5, 1.0] and {m["width"] for m in data["models"]} == {8}
    held = {f"{c} {s}" for c, s in world.HELDOUT_PAIRS}
    size = data["config"]["size"]
    for m in data["models"]:
        assert set(m["heldout_pairs"]) == held and not held & set(m["seen_pairs"])
        card = json.loads((out / m["folder"] / "card.json").read_text())
        # what the trainer excluded = held-out ∪ pairs outside the coverage
        assert {f"{c} {s}" for c, s in card["heldout_pairs"]} == held | set(m["uncovered_pairs"])
        assert card["config"]["size"] == size and card["config"]["block_out_channels"] == [8, 16, 16]
        assert card["scheduler"]["prediction_type"] == data["config"]["prediction_type"]
        assert len(m["seen_pairs"]) == m["n_seen_pairs"] == round(m["coverage"] * 18)
        e = m["eval"]
        assert e["success"]["heldout"]["n"] == 6 * data["config"]["samples"]
        for s in ("heldout", "seen", "uncovered"):
            r = e["success"][s]
            if r["n"]:
                assert _ordered(r["ci"], r["rate"]) and r["rate"] == pytest.approx(r["k"] / r["n"], abs=1e-4)
        assert m["fit"] == {"fits": True, "threshold": 0.0, "seen_success": e["success"]["seen"]["rate"]}
        assert "mid@middle" in e["layers"] and len(e["layers"]) % 3 == 0
        d = e["decodability"]["mid@middle"]
        assert 0 <= d["color"]["heldout"]["accuracy"] <= 1
        assert d["color"]["chance_uniform"] == pytest.approx(1 / 6, abs=1e-3)
        assert sorted(c["composition"] for c in e["per_composition"] if c["split"] == "heldout") == sorted(held)
        assert all(0 <= c["control_decodability"]["mid@middle"] <= 1 for c in e["per_composition"])
        # decodability from other seeds than the judged; the references beside it
        assert all(c["n"] == data["config"]["samples"] for c in e["per_composition"])
        assert data["config"]["decode_samples"] == 2 and "never judged" in e["seeds"]["decoded"]
        assert all(0 <= c["text_decodability"] <= 1 and 0 <= c["decodability_judged_seeds"]["mid@middle"] <= 1
                   for c in e["per_composition"])
    agg = data["aggregate"]
    assert agg["headline_layer"] == "mid@middle" and agg["n_models"] == 2
    assert agg["decodability_success_link"]["readings"]["denoiser"]["strata"] == "coverage"
    cu, cards = data["compute"], [json.loads((out / m["folder"] / "card.json").read_text()) for m in data["models"]]
    assert cu["models_counted"] == 2 and cu["train_cpu_seconds"] == pytest.approx(sum(c["cpu_seconds"] for c in cards))
    assert cu["minutes_on_2_cores"] == pytest.approx(
        (cu["train_cpu_seconds"] + sum(m["eval"]["eval_cpu_seconds"] for m in data["models"])) / 120, abs=0.06)
    page = (out / "index.html").read_text()
    assert "Pre-registered headline layer" in page and "SMOKE run" in page and "NO — excluded" not in page
    assert "within coverage" in page and "Text encoder only" in page
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
    from t2i_audit.mini.sweep_eval import eval_prompts, image_seed

    out, _ = smoke_run
    data = json.loads((out / "sweep.json").read_text())
    cfg, m = data["config"], data["models"][0]
    pipe = load_pipeline(out / m["folder"])
    pipe.set_progress_bar_config(disable=True)
    prompts = eval_prompts()
    i = 2  # "a red triangle": held-out
    assert prompts[i]["text"] == "a red triangle"
    gens = [torch.Generator().manual_seed(image_seed(i, k)) for k in range(cfg["samples"])]
    ims = pipe([prompts[i]["text"]] * cfg["samples"], generator=gens, num_inference_steps=cfg["eval_steps"],
               guidance_scale=cfg["guidance"], height=cfg["size"], width=cfg["size"]).images
    assert ims[0].size == (cfg["size"], cfg["size"])
    stored = next(c for c in m["eval"]["per_composition"] if c["composition"] == "red triangle")
    assert stored["k"] == sum(prompt_passes(im, prompts[i]) for im in ims) and stored["n"] == cfg["samples"]


def test_smoke_text_reference_is_what_the_unet_receives(smoke_run):
    """The text-encoder reference's features are the conditioning the UNet's cross-attention gets in a plain
    pipeline call (the conditional half of encoder_hidden_states under guidance), not a re-encoding."""
    import torch

    from t2i_audit.mini.components import load_pipeline
    from t2i_audit.mini.sweep_eval import eval_prompts, text_features

    out, _ = smoke_run
    data = json.loads((out / "sweep.json").read_text())
    cfg = data["config"]
    pipe = load_pipeline(out / data["models"][0]["folder"])
    texts = [p["text"] for p in eval_prompts()[:3]]
    seen = []
    hook = pipe.unet.register_forward_pre_hook(
        lambda _m, args, kw: seen.append(kw["encoder_hidden_states"].detach().clone()), with_kwargs=True)
    try:
        pipe(texts, num_inference_steps=1, guidance_scale=cfg["guidance"], height=cfg["size"], width=cfg["size"],
             generator=torch.Generator().manual_seed(0))
    finally:
        hook.remove()
    cond = seen[0][len(texts):].reshape(len(texts), -1).numpy()  # [unconditional, conditional]
    np.testing.assert_allclose(text_features(pipe, texts), cond, rtol=0, atol=1e-6)


def test_smoke_sweep_resumes_without_retraining_and_flags_unfit_models(smoke_run):
    out, _ = smoke_run
    before = json.loads((out / "sweep.json").read_text())
    res = _sweep_cli("--out", out, "--smoke")  # the default bar: 3-step models do not fit
    assert res.exit_code == 0, res.output
    assert res.output.count("done, skipped") == 2 and "evaluating" not in res.output and "training" not in res.output
    assert res.output.count("does NOT fit: excluded") == 2
    after = json.loads((out / "sweep.json").read_text())
    assert [m["eval"] for m in after["models"]] == [m["eval"] for m in before["models"]]
    assert [m["fit"]["fits"] for m in after["models"]] == [False, False]
    agg = after["aggregate"]
    assert agg["n_models"] == 0 and agg["n_models_evaluated"] == 2 and len(agg["excluded_unfit"]) == 2
    assert "heldout_success_vs_coverage" not in agg
    page = (out / "index.html").read_text()
    assert page.count("NO — excluded") == 2 and "no claim is read" in page


def test_smoke_sweep_refuses_a_model_folder_of_other_settings(smoke_run):
    out, _ = smoke_run
    card = (out / "models" / "w8_cov050_seed0" / "card.json").read_bytes()
    from t2i_audit.errors import AuditError

    res = _sweep_cli("--out", out, "--smoke", "--steps", 4)  # AuditError: the CLI's main prints it, exit 2
    assert isinstance(res.exception, AuditError)
    assert "w8_cov050_seed0: trained with other settings (steps: 3 → 4" in str(res.exception)
    assert "training" not in res.output  # refused before any work
    assert (out / "models" / "w8_cov050_seed0" / "card.json").read_bytes() == card  # nothing overwritten


def test_a_model_to_evaluate_without_its_weights_is_trained_again_and_only_that_one(smoke_run):
    out, _ = smoke_run
    folder = out / "models" / "w8_cov050_seed0"
    (folder / "sweep_eval.json").unlink()
    (folder / "unet" / "diffusion_pytorch_model.safetensors").unlink()  # as in a checkout of reports/sweep
    (out / "models" / "w8_cov100_seed0" / "unet" / "diffusion_pytorch_model.safetensors").unlink()  # evaluated
    res = _sweep_cli("--out", out, "--smoke", "--fit-threshold", 0)
    assert res.exit_code == 0, res.output
    assert "w8_cov050_seed0: training" in res.output and "w8_cov100_seed0: done, skipped" in res.output
    assert res.output.count("training") == 1 and res.output.count("evaluating") == 1
    assert (folder / "sweep_eval.json").is_file() and json.loads((out / "sweep.json").read_text())["complete"]


def test_train_only_trains_an_evaluated_model_whose_weights_are_gone(smoke_run):
    """A checkout of reports/sweep has evaluations but no weights: --train-only makes them (for a
    later --eval-only), it does not skip the model as done."""
    out, _ = smoke_run
    (out / "models" / "w8_cov100_seed0" / "unet" / "diffusion_pytorch_model.safetensors").unlink(missing_ok=True)
    res = _sweep_cli("--out", out, "--smoke", "--fit-threshold", 0, "--train-only")
    assert res.exit_code == 0, res.output
    assert "w8_cov100_seed0: training" in res.output and "w8_cov050_seed0: done, skipped" in res.output
    assert "evaluating" not in res.output
    assert (out / "models" / "w8_cov100_seed0" / "unet" / "diffusion_pytorch_model.safetensors").is_file()


def test_a_model_held_by_another_worker_is_skipped(tmp_path):
    from t2i_audit.mini import sweep_work

    cfg = sweep.smoke_sweep_config(coverages=(1.0,))
    logs = []
    with sweep_work.model_lock(tmp_path, "w8_cov100_seed0") as mine:
        assert mine
        sweep_work.work(tmp_path, cfg, log=logs.append)  # the same process's second flock on a new fd fails
    assert logs == ["w8_cov100_seed0: held by another worker, skipped"]
    assert not (tmp_path / "models").exists()


def test_two_worker_processes_share_the_models_without_training_one_twice(tmp_path, capfd):
    res = _sweep_cli("--out", tmp_path, "--smoke", "--workers", 2, "--fit-threshold", 0)
    assert res.exit_code == 0, res.output
    children = capfd.readouterr().out  # the workers print to the process's stdout, not CliRunner's
    trained = re.findall(r"\[worker \d\] (w8_cov\d+_seed0): training", children)
    assert sorted(trained) == ["w8_cov050_seed0", "w8_cov100_seed0"]  # each model once, by one worker
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["complete"] and data["config"]["workers"] == 2
    assert all((tmp_path / m["folder"] / "sweep_eval.json").is_file() for m in data["models"])


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


def test_sweep_models_are_taught_the_sweeps_object_size():
    """Each model's training config carries the sweep's object size and centre range (recorded in its card,
    so a sweep with other objects never reuses it)."""
    import random

    cfg = sweep.SweepConfig()
    g = sweep.generator_config(cfg, 16, 1.0, 0)
    assert (g.single_size, g.single_centre) == (tuple(cfg.object_size), tuple(cfg.object_centre))
    scenes = [world.sample_scene(random.Random(i), "single", single_size=g.single_size,
                                 single_centre=g.single_centre) for i in range(200)]
    sides = [o.size for sc in scenes for o in sc.objects]
    assert cfg.object_size[0] <= min(sides) and max(sides) <= cfg.object_size[1]
    # the world's default draws are unchanged (the shipped mini generator's training data)
    assert world.sample_scene(random.Random(3), "single") == world.sample_scene(
        random.Random(3), "single", single_size=(0.36, 0.5), single_centre=(0.38, 0.62))


def test_a_card_from_before_a_setting_existed_compares_at_its_default(tmp_path):
    """A model trained before GeneratorConfig had ``single_size``/``single_centre`` (its card lacks them) was
    trained at their defaults: it is reused by a sweep asking for those, and refused, naming the setting, by a
    sweep with larger objects — never reused or overwritten."""
    from t2i_audit.errors import AuditError
    from t2i_audit.mini.sweep_work import _as_stored, trained_card

    old_objects = sweep.SweepConfig(object_size=(0.36, 0.5), object_centre=(0.38, 0.62))
    config = _as_stored(sweep.generator_config(old_objects, 16, 1.0, 0))
    del config["single_size"], config["single_centre"]
    (tmp_path / "card.json").write_text(json.dumps({"final": True, "steps": 2500, "config": config}))
    assert trained_card(tmp_path, sweep.generator_config(old_objects, 16, 1.0, 0))["steps"] == 2500
    with pytest.raises(AuditError, match=r"single_size: \[0\.36, 0\.5\] → \[0\.6, 0\.75\]"):
        trained_card(tmp_path, sweep.generator_config(sweep.SweepConfig(), 16, 1.0, 0))
