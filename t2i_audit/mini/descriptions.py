"""Text descriptions of mini scenes, full or partial, with exact truth against a scene.

The judge is trained on these: every full caption of the suite plus the partial phrases the
CLIP scorer asks about ("a circle", "a red circle", "a circle to the left of a square"),
each labelled true or false for each image by :func:`holds` (so no in-batch false negatives).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .world import COLORS, RELATIONS, SHAPES, Scene, relation_holds


@dataclass(frozen=True)
class Desc:
    objects: tuple[tuple[str | None, str], ...]   # (colour or None, shape)
    relation: str | None = None                  # between objects[0] and objects[1]

    def text(self, rng: random.Random | None = None) -> str:
        parts = []
        for c, s in self.objects:
            word = f"{c} {s}" if c else s
            art = "an" if word[0] in "aeiou" else "a"
            if rng is not None and word[0] in "aeiou" and rng.random() < 0.5:
                art = "a"  # the CLIP scorer's templates write "a {value} {object}"
            parts.append(f"{art} {word}")
        if len(parts) == 1:
            return parts[0]
        if self.relation is None:
            return f"{parts[0]} and {parts[1]}"
        return f"{parts[0]} {RELATIONS[self.relation][0]} {parts[1]}"


def full_desc(scene: Scene) -> Desc:
    objs = tuple((o.color, o.shape) for o in scene.objects)
    return Desc(objs, scene.relation if scene.kind == "spatial" else None)


def holds(scene: Scene, d: Desc) -> bool:
    """Is description d true of scene? (Scene objects have distinct shapes.)"""
    found = []
    for c, s in d.objects:
        o = next((o for o in scene.objects if o.shape == s and (c is None or o.color == c)), None)
        if o is None:
            return False
        found.append(o)
    if len(found) == 2 and found[0] is found[1]:
        return False
    if d.relation is not None:
        return relation_holds(found[0], found[1], d.relation)
    return True


def positive_desc(scene: Scene, rng: random.Random) -> Desc:
    """A true description: the full caption (60 %) or a partial phrase."""
    r = rng.random()
    objs = scene.objects
    if r < 0.6 or len(objs) == 1 and r < 0.8:
        return full_desc(scene)
    o = rng.choice(objs)
    if len(objs) == 2 and r > 0.85:
        a, b = (objs if rng.random() < 0.5 else objs[::-1])
        rel = next(rn for rn in RELATIONS if relation_holds(a, b, rn))
        return Desc(((None, a.shape), (None, b.shape)), rel)
    if rng.random() < 0.5:
        return Desc(((o.color, o.shape),))
    return Desc(((None, o.shape),))


def negative_desc(scene: Scene, d: Desc, rng: random.Random, relation_p: float = 0.35) -> Desc:
    """A hard negative of the same form as `d` (false for `scene`, checked by holds);
    a description with a relation gets the reversed relation with probability `relation_p`."""
    for _ in range(20):
        objs = list(d.objects)
        choice = rng.random()
        if d.relation is not None and choice < relation_p:
            nd = Desc(tuple(objs), RELATIONS[d.relation][1])
        elif len(objs) == 2 and choice < max(0.6, relation_p + 0.1):
            (c1, s1), (c2, s2) = objs
            nd = Desc(((c2, s1), (c1, s2)) if rng.random() < 0.5 or c1 is None else ((c1, s2), (c2, s1)), d.relation)
            if c1 is None:
                nd = Desc(((None, s2), (None, s1)), d.relation)
        else:
            i = rng.randrange(len(objs))
            c, s = objs[i]
            if c is not None and rng.random() < 0.5:
                objs[i] = (rng.choice([x for x in COLORS if x != c]), s)
            else:
                objs[i] = (c, rng.choice([x for x in SHAPES if x != s]))
            nd = Desc(tuple(objs), d.relation)
        if not holds(scene, nd) and len({s for _, s in nd.objects}) == len(nd.objects):
            return nd
    return Desc(((None, next(s for s in SHAPES if s not in {o.shape for o in scene.objects})),))
