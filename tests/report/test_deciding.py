"""One rule picks the scorer deciding each category (t2i_audit/deciding.py): measured agreement,
never name order; the run report, compare and the probe labels all follow it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from synth import make_prompts, make_run

from t2i_audit import deciding as rule
from t2i_audit.report import compare_runs, render_report
from t2i_audit.rundir import RunDir, atomic_write_json, read_jsonl
from t2i_audit.scorers import default_scorers, load_cards

CATS = ("color_binding", "counting", "spatial")


def _calibration(run: Path, entries: dict) -> None:
    """calibration/report.json as `t2i-audit calibrate` writes it: scorer -> level -> category."""
    atomic_write_json(Path(run) / "calibration" / "report.json", {
        "labels": "labels.csv", "positive": 0.5, "n_labels": 100,
        "scorers": {name: {"matched": 100, "unmatched": 0, "levels": {"prompt": cats}}
                    for name, cats in entries.items()}})


def _prompt_verdicts(run: Path, scorer: str) -> dict:
    return {(r["prompt_id"], r["sample"]): r["verdict"] for r in read_jsonl(Path(run) / "scores" / f"{scorer}.jsonl")
            if r["kind"] == "prompt"}


@pytest.fixture(scope="module")
def mini_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("deciding")
    prompts = make_prompts(n_binding=8, n_rel=6, n_count=4)
    a = make_run(root / "a", prompts=prompts, scorers=("mini-judge", "mini-pixel"), model="mini-a",
                 probes=False, size=16)
    b = make_run(root / "b", prompts=prompts, scorers=("mini-judge", "mini-pixel"), model="mini-b",
                 skill=0.7, probes=False, size=16)
    return a, b


# --- the rule on synthetic evidence -----------------------------------------------------------
CARDS = {
    "judge-a": {"name": "judge-a", "family": "clip",
                "known_agreement": {"overall": {"accuracy": 0.83, "kappa": 0.53, "n": 235},
                                    "chance_on": ["relation"]}},
    "judge-b": {"name": "judge-b", "family": "detect",
                "known_agreement": {"overall": {"accuracy": 0.975, "kappa": 0.90, "n": 235}}},
}
BOTH = [{"judge-a": {c: 10 for c in CATS}, "judge-b": {c: 10 for c in CATS}}]


def test_card_agreement_decides_and_chance_never_does(tmp_path):
    d = rule.deciding_scorers([tmp_path], CATS, decided=BOTH, cards=CARDS, defaults={})
    assert {c: d[c]["scorer"] for c in CATS} == {c: "judge-b" for c in CATS}
    assert d["color_binding"]["source"] == rule.SOURCE_CARD and d["color_binding"]["agreement"]["kappa"] == 0.90
    assert "κ 0.90" in d["color_binding"]["why"] and "judge-a κ 0.53" in d["color_binding"]["why"]
    # judge-a alone: it decides colours, but never spatial (its card says chance on relations)
    alone = [{"judge-a": {c: 10 for c in CATS}}]
    d = rule.deciding_scorers([tmp_path], CATS, decided=alone, cards=CARDS, defaults={})
    assert d["color_binding"]["scorer"] == "judge-a"
    assert d["spatial"]["scorer"] is None and "at chance on relation" in d["spatial"]["why"]


def test_calibration_on_the_run_beats_the_card(tmp_path):
    # measured here: judge-a agrees better on colour binding than judge-b, whose card says more
    _calibration(tmp_path, {"judge-a": {"color_binding": {"n": 60, "accuracy": 0.95, "kappa": 0.85}},
                            "judge-b": {"color_binding": {"n": 60, "accuracy": 0.70, "kappa": 0.35},
                                        "counting": {"n": 5, "accuracy": 0.1, "kappa": 0.0}}})
    d = rule.deciding_scorers([tmp_path], CATS, decided=BOTH, cards=CARDS, defaults={})
    assert d["color_binding"]["scorer"] == "judge-a"
    assert d["color_binding"]["source"] == rule.SOURCE_RUN and d["color_binding"]["agreement"]["n"] == 60
    # 5 labels are below MIN_LABELS: no evidence, the card still decides counting
    assert d["counting"]["scorer"] == "judge-b" and d["counting"]["source"] == rule.SOURCE_CARD
    # calibration at chance excludes even a scorer whose card is good
    _calibration(tmp_path, {"judge-b": {"counting": {"n": 50, "accuracy": 0.55, "kappa": 0.04}}})
    d = rule.deciding_scorers([tmp_path], CATS, decided=BOTH, cards=CARDS, defaults={})
    assert d["counting"]["scorer"] == "judge-a" and "judge-b" in d["counting"]["excluded"]


def test_a_partial_or_constant_calibration_does_not_overturn_a_card(tmp_path):
    """Issue 37: 300 labels, all "yes", gave κ 0.000 and set the 97 %-accurate judge aside as at chance; the
    headline lost two categories. κ on constant labels is undefined — no evidence — and fewer than
    MIN_LABELS_OVER_CARD labels never replace a card's measured agreement (the reason says so)."""
    _calibration(tmp_path, {"judge-b": {"color_binding": {"n": 300, "accuracy": 0.97, "kappa": None,
                                                          "undefined": {"kappa": "undefined: every label is 1"}},
                                        "counting": {"n": 30, "accuracy": 0.5, "kappa": 0.02}}})
    d = rule.deciding_scorers([tmp_path], CATS, decided=BOTH, cards=CARDS, defaults={})
    assert d["color_binding"]["scorer"] == "judge-b" and d["color_binding"]["source"] == rule.SOURCE_CARD
    assert d["color_binding"]["agreement"]["kappa"] == 0.90
    assert d["counting"]["scorer"] == "judge-b" and d["counting"]["source"] == rule.SOURCE_CARD
    assert "set aside: fewer than 50 labels do not replace the card's measured agreement" in d["counting"]["why"]
    # without a card's measured agreement, 10 labels of both kinds are evidence as before
    bare = {n: {"name": n, "family": c["family"]} for n, c in CARDS.items()}
    d = rule.deciding_scorers([tmp_path], CATS, decided=BOTH, cards=bare, defaults={})
    assert "judge-b" in d["counting"]["excluded"] and d["counting"]["scorer"] == "judge-a"


@pytest.mark.parametrize("names", [("aaa", "zzz"), ("zzz", "aaa")])
def test_no_name_order_renaming_keeps_the_choice(tmp_path, names):
    """Without evidence the family decides (VLM judge for bindings, detection for counts);
    with evidence the numbers do — whatever the scorers are called."""
    vlm, det = names
    cards = {vlm: {"name": vlm, "family": "vqa", "class": "t2i_audit.scorers.vlm:VlmJudge"},
             det: {"name": det, "family": "detect"}}
    dec = [{vlm: {c: 10 for c in CATS}, det: {c: 10 for c in CATS}}]
    d = rule.deciding_scorers([tmp_path], CATS, decided=dec, cards=cards, defaults={})
    assert d["color_binding"]["scorer"] == vlm and d["counting"]["scorer"] == det
    assert d["spatial"]["scorer"] == det and d["spatial"]["source"] == rule.SOURCE_NONE
    assert "no agreement evidence" in d["color_binding"]["why"]
    # equal kinds, numbers on the cards: the better agreement wins under either name
    cards = {vlm: {"name": vlm, "known_agreement": {"overall": {"accuracy": 0.9, "kappa": 0.7}}},
             det: {"name": det, "known_agreement": {"overall": {"accuracy": 0.8, "kappa": 0.4}}}}
    d = rule.deciding_scorers([tmp_path], CATS, decided=dec, cards=cards, defaults={})
    assert {d[c]["scorer"] for c in CATS} == {vlm}


def test_aspects_of_category_names():
    assert {"spatial", "relation", "color", "attribute"} <= rule.category_aspects("color_spatial")
    assert rule.is_detection_category("count_color") and rule.is_detection_category("spatial")
    assert not rule.is_detection_category("texture_binding") and not rule.is_detection_category("action")


# --- defaults and cards ---------------------------------------------------------------------------
def test_defaults_per_category_pinned():
    cards = load_cards()
    detector = "geneval" if "geneval" in cards else "detect-owlv2"
    assert default_scorers({"color_binding", "action", "texture", "shape_binding"}) == ["qwen3-vl-8b"]
    assert default_scorers({"count", "spatial", "color_spatial"}) == [detector]
    everything = {"action", "color", "color_binding", "count", "count_binding", "color_spatial",
                  "count_color", "texture_color", "shape", "shape_binding", "spatial", "texture"}
    assert default_scorers(everything) == ["qwen3-vl-8b", detector]
    assert not {"clip", "clip-hf", "vqa-blip"} & set(default_scorers(everything))  # CLIP never a default
    # tiny model cards: tiny scorers of the same kinds, built offline from configs
    tiny = default_scorers(everything, tiny=True)
    assert tiny == ["tiny-qwen3-vl", "tiny-detect"]
    assert all(str(cards[n]["model"]["id"]).startswith("tiny:") for n in tiny)


def test_every_card_has_known_agreement_and_mini_cards_carry_generated_image_figures():
    cards = load_cards()
    assert [n for n, c in cards.items() if not c.get("known_agreement")] == []
    pix, judge = cards["mini-pixel"]["known_agreement"], cards["mini-judge"]["known_agreement"]
    assert pix["overall"] == {"accuracy": 0.975, "kappa": 0.90, "n": 235, "images": 72}
    assert judge["overall"]["kappa"] == 0.53 and judge["per_category"]["color"]["kappa"] == 0.21
    assert "spatial" in judge["chance_on"] and judge["on_renders"]["accuracy"]["relation"] == 0.5133
    assert "2026-12-03" in judge["source"] and "blind reading of 72 generated images" in pix["source"]


def test_scorers_command_shows_known_agreement():
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    out = CliRunner().invoke(app, ["scorers"]).output
    assert "known agreement: 97.5 % agreement (Cohen's κ 0.90)" in out
    assert out.count("known agreement:") == len(load_cards())


# --- the pages and the probe labels follow the rule ------------------------------------------
def test_report_and_compare_pick_the_same_deciding_scorer(mini_runs, tmp_path):
    a, b = mini_runs
    cmp_page = compare_runs([a, b], tmp_path / "cmp")
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    for run in (a, b):
        render_report(run, out_dir=tmp_path / Path(run).name, progress=False)
        rep = json.loads((Path(run) / "summary.json").read_text())["report"]
        assert {c: rep["deciding"][c]["scorer"] for c in CATS} == {c: cmp["deciding"][c]["scorer"] for c in CATS}
    # mini-pixel: κ 0.90 on generated images beats mini-judge's 0.53; and mini-judge is at chance
    # on spatial — before this rule compare took mini-judge (ties broken by name)
    assert {c: cmp["deciding"][c]["scorer"] for c in CATS} == {c: "mini-pixel" for c in CATS}
    assert cmp["scorer"] == "mini-pixel" and "mini-judge" in cmp["deciding"]["spatial"]["why"]
    html = cmp_page.read_text()
    assert "Which scorer decided each category" in html and "card known_agreement" in html
    # compare's paired verdicts are the deciding scorer's
    pix = _prompt_verdicts(a, "mini-pixel")
    df = pd.read_csv(tmp_path / "cmp" / "pairs.csv")
    assert len(df) == 35  # 18 prompts x 2 samples, one image flagged
    assert all(bool(v) == pix[(pid, s)] for v, pid, s in
               zip(df["verdict:mini-a"], df["prompt_id:mini-a"], df["sample"]))


def test_calibration_in_one_run_moves_both_pages_alike(mini_runs, tmp_path):
    a, b = mini_runs
    _calibration(a, {"mini-judge": {"color_binding": {"n": 60, "accuracy": 0.97, "kappa": 0.93}},
                     "mini-pixel": {"color_binding": {"n": 60, "accuracy": 0.80, "kappa": 0.55}}})
    try:
        render_report(a, out_dir=tmp_path / "ra", progress=False)
        rep = json.loads((Path(a) / "summary.json").read_text())["report"]
        compare_runs([a, b], tmp_path / "cmp")
        cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
        assert rep["deciding"]["color_binding"]["scorer"] == cmp["deciding"]["color_binding"]["scorer"] == "mini-judge"
        assert rep["deciding"]["color_binding"]["source"] == rule.SOURCE_RUN
        assert cmp["deciding"]["color_binding"]["source"] == rule.SOURCE_RUNS
        assert rep["deciding"]["counting"]["scorer"] == "mini-pixel"
        # the headline of colour binding counts mini-judge's verdicts, counting mini-pixel's
        prompts = {p["id"]: p for p in read_jsonl(Path(a) / "prompts.jsonl")}
        flagged = {(i["prompt_id"], i["sample"]) for i in read_jsonl(Path(a) / "images.jsonl") if i["flags"]}
        for cat, name in (("color_binding", "mini-judge"), ("counting", "mini-pixel")):
            v = [x for k, x in _prompt_verdicts(a, name).items()
                 if prompts[k[0]]["category"] == cat and x is not None and k not in flagged]
            assert rep["by_category"][cat]["n"] == len(v) and rep["by_category"][cat]["k"] == sum(v)
        html = (tmp_path / "ra" / "index.html").read_text()
        assert "calibrate on this run" in html and "κ 0.93" in html
    finally:
        (Path(a) / "calibration" / "report.json").unlink()


def test_forced_scorer_applies_everywhere(mini_runs, tmp_path):
    a, _ = mini_runs
    render_report(a, out_dir=tmp_path / "r", progress=False, scorer="mini-judge")
    rep = json.loads((Path(a) / "summary.json").read_text())["report"]
    assert rep["scorer"] == "mini-judge"
    assert {d["scorer"] for d in rep["deciding"].values()} == {"mini-judge"}
    assert rep["deciding"]["spatial"]["source"] == "--scorer"


def test_probe_labels_follow_the_deciding_scorer(mini_runs):
    from t2i_audit.probes.stage import success_rates

    a, _ = mini_runs
    rd = RunDir(a)
    prompts = {p["id"]: p for p in rd.read_prompts()}
    _calibration(a, {"mini-judge": {"color_binding": {"n": 60, "accuracy": 0.97, "kappa": 0.93}}})
    try:
        rates, used = success_rates(rd)
    finally:
        (Path(a) / "calibration" / "report.json").unlink()
    assert used == ["mini-judge", "mini-pixel"]
    judge, pix = _prompt_verdicts(a, "mini-judge"), _prompt_verdicts(a, "mini-pixel")

    def mean(verdicts, pid):
        v = [x for (p, _), x in verdicts.items() if p == pid and x is not None]
        return sum(v) / len(v)

    checked = 0
    for pid, rate in rates.items():
        src = judge if prompts[pid]["category"] == "color_binding" else pix
        assert rate == pytest.approx(mean(src, pid))
        checked += 1
    assert checked == len(prompts)
    # the old average over both scorers differs somewhere: the labels really changed source
    assert any(abs(rates[p] - (mean(judge, p) + mean(pix, p)) / 2) > 1e-9 for p in rates)
    forced, used = success_rates(rd, "mini-judge")
    assert used == ["mini-judge"] and all(forced[p] == pytest.approx(mean(judge, p)) for p in forced)


def test_probe_and_predict_name_the_scorer_behind_the_labels(tmp_path):
    from t2i_audit.probes import predict_failures, run_probe_stage
    from t2i_audit.tiny import materialize

    model = str(materialize("tiny-sd"))
    run = make_run(tmp_path / "run", prompts=make_prompts(n_binding=24, n_rel=12, n_count=9),
                   scorers=("mini-judge", "mini-pixel"), skill=0.7, probes=False, size=16)
    _calibration(run, {"mini-judge": {"color_binding": {"n": 60, "accuracy": 0.97, "kappa": 0.93}}})
    res = run_probe_stage(run, model=model, layers="final", poolings=("eos",), n_boot=50, progress=False)
    expected = {"color_binding": "mini-judge", "counting": "mini-pixel", "spatial": "mini-pixel"}
    assert {c: d["scorer"] for c, d in res["labels_from"].items()} == expected
    assert res["scorers"] == ["mini-judge", "mini-pixel"]
    probe = json.loads((Path(run) / "probes" / "failure_probe.json").read_text())
    assert probe["labels_from"]["spatial"]["source"] == rule.SOURCE_CARD
    ranked = predict_failures(model, Path(run) / "prompts.jsonl", run, tmp_path / "risk.jsonl")
    assert ranked and all(r["probe"]["labels_from"] == expected for r in ranked)
