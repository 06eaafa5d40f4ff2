"""The mini track's study: per-model suites, and the pre-registered settings checked before the test is read."""

from __future__ import annotations

import pytest

from t2i_audit.mini import track_demo, track_preregistered as prereg


def test_each_models_suite_holds_out_the_pairs_it_never_trained_on(tmp_path):
    from t2i_audit.api import expand_suites
    from t2i_audit.mini.sweep import HELDOUT_PAIRS, seen_pairs

    for path, cov in zip(track_demo.write_suites(tmp_path), prereg.MODELS["coverages"]):
        records = expand_suites([str(path)])
        assert len(records) == 24 and all(r["text"].split()[0] in ("a", "an") for r in records)
        seen = {(r["slots"]["c1"], r["slots"]["o1"]) for r in records if r["split"] == "train"}
        assert seen == set(seen_pairs(cov, prereg.MODELS["seed"]))
        held = {(r["slots"]["c1"], r["slots"]["o1"]) for r in records if r["split"] == "heldout"}
        assert set(HELDOUT_PAIRS) <= held and len(held) == 24 - len(seen)


def test_the_test_is_read_only_from_tracks_made_as_registered():
    ev, dec = prereg.EVALUATION, prereg.DECODABILITY
    good = {"steps": ev["steps"], "guidance": ev["guidance"], "size": ev["size"], "seed": ev["seed"],
            "scorers": [ev["scorer"]], "ema": True, "denoiser_samples": dec["samples"], "model": "x"}
    curves = {"folds": dec["n_splits"], "headline_source": "denoiser:mid@middle"}
    track_demo._check_settings(good, curves, 1.0)
    with pytest.raises(ValueError, match="not made with the registered settings"):
        track_demo._check_settings({**good, "guidance": 7.0}, curves, 1.0)
    with pytest.raises(ValueError, match="folds 5"):
        track_demo._check_settings(good, {**curves, "folds": 5}, 1.0)
