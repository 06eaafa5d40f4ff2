"""Composition statistics of one image's cross-attention maps, slot by slot (pure numpy).

Input: one ``(H, W, keys)`` map (the head- and module-mean probabilities of a grid at a step,
probes/capture/attention.py), the key positions of each slot's tokens, and the prompt record. Each slot's
map is its tokens' mean probability, renormalised per pixel over the prompt's own word tokens (the
start token soaks up most of the mass in CLIP-conditioned UNets, and how much varies per pixel;
``A_s(x) = p_s(x) / Σ_words p(x)``).

Features, named so that one category's prompts share one layout (object 1, object 2, relation 1):

* per object and per attribute slot: ``mass`` (mean of A_s), ``peak`` (max), ``entropy`` of the
  spatial distribution ``q_s = A_s / ΣA_s`` (normalised by log H·W), ``spread`` (its radius of
  gyration), and the 2×2 region masses of ``q_s`` (where it looks, not only how much);
* binding: the correlation of each attribute's map with its own object's map and with the other
  object's (``bind_own`` − ``bind_other``: does "red" attend where "cube" does, not where "sphere"
  does?), the overlap ``Σ min(q_o1, q_o2)`` of the two objects;
* layout, per relation: the objects' centroid difference along the relation's axis, signed so that
  positive means "as the prompt says" (``order``), and the same for the 2×2 region masses in the
  relation's frame (the subject's mass on the side the relation names, minus the object's);
* counts: the number of blobs of the object's map above half its peak (scipy.ndimage.label).

A slot the prompt lacks is NaN (the probes impute per category, where layouts agree).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

# Relation name → (axis, sign): the subject's centroid minus the object's, times sign, is positive
# when the relation holds (x grows rightwards, y downwards).
RELATION_AXES: dict[str, tuple[int, float]] = {
    "left of": (1, -1.0), "to the left of": (1, -1.0), "on the left of": (1, -1.0),
    "right of": (1, 1.0), "to the right of": (1, 1.0), "on the right of": (1, 1.0),
    "above": (0, -1.0), "on top of": (0, -1.0), "over": (0, -1.0),
    "below": (0, 1.0), "under": (0, 1.0), "beneath": (0, 1.0), "on the bottom of": (0, 1.0),
}
PER_SLOT = ("mass", "peak", "entropy", "spread", "r00", "r01", "r10", "r11", "blobs")


def slot_map(m: np.ndarray, keys: Sequence[int], words: Sequence[int]) -> np.ndarray:
    """A_s: the slot tokens' mean probability over the prompt's word tokens, per pixel."""
    total = m[..., list(words)].sum(-1)
    return m[..., list(keys)].mean(-1) / np.maximum(total, 1e-12)


def _dist(a: np.ndarray) -> np.ndarray:
    s = a.sum()
    return a / s if s > 0 else np.full_like(a, 1.0 / a.size)


def _centroid(q: np.ndarray) -> np.ndarray:
    h, w = q.shape
    ys, xs = (np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w
    return np.array([(q.sum(1) * ys).sum(), (q.sum(0) * xs).sum()])


def _regions(q: np.ndarray) -> np.ndarray:
    """2×2 region masses [[top-left, top-right], [bottom-left, bottom-right]]."""
    h, w = q.shape
    return np.array([[q[:h // 2, :w // 2].sum(), q[:h // 2, w // 2:].sum()],
                     [q[h // 2:, :w // 2].sum(), q[h // 2:, w // 2:].sum()]])


def _blobs(a: np.ndarray) -> int:
    from scipy import ndimage

    if a.max() <= 0:
        return 0
    return int(ndimage.label(a >= 0.5 * a.max())[1])


def slot_stats(a: np.ndarray) -> dict[str, float]:
    q = _dist(a)
    h, w = q.shape
    c = _centroid(q)
    ys, xs = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
    ent = -(q[q > 0] * np.log(q[q > 0])).sum() / np.log(q.size)
    r = _regions(q)
    return {"mass": float(a.mean()), "peak": float(a.max()), "entropy": float(ent),
            "spread": float(np.sqrt((q * ((ys - c[0]) ** 2 + (xs - c[1]) ** 2)).sum())),
            "r00": float(r[0, 0]), "r01": float(r[0, 1]), "r10": float(r[1, 0]), "r11": float(r[1, 1]),
            "blobs": float(_blobs(a))}


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel() - a.mean(), b.ravel() - b.mean()
    d = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / d) if d > 0 else 0.0


def feature_names(max_objects: int = 2, max_relations: int = 1) -> list[str]:
    names = []
    for i in range(max_objects):
        names += [f"obj{i + 1}.{s}" for s in PER_SLOT]
        names += [f"obj{i + 1}.attr.{s}" for s in PER_SLOT]
        names += [f"obj{i + 1}.bind_own", f"obj{i + 1}.bind_other", f"obj{i + 1}.bind_margin"]
    names += ["pair.overlap"]
    for j in range(max_relations):
        names += [f"rel{j + 1}.order", f"rel{j + 1}.side"]
    return names


def image_features(m: np.ndarray, slot_keys: Mapping[str, Sequence[int]], words: Sequence[int],
                   prompt: Mapping, max_objects: int = 2, max_relations: int = 1) -> np.ndarray:
    """One image's feature vector (``feature_names`` order) from its ``(H, W, keys)`` map."""
    f = dict.fromkeys(feature_names(max_objects, max_relations), np.nan)
    if not words:
        return np.array(list(f.values()), dtype=np.float32)
    objs = list(prompt.get("objects") or [])[:max_objects]
    maps: dict[str, np.ndarray] = {}
    attr_of: dict[str, str] = {}
    for o in objs:
        if o["id"] in slot_keys:
            maps[o["id"]] = slot_map(m, slot_keys[o["id"]], words)
        attr = next((s for s in (o.get("attribute_slots") or {}).values() if s in slot_keys), None)
        if attr:
            maps[attr] = slot_map(m, slot_keys[attr], words)
            attr_of[o["id"]] = attr
    for i, o in enumerate(objs):
        tag = f"obj{i + 1}"
        if o["id"] in maps:
            f.update({f"{tag}.{k}": v for k, v in slot_stats(maps[o["id"]]).items()})
        if o["id"] in attr_of:
            a = maps[attr_of[o["id"]]]
            f.update({f"{tag}.attr.{k}": v for k, v in slot_stats(a).items()})
            if o["id"] in maps:
                f[f"{tag}.bind_own"] = _corr(a, maps[o["id"]])
            others = [maps[p["id"]] for p in objs if p["id"] != o["id"] and p["id"] in maps]
            if others:
                f[f"{tag}.bind_other"] = max(_corr(a, x) for x in others)
                if o["id"] in maps:
                    f[f"{tag}.bind_margin"] = f[f"{tag}.bind_own"] - f[f"{tag}.bind_other"]
    ids = [o["id"] for o in objs if o["id"] in maps]
    if len(ids) >= 2:
        f["pair.overlap"] = float(np.minimum(_dist(maps[ids[0]]), _dist(maps[ids[1]])).sum())
    for j, rel in enumerate(list(prompt.get("relations") or [])[:max_relations]):
        axis = RELATION_AXES.get(str(rel.get("name", "")).lower())
        s, o = rel.get("subject"), rel.get("object")
        if axis is None or s not in maps or o not in maps:
            continue
        ax, sign = axis
        qs, qo = _dist(maps[s]), _dist(maps[o])
        f[f"rel{j + 1}.order"] = float(sign * (_centroid(qs)[ax] - _centroid(qo)[ax]))
        # the subject's mass on the named side minus the object's there (2 x 2 regions, the relation's frame)
        halves_s, halves_o = _regions(qs).sum(axis=1 - ax), _regions(qo).sum(axis=1 - ax)
        far = 1 if sign > 0 else 0
        f[f"rel{j + 1}.side"] = float(halves_s[far] - halves_o[far])
    return np.array(list(f.values()), dtype=np.float32)
