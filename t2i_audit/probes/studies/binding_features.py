"""Binding looked for properly: per-image features from maps the head mean throws away (pure numpy).

Inputs per image and step (``trajectory.py`` captures them): every cross-attention module's maps per
head ``(heads, H, W, keys)`` (conditional half), the CFG gap map ``‖ε_c − ε_u‖`` over channels at the
latent's resolution and its mean square, and the decoded x0 preview. Families:

* ``heads`` — map_features' composition statistics on every (module, head) map instead of the mean;
* ``rawmaps`` — each slot's renormalised map (object 1, its attribute, object 2, its attribute) per grid,
  turned into the relation's frame (so "A left of B", "B right of A" and "A above B" read alike) and
  averaged into 4×4 cells: a linear probe sees where, not statistics of where;
* ``overlap`` — per module (head mean): the overlap ``Σ min(q_attr, q_obj)`` of each attribute token's map
  with its own object's and with the other object's, their margin, and the two objects' overlap;
* ``cfg`` — the CFG gap (CFG-Rejection's accumulated score difference, arXiv 2505.23343): log10 of this
  step's mean square and of its sum over steps 0…s, and per slot token the gap inside its attention region
  relative to the image's mean gap (does guidance push where "red" looks?);
* ``x0colour`` — the x0 preview's colour inside each object's attention region: the weighted mean
  colour's distance to the object's own colour and to the other object's, their margin, and the share
  of the region on pixels whose nearest named colour is its own / the other object's.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..features.map_features import RELATION_AXES, feature_names, image_features, slot_map

SLOTS = ("o1", "a1", "o2", "a2")  # object 1, its attribute, object 2, its attribute
CELLS = 4
OVERLAP = ("a1_o1", "a1_o2", "a2_o2", "a2_o1", "margin1", "margin2", "o1_o2")
CFG = ("log10_asd", "log10_asd_cum", *(f"gap_{s}" for s in SLOTS))  # log10: arrays are stored as float16
X0COLOUR = tuple(f"{o}.{f}" for o in ("o1", "o2") for f in ("d_own", "d_other", "margin", "own_share", "other_share"))
# CSS colour names for prompts outside the mini world (the mini palette overrides: its renders are exact)
NAMED = {"red": (255, 0, 0), "green": (0, 128, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
         "purple": (128, 0, 128), "orange": (255, 165, 0), "black": (0, 0, 0), "white": (255, 255, 255),
         "pink": (255, 192, 203), "brown": (165, 42, 42), "gray": (128, 128, 128), "grey": (128, 128, 128)}


def palette() -> dict[str, tuple[int, int, int]]:
    from ...mini.world import BACKGROUND, PALETTE

    return {**NAMED, **PALETTE, "background": BACKGROUND}


def slot_keys(prompt: Mapping, keys: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """The key positions of SLOTS for this prompt (missing slots absent)."""
    out = {}
    for i, o in enumerate(list(prompt.get("objects") or [])[:2]):
        if o["id"] in keys:
            out[f"o{i + 1}"] = list(keys[o["id"]])
        attr = next((s for s in (o.get("attribute_slots") or {}).values() if s in keys), None)
        if attr:
            out[f"a{i + 1}"] = list(keys[attr])
    return out


def _dist(a: np.ndarray) -> np.ndarray:
    s = a.sum()
    return a / s if s > 0 else np.full_like(a, 1.0 / a.size)


def relation_frame(prompt: Mapping) -> tuple[int, float] | None:
    rels = list(prompt.get("relations") or [])
    return RELATION_AXES.get(str(rels[0].get("name", "")).lower()) if rels else None


def canonical(q: np.ndarray, frame: tuple[int, float] | None) -> np.ndarray:
    """A map turned so the prompt's relation reads "subject left of object" (identity without a relation)."""
    if frame is None:
        return q
    axis, sign = frame
    if axis == 0:
        q = q.T
    return q[:, ::-1] if sign > 0 else q


def cells(q: np.ndarray, n: int = CELLS) -> np.ndarray:
    """Mean of ``q`` over an n × n partition of its grid (np.array_split: any size)."""
    return np.array([[blk.mean() for blk in np.array_split(row, n, axis=1)] for row in np.array_split(q, n, axis=0)])


def heads(maps: Mapping[str, np.ndarray], keys, words, prompt) -> np.ndarray:
    """``maps``: module → ``(heads, H, W, keys)``; map_features per (module, head), modules in sorted order."""
    return np.concatenate([image_features(m[h], keys, words, prompt) for _, m in sorted(maps.items())
                           for h in range(m.shape[0])])


def heads_names(modules: Sequence[str], n_heads: Mapping[str, int]) -> list[str]:
    return [f"{m}.h{h}.{f}" for m in sorted(modules) for h in range(n_heads[m]) for f in feature_names()]


def _slot_dists(m: np.ndarray, sk: Mapping[str, list[int]], words) -> dict[str, np.ndarray]:
    return {s: _dist(slot_map(m, sk[s], words)) for s in SLOTS if s in sk}


def rawmaps(grids: Mapping[str, np.ndarray], sk, words, prompt) -> np.ndarray:
    """``grids``: grid → head- and module-mean map ``(H, W, keys)``; per grid (sorted) and slot, 4×4 cells."""
    frame = relation_frame(prompt)
    out = []
    for _, m in sorted(grids.items()):
        q = _slot_dists(m, sk, words) if words else {}
        for s in SLOTS:
            out.append(cells(canonical(q[s], frame)).ravel() if s in q else np.full(CELLS * CELLS, np.nan))
    return np.concatenate(out).astype(np.float32)


def rawmaps_names(grids: Sequence[str]) -> list[str]:
    return [f"{g}.{s}.c{i}{j}" for g in sorted(grids) for s in SLOTS for i in range(CELLS) for j in range(CELLS)]


def overlap(maps: Mapping[str, np.ndarray], sk, words) -> np.ndarray:
    """Per module (sorted), head mean: OVERLAP values."""
    out = []
    for _, m in sorted(maps.items()):
        q = _slot_dists(m.mean(0), sk, words) if words else {}
        ov = lambda a, b: float(np.minimum(q[a], q[b]).sum()) if a in q and b in q else np.nan  # noqa: E731
        v = [ov("a1", "o1"), ov("a1", "o2"), ov("a2", "o2"), ov("a2", "o1")]
        out += v + [v[0] - v[1], v[2] - v[3], ov("o1", "o2")]
    return np.asarray(out, np.float32)


def overlap_names(modules: Sequence[str]) -> list[str]:
    return [f"{m}.{f}" for m in sorted(modules) for f in OVERLAP]


def _upsample(q: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A grid map resized to ``shape`` (PIL bilinear; exact repeat when the sizes divide)."""
    h, w = shape
    if h % q.shape[0] == 0 and w % q.shape[1] == 0:
        return np.kron(q, np.ones((h // q.shape[0], w // q.shape[1]))) / ((h // q.shape[0]) * (w // q.shape[1]))
    from PIL import Image

    img = Image.fromarray(q.astype(np.float32), mode="F").resize((w, h), Image.BILINEAR)
    return _dist(np.maximum(np.asarray(img, dtype=np.float64), 0))


def cfg(gap: np.ndarray, asd: float, asd_cum: float, fine: np.ndarray | None, sk, words) -> np.ndarray:
    """``gap``: ``(h, w)`` ‖ε_c − ε_u‖ per latent pixel; ``fine``: the finest grid's mean map ``(H, W, keys)``."""
    out = [np.log10(max(asd, 1e-30)), np.log10(max(asd_cum, 1e-30))]
    q = _slot_dists(fine, sk, words) if (fine is not None and words) else {}
    mean = gap.mean()
    for s in SLOTS:
        out.append(float((_upsample(q[s], gap.shape) * gap).sum() / mean) if s in q and mean > 0 else np.nan)
    return np.asarray(out, np.float32)


def x0colour(image: np.ndarray, fine: np.ndarray | None, sk, words, prompt, colours=None) -> np.ndarray:
    """``image``: the x0 preview ``(h, w, 3)`` in [0, 255]."""
    colours = colours or palette()
    names = list(colours)
    rgb = np.asarray([colours[n] for n in names], float)
    px = np.asarray(image, float).reshape(-1, 3)
    nearest = np.asarray(names)[np.argmin(((px[:, None, :] - rgb[None]) ** 2).sum(-1), axis=1)]
    objs = list(prompt.get("objects") or [])[:2]
    want = [str((o.get("attributes") or {}).get("color", "")).lower() for o in objs]
    q = _slot_dists(fine, sk, words) if (fine is not None and words) else {}
    out = []
    for i in range(2):
        s, own = f"o{i + 1}", want[i] if i < len(want) else ""
        other = want[1 - i] if len(want) == 2 else ""
        if s not in q or own not in colours:
            out += [np.nan] * 5
            continue
        w = _upsample(q[s], image.shape[:2]).ravel()
        mean = (w[:, None] * px).sum(0) / max(w.sum(), 1e-12)
        d_own = float(np.linalg.norm(mean - np.asarray(colours[own], float)) / 255)
        d_other = float(np.linalg.norm(mean - np.asarray(colours[other], float)) / 255) if other in colours else np.nan
        out += [d_own, d_other, d_other - d_own, float(w[nearest == own].sum() / max(w.sum(), 1e-12)),
                float(w[nearest == other].sum() / max(w.sum(), 1e-12)) if other in colours else np.nan]
    return np.asarray(out, np.float32)
