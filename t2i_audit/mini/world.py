"""The mini world: coloured flat shapes on white, rendered by PIL with an exact palette.

Every image comes with its ground-truth :class:`Scene`; :func:`caption` writes the same text
as the templates of ``prompts/mini.yaml``; :func:`hard_negatives` gives false descriptions of a
scene (colours swapped between the objects, shapes swapped, relation reversed, one attribute
changed). Rendering is fast enough (~10k images/s at 32 px) to make training data fresh every
step. Nothing here imports torch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np
from PIL import Image, ImageDraw

# Exact palette (no antialiasing anywhere, so every object pixel is one of these).
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 60),
    "blue": (40, 80, 230),
    "yellow": (245, 215, 0),
    "purple": (150, 50, 190),
    "orange": (255, 140, 0),
}
BACKGROUND = (255, 255, 255)
COLORS: tuple[str, ...] = tuple(PALETTE)
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "cross")
# relation name -> (text used in prompts, inverse relation name)
RELATIONS: dict[str, tuple[str, str]] = {
    "left of": ("to the left of", "right of"),
    "right of": ("to the right of", "left of"),
    "above": ("above", "below"),
    "below": ("below", "above"),
}
PLURALS = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses"}
KINDS = ("single", "pair", "spatial")
DEFAULT_SIZE = 32

# Colour-shape pairs the shipped generator never sees (also the `heldout:` block of the suite).
HELDOUT_PAIRS: tuple[tuple[str, str], ...] = (
    ("red", "triangle"),
    ("green", "cross"),
    ("blue", "square"),
    ("yellow", "circle"),
    ("purple", "triangle"),
    ("orange", "square"),
)


def article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


@dataclass(frozen=True)
class Obj:
    """One object: its colour and shape, centre and size as fractions of the image side."""

    color: str
    shape: str
    cx: float = 0.5
    cy: float = 0.5
    size: float = 0.32


@dataclass(frozen=True)
class Scene:
    """What an image shows. ``relation`` holds between objects[0] (subject) and objects[1]
    for kind "spatial"; for "pair" it records the layout only (the caption says "and")."""

    kind: str
    objects: tuple[Obj, ...]
    relation: str | None = None

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((o.color, o.shape) for o in self.objects)


def caption(scene: Scene) -> str:
    """The suite's text for this scene (same words as the prompts/mini.yaml templates)."""
    phrases = [f"{article(o.color)} {o.shape}" for o in scene.objects]
    if scene.kind == "single":
        return phrases[0]
    if scene.kind == "pair":
        return f"{phrases[0]} and {phrases[1]}"
    if scene.kind == "spatial":
        return f"{phrases[0]} {RELATIONS[scene.relation][0]} {phrases[1]}"
    raise ValueError(f"unknown scene kind {scene.kind!r}")


def relation_holds(a: Obj, b: Obj, relation: str) -> bool:
    """Dominant-axis rule (as T2I-CompBench): 'a left of b' iff b is further right than it
    is above/below a. Image y grows downwards."""
    dx, dy = b.cx - a.cx, b.cy - a.cy
    if relation == "left of":
        return dx > 0 and abs(dx) > abs(dy)
    if relation == "right of":
        return dx < 0 and abs(dx) > abs(dy)
    if relation == "above":
        return dy > 0 and abs(dy) > abs(dx)
    if relation == "below":
        return dy < 0 and abs(dy) > abs(dx)
    raise ValueError(f"unknown relation {relation!r}")


# ---------------------------------------------------------------- sampling scenes


def _layout(rng: random.Random, relation: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """Centres of subject and object such that `relation` holds with a clear margin."""
    d = rng.uniform(0.44, 0.54)
    along1, along2 = 0.5 - d / 2, 0.5 + d / 2
    across1, across2 = rng.uniform(0.38, 0.62), rng.uniform(0.38, 0.62)
    shift = rng.uniform(-0.02, 0.02)
    along1, along2 = along1 + shift, along2 + shift
    if relation in ("right of", "below"):
        along1, along2 = along2, along1
    if relation in ("left of", "right of"):
        return (along1, across1), (along2, across2)
    return (across1, along1), (across2, along2)


def sample_scene(
    rng: random.Random,
    kind: str | None = None,
    exclude: Iterable[tuple[str, str]] = (),
    kind_weights: Sequence[float] = (0.2, 0.3, 0.5),
    single_size: tuple[float, float] = (0.36, 0.5),
    single_centre: tuple[float, float] = (0.38, 0.62),
) -> Scene:
    """A random scene; colours and shapes uniform, two objects always differ in both colour
    and shape (as in the suite's constraints). Scenes using an `exclude`d (colour, shape)
    pair are rejected and redrawn. A single object's side (fraction of the image) is drawn from
    `single_size`, each coordinate of its centre from `single_centre`."""
    excluded = set(map(tuple, exclude))
    if kind is None:
        kind = rng.choices(KINDS, weights=kind_weights)[0]
    while True:
        if kind == "single":
            c, s = rng.choice(COLORS), rng.choice(SHAPES)
            if (c, s) in excluded:
                continue
            size = rng.uniform(*single_size)
            cx, cy = rng.uniform(*single_centre), rng.uniform(*single_centre)
            return Scene("single", (Obj(c, s, cx, cy, size),))
        c1, c2 = rng.sample(COLORS, 2)
        s1, s2 = rng.sample(SHAPES, 2)
        if (c1, s1) in excluded or (c2, s2) in excluded:
            continue
        relation = rng.choice(tuple(RELATIONS))
        (x1, y1), (x2, y2) = _layout(rng, relation)
        o1 = Obj(c1, s1, x1, y1, rng.uniform(0.28, 0.36))
        o2 = Obj(c2, s2, x2, y2, rng.uniform(0.28, 0.36))
        return Scene(kind, (o1, o2), relation)


def scene_for(
    colors: Sequence[str],
    shapes: Sequence[str],
    relation: str | None = None,
    kind: str | None = None,
    rng: random.Random | None = None,
) -> Scene:
    """A scene with given contents and a random layout (`relation` None for single/pair)."""
    rng = rng or random.Random(0)
    if kind is None:
        kind = "single" if len(shapes) == 1 else ("spatial" if relation else "pair")
    if kind == "single":
        size = rng.uniform(0.36, 0.5)
        return Scene("single", (Obj(colors[0], shapes[0], rng.uniform(0.38, 0.62), rng.uniform(0.38, 0.62), size),))
    layout_rel = relation or rng.choice(tuple(RELATIONS))
    (x1, y1), (x2, y2) = _layout(rng, layout_rel)
    objs = (
        Obj(colors[0], shapes[0], x1, y1, rng.uniform(0.28, 0.36)),
        Obj(colors[1], shapes[1], x2, y2, rng.uniform(0.28, 0.36)),
    )
    return Scene(kind, objs, layout_rel)


# ---------------------------------------------------------------- rendering


def shape_polygon(shape: str, x0: float, y0: float, x1: float, y1: float) -> list[list[tuple[float, float]]]:
    """Polygons (one or more) filling the box [x0, x1] x [y0, y1] with `shape` (not circles)."""
    w, h = x1 - x0, y1 - y0
    if shape == "square":
        return [[(x0, y0), (x1, y0), (x1, y1), (x0, y1)]]
    if shape == "triangle":
        return [[((x0 + x1) / 2, y0), (x1, y1), (x0, y1)]]
    if shape == "cross":
        t0x, t1x = x0 + w / 3, x1 - w / 3
        t0y, t1y = y0 + h / 3, y1 - h / 3
        return [[(t0x, y0), (t1x, y0), (t1x, y1), (t0x, y1)], [(x0, t0y), (x1, t0y), (x1, t1y), (x0, t1y)]]
    raise ValueError(f"unknown shape {shape!r}")


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], fill) -> None:
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse([x0, y0, x1, y1], fill=fill)
        return
    for poly in shape_polygon(shape, x0, y0, x1, y1):
        if shape in ("square", "cross"):
            xs, ys = [p[0] for p in poly], [p[1] for p in poly]
            draw.rectangle([min(xs), min(ys), max(xs), max(ys)], fill=fill)
        else:
            draw.polygon(poly, fill=fill)


def object_box(o: Obj, size: int) -> tuple[int, int, int, int]:
    half = o.size * size / 2
    x0 = int(round(o.cx * size - half))
    y0 = int(round(o.cy * size - half))
    side = max(3, int(round(o.size * size)))
    return x0, y0, x0 + side - 1, y0 + side - 1


def render(scene: Scene, size: int = DEFAULT_SIZE) -> Image.Image:
    """The scene as an RGB image (white background, exact palette, no antialiasing)."""
    img = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(img)
    for o in scene.objects:
        draw_shape(draw, o.shape, object_box(o, size), PALETTE[o.color])
    return img


def render_batch(scenes: Sequence[Scene], size: int = DEFAULT_SIZE) -> np.ndarray:
    """uint8 array (N, size, size, 3)."""
    return np.stack([np.asarray(render(s, size)) for s in scenes])


# ---------------------------------------------------------------- hard negatives


def hard_negatives(scene: Scene, rng: random.Random | None = None) -> list[tuple[str, Scene]]:
    """False descriptions of `scene` as (category, scene-with-same-layout) pairs; their
    captions are false for render(scene). Categories: shape, color (one attribute changed to
    a value absent from the scene), color_binding (colours swapped between objects),
    shape_binding (shapes swapped), relation (relation reversed, same object order)."""
    rng = rng or random.Random(0)
    objs = scene.objects
    used_c = {o.color for o in objs}
    used_s = {o.shape for o in objs}
    out: list[tuple[str, Scene]] = []
    i = rng.randrange(len(objs))
    new_c = rng.choice([c for c in COLORS if c not in used_c])
    new_s = rng.choice([s for s in SHAPES if s not in used_s])
    out.append(("color", _with(scene, i, color=new_c)))
    out.append(("shape", _with(scene, i, shape=new_s)))
    if len(objs) == 2:
        a, b = objs
        out.append(("color_binding", replace(scene, objects=(replace(a, color=b.color), replace(b, color=a.color)))))
        if scene.kind == "spatial":  # for "A and B" a shape swap says the same as a colour swap
            out.append(("shape_binding", replace(scene, objects=(replace(a, shape=b.shape), replace(b, shape=a.shape)))))
            out.append(("relation", replace(scene, relation=RELATIONS[scene.relation][1])))
    return out


def _with(scene: Scene, i: int, **kw) -> Scene:
    objs = list(scene.objects)
    objs[i] = replace(objs[i], **kw)
    return replace(scene, objects=tuple(objs))


# ---------------------------------------------------------------- records


def scene_record(scene: Scene, prompt_id: str | None = None) -> dict:
    """A PromptRecord-shaped dict (docs/records.md: objects, relations, questions, bindings)
    for the caption of `scene`, as the suite's templates would expand it."""
    slot_names = [("c1", "o1"), ("c2", "o2")]
    objects, questions, bindings, slots, families = [], [], [], {}, {}
    q = 0
    exists_q = {}
    for (cs, os_), o in zip(slot_names, scene.objects):
        slots[cs], slots[os_] = o.color, o.shape
        families[cs], families[os_] = "color", "object"
        objects.append({"id": os_, "name": o.shape, "plural": PLURALS[o.shape], "count": 1, "count_slot": None,
                        "attributes": {"color": o.color}, "attribute_slots": {"color": cs}})
        bindings.append(["color", o.color, o.shape])
        questions.append({"id": f"q{q}", "kind": "exists", "text": f"Is there a {o.shape}?",
                          "object": os_, "depends_on": []})
        exists_q[os_] = f"q{q}"
        questions.append({"id": f"q{q + 1}", "kind": "attribute", "text": f"Is the {o.shape} {o.color}?",
                          "object": os_, "family": "color", "value": o.color, "slot": cs,
                          "depends_on": [f"q{q}"]})
        q += 2
    relations = []
    if scene.kind == "spatial":
        text, inverse = RELATIONS[scene.relation]
        slots["rel"], families["rel"] = scene.relation, "spatial"
        relations.append({"slot": "rel", "family": "spatial", "name": scene.relation, "text": text,
                          "inverse": inverse, "subject": "o1", "object": "o2"})
        a, b = scene.objects
        questions.append({"id": f"q{q}", "kind": "relation", "text": f"Is the {a.shape} {text} the {b.shape}?",
                          "subject": "o1", "object": "o2", "family": "spatial", "value": scene.relation,
                          "slot": "rel", "depends_on": [exists_q["o1"], exists_q["o2"]]})
    text = caption(scene)
    spans, pos = {}, 0
    for (cs, os_), o in zip(slot_names, scene.objects):  # slots appear in caption order
        for slot, word in ((cs, o.color), (os_, o.shape)):
            start = text.index(word, pos)
            spans[slot] = [start, start + len(word)]
            pos = start + len(word)
            if slot == "o1" and scene.kind == "spatial":
                rel_text = RELATIONS[scene.relation][0]
                r0 = text.index(rel_text, pos)
                spans["rel"] = [r0, r0 + len(rel_text)]
    category = {"single": "color", "pair": "color_binding", "spatial": "spatial"}[scene.kind]
    return {"id": prompt_id or "mini:" + caption(scene), "suite": "mini", "template": scene.kind,
            "category": category, "text": text, "slots": slots, "families": families, "spans": spans,
            "objects": objects, "relations": relations, "questions": questions, "bindings": bindings,
            "composition": "|".join(f"{k}={v}" for k, v in sorted(slots.items())), "split": "train",
            "twin": None, "twin_id": None, "twin_swap": None}


def scene_from_record(record: dict, rng: random.Random | None = None) -> Scene:
    """A renderable scene showing what a PromptRecord asks for (random layout)."""
    objs = record["objects"]
    colors = [o["attributes"].get("color") for o in objs]
    shapes = [o["name"] for o in objs]
    rel = record.get("relations") or []
    if any(c not in PALETTE for c in colors) or any(s not in SHAPES for s in shapes) or len(objs) > 2:
        raise ValueError(f"prompt {record.get('id')!r} is outside the mini world: {record.get('text')!r}")
    relation = rel[0]["name"] if rel else None
    kind = "single" if len(objs) == 1 else ("spatial" if relation else "pair")
    return scene_for(colors, shapes, relation, kind, rng)


def all_compositions() -> list[Scene]:
    """Every composition of the world once (layout fixed by a seeded rng)."""
    rng = random.Random(0)
    out = [scene_for([c], [s], rng=rng) for c in COLORS for s in SHAPES]
    for c1 in COLORS:
        for c2 in COLORS:
            for s1 in SHAPES:
                for s2 in SHAPES:
                    if c1 == c2 or s1 == s2:
                        continue
                    out.append(scene_for([c1, c2], [s1, s2], kind="pair", rng=rng))
                    for r in RELATIONS:
                        out.append(scene_for([c1, c2], [s1, s2], r, rng=rng))
    return out


def parse_caption(text: str, rng: random.Random | None = None) -> Scene:
    """The scene of a mini caption ("an orange cross above a red circle"), random layout.
    Raises AuditError naming the text when it is not a caption of this world."""
    import re

    from ..errors import AuditError

    c, s = "|".join(COLORS), "|".join(SHAPES)
    np_ = rf"an? ({c}) ({s})"
    rels = "|".join(re.escape(t) for t, _ in RELATIONS.values())
    t = " ".join(text.lower().split())
    m = re.fullmatch(np_, t)
    if m:
        return scene_for([m[1]], [m[2]], rng=rng)
    m = re.fullmatch(rf"{np_} (and|{rels}) {np_}", t)
    if m and m[2] != m[5] and m[1] != m[4]:
        rel = None if m[3] == "and" else next(k for k, (tx, _) in RELATIONS.items() if tx == m[3])
        return scene_for([m[1], m[4]], [m[2], m[5]], rel, kind="pair" if rel is None else "spatial", rng=rng)
    raise AuditError(f"{text!r}: not a mini-world caption (e.g. 'a red circle', 'a red circle and a blue "
                     f"square', 'a red circle to the left of a blue square'; colours {', '.join(COLORS)}; "
                     f"shapes {', '.join(SHAPES)}; two objects differ in colour and shape)")
