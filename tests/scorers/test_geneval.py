"""GenEval's evaluator on transformers' Mask2Former: its rules on hand-built instances, the masked
crop, the colour classifier pinned to open_clip, instances from a tiny Mask2Former forward
through transformers' own post-processing, and a tiny run through the score stage."""

import json

import numpy as np
import pytest
from PIL import Image, ImageDraw

from t2i_audit.scorers.base import ScoreItem
from t2i_audit.scorers.detect import relative_position
from t2i_audit.scorers.geneval import (COCO_CLASSES, COLORS, GenEvalScorer, color_classifier, coco_class,
                                       geneval_iou, mask_to_box, masked_crop, select_instances)
from t2i_audit.scorers.registry import get_card
from t2i_audit.scorers.stage import run_score_stage

from .scenes import COLORS as RGB
from .scenes import draw, make_run, prompt

L, R = (4, 20, 24, 40), (40, 20, 60, 40)


def geneval_relative_position(box_a, box_b, position_threshold=0.1):
    """djghosh13/geneval evaluation/evaluate_images.py ``relative_position``, transcribed as the oracle."""
    boxes = np.array([box_a, box_b])[:, :4].reshape(2, 2, 2)
    center_a, center_b = boxes.mean(axis=-2)
    dim_a, dim_b = np.abs(np.diff(boxes, axis=-2))[..., 0, :]
    offset = center_a - center_b
    revised_offset = np.maximum(np.abs(offset) - position_threshold * (dim_a + dim_b), 0) * np.sign(offset)
    if np.all(np.abs(revised_offset) < 1e-3):
        return set()
    dx, dy = revised_offset / np.linalg.norm(offset)
    relations = set()
    if dx < -0.5:
        relations.add("left of")
    if dx > 0.5:
        relations.add("right of")
    if dy < -0.5:
        relations.add("above")
    if dy > 0.5:
        relations.add("below")
    return relations


def shape_mask(kind, box, size=64):
    m = Image.new("L", (size, size), 0)
    (ImageDraw.Draw(m).ellipse if kind == "circle" else ImageDraw.Draw(m).rectangle)(box, fill=255)
    return np.array(m) > 0


def inst(cls, score, kind="square", box=L):
    mask = shape_mask(kind, box)
    return {"class": cls, "score": score, "box": mask_to_box(mask), "mask": mask}


class Injected(GenEvalScorer):
    """Known instances; colour logits from the crop's non-grey pixels (nearest scene colour)."""

    instances: list = []

    def load_model(self):
        self._clip, self._classifiers = None, {}

    def segment(self, images):
        return [list(self.instances) for _ in images]

    def classify_colors(self, crops, object_names):
        out = []
        for crop in crops:
            px = [p for p in crop.get_flattened_data() if p != (153, 153, 153)]
            mean = [sum(c[i] for c in px) / len(px) for i in range(3)]
            near = min(RGB, key=lambda k: sum((a - b) ** 2 for a, b in zip(RGB[k], mean)))
            out.append([10.0 if c == near else 0.0 for c in COLORS])
        return out


def score(p, image, instances, **over):
    s = Injected(get_card("geneval", overrides=over or None))
    s.instances = instances
    recs = s.load().score([ScoreItem(p, {"prompt_id": p["id"], "sample": 0, "sha256": "x"}, image)])[0]
    return {r["question_id"]: r for r in recs if r["kind"] == "question"}, recs[-1]


# --- selection rules ----------------------------------------------------------------------------
def test_selection_is_strict_threshold_then_max_objects():
    insts = [{"class": "cat", "score": s, "box": [0, 0, 5, 5]} for s in (0.95, 0.92, 0.5, 0.31, 0.3, 0.1)]
    assert [i["score"] for i in select_instances(insts, 0.3)["cat"]] == [0.95, 0.92, 0.5, 0.31]  # 0.3 is out
    assert [i["score"] for i in select_instances(insts, 0.9)["cat"]] == [0.95, 0.92]
    assert len(select_instances(insts, 0.0, max_objects=3)["cat"]) == 3
    assert select_instances(insts, 0.96) == {}


def test_nms_only_when_max_overlap_below_one():
    assert geneval_iou([0, 0, 9, 9], [0, 0, 4, 4]) == 0.25  # inclusive pixels: 25 / 100
    insts = [{"class": "dog", "score": 0.9, "box": [0, 0, 9, 9]}, {"class": "dog", "score": 0.8, "box": [0, 0, 4, 4]}]
    assert len(select_instances(insts, 0.3, max_overlap=1.0)["dog"]) == 2  # GenEval's default: no NMS
    assert len(select_instances(insts, 0.3, max_overlap=0.25)["dog"]) == 1  # dropped at iou >= max_overlap
    assert len(select_instances(insts, 0.3, max_overlap=0.26)["dog"]) == 2


def test_count_uses_0_9_on_counting_prompts_and_0_3_elsewhere():
    img = draw([])
    cats = [inst("cat", 0.95, box=(2, 2, 12, 12)), inst("cat", 0.92, box=(20, 2, 30, 12)),
            inst("cat", 0.5, box=(40, 2, 50, 12))]
    q, pr = score(prompt(None, "cat", n1=2), img, cats)
    assert q["q1"]["value"] == 2.0 and q["q1"]["verdict"] is True and q["q1"]["extra"]["threshold"] == 0.9
    assert pr["verdict"] is True
    q, pr = score(prompt(None, "cat", n1=3), img, cats)  # three at 0.3, but a counting prompt uses 0.9
    assert q["q1"]["value"] == 2.0 and [f["type"] for f in pr["failures"]] == ["wrong_count"]
    q, _ = score(prompt(None, "cat"), img, cats)  # not counting: 0.3, the best score is the value
    assert q["q0"]["verdict"] is True and q["q0"]["value"] == 0.95 and q["q0"]["extra"]["threshold"] == 0.3
    assert q["q0"]["extra"]["scores"] == [0.95, 0.92, 0.5]
    # "at least n" (an imported GenEval include without its exclude): n or more pass
    p = prompt(None, "cat", n1=2)
    p["questions"][1] = dict(p["questions"][1], kind="other", text="Are there at least 2 cats?")
    q, _ = score(p, img, cats + [inst("cat", 0.97, box=(2, 30, 12, 40))])
    assert q["q1"]["value"] == 4.0 and q["q1"]["verdict"] is True and q["q1"]["extra"]["rule"] == "at least"
    assert q["q1"]["extra"]["threshold"] == 0.3  # no count question: not a counting prompt
    # an imported GenEval prompt decides by its tag, as GenEval does
    assert GenEvalScorer.is_counting({"source_meta": {"tag": "counting"}, "questions": []})
    assert not GenEvalScorer.is_counting({"source_meta": {"tag": "two_object"},
                                          "questions": [{"kind": "count"}]})


# --- position -----------------------------------------------------------------------------------
def test_relative_position_is_genevals_function():
    rng = np.random.default_rng(0)
    for _ in range(500):
        a, b = [sorted(rng.uniform(0, 64, 2)) for _ in range(2)], [sorted(rng.uniform(0, 64, 2)) for _ in range(2)]
        box_a, box_b = [a[0][0], a[1][0], a[0][1], a[1][1]], [b[0][0], b[1][0], b[0][1], b[1][1]]
        for thr in (0.1, 0.3):
            assert relative_position(box_a, box_b, thr) == geneval_relative_position(box_a, box_b, thr)
    assert relative_position([10, 10, 30, 30], [13, 10, 33, 30]) == set()  # 3 px apart < 0.1 * (20 + 20)
    assert relative_position([10, 10, 30, 30], [32, 10, 52, 30]) == {"left of"}


def test_position_on_box_centres_with_reversal_and_too_close():
    img = draw([])
    cat, dog = inst("cat", 0.9, box=L), inst("dog", 0.8, "circle", R)
    p = prompt(None, "cat", None, "dog", rel="left of")
    q, pr = score(p, img, [cat, dog])
    assert q["q2"]["extra"]["relations"] == ["left of"] and pr["verdict"] is True
    _, pr = score(prompt(None, "cat", None, "dog", rel="right of"), img, [cat, dog])
    assert [f["type"] for f in pr["failures"]] == ["reversed_relation"]
    close = inst("dog", 0.8, box=(7, 20, 27, 40))  # 3 px right of the cat: neither way
    q, pr = score(p, img, [cat, close])
    assert q["q2"]["extra"]["relations"] == [] and [f["type"] for f in pr["failures"]] == ["wrong_relation"]


# --- colour: the masked crop and the classifier ----------------------------------------------------
def test_masked_crop_replaces_background_with_999_and_rounds_the_box():
    rng = np.random.default_rng(1)
    arr = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    image = Image.fromarray(arr)
    mask = np.zeros((20, 24), bool)
    mask[5:12, 4:10] = True
    crop = np.array(masked_crop(image, mask, [2.4, 3.6, 10.5, 12.2]))  # PIL rounds: (2, 4, 10, 12)
    assert crop.shape == (8, 8, 3)
    sub_mask = mask[4:12, 2:10]
    assert (crop[sub_mask] == arr[4:12, 2:10][sub_mask]).all()
    assert (crop[~sub_mask] == 153).all()  # "#999"
    assert (np.array(masked_crop(image, mask, [0, 0, 24, 20], background="original")) == arr).all()
    with pytest.raises(ValueError, match="does not match"):
        masked_crop(image, mask[:10], [0, 0, 5, 5])


def test_mask_keeps_the_background_out_of_the_colour_crop():
    # a thick red diagonal over a blue square: its box is mostly blue, its mask only red
    img = draw([("square", "blue", (10, 10, 40, 40))])
    ImageDraw.Draw(img).line((10, 10, 40, 40), fill=RGB["red"], width=5)
    m = Image.new("L", (64, 64), 0)
    ImageDraw.Draw(m).line((10, 10, 40, 40), fill=255, width=5)
    line = {"class": "cup", "score": 0.9, "mask": np.array(m) > 0, "box": mask_to_box(np.array(m) > 0)}
    q, pr = score(prompt("red", "cup"), img, [line])
    assert q["q1"]["extra"]["predicted"] == ["red"] and pr["verdict"] is True
    q, _ = score(prompt("red", "cup"), img, [dict(line, mask=None)])  # no mask: the box's blue wins
    assert q["q1"]["extra"]["predicted"] == ["blue"] and q["q1"]["verdict"] is False
    q, _ = score(prompt("gray", "cup"), img, [line])  # not one of GenEval's 10 colours
    assert q["q1"]["verdict"] is None and q["q1"]["extra"]["unsupported"] is True


def test_swapped_colours_are_typed_from_the_crops():
    p = prompt("red", "cat", "blue", "dog")
    img = draw([("square", "blue", L), ("circle", "red", R)])
    _, pr = score(p, img, [inst("cat", 0.9, box=L), inst("dog", 0.9, "circle", R)])
    assert sorted((f["type"], f["slot"]) for f in pr["failures"]) == [("swapped_binding", "c1"),
                                                                     ("swapped_binding", "c2")]


def test_color_classifier_is_clip_benchmark_zero_shot_on_open_clip(tmp_path):
    import torch
    import torch.nn.functional as F

    from t2i_audit.scorers.clip_models import load_clip
    from t2i_audit.tiny.scorers import materialize

    clip = load_clip(materialize("open_clip"))
    w = color_classifier(clip, "cup")
    assert w.shape[1] == len(COLORS)
    for j, c in enumerate(COLORS):  # clip_benchmark: normalise each template, mean, renormalise
        texts = [f"a photo of a {c} cup", f"a photo of a {c}-colored cup", f"a photo of a {c} object"]
        with torch.no_grad():
            emb = F.normalize(clip.model.encode_text(clip.tokenizer(texts)).float(), dim=-1).mean(0)
        assert torch.allclose(w[:, j], emb / emb.norm(), atol=1e-6)
    s = GenEvalScorer(get_card("tiny-geneval"))
    s._clip, s._classifiers = clip, {}
    crop = draw([("square", "red", (0, 0, 40, 40))])
    (logits,) = s.classify_colors([crop], ["cup"])
    with torch.no_grad():
        f = F.normalize(clip.model.encode_image(clip.preprocess(crop)[None]).float(), dim=-1)
    assert logits == pytest.approx((100.0 * f @ w)[0].tolist(), abs=1e-4)


# --- COCO only ------------------------------------------------------------------------------------
def test_non_coco_objects_are_unsupported_not_failures():
    assert coco_class("Computer  Mouse") == "computer mouse" and coco_class("cube") is None
    assert coco_class("sofa", get_card("geneval")["options"]["class_aliases"]) == "couch"
    img = draw([])
    q, pr = score(prompt(None, "cube", None, "cat", rel="left of"), img, [inst("cat", 0.9, box=R)])
    assert q["q0"]["verdict"] is None and q["q0"]["extra"]["unsupported"] is True
    assert q["q1"]["verdict"] is True and q["q2"]["verdict"] is None  # the relation needs both
    assert pr["verdict"] is None and pr["failures"] == [] and pr["extra"]["unsupported"] == ["q0", "q2"]
    _, pr = score(prompt(None, "cube", None, "cat"), img, [])  # a COCO failure still fails the prompt
    assert pr["verdict"] is False and [f["type"] for f in pr["failures"]] == ["missing_object"]


# --- a real tiny Mask2Former -------------------------------------------------------------------
def tiny_scorer(cat_bias=None):
    s = GenEvalScorer(get_card("tiny-geneval")).load()
    if cat_bias is not None:  # every query says "cat": known classes, real masks
        import torch

        with torch.no_grad():
            s.model.class_predictor.weight.zero_()
            s.model.class_predictor.bias.fill_(-cat_bias)
            s.model.class_predictor.bias[COCO_CLASSES.index("cat")] = cat_bias
    return s


def test_instances_from_tiny_mask2former_are_selected_by_genevals_rules():
    # scores and masks against a transcription of mmdet: tests/scorers/test_as_anchors_ran.py
    s = tiny_scorer(cat_bias=10.0)
    insts = s.segment([draw([("square", "red", L), ("circle", "blue", R)]).crop((0, 0, 64, 48))])[0]
    cats = [i for i in insts if i["class"] == "cat"]
    assert cats and all(i["mask"].shape == (48, 64) and i["mask"].any() for i in insts)
    assert mask_to_box(np.zeros((4, 4), bool)) == [0.0, 0.0, 0.0, 0.0]
    # GenEval's selection on these: strictly above 0.3 (0.9 for counting prompts)
    assert len(select_instances(insts, 0.3).get("cat", [])) == sum(i["score"] > 0.3 for i in cats)


def test_image_size_option_sets_the_detector_input():
    # the real card feeds mmdet's test size (1333 x 800, ratio kept); masks still come at image size
    s = GenEvalScorer(get_card("tiny-geneval", overrides={"options": {"image_size": {"shortest_edge": 96,
                                                                                     "longest_edge": 96}}})).load()
    seen = []
    s.model.register_forward_pre_hook(lambda m, a, kw: seen.append(tuple(kw["pixel_values"].shape)),
                                      with_kwargs=True)
    insts = s.segment([draw([("square", "red", L)]).crop((0, 0, 64, 48))])[0]
    assert seen == [(1, 3, 96, 96)]  # 48 x 64 -> 72 x 96 (ratio kept) -> padded to multiples of 32: 96 x 96
    assert all(i["mask"].shape == (48, 64) for i in insts)


def test_non_coco_checkpoint_is_refused(tmp_path):
    import shutil

    from transformers import Mask2FormerConfig, Mask2FormerForUniversalSegmentation

    from t2i_audit.errors import AuditError
    from t2i_audit.tiny.scorers import materialize

    folder = materialize("mask2former")["id"]
    cfg = Mask2FormerConfig.from_pretrained(folder)
    cfg.id2label = {i: f"c{i}" for i in range(133)}  # e.g. a COCO panoptic checkpoint
    cfg.label2id = {v: k for k, v in cfg.id2label.items()}
    Mask2FormerForUniversalSegmentation(cfg).save_pretrained(tmp_path / "pan")
    shutil.copy(f"{folder}/preprocessor_config.json", tmp_path / "pan")
    s = GenEvalScorer(get_card("tiny-geneval", overrides={"model": {"id": str(tmp_path / "pan"), "local": True}}))
    with pytest.raises(AuditError, match="80 COCO instance classes"):
        s.load()


def test_tiny_run_through_the_score_stage(tmp_path):
    p = prompt("red", "cat", "blue", "dog", rel="left of")
    img = draw([("square", "red", L), ("circle", "blue", R)])
    rd = make_run(tmp_path / "run", [(p, img), (prompt("red", "cube"), img)])
    counts = run_score_stage(rd, ["tiny-geneval"], progress=False)["tiny-geneval"]
    assert counts["scored"] == 2 and counts["model"] == "tiny:mask2former"
    recs = [json.loads(x) for x in rd.scores("tiny-geneval").read_text().splitlines()]
    by = {(r["prompt_id"], r["question_id"]): r for r in recs}
    # the recorded exists values are the best instance scores of the same forward, above threshold 0
    s = tiny_scorer()
    dets = select_instances(s.segment([Image.open(rd.image_path(p["id"], 0)).convert("RGB")])[0], 0.0)
    for qid, name in (("q0", "cat"), ("q2", "dog")):
        r = by[(p["id"], qid)]
        best = dets[name][0]["score"] if name in dets else 0.0
        assert r["value"] == pytest.approx(best) and r["verdict"] is (name in dets)
    cube = [r for r in recs if r["prompt_id"] != p["id"]]
    assert cube[-1]["kind"] == "prompt" and cube[-1]["verdict"] is None
    assert cube[-1]["extra"]["unsupported"] == ["q0", "q1"]
