"""GenEval's own evaluator (Ghosh et al. 2023) on transformers' Mask2Former — no mmdet / mmcv.

Rules transcribed from djghosh13/geneval ``evaluation/evaluate_images.py`` (commit af4902f):

* detector: Mask2Former Swin-S COCO *instance* segmentation (GenEval loads mmdet's
  ``mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco``; the card uses the transformers checkpoint
  ``facebook/mask2former-swin-small-coco-instance``: same architecture and task, weights trained
  by the Mask2Former authors rather than by mmdet — not bit-identical detections);
* ``evaluate_image``: per class, instances sorted by score, kept when score ``> THRESHOLD`` (0.3;
  ``COUNTING_THRESHOLD`` 0.9 for the whole image when the prompt is a counting prompt), at most
  ``MAX_OBJECTS`` (16), then greedy NMS with ``compute_iou`` only if ``NMS_THRESHOLD`` (option
  ``max_overlap``, default 1.0 = off) is below 1;
* ``evaluate``: an object with ``count`` n needs n instances; counting prompts also exclude n + 1
  (exactly n); colour and position look only at the n best instances;
* colour: ``color_classification`` — each instance's image composited over a ``#999`` blank through
  its mask, cropped to its box, classified by CLIP ViT-L-14 (openai) zero-shot among ``COLORS``
  with the three templates averaged (clip_benchmark ``zero_shot_classifier``: mean of the
  normalised template embeddings, renormalised; logits ``100 · image @ classifier``);
* position: every one of the subject's n best instances against every one of the target's, by
  ``relative_position`` on box centres with ``POSITION_THRESHOLD`` 0.1 — the same
  function as :func:`t2i_audit.scorers.detect.relative_position` (checked against a transcription
  of GenEval's numpy code in tests/scorers/test_geneval.py), so it is reused, not copied.
  (detect.py's ``iou``/``nms`` are *not* GenEval's: continuous boxes and ``<=``; GenEval's
  ``compute_iou`` counts inclusive pixels and keeps ``iou < max_overlap`` — :func:`geneval_iou`.)
  GenEval checks a position only once subject and target passed their colour checks; here the
  questions are judged apart, and the prompt verdict (all pass) is the same.

Detection as mmdet 2.x ran it for GenEval (README: mmdetection branch 2.x; config
``configs/mask2former/mask2former_r50_lsj_8x2_50e_coco.py``, which the Swin-S config inherits;
``MaskFormerHead.simple_test``, ``MaskFormerFusionHead.simple_test`` / ``instance_postprocess``),
not as transformers' processor does it:

* input: ``Resize(img_scale=(1333, 800), keep_ratio=True)`` (mmcv ``rescale_size``:
  ``int(side * factor + 0.5)``, :func:`mmdet_resize_hw`), then ``Pad(size_divisor=32)`` with zeros
  after ``Normalize`` at the bottom/right. transformers' ``Mask2FormerImageProcessor.resize``
  (image_processing_mask2former.py, 5.x) instead *stretches* to the next multiple of 32 and
  floors the side (``get_size_with_aspect_ratio``), so the processor is called with the exact
  size and ``size_divisor=0`` and the padding is added here;
* output (:func:`mmdet_instances`): mask logits upsampled BILINEARLY to the padded input, the
  padding cropped off, upsampled BILINEARLY to the original image; then top-100 over queries ×
  classes, binary mask = logit > 0, score = class probability × mean mask probability inside it,
  all at the original resolution. transformers' ``post_process_instance_segmentation`` resizes
  every mask to 384², scores there, then resizes the binary mask NEAREST to ``target_sizes``,
  padding included — masks shifted and blocky on non-square images, scores from another grid.
Boxes from the binary masks as mmdet's ``mask2bbox`` (``[x_min, y_min, x_max + 1, y_max + 1]``).

GenEval knows the 80 COCO classes only: a question about another object, a colour outside
``COLORS``, a non-colour attribute or a non-spatial relation gets no answer (``extra.unsupported``),
and a prompt whose answered questions all pass but which has unsupported questions gets verdict
``None`` (GenEval's "correct" cannot be established), never a failure.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .base import Answer, QuestionScorer, ScoreItem
from .coco import COCO_CLASSES
from .detect import SPATIAL, relative_position

# evaluate_images.py COLORS and the templates of color_classification
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
COLOR_TEMPLATES = ("a photo of a {color} {object}", "a photo of a {color}-colored {object}",
                   "a photo of a {color} object")
DEFAULTS = {"score": 0.3, "counting_score": 0.9, "position": 0.1, "max_overlap": 1.0}


# --- GenEval's rules, pure functions ----------------------------------------------------------
def geneval_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """GenEval's ``compute_iou``: inclusive pixel boxes (+1). Not detect.iou, which is continuous."""
    def area(x):
        return max(x[2] - x[0] + 1, 0) * max(x[3] - x[1] + 1, 0)

    inter = area([max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])])
    union = area(a) + area(b) - inter
    return inter / union if union else 0


def select_instances(instances: Sequence[Mapping], threshold: float, max_objects: int = 16,
                     max_overlap: float = 1.0) -> dict[str, list[dict]]:
    """``evaluate_image``'s per-class selection: ``{class: [instance, ...]}`` best first.

    Instances are dicts with ``class``, ``score`` and ``box``; kept when ``score > threshold``
    (strict, as GenEval), at most ``max_objects`` a class, then greedy NMS dropping boxes with
    ``geneval_iou >= max_overlap`` unless ``max_overlap == 1`` (GenEval's default: no NMS).
    """
    by_class: dict[str, list[dict]] = {}
    for inst in instances:
        by_class.setdefault(inst["class"], []).append(dict(inst))
    out: dict[str, list[dict]] = {}
    for cls, insts in by_class.items():
        order = sorted((i for i in insts if i["score"] > threshold), key=lambda i: -i["score"])[:max_objects]
        kept = []
        while order:
            best = order.pop(0)
            kept.append(best)
            order = [i for i in order if max_overlap == 1 or geneval_iou(best["box"], i["box"]) < max_overlap]
        if kept:
            out[cls] = kept
    return out


def mask_to_box(mask) -> list[float]:
    """mmdet ``mask2bbox`` for one (H, W) boolean mask: ``[x0, y0, x1 + 1, y1 + 1]``; zeros if empty."""
    import numpy as np

    m = np.asarray(mask, dtype=bool)
    xs, ys = np.flatnonzero(m.any(0)), np.flatnonzero(m.any(1))
    if not len(xs) or not len(ys):
        return [0.0, 0.0, 0.0, 0.0]
    return [float(xs[0]), float(ys[0]), float(xs[-1] + 1), float(ys[-1] + 1)]


def masked_crop(image, mask, box: Sequence[float], background: str = "#999", crop: bool = True):
    """``ImageCrops.__getitem__``: the image through ``mask`` over a ``background`` blank (or the
    image itself for ``"original"``), cropped to ``box`` (PIL rounds float boxes)."""
    import numpy as np
    from PIL import Image

    image = image.convert("RGB")
    blank = image.copy() if background == "original" else Image.new("RGB", image.size, color=background)
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        if m.shape != (image.height, image.width):
            raise ValueError(f"mask {m.shape} does not match image {(image.height, image.width)}")
        image = Image.composite(image, blank, Image.fromarray(m))
    return image.crop(tuple(box[:4])) if crop else image


def color_classifier(clip, object_name: str, colors: Sequence[str] = COLORS,
                     templates: Sequence[str] = COLOR_TEMPLATES):
    """clip_benchmark ``zero_shot_classifier``: (d, n_colors), each column the renormalised mean
    of the normalised embeddings of the templates filled with that colour and ``object_name``."""
    import torch

    cols = []
    for c in colors:
        emb = clip.encode_texts([t.format(color=c, object=object_name) for t in templates])  # normalised
        mean = emb.mean(0)
        cols.append(mean / mean.norm())
    return torch.stack(cols, dim=1)


def mmdet_resize_hw(height: int, width: int, scale: Sequence[int] = (1333, 800)) -> tuple[int, int]:
    """mmcv ``rescale_size`` (keep_ratio Resize): the largest size within ``scale`` (long, short
    edge), each side ``int(side * factor + 0.5)``; returns (height, width)."""
    factor = min(max(scale) / max(height, width), min(scale) / min(height, width))
    return int(height * factor + 0.5), int(width * factor + 0.5)


def mmdet_instances(class_logits, mask_logits, input_hw, resized_hw, image_hw, max_per_image: int = 100):
    """mmdet 2.x Mask2Former instance post-processing for one image: ``(labels, scores, binary masks)``.

    ``class_logits`` (Q, C + 1), ``mask_logits`` (Q, h, w) at 1/4 of the padded input ``input_hw``;
    ``resized_hw`` the image inside it, ``image_hw`` the original. ``MaskFormerHead.simple_test``
    upsamples to the padded input, ``MaskFormerFusionHead.simple_test`` crops the padding and
    upsamples to the original (both bilinear, align_corners=False), ``instance_postprocess``
    takes the top ``max_per_image`` (query, class) pairs and scores each at the original size.
    Interpolation is per query, so only the selected queries are upsampled.
    """
    import torch.nn.functional as F

    n_cls = class_logits.shape[-1] - 1
    scores = class_logits.softmax(-1)[:, :-1].flatten()
    top, idx = scores.topk(min(max_per_image, scores.numel()))
    labels, queries = idx % n_cls, idx // n_cls
    m = F.interpolate(mask_logits[queries][None], size=tuple(input_hw), mode="bilinear", align_corners=False)[0]
    m = m[:, :resized_hw[0], :resized_hw[1]]
    m = F.interpolate(m[None], size=tuple(image_hw), mode="bilinear", align_corners=False)[0]
    binary = m > 0
    mask_scores = (m.sigmoid() * binary).flatten(1).sum(1) / (binary.flatten(1).sum(1) + 1e-6)
    return labels, top * mask_scores, binary


def coco_class(name: str, aliases: Mapping[str, str] | None = None) -> str | None:
    """GenEval's class for an object name (its own name, or a card alias), ``None`` if not COCO."""
    key = " ".join(str(name).lower().split())
    if key in COCO_CLASSES:
        return key
    alias = (aliases or {}).get(key)
    return alias if alias in COCO_CLASSES else None


# --- the scorer -------------------------------------------------------------------------------
class GenEvalScorer(QuestionScorer):
    """Card keys: ``thresholds`` {score, counting_score, position, max_overlap}; ``options``
    {max_objects, colors, color_templates, background, crop, class_aliases, image_size,
    attribute_model (a CLIP model section, see clip_models.load_clip)}."""

    family = "detect"

    def load_model(self) -> None:
        import transformers

        from ..errors import AuditError
        from .clip_models import model_dtype

        m = self.resolved_model()
        kw = {} if m.get("local") else {"revision": m.get("revision") or None}
        self.processor = transformers.AutoImageProcessor.from_pretrained(m["id"], **kw)
        self.model = transformers.Mask2FormerForUniversalSegmentation.from_pretrained(
            m["id"], dtype=model_dtype(m, self.device), **kw).to(self.device).eval()
        n = int(self.model.config.num_labels)
        if n != len(COCO_CLASSES):
            raise AuditError(f"scorer {self.name!r}: {m['id']} predicts {n} classes; GenEval's rules need "
                             f"the {len(COCO_CLASSES)} COCO instance classes (a *-coco-instance checkpoint)")
        self._clip = None
        self._classifiers: dict = {}

    @property
    def options(self) -> dict:
        return dict(self.card.get("options") or {})

    def threshold(self, name: str) -> float:
        return float(self.thresholds.get(name, DEFAULTS[name]))

    def _color_clip(self):
        if self._clip is None:
            from .clip_models import load_clip
            from .registry import _normalise

            cfg = _normalise({"name": "color", "class": "-", "model": dict(self.options.get("attribute_model") or {})},
                             "attribute_model", None)["model"]
            self._clip = load_clip(self.resolved_model(cfg), self.device)
        return self._clip

    # --- model calls (override to inject) ---------------------------------------------------
    def segment(self, images: Sequence) -> list[list[dict]]:
        """For each image, its instances ``{class, label_id, score, box, mask}`` (mask: (H, W) bool
        numpy), detected and post-processed as mmdet 2.x did for GenEval (module docstring)."""
        import torch

        floor = min(self.threshold("score"), self.threshold("counting_score"))
        size = self.options.get("image_size") or self.processor.size
        edge = {k: (size.get(k) if isinstance(size, Mapping) else getattr(size, k, None))
                for k in ("shortest_edge", "longest_edge")}
        div = int(getattr(self.processor, "size_divisor", 32) or 1)
        out = []
        for im in images:  # one at a time: each image padded only to its own multiple of 32
            im = im.convert("RGB")
            h, w = (mmdet_resize_hw(im.height, im.width, (edge["longest_edge"], edge["shortest_edge"]))
                    if all(edge.values()) else (None, None))
            kw = {"size": {"height": h, "width": w}} if h else {"size": size}
            px = self.processor(images=im, return_tensors="pt", size_divisor=0, **kw)["pixel_values"]
            h, w = px.shape[-2:]
            pad_h, pad_w = -h % div, -w % div
            px = torch.nn.functional.pad(px, (0, pad_w, 0, pad_h))  # zeros after Normalize, as mmdet Pad
            with torch.no_grad():  # no pixel_mask: mmdet's MSDeformAttnPixelDecoder ignores padding too
                res = self.model(pixel_values=px.to(self.device, self.model.dtype))
            labels, scores, masks = mmdet_instances(
                res.class_queries_logits[0].float(), res.masks_queries_logits[0].float(),
                (h + pad_h, w + pad_w), (h, w), (im.height, im.width))
            insts = []
            for lab, sc, m in zip(labels.tolist(), scores.tolist(), masks.cpu().numpy()):
                if sc >= floor and m.any():
                    insts.append({"class": COCO_CLASSES[lab], "label_id": int(lab), "score": float(sc),
                                  "box": mask_to_box(m), "mask": m})
            out.append(insts)
        return out

    def classify_colors(self, crops: Sequence, object_names: Sequence[str]) -> list[list[float]]:
        """For each crop, GenEval's colour logits (``100 · image @ classifier``) over the card's colours."""
        if not crops:
            return []
        clip = self._color_clip()
        colors = tuple(self.options.get("colors") or COLORS)
        tpls = tuple(self.options.get("color_templates") or COLOR_TEMPLATES)
        img = clip.encode_images(list(crops))
        out = []
        for i, name in enumerate(object_names):
            key = (name, colors, tpls)
            if key not in self._classifiers:
                self._classifiers[key] = color_classifier(clip, name, colors, tpls)
            out.append((100.0 * img[i:i + 1] @ self._classifiers[key])[0].tolist())
        return out

    # --- decisions --------------------------------------------------------------------------
    @staticmethod
    def is_counting(prompt: Mapping) -> bool:
        """GenEval's ``tag == "counting"`` (imported prompts keep it in ``source_meta``); otherwise
        a prompt with a count question."""
        tag = (prompt.get("source_meta") or {}).get("tag")
        if tag is not None:
            return tag == "counting"
        return any(q.get("kind") == "count" for q in prompt.get("questions", []))

    def answer(self, items: Sequence[ScoreItem], queries) -> list[dict[str, Answer]]:
        aliases = self.options.get("class_aliases") or {}
        colors = tuple(self.options.get("colors") or COLORS)
        max_objects = int(self.options.get("max_objects", 16))
        segs = self.segment([it.image for it in items])
        out = []
        for it, qs, insts in zip(items, queries, segs):
            objs = {o["id"]: o for o in it.prompt.get("objects", [])}
            cls = {oid: coco_class(o["name"], aliases) for oid, o in objs.items()}
            thr = self.threshold("counting_score" if self.is_counting(it.prompt) else "score")
            dets = select_instances(insts, thr, max_objects, self.threshold("max_overlap"))

            def top(oid):  # the n best instances GenEval looks at for colour and position
                return dets.get(cls[oid], [])[:max(1, int(objs[oid].get("count") or 1))]

            ans: dict[str, Answer] = {}
            color_jobs = []
            for q in qs:
                kind, oid = q.get("kind"), q.get("object")
                if kind in ("exists", "count", "other", "attribute") and cls.get(oid) is None:
                    continue  # not a COCO class: GenEval cannot answer
                if kind == "exists":
                    found = dets.get(cls[oid], [])
                    ans[q["id"]] = Answer(found[0]["score"] if found else 0.0, bool(found),
                                          {"class": cls[oid], "threshold": thr, **_boxes(found)})
                elif kind == "count" or (kind == "other" and q.get("number") is not None):
                    n, want = len(dets.get(cls[oid], [])), int(q["number"])
                    exact = kind == "count"  # "other" + number: "at least n", GenEval's include alone
                    ans[q["id"]] = Answer(float(n), n == want if exact else n >= want,
                                          {"class": cls[oid], "count": n, "expected": want, "threshold": thr,
                                           "rule": "exactly" if exact else "at least"})
                elif kind == "relation":
                    rel = SPATIAL.get(q.get("value"))
                    s, o = q.get("subject"), q.get("object")
                    if rel is None or cls.get(s) is None or cls.get(o) is None or not top(s) or not top(o):
                        continue  # non-spatial, non-COCO, or no instances (the exists question decides)
                    found = [relative_position(a["box"], b["box"], self.threshold("position"))
                             for a in top(s) for b in top(o)]
                    ok = all(rel in f for f in found)  # every subject instance vs every target instance
                    ans[q["id"]] = Answer(float(ok), ok, {"rule": rel, "relations": sorted(found[0]),
                                                          "subject_box": top(s)[0]["box"],
                                                          "object_box": top(o)[0]["box"]})
                elif kind == "attribute" and q.get("family") == "color" and q.get("value") in colors and top(oid):
                    color_jobs.append((q, oid))
            self._answer_colors(it, color_jobs, top, cls, colors, ans)
            out.append(ans)
        return out

    def _answer_colors(self, item, jobs, top, cls, colors, ans) -> None:
        """All colour queries of one image: each needed instance cropped and classified once."""
        import math

        needed = list(dict.fromkeys((oid, k) for _, oid in jobs for k in range(len(top(oid)))))
        if not needed:
            return
        bg = str(self.options.get("background", "#999"))
        crop = bool(self.options.get("crop", True))
        crops = [masked_crop(item.image, top(oid)[k].get("mask"), top(oid)[k]["box"], bg, crop) for oid, k in needed]
        logits = dict(zip(needed, self.classify_colors(crops, [cls[oid] for oid, _ in needed])))
        for q, oid in jobs:
            preds, probs = [], []
            for k in range(len(top(oid))):
                lg = logits[(oid, k)]
                mx = max(lg)
                z = sum(math.exp(v - mx) for v in lg)
                preds.append(colors[max(range(len(lg)), key=lg.__getitem__)])
                probs.append(math.exp(lg[colors.index(q["value"])] - mx) / z)
            ok = all(p == q["value"] for p in preds)  # colors.count(color) >= count on the n best
            ans[q["id"]] = Answer(sum(probs) / len(probs), ok, {"predicted": preds, "class": cls[oid],
                                                                 "boxes": [i["box"] for i in top(oid)]})

    def records_from_answers(self, item: ScoreItem, queries, answers) -> list[dict]:
        recs = super().records_from_answers(item, queries, answers)
        unsupported = [r["question_id"] for r in recs[:-1] if r["kind"] == "question"
                       and r["extra"].get("unsupported") and not r["extra"].get("skipped_by")]
        if unsupported:
            pr = recs[-1]
            pr["extra"]["unsupported"] = unsupported
            if pr["verdict"] is True:  # the answered questions pass, the rest GenEval cannot judge
                pr["verdict"] = None
        return recs


def _boxes(found: Sequence[Mapping]) -> dict:
    return {"boxes": [[round(float(x), 2) for x in i["box"]] for i in found[:10]],
            "scores": [round(float(i["score"]), 4) for i in found[:10]]}
