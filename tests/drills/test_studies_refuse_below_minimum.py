"""A study that cannot be computed on a run is refused with its minimum and what to do, exit 2, nothing written —
never NaN, never an empty study that exits 0 (issue 37 point 2: `select --study` on the one-image quickstart run
printed "whole images nan, +nan" with 21 NumPy warnings; `select --budget 40` then ran the random-seed policy and
printed +0.000)."""

from __future__ import annotations

import json

import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError
from t2i_audit.probes.studies import pareto
from t2i_audit.select import budget

from .test_folder_identity import _cli, _refused
from .test_malformed_corpus import _snapshot


@pytest.fixture(scope="module")
def one_image_run(tmp_path_factory):
    """4 mini-world prompts × 1 image at 2 steps, scored by the pixel judge: what the quickstart makes, small."""
    out = tmp_path_factory.mktemp("one") / "run"
    cfg = api.make_config(dict(model="mini", prompts=["mini"], limit=4, steps=2, scorers=["mini-pixel"],
                               stages=["prompts", "generate", "score"], out=str(out), device="cpu"))
    return api.run_audit(cfg, progress=False)


def test_probe_early_with_no_category_large_enough_is_refused(one_image_run, tmp_path, monkeypatch, capsys):
    code, _, err = _cli(["probe", one_image_run, "--early", "--at", "0.5", "-q"], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["no category can be studied per image", "a category needs ≥ 3 prompt groups",
                         "(-n 4) with the command that made the run"])
    assert not (one_image_run / "probes" / "early.json").exists()
    assert not (one_image_run / "probes" / "early_probes.json").exists()
    assert (one_image_run / "activations" / "early" / "meta.json").exists()  # the replay's work is kept


def test_select_study_on_one_image_per_prompt_is_refused(one_image_run, tmp_path, monkeypatch, capsys):
    if not (one_image_run / "activations" / "early" / "meta.json").exists():  # run alone: make the features
        from t2i_audit.probes.capture.early import extract_early_features
        from t2i_audit.rundir import RunDir

        extract_early_features(RunDir(one_image_run), "mini", fractions=(0.5,), previews=False, progress=False)
    before = _snapshot(one_image_run)
    for extra in ([], ["--binding"]):  # --binding would capture for minutes first: refused before that
        code, out, err = _cli(["select", "--from", one_image_run, "--study", "-q", *extra], tmp_path, monkeypatch,
                              capsys)
        _refused(code, err, ["the selection study ranks the seeds of each prompt, and this run has 1 image per "
                             "prompt (it needs ≥ 2", "with -n 8 added"])
        assert "nan" not in (out + err).lower()
    assert _snapshot(one_image_run) == before


def test_a_study_with_no_category_at_the_minimum_is_refused():
    """Two seeds per prompt, but 3 prompt groups (twin pairs): the selection study needs ≥ 5 with both outcomes."""
    from t2i_audit.rundir import RunDir

    prompts = [{"id": f"p{i}", "text": f"prompt {i}", "category": "spatial", "twin_id": f"g{i // 2}"} for i in range(6)]
    row_of = {(p["id"], k): 2 * i + k for i, p in enumerate(prompts) for k in range(2)}
    verdicts = {key: {"verdict": key[1] == 0} for key in row_of}
    with pytest.raises(AuditError, match=r"no category can be studied — spatial: 6 prompts in 3 prompt groups with every "
                                         r"seed judged, both outcomes; a category needs ≥ 5 prompt groups"):
        pareto.refuse_unless_studiable(RunDir("run"), prompts, row_of, verdicts, 2)
    many = [{"id": f"p{i}", "text": f"prompt {i}", "category": "spatial", "twin_id": f"g{i}"} for i in range(6)]
    assert set(pareto.refuse_unless_studiable(RunDir("run"), many, row_of, verdicts, 2)) == {"spatial"}


def test_select_budget_on_a_one_seed_study_is_refused(tmp_path):
    """A selection.json from before the study refused one seed per prompt: --budget refuses it too, rather than
    run the one policy it holds (a random seed) and print +0.000."""
    probes = tmp_path / "run" / "probes"
    probes.mkdir(parents=True)
    (probes / "selection.json").write_text(json.dumps({"loop_steps": 20, "seeds_per_prompt": 1}))
    (probes / "selection_outcomes.jsonl").write_text("")
    with pytest.raises(AuditError, match=r"--budget 40: .*has 1 image per prompt \(it needs ≥ 2"):
        budget.choose_for_budget(tmp_path / "run", 40.0, [{"id": "x", "category": "spatial"}])
