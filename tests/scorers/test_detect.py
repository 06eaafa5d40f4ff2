"""Detection scorer: known boxes and a pixel-colour 'CLIP' injected; tiny OWLv2 end to end."""

import json

import pytest

from t2i_audit.scorers.base import ScoreItem
from t2i_audit.scorers.detect import DetectionScorer
from t2i_audit.scorers.registry import get_card
from t2i_audit.scorers.stage import run_score_stage

from . import tiny_models as tm
from .scenes import COLORS, draw, make_run, prompt

L, R = (4, 20, 24, 40), (40, 20, 60, 40)


class InjectedDetector(DetectionScorer):
    """Boxes come from the scene's ground truth; crop colours from the crop's pixels."""

    boxes: dict = {}

    def load_model(self):
        pass

    def detect(self, images, labels):
        return [{lab: [list(b) for b in self.boxes.get(lab, [])] for lab in labs} for labs in labels]

    def classify_crops(self, crops, texts):
        out = []
        for crop, ts in zip(crops, texts):
            px = [p for p in crop.get_flattened_data() if p != (255, 255, 255)]
            mean = [sum(c[i] for c in px) / len(px) for i in range(3)]
            near = min(COLORS, key=lambda k: sum((a - b) ** 2 for a, b in zip(COLORS[k], mean)))
            out.append([1.0 if t.split()[4] == near else 0.0 for t in ts])
        return out


def score(tmp_path, p, image, boxes, **thr):
    s = InjectedDetector(get_card("detect-owlv2", overrides={"thresholds": thr} if thr else None))
    s.boxes = boxes
    rd = make_run(tmp_path / "run", [(p, image)])
    run_score_stage(rd, [], instances=[s.load()], progress=False)
    recs = [json.loads(x) for x in rd.scores(s.name).read_text().splitlines()]
    return {r["question_id"]: r for r in recs if r["kind"] == "question"}, recs[-1]


def test_left_of_passes_with_colours(tmp_path):
    img = draw([("square", "red", L), ("circle", "blue", R)])
    p = prompt("red", "square", "blue", "circle", rel="left of")
    q, pr = score(tmp_path, p, img, {"square": [(*L, 0.9)], "circle": [(*R, 0.8)]})
    assert q["q4"]["extra"]["relations"] == ["left of"]
    assert q["q1"]["extra"]["predicted"] == "red" and q["q3"]["extra"]["predicted"] == "blue"
    assert pr["verdict"] is True, pr["failures"]


def test_right_of_is_reversed_and_above_is_wrong(tmp_path):
    img = draw([("square", "red", L), ("circle", "blue", R)])
    boxes = {"square": [(*L, 0.9)], "circle": [(*R, 0.8)]}
    _, pr = score(tmp_path / "a", prompt(None, "square", None, "circle", rel="right of"), img, boxes)
    assert [f["type"] for f in pr["failures"]] == ["reversed_relation"]
    _, pr = score(tmp_path / "b", prompt(None, "square", None, "circle", rel="above"), img, boxes)
    assert [f["type"] for f in pr["failures"]] == ["wrong_relation"]


def test_swapped_colours_and_leakage_from_crops(tmp_path):
    p = prompt("red", "square", "blue", "circle")
    boxes = {"square": [(*L, 0.9)], "circle": [(*R, 0.8)]}
    _, pr = score(tmp_path / "a", p, draw([("square", "blue", L), ("circle", "red", R)]), boxes)
    assert sorted((f["type"], f["slot"]) for f in pr["failures"]) == [
        ("swapped_binding", "c1"), ("swapped_binding", "c2")]
    _, pr = score(tmp_path / "b", p, draw([("square", "red", L), ("circle", "red", R)]), boxes)
    assert [(f["type"], f["slot"]) for f in pr["failures"]] == [("attribute_leakage", "c2")]


def test_missing_object_below_box_threshold(tmp_path):
    img = draw([("square", "red", L)])
    p = prompt("red", "square", "blue", "circle", rel="left of")
    q, pr = score(tmp_path, p, img, {"square": [(*L, 0.9)], "circle": [(*R, 0.05)]}, box=0.1)
    assert q["q2"]["verdict"] is False and q["q3"]["verdict"] is None and q["q4"]["verdict"] is None
    assert [(f["type"], f["slot"]) for f in pr["failures"]] == [("missing_object", "o2")]


def test_count_rule_with_nms(tmp_path):
    img = draw([("square", "green", (2, 2, 14, 14)), ("square", "green", (30, 30, 42, 42))])
    p = prompt(None, "cube", n1=3)
    boxes = {"cube": [(2, 2, 14, 14, 0.9), (3, 2, 15, 14, 0.7), (30, 30, 42, 42, 0.8)]}  # a duplicate
    q, pr = score(tmp_path / "a", p, img, boxes)
    assert q["q1"]["value"] == 2.0 and q["q1"]["verdict"] is False
    assert pr["failures"][0]["type"] == "wrong_count"
    boxes["cube"].append((50, 50, 60, 60, 0.6))
    q, pr = score(tmp_path / "b", p, img, boxes)
    assert q["q1"]["value"] == 3.0 and pr["verdict"] is True


def test_tiny_owlv2_end_to_end(tmp_path, tiny_owlv2):
    m = tiny_owlv2
    p = prompt("red", "square", "blue", "circle", rel="left of")
    img = draw([("square", "red", L), ("circle", "blue", R)])
    rd = make_run(tmp_path / "run", [(p, img)])
    ov = {"model": m["owl"], "thresholds": {"box": 0.0}, "options": {"attribute_model": m["clip"]}}
    counts = run_score_stage(rd, ["detect-owlv2"], overrides={"detect-owlv2": ov}, progress=False)
    recs = [json.loads(x) for x in rd.scores("detect-owlv2").read_text().splitlines()]
    q = {r["question_id"]: r for r in recs if r["kind"] == "question"}
    assert q["q0"]["verdict"] is True and q["q0"]["extra"]["boxes"]  # threshold 0: something detected
    for b in q["q0"]["extra"]["boxes"]:
        assert 0 <= b[0] <= b[2] <= 64 and 0 <= b[1] <= b[3] <= 64
    assert q["q1"]["extra"]["predicted"] in get_card("detect-owlv2")["options"]["values"]["color"] + ["red"]
    assert counts["detect-owlv2"]["scored"] == 1


def test_grounding_dino_phrase_scores_map_to_labels(model_dir):
    """Per-phrase scores are the max over the phrase's own tokens (known logits injected)."""
    import torch
    from types import SimpleNamespace

    folder = model_dir / "gdino"
    if not (folder / "done").exists():
        (folder / "done").parent.mkdir(parents=True, exist_ok=True)
        (folder / "done").write_text(json.dumps(tm.grounding_dino_model(folder)))
    s = DetectionScorer(get_card("tiny-gdino", overrides={"model": json.loads((folder / "done").read_text())}))
    s.load()
    queries = ["square", "circle"]
    ids = s.processor(images=draw([]), text="square. circle.", return_tensors="pt")["input_ids"][0].tolist()
    circle_tok = ids.index(s.processor.tokenizer.convert_tokens_to_ids("circle"))
    logits = torch.full((2, len(ids)), -10.0)
    logits[0, circle_tok] = 3.0  # query box 0 grounds "circle"
    logits[1, ids.index(s.processor.tokenizer.convert_tokens_to_ids("square"))] = 1.0
    boxes = torch.tensor([[0.25, 0.5, 0.5, 0.5], [0.75, 0.5, 0.5, 0.5]])  # cx, cy, w, h
    res = SimpleNamespace(logits=logits[None], pred_boxes=boxes[None])
    r = s._grounding_boxes(res, ids, queries, (64, 64), thr=0.5)
    assert r["labels"].tolist() == [1, 0]
    assert r["scores"].tolist() == pytest.approx([torch.sigmoid(torch.tensor(3.0)).item(),
                                                  torch.sigmoid(torch.tensor(1.0)).item()])
    assert r["boxes"][0].tolist() == pytest.approx([0.0, 16.0, 32.0, 48.0])
    # end to end through the stage
    p = prompt("red", "square", "blue", "circle", rel="left of")
    img = draw([("square", "red", L), ("circle", "blue", R)])
    det = s.detect([img], [queries])[0]
    assert set(det) == {"square", "circle"} and all(0 <= b[4] <= 1 for v in det.values() for b in v)
    (ans,) = s.answer([ScoreItem(p, {"prompt_id": p["id"], "sample": 0}, img)], [s.queries(p)])
    assert ans["q0"].passed is True  # threshold 0: every query box counts
    assert ans["q4"].extra["relations"] is not None


def test_long_detector_query_is_recorded_as_truncated(tmp_path, tiny_owlv2):
    m = tiny_owlv2
    long_name = "square " * 20  # OWLv2 text queries hold 16 tokens
    p = prompt(None, long_name.strip())
    rd = make_run(tmp_path / "run", [(p, draw([("square", "red", L)]))])
    ov = {"model": m["owl"], "thresholds": {"box": 0.0}, "options": {"attribute_model": m["clip"]}}
    run_score_stage(rd, ["detect-owlv2"], overrides={"detect-owlv2": ov}, progress=False)
    recs = [json.loads(x) for x in rd.scores("detect-owlv2").read_text().splitlines()]
    assert recs[0]["truncated"] is True and recs[-1]["truncated"] is True
