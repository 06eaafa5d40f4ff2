"""The detectors and VQA as their benchmarks ran them (issue 21): GenEval's mmdet input padding and
mask post-processing, every card's dtype, T2I-CompBench's BLIP-VQA question encoding and image
size, OWLv2 boxes in the square padding. Each test failed on the code before these fixes."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from t2i_audit.scorers.registry import get_card, load_cards

from . import tiny_models as tm
from .scenes import draw


# --- GenEval: mmdet 2.x input and post-processing --------------------------------------------------
def mmdet_oracle(cls_logits, mask_logits, batch_input_shape, img_shape, ori_shape, max_per_image=100):
    """mmdet 2.x, transcribed: MaskFormerHead.simple_test (upsample to batch_input_shape),
    MaskFormerFusionHead.simple_test (crop img_shape, rescale to ori_shape) and instance_postprocess."""
    import torch.nn.functional as F

    mask_pred = F.interpolate(mask_logits[None], size=batch_input_shape, mode="bilinear", align_corners=False)[0]
    mask_pred = mask_pred[:, :img_shape[0], :img_shape[1]]
    mask_pred = F.interpolate(mask_pred[:, None], size=ori_shape, mode="bilinear", align_corners=False)[:, 0]
    num_classes = cls_logits.shape[-1] - 1
    scores = F.softmax(cls_logits, dim=-1)[:, :-1]
    scores_per_image, top_indices = scores.flatten(0, 1).topk(max_per_image, sorted=False)
    labels = top_indices % num_classes
    mask_pred = mask_pred[top_indices // num_classes]
    binary = (mask_pred > 0).float()
    mask_scores = (mask_pred.sigmoid() * binary).flatten(1).sum(1) / (binary.flatten(1).sum(1) + 1e-6)
    return labels, scores_per_image * mask_scores, binary.bool()


def cat_scorer(bias=10.0):
    import torch

    from t2i_audit.scorers.geneval import COCO_CLASSES, GenEvalScorer

    s = GenEvalScorer(get_card("tiny-geneval")).load()
    with torch.no_grad():  # every query says "cat": known classes, real masks
        s.model.class_predictor.weight.zero_()
        s.model.class_predictor.bias.fill_(-bias)
        s.model.class_predictor.bias[COCO_CLASSES.index("cat")] = bias
    return s


def test_geneval_pads_a_non_square_image_instead_of_stretching_it():
    from t2i_audit.scorers.geneval import mmdet_resize_hw

    assert mmdet_resize_hw(512, 512) == (800, 800)
    assert mmdet_resize_hw(768, 1024) == (800, 1067)  # mmcv rounds; transformers floors to 1066
    s = cat_scorer()
    seen = []
    s.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["pixel_values"]), with_kwargs=True)
    s.segment([Image.new("RGB", (32, 24), (200, 30, 30))])  # tiny processor: 64/64 -> 48 x 64, padded to 64 x 64
    (px,) = seen
    assert px.shape == (1, 3, 64, 64)
    mean, std = np.array(s.processor.image_mean), np.array(s.processor.image_std)
    want = (np.array([200, 30, 30]) / 255 - mean) / std
    assert np.allclose(px[0, :, :48].numpy(), want[:, None, None], atol=1e-5)  # the image, ratio kept
    assert (px[0, :, 48:] == 0).all()  # mmdet Pad(size_divisor=32) after Normalize: zeros, not stretch


def test_geneval_masks_and_scores_follow_mmdet_post_processing():
    from t2i_audit.scorers.geneval import COCO_CLASSES

    s = cat_scorer()
    outs = []
    s.model.register_forward_hook(lambda m, a, o: outs.append(o))
    img = draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))]).resize((32, 24))
    insts = [i for i in s.segment([img])[0] if i["class"] == "cat"]
    (o,) = outs
    labels, scores, masks = mmdet_oracle(o.class_queries_logits[0].float(), o.masks_queries_logits[0].float(),
                                         (64, 64), (48, 64), (24, 32))
    cat = COCO_CLASSES.index("cat")
    keep = [(sc, m.numpy()) for lab, sc, m in zip(labels.tolist(), scores.tolist(), masks) if lab == cat and m.any()]
    assert insts and len(insts) == len(keep)
    for got, (sc, m) in zip(sorted(insts, key=lambda i: i["score"]), sorted(keep, key=lambda k: k[0])):
        assert got["score"] == pytest.approx(sc, abs=1e-6)
        assert got["mask"].shape == (24, 32) and (got["mask"] == m).all()
        ys, xs = np.nonzero(m)
        assert got["box"] == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]  # mmdet mask2bbox


# --- dtype ------------------------------------------------------------------------------------------
def test_every_card_here_states_its_dtype_and_geneval_runs_fp32_on_cuda():
    import torch

    from t2i_audit.scorers.clip_models import model_dtype

    # every shipped card with a neural model (mini-pixel reads the palette: no weights, no dtype)
    cards = [c for c in load_cards().values() if (c.get("model") or {}).get("id") != "mini-pixel-judge"]
    assert {"geneval", "vqa-blip", "detect-owlv2", "detect-gdino", "clip", "clip-hf", "vqascore"} <= {c["name"] for c in cards}
    for c in cards:
        sections = [c["model"]] + [s for s in [(c.get("options") or {}).get("attribute_model")] if s]
        for sec in sections:
            assert sec.get("dtype"), (c["name"], sec)
            model_dtype(sec, "cuda")  # a known value
    for name in ("geneval", "vqa-blip", "detect-owlv2", "detect-gdino"):  # their anchors ran fp32
        c = get_card(name)
        assert model_dtype(c["model"], "cuda") is torch.float32, name
        if "attribute_model" in c.get("options", {}):
            assert model_dtype(c["options"]["attribute_model"], "cuda") is torch.float32, name
    assert model_dtype({"dtype": "auto"}, "cuda") is torch.float16  # OpenAI clip.load's choice
    assert model_dtype({"dtype": "auto"}, "cpu") is torch.float32


# --- BLIP-VQA as T2I-CompBench --------------------------------------------------------------------
@pytest.fixture()
def tiny_blip(model_dir):
    folder = model_dir / "vqa-blip"
    if not (folder / "done").exists():
        (folder / "done").parent.mkdir(parents=True, exist_ok=True)
        (folder / "done").write_text(json.dumps(tm.blip_vqa_model(folder)))
    return json.loads((folder / "done").read_text())


def test_blip_vqa_encodes_the_question_with_enc_and_uses_the_cards_image_size(tiny_blip):
    from t2i_audit.scorers.vqa import BlipVqaScorer, blip_question

    s = BlipVqaScorer(get_card("vqa-blip", overrides={"model": tiny_blip})).load()
    seen = {}
    s.model.vision_model.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("px", kw["pixel_values"]), with_kwargs=True)
    s.model.text_encoder.register_forward_pre_hook(
        lambda m, a, kw: seen.__setitem__("ids", kw["input_ids"]), with_kwargs=True)
    im = draw([("square", "red", (4, 20, 24, 40))])
    long_q = "is the " + "red " * 40 + "square left of the circle?"
    res = s.yes_no([(im, 'Is the "square" red.'), (im, long_q)])
    enc = s.tokenizer.convert_tokens_to_ids("[ENC]")
    assert enc != s.tokenizer.cls_token_id
    assert seen["ids"][:, 0].tolist() == [enc, enc]  # BLIP: question.input_ids[:, 0] = enc_token_id
    first = s.tokenizer(blip_question('Is the "square" red.'))["input_ids"]
    assert blip_question('Is the "square" red.') == "is the square red"  # T2I-CompBench pre_question
    assert seen["ids"][0, 1:len(first)].tolist() == first[1:]
    assert seen["ids"].shape[1] == 35 and [t for _, _, t in res] == [False, True]  # max_length=35
    size = get_card("vqa-blip")["options"]["image_size"]
    assert size == 480 and tuple(seen["px"].shape[-2:]) == (size, size)
    assert s.model.decoder_start_token_id == s.tokenizer.convert_tokens_to_ids("[DEC]")


# --- OWLv2: the square padding ------------------------------------------------------------------------
def test_owlv2_drops_boxes_centred_in_the_square_padding(tiny_owlv2):
    import torch

    from t2i_audit.scorers.detect import DetectionScorer, in_image

    m = tiny_owlv2
    s = DetectionScorer(get_card("detect-owlv2", overrides={"model": m["owl"], "thresholds": {"box": 0.5}})).load()
    # a 64 x 32 image: OWLv2 sees it padded to 64 x 64; boxes (cx, cy, w, h) relative to the square
    boxes = torch.tensor([[[0.25, 0.25, 0.2, 0.2],     # in the image
                           [0.50, 0.80, 0.2, 0.2],     # wholly in the padding (y 44.8-57.6 > 32)
                           [0.75, 0.45, 0.2, 0.3]]])   # centre inside (28.8), bottom in the padding
    logits = torch.tensor([[[5.0, -5.0], [5.0, -5.0], [-5.0, 5.0]]])
    s.model.forward = lambda **kw: SimpleNamespace(logits=logits, pred_boxes=boxes)
    (det,) = s.detect([Image.new("RGB", (64, 32))], [["square", "circle"]])
    assert [b[:4] for b in det["square"]] == [pytest.approx([9.6, 9.6, 22.4, 22.4])]  # the padding box is gone
    assert [b[:4] for b in det["circle"]] == [pytest.approx([41.6, 19.2, 54.4, 32.0])]  # clipped to the image
    assert in_image([0, 40, 10, 60], 64, 32) is None and in_image([0, 20, 10, 40], 64, 32) == [0, 20, 10, 32]
