"""The pixel judge: reads the mini world's palette to answer a prompt's questions exactly.

Pixels are classified to the nearest palette colour (or white, or "other" when far from all);
each colour's 4-connected components above a minimum area are objects ("blobs"), with area,
centroid and bounding box; a blob's shape is the ideal shape (rendered into its bounding
box) with the highest IoU. A prompt's objects are matched to blobs by a maximum-weight
assignment (shape match first, then colour), and the questions read the matched blobs:
``exists`` — the matched blob has the object's shape; ``attribute`` (colour) — it has the
colour; ``relation`` — the dominant-axis rule between centroids (as in world.relation_holds);
``count`` — how many blobs have the object's shape. Questions outside the world (other
objects, families or relations) are not answered (``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..scorers.base import Answer, QuestionScorer, ScoreItem
from .world import BACKGROUND, PALETTE, RELATIONS, SHAPES, Obj, draw_shape, relation_holds

COLOR_NAMES = tuple(PALETTE)
_REF = np.array([PALETTE[c] for c in COLOR_NAMES] + [BACKGROUND], dtype=np.float32)
MAX_COLOR_DISTANCE = 90.0   # RGB distance beyond which a pixel is "other"
MIN_AREA_FRACTION = 0.012   # of the image: smaller components are noise (an object is >= ~6 %)


@dataclass
class Blob:
    color: str
    shape: str
    shape_iou: float
    area: int
    cx: float   # centroid, fraction of width
    cy: float
    bbox: tuple[int, int, int, int]  # x0, y0, x1, y1 inclusive


def classify_pixels(arr: np.ndarray) -> np.ndarray:
    """(H, W) int: palette index, len(PALETTE) for white, -1 for other."""
    d = np.linalg.norm(arr[:, :, None, :].astype(np.float32) - _REF[None, None], axis=-1)
    idx = d.argmin(-1)
    idx[d.min(-1) > MAX_COLOR_DISTANCE] = -1
    return idx


def _ideal_mask(shape: str, w: int, h: int) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.new("L", (w, h), 0)
    draw_shape(ImageDraw.Draw(img), shape, (0, 0, w - 1, h - 1), 255)
    return np.asarray(img) > 0


def classify_shape(mask: np.ndarray) -> tuple[str, float]:
    """Best-IoU shape for a cropped boolean mask."""
    h, w = mask.shape
    best, best_iou = SHAPES[0], -1.0
    for s in SHAPES:
        ideal = _ideal_mask(s, w, h)
        iou = float((ideal & mask).sum() / max(1, (ideal | mask).sum()))
        if iou > best_iou:
            best, best_iou = s, iou
    return best, best_iou


def analyze(image) -> list[Blob]:
    """All blobs of an RGB image (PIL or uint8 array), largest first."""
    from scipy import ndimage

    arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
    h, w = arr.shape[:2]
    idx = classify_pixels(arr)
    min_area = max(3, int(MIN_AREA_FRACTION * h * w))
    blobs = []
    for ci, cname in enumerate(COLOR_NAMES):
        labels, n = ndimage.label(idx == ci)
        if n == 0:
            continue
        for sl_i, sl in enumerate(ndimage.find_objects(labels), start=1):
            mask = labels[sl] == sl_i
            area = int(mask.sum())
            if area < min_area:
                continue
            ys, xs = np.nonzero(mask)
            shape, iou = classify_shape(mask)
            y0, x0 = sl[0].start, sl[1].start
            blobs.append(Blob(cname, shape, iou, area, float((x0 + xs.mean() + 0.5) / w), float((y0 + ys.mean() + 0.5) / h),
                              (x0, y0, sl[1].stop - 1, sl[0].stop - 1)))
    blobs.sort(key=lambda b: -b.area)
    return blobs


def match_objects(objects: Sequence[Mapping], blobs: Sequence[Blob]) -> dict[str, Blob | None]:
    """Assign each prompt object a distinct blob, maximising 2*[shape] + [colour] (+area)."""
    from scipy.optimize import linear_sum_assignment

    if not objects or not blobs:
        return {o["id"]: None for o in objects}
    gain = np.zeros((len(objects), len(blobs)))
    max_area = max(b.area for b in blobs)
    for i, o in enumerate(objects):
        color = (o.get("attributes") or {}).get("color")
        for j, b in enumerate(blobs):
            gain[i, j] = 2.0 * (b.shape == o["name"]) + 1.0 * (b.color == color) + 0.01 * b.area / max_area
    rows, cols = linear_sum_assignment(-gain)
    out = {o["id"]: None for o in objects}
    for r, c in zip(rows, cols):
        out[objects[r]["id"]] = blobs[c]
    return out


def answer_queries(queries: Sequence[Mapping], prompt: Mapping, blobs: Sequence[Blob]) -> dict[str, Answer]:
    """Answers to question/probe dicts (PromptRecord question keys) from the blobs."""
    objs = list(prompt.get("objects", []))
    if not all(o.get("name") in SHAPES for o in objs):
        return {}
    matched = match_objects(objs, blobs)
    by_id = {o["id"]: o for o in objs}
    out: dict[str, Answer] = {}
    for q in queries:
        kind = q.get("kind")
        if kind == "exists":
            b = matched.get(q["object"])
            ok = b is not None and b.shape == by_id[q["object"]]["name"]
            out[q["id"]] = Answer(float(ok), ok, _blob_extra(b))
        elif kind == "attribute" and q.get("family") == "color" and q.get("value") in PALETTE:
            b = matched.get(q["object"])
            ok = b is not None and b.color == q["value"]
            out[q["id"]] = Answer(float(ok), ok, {"seen": None if b is None else b.color})
        elif kind == "relation" and q.get("value") in RELATIONS:
            a, b = matched.get(q["subject"]), matched.get(q["object"])
            if a is None or b is None:
                out[q["id"]] = Answer(None, False, {"reason": "object not found"})
                continue
            ok = bool(relation_holds(Obj("", "", a.cx, a.cy), Obj("", "", b.cx, b.cy), q["value"]))
            out[q["id"]] = Answer(float(ok), ok, {"dx": round(b.cx - a.cx, 3), "dy": round(b.cy - a.cy, 3)})
        elif kind == "count":
            name = by_id[q["object"]]["name"]
            n = sum(1 for b in blobs if b.shape == name)
            out[q["id"]] = Answer(float(n), n == int(q["number"]), {"counted": n})
    return out


def _blob_extra(b: Blob | None) -> dict:
    if b is None:
        return {"blob": None}
    return {"blob": {"color": b.color, "shape": b.shape, "iou": round(b.shape_iou, 3), "area": b.area,
                     "cx": round(b.cx, 3), "cy": round(b.cy, 3)}}


def judge_image(image, record: Mapping) -> dict[str, bool | None]:
    """Per-question verdicts (DSG dependencies applied) for one image and PromptRecord."""
    from ..scorers import verdicts

    queries = verdicts.build_queries(record)
    ans = answer_queries(queries, record, analyze(image))
    j = verdicts.judge(record, {k: a.passed for k, a in ans.items()})
    return {qid: st["verdict"] for qid, st in j["questions"].items()}


def prompt_passes(image, record: Mapping) -> bool:
    """All of the record's questions verdict True."""
    v = judge_image(image, record)
    return bool(v) and all(x is True for x in v.values())


class PixelJudge(QuestionScorer):
    """Scorer wrapper (card: t2i_audit/cards/scorers/mini.yaml, name ``mini-pixel``)."""

    family = "detect"

    @property
    def model_id(self) -> str:
        return "mini-pixel-judge"

    def answer(self, items: Sequence[ScoreItem], queries: Sequence[Sequence[dict]]) -> list[dict[str, Answer]]:
        out = []
        for it, qs in zip(items, queries):
            blobs = analyze(it.image)
            ans = answer_queries(qs, it.prompt, blobs)
            out.append(ans)
        return out

    def metrics(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        recs = []
        for it in items:
            blobs = analyze(it.image)
            recs.append([self.record(it, "metric", metric="objects_found", value=len(blobs),
                                     extra={"blobs": [_blob_extra(b)["blob"] for b in blobs[:6]]})])
        return recs
