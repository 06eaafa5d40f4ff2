"""Open-vocabulary detection scorer (OWLv2 / Grounding DINO through transformers).

Decision rules (GenEval-style, Ghosh et al. 2023), on boxes with score >= ``thresholds.box``
after per-label NMS at ``thresholds.nms_iou``:

* exists — at least one box of the object; value: the best box score;
* count — exactly ``number`` boxes; value: the number of boxes;
* relation (spatial: left of / right of / above / below, and on top of → above, under → below)
  — on the best boxes of subject and object, the offset of the centroids, shrunk by
  ``thresholds.position`` × (sum of the box sizes) per axis, must point within 45° of the
  direction (:func:`relative_position`); value 1/0; other relations are unanswerable (null);
* attribute (families in ``options.values``) — the best box of the object is cropped and
  classified by CLIP (``options.attribute_model``) among "a photo of a {value} {object}";
  pass when the asked value wins; value: its probability.

The decision layer's inputs are :meth:`DetectionScorer.detect` (boxes per label) and
:meth:`DetectionScorer.classify_crops` (CLIP probabilities): override them to inject.
"""

from __future__ import annotations

import math
from typing import Sequence

from .base import Answer, QuestionScorer, ScoreItem

SPATIAL = {"left of": "left of", "right of": "right of", "above": "above", "below": "below",
           "on top of": "above", "over": "above", "under": "below", "beneath": "below"}


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def nms(boxes: Sequence[Sequence[float]], iou_thr: float) -> list[list[float]]:
    """Greedy NMS on [x0, y0, x1, y1, score] boxes; best first."""
    keep: list[list[float]] = []
    for b in sorted(boxes, key=lambda x: -x[4]):
        if all(iou(b, k) <= iou_thr for k in keep):
            keep.append(list(b))
    return keep


def relative_position(a: Sequence[float], b: Sequence[float], threshold: float = 0.1) -> set[str]:
    """Where box ``a`` is relative to box ``b`` (image y grows downwards), as in GenEval."""
    ca = ((a[0] + a[2]) / 2, (a[1] + a[3]) / 2)
    cb = ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)
    dims = (abs(a[2] - a[0]) + abs(b[2] - b[0]), abs(a[3] - a[1]) + abs(b[3] - b[1]))
    off = (ca[0] - cb[0], ca[1] - cb[1])
    rev = [max(abs(o) - threshold * d, 0.0) * math.copysign(1, o) for o, d in zip(off, dims)]
    if all(abs(r) < 1e-3 for r in rev):
        return set()
    norm = math.hypot(*off)
    dx, dy = rev[0] / norm, rev[1] / norm
    out = set()
    if dx < -0.5:
        out.add("left of")
    if dx > 0.5:
        out.add("right of")
    if dy < -0.5:
        out.add("above")
    if dy > 0.5:
        out.add("below")
    return out


def in_image(box: Sequence[float], width: int, height: int) -> list[float] | None:
    """``box`` clipped to the image, or ``None`` when its centre lies outside it. OWLv2's processor
    pads an image bottom/right to a square before resizing (transformers
    ``Owlv2ImageProcessor.pad`` / ``_scale_boxes``: boxes are scaled by the longer side), so a box
    centred in that padding describes the padding, not an object: it is dropped, never clamped
    onto the image edge where it would count."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    if not (0 <= cx <= width and 0 <= cy <= height):
        return None
    return [min(max(v, 0.0), lim) for v, lim in zip(box, (width, height, width, height))]


class DetectionScorer(QuestionScorer):
    family = "detect"

    # --- models -----------------------------------------------------------------------------
    def load_model(self) -> None:
        import transformers

        from .clip_models import model_dtype

        m = self.resolved_model()
        kw = {} if m.get("local") else {"revision": m.get("revision") or None}
        self.processor = transformers.AutoProcessor.from_pretrained(m["id"], **kw)
        self.model = transformers.AutoModelForZeroShotObjectDetection.from_pretrained(
            m["id"], dtype=model_dtype(m, self.device), **kw).to(self.device).eval()
        self._clip = None

    def _attribute_clip(self):
        if self._clip is None:
            from .clip_models import load_clip
            from .registry import _normalise

            cfg = dict((self.card.get("options") or {}).get("attribute_model") or {})
            cfg = _normalise({"name": "attr", "class": "-", "model": cfg}, "attribute_model",
                             None)["model"]
            self._clip = load_clip(self.resolved_model(cfg), self.device)
        return self._clip

    def detect(self, images: Sequence, labels: Sequence[Sequence[str]]) -> list[dict[str, list]]:
        """For each image, ``{label: [[x0, y0, x1, y1, score], ...]}`` in pixels."""
        import torch

        tpl = (self.card.get("templates") or {}).get("query", "a photo of a {object}")
        thr = float(self.thresholds.get("box", 0.1))
        out = []
        for im, labs in zip(images, labels):
            if not labs:  # a prompt with no parsed objects (imported, whole-prompt question only)
                out.append({})
                continue
            queries = [tpl.format(object=lab) for lab in labs]
            grounding = self.model.config.model_type == "grounding-dino"
            with torch.no_grad():
                if grounding:
                    enc = self.processor(images=im, text=". ".join(queries) + ".", return_tensors="pt",
                                         truncation=True, max_length=int(self.model.config.max_text_len))
                else:
                    limit = int(self.model.config.text_config.max_position_embeddings)
                    enc = self.processor(text=[queries], images=im, return_tensors="pt",
                                         truncation=True, max_length=limit)
                enc = enc.to(self.device)
                if "pixel_values" in enc:
                    enc["pixel_values"] = enc["pixel_values"].to(self.model.dtype)
                res = self.model(**enc)
            side = max(im.width, im.height)  # OWLv2 pads to a square before resizing
            size = [(im.height, im.width)] if grounding else [(side, side)]
            if grounding:
                r = self._grounding_boxes(res, enc["input_ids"][0].tolist(), queries, size[0], thr)
                names = [labs[int(i)] for i in r["labels"]]
            else:
                r = self.processor.post_process_grounded_object_detection(
                    res, threshold=thr, target_sizes=size, text_labels=[queries])[0]
                names = [labs[int(i)] for i in r["labels"]]
            det: dict[str, list] = {lab: [] for lab in labs}
            for name, box, score in zip(names, r["boxes"].tolist(), r["scores"].tolist()):
                kept = in_image(box, im.width, im.height)
                if name is not None and kept is not None:
                    det[name].append([*kept, float(score)])
            out.append(det)
        return out

    def _grounding_boxes(self, res, input_ids: list, queries: list, size, thr: float) -> dict:
        """Grounding DINO scores per phrase: max over the phrase's tokens of sigmoid(logits)
        (the processor's own post-processing returns decoded token strings instead of labels)."""
        import torch

        spans, pos = [], 0
        for q in queries:  # find each phrase's tokens in order in the joined caption
            ids = self.processor.tokenizer(q, add_special_tokens=False)["input_ids"]
            start = next((i for i in range(pos, len(input_ids) - len(ids) + 1)
                          if input_ids[i:i + len(ids)] == ids), None)
            spans.append((start, start + len(ids)) if start is not None and ids else None)
            if start is not None:
                pos = start + len(ids)
        probs = res.logits[0].float().sigmoid()  # (queries, text tokens)
        per = torch.stack([probs[:, a:b].max(-1).values if sp else torch.zeros(probs.shape[0], device=probs.device)
                           for sp in spans for a, b in [sp or (0, 0)]], -1)
        scores, labels = per.max(-1)
        h, w = size
        cx, cy, bw, bh = res.pred_boxes[0].float().unbind(-1)
        boxes = torch.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], -1)
        keep = scores >= thr
        return {"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]}

    def classify_crops(self, crops: Sequence, texts: Sequence[Sequence[str]]) -> list[list[float]]:
        """Softmax probabilities of each crop over its candidate texts (CLIP)."""
        clip = self._attribute_clip()
        from .clip import softmax

        if not crops:
            return []
        img = clip.encode_images(crops)
        unique = list(dict.fromkeys(t for ts in texts for t in ts))  # one text forward for all crops
        txt = clip.encode_texts(unique)
        row = {t: i for i, t in enumerate(unique)}
        out = []
        for i, ts in enumerate(texts):
            sims = (img[i:i + 1] @ txt[[row[t] for t in ts]].T)[0].tolist()
            out.append(softmax(sims, clip.logit_scale))
        return out

    # --- decisions --------------------------------------------------------------------------
    def query_truncated(self, label: str) -> bool:
        """Whether the text query for ``label`` exceeds the detector's text length (OWLv2: 16)."""
        proc, model = getattr(self, "processor", None), getattr(self, "model", None)
        if proc is None or model is None:
            return False
        tpl = (self.card.get("templates") or {}).get("query", "a photo of a {object}")
        cfg = model.config
        limit = getattr(cfg, "max_text_len", None) or cfg.text_config.max_position_embeddings
        return len(proc.tokenizer(tpl.format(object=label))["input_ids"]) > int(limit)

    def answer(self, items: Sequence[ScoreItem], queries) -> list[dict[str, Answer]]:
        thr = float(self.thresholds.get("box", 0.1))
        iou_thr = float(self.thresholds.get("nms_iou", 0.5))
        pos_thr = float(self.thresholds.get("position", 0.1))
        labels = [list(dict.fromkeys(o["name"] for o in it.prompt.get("objects", []))) for it in items]
        raw = self.detect([it.image for it in items], labels)
        out, crop_jobs = [], []
        for i, (it, qs, det) in enumerate(zip(items, queries, raw)):
            objs = {o["id"]: o for o in it.prompt.get("objects", [])}
            boxes = {name: nms([b for b in bs if b[4] >= thr], iou_thr) for name, bs in det.items()}
            best = {oid: (boxes.get(o["name"]) or [None])[0] for oid, o in objs.items()}
            ans: dict[str, Answer] = {}
            for q in qs:
                kind = q.get("kind")
                if kind == "exists":
                    bs = boxes.get(objs[q["object"]]["name"], [])
                    ans[q["id"]] = Answer(bs[0][4] if bs else 0.0, bool(bs),
                                          {"boxes": [[round(x, 2) for x in b] for b in bs[:10]]})
                elif kind == "count":
                    bs = boxes.get(objs[q["object"]]["name"], [])
                    ans[q["id"]] = Answer(float(len(bs)), len(bs) == int(q["number"]),
                                          {"count": len(bs), "expected": int(q["number"])})
                elif kind == "relation" and SPATIAL.get(q.get("value")):
                    a, b = best.get(q["subject"]), best.get(q["object"])
                    if a is None or b is None:
                        continue  # no boxes: the exists question decides, this one is skipped
                    rels = relative_position(a, b, pos_thr)
                    ok = SPATIAL[q["value"]] in rels
                    ans[q["id"]] = Answer(float(ok), ok, {"relations": sorted(rels),
                                                          "subject_box": [round(x, 2) for x in a],
                                                          "object_box": [round(x, 2) for x in b]})
                elif kind == "attribute":
                    vals = ((self.card.get("options") or {}).get("values") or {}).get(q.get("family"))
                    box = best.get(q["object"])
                    if not vals or box is None:
                        continue
                    crop_jobs.append((i, q, box, objs[q["object"]]["name"], vals))
            for q in qs:  # a truncated detector query is recorded, never hidden
                a = ans.get(q["id"])
                names = [objs[k]["name"] for k in (q.get("object"), q.get("subject")) if k in objs]
                if a is not None and q.get("kind") != "attribute":
                    a.truncated = any(self.query_truncated(n) for n in names)
            out.append(ans)
        self._answer_attributes(items, crop_jobs, out)
        return out

    def _answer_attributes(self, items, jobs, out) -> None:
        if not jobs:
            return
        tpl = (self.card.get("templates") or {}).get("attribute", "a photo of a {value} {object}")
        crops, texts, cands = [], [], []
        for i, q, box, name, vals in jobs:
            im = items[i].image
            x0, y0, x1, y1 = (max(0, int(box[0])), max(0, int(box[1])),
                              min(im.width, int(math.ceil(box[2]))), min(im.height, int(math.ceil(box[3]))))
            crops.append(im.crop((x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))))
            c = list(dict.fromkeys([q["value"], *vals]))
            cands.append(c)
            texts.append([tpl.format(value=v, object=name) for v in c])
        for (i, q, box, _, _), c, probs in zip(jobs, cands, self.classify_crops(crops, texts)):
            top = max(range(len(c)), key=lambda k: probs[k])
            out[i][q["id"]] = Answer(probs[0], c[top] == q["value"],
                                     {"predicted": c[top], "box": [round(x, 2) for x in box]})
