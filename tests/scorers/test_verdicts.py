"""Dependencies, failure typing, probes, foils and position rules — pure Python, no models."""

from t2i_audit.scorers.detect import nms, relative_position
from t2i_audit.scorers.foils import build_foils
from t2i_audit.scorers.verdicts import build_queries, judge

from .scenes import prompt

P = prompt("red", "square", "blue", "circle")  # q0 exists square, q1 red, q2 exists circle, q3 blue
R = prompt(None, "square", None, "circle", rel="left of")  # q0, q1 exists; q2 relation


def test_probe_queries_come_from_structure():
    qs = {q["id"]: q for q in build_queries(P)}
    assert qs["q1~o2"]["text"] == "Is the square blue?"
    assert qs["q1~o2"]["probe"] == {"for": "q1", "type": "cross", "source": "o2"}
    assert qs["q3~o1"]["text"] == "Is the circle red?"
    rq = {q["id"]: q for q in build_queries(R)}
    assert rq["q2~rev"]["text"] == "Is the circle to the left of the square?"
    assert rq["q2~rev"]["subject"] == "o2" and rq["q2~rev"]["object"] == "o1"


def test_all_pass():
    j = judge(P, {"q0": True, "q1": True, "q2": True, "q3": True})
    assert j["verdict"] is True and j["failures"] == []


def test_missing_object_skips_dependants():
    j = judge(P, {"q0": True, "q1": True, "q2": False, "q3": True})
    assert j["verdict"] is False
    assert j["questions"]["q3"]["verdict"] is None
    assert j["questions"]["q3"]["skipped_by"] == ["q2"]
    assert [(f["type"], f["slot"]) for f in j["failures"]] == [("missing_object", "o2")]


def test_relation_skipped_when_either_object_missing():
    j = judge(R, {"q0": False, "q1": True, "q2": True})
    assert j["questions"]["q2"]["verdict"] is None and j["questions"]["q2"]["skipped_by"] == ["q0"]
    assert [f["type"] for f in j["failures"]] == ["missing_object"]


def test_swapped_binding_on_both_slots():
    ans = {"q0": True, "q2": True, "q1": False, "q1~o2": True, "q3": False, "q3~o1": True}
    j = judge(P, ans)
    assert sorted((f["type"], f["slot"]) for f in j["failures"]) == [
        ("swapped_binding", "c1"), ("swapped_binding", "c2")]


def test_attribute_leakage_when_other_keeps_its_value():
    # square is blue (took the circle's colour), circle is blue: both show the circle's attribute
    ans = {"q0": True, "q2": True, "q1": False, "q1~o2": True, "q3": True, "q3~o1": False}
    j = judge(P, ans)
    assert [(f["type"], f["slot"]) for f in j["failures"]] == [("attribute_leakage", "c1")]


def test_wrong_attribute_when_neither_value():
    ans = {"q0": True, "q2": True, "q1": False, "q1~o2": False, "q3": True, "q3~o1": False}
    assert [f["type"] for f in judge(P, ans)["failures"]] == ["wrong_attribute"]


def test_relation_reversed_vs_wrong():
    assert judge(R, {"q0": True, "q1": True, "q2": False, "q2~rev": True})["failures"][0]["type"] == "reversed_relation"
    assert judge(R, {"q0": True, "q1": True, "q2": False, "q2~rev": False})["failures"][0]["type"] == "wrong_relation"


def test_wrong_count_and_unanswerable():
    c = prompt(None, "cube", n1=3)
    j = judge(c, {"q0": True, "q1": False})
    assert [(f["type"], f["slot"]) for f in j["failures"]] == [("wrong_count", "n1")]
    j = judge(c, {})
    assert j["verdict"] is None and j["failures"] == []


def test_foils_swap_reverse_replace():
    p = prompt("red", "square", "blue", "circle", rel="left of")
    foils = {f["name"]: f for f in build_foils(p, ["cat", "dog"])}
    assert foils["swap_color"]["text"] == "a photo of a blue square to the left of a red circle"
    assert foils["reverse_r"]["text"] == "a photo of a blue circle to the left of a red square"
    assert foils["replace_o1"]["text"] in ("a photo of a red cat to the left of a blue circle",
                                           "a photo of a red dog to the left of a blue circle")
    assert [f["type"] for f in foils["swap_color"]["failures"]] == ["swapped_binding"] * 2
    assert foils["reverse_r"]["failures"][0]["type"] == "reversed_relation"
    assert foils["replace_o2"]["failures"][0] == {"type": "missing_object", "slot": "o2", "object": "o2",
                                                  "detail": foils["replace_o2"]["failures"][0]["detail"]}
    # stable choice of distractor, and articles fixed
    assert build_foils(p, ["cat", "dog"]) == build_foils(p, ["cat", "dog"])
    a = prompt(None, "square", n1=2)
    assert {f["name"]: f["text"] for f in build_foils(a, ["apple/apples"])} == {"replace_o1": "a photo of two apples"}


def test_geneval_positions():
    left, right = [4, 20, 24, 40], [40, 20, 60, 40]
    assert relative_position(left, right) == {"left of"}
    assert relative_position(right, left) == {"right of"}
    top, bottom = [20, 2, 40, 20], [20, 44, 40, 62]
    assert relative_position(top, bottom) == {"above"}
    assert relative_position(bottom, top) == {"below"}
    # overlapping almost completely: within the 0.1 x size margin, no relation
    assert relative_position([10, 10, 30, 30], [11, 10, 31, 30]) == set()
    # diagonal at 45 degrees with a big offset: both directions
    assert relative_position([0, 0, 10, 10], [40, 40, 50, 50]) == {"left of", "above"}


def test_nms_keeps_best_of_overlapping():
    boxes = [[0, 0, 10, 10, 0.5], [1, 0, 11, 10, 0.9], [30, 30, 40, 40, 0.3]]
    assert nms(boxes, 0.5) == [[1, 0, 11, 10, 0.9], [30, 30, 40, 40, 0.3]]
