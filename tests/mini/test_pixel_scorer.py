"""The pixel judge through the scorer registry: records, dependencies, failure types."""

import pytest

from t2i_audit.mini import world
from t2i_audit.scorers.base import ScoreItem
from t2i_audit.scorers.registry import create_scorer


@pytest.fixture(scope="module")
def scorer():
    return create_scorer("mini-pixel").load()


def _score(scorer, shown, asked):
    rec = world.scene_record(asked, prompt_id="p1")
    item = ScoreItem(rec, {"prompt_id": "p1", "sample": 0, "sha256": "x"}, image=world.render(shown))
    return scorer.score([item])[0]


def _prompt(recs):
    return next(r for r in recs if r["kind"] == "prompt")


def test_true_render_passes(scorer):
    s = world.scene_for(["red", "blue"], ["circle", "square"], "left of")
    recs = _score(scorer, s, s)
    qs = [r for r in recs if r["kind"] == "question"]
    assert [r["verdict"] for r in qs] == [True] * 5
    p = _prompt(recs)
    assert p["verdict"] is True and p["failures"] == [] and p["scorer"] == "mini-pixel"
    m = next(r for r in recs if r["kind"] == "metric")
    assert m["metric"] == "objects_found" and m["value"] == 2


def test_swapped_colours_typed_as_swapped_binding(scorer):
    shown = world.scene_for(["blue", "red"], ["circle", "square"], "left of")
    asked = world.scene_for(["red", "blue"], ["circle", "square"], "left of")
    p = _prompt(_score(scorer, shown, asked))
    assert p["verdict"] is False
    assert {f["type"] for f in p["failures"]} == {"swapped_binding"}


def test_leakage_and_reversed_relation(scorer):
    shown = world.scene_for(["red", "red"], ["circle", "square"], "left of")  # both red
    asked = world.scene_for(["red", "blue"], ["circle", "square"], "left of")
    p = _prompt(_score(scorer, shown, asked))
    assert [f["type"] for f in p["failures"]] == ["attribute_leakage"]
    rev = world.scene_for(["red", "blue"], ["circle", "square"], "right of")
    p = _prompt(_score(scorer, rev, asked))
    assert [f["type"] for f in p["failures"]] == ["reversed_relation"]


def test_missing_object_skips_dependants(scorer):
    shown = world.scene_for(["red"], ["circle"])
    asked = world.scene_for(["red", "blue"], ["circle", "square"], "above")
    recs = _score(scorer, shown, asked)
    by_q = {r["question_id"]: r for r in recs if r["kind"] == "question"}
    assert by_q["q2"]["verdict"] is False
    assert by_q["q3"]["verdict"] is None and by_q["q4"]["verdict"] is None
    assert [f["type"] for f in _prompt(recs)["failures"]] == ["missing_object"]


def test_prompts_outside_the_world_are_not_answered(scorer):
    rec = world.scene_record(world.scene_for(["red"], ["circle"]), prompt_id="p2")
    rec["objects"][0]["name"] = "dog"
    item = ScoreItem(rec, {"prompt_id": "p2", "sample": 0, "sha256": "x"}, image=world.render(world.scene_for(["red"], ["circle"])))
    p = _prompt(scorer.score([item])[0])
    assert p["verdict"] is None
