"""PIL scenes whose truth we know, and PromptRecords in the format of docs/records.md."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from PIL import Image, ImageDraw

from t2i_audit.ownership import claim_output_dir
from t2i_audit.rundir import RunDir

COLORS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 180, 60), "yellow": (230, 210, 30)}
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
SURFACE = {"left of": "to the left of", "right of": "to the right of", "above": "above", "below": "below"}


def prompt(c1=None, o1="square", c2=None, o2=None, rel=None, n1=None, pid=None, category=None) -> dict:
    """A PromptRecord: '[n1|a] [c1] o1 [rel a [c2] o2 | and a [c2] o2]'."""
    text, spans, slots, fam = "a photo of ", {}, {}, {}

    def put(slot, word, family):
        nonlocal text
        spans[slot] = [len(text), len(text) + len(word)]
        slots[slot], fam[slot] = word, family
        text += word

    objects, questions = [], []
    nums = {2: "two", 3: "three"}
    text += (nums[n1] + " ") if n1 else "a "
    if n1:
        spans["n1"] = [len(text) - len(nums[n1]) - 1, len(text) - 1]
        slots["n1"], fam["n1"] = nums[n1], "count"
    if c1:
        put("c1", c1, "color")
        text += " "
    put("o1", (o1 + "s") if n1 else o1, "object")
    objects.append({"id": "o1", "name": o1, "plural": o1 + "s", "count": n1 or 1,
                    "count_slot": "n1" if n1 else None,
                    "attributes": {"color": c1} if c1 else {}, "attribute_slots": {"color": "c1"} if c1 else {}})
    if o2:
        text += f" {SURFACE[rel]} a " if rel else " and a "
        if rel:
            spans["r"] = [len(text) - len(SURFACE[rel]) - 3, len(text) - 3]
            slots["r"], fam["r"] = rel, "spatial"
        if c2:
            put("c2", c2, "color")
            text += " "
        put("o2", o2, "object")
        objects.append({"id": "o2", "name": o2, "plural": o2 + "s", "count": 1, "count_slot": None,
                        "attributes": {"color": c2} if c2 else {}, "attribute_slots": {"color": "c2"} if c2 else {}})
    exists = {}
    for o in objects:
        qid = f"q{len(questions)}"
        exists[o["id"]] = qid
        questions.append({"id": qid, "kind": "exists", "text": f"Is there a {o['name']}?", "object": o["id"], "depends_on": []})
        for f, v in o["attributes"].items():
            questions.append({"id": f"q{len(questions)}", "kind": "attribute", "text": f"Is the {o['name']} {v}?",
                              "object": o["id"], "family": f, "value": v, "slot": o["attribute_slots"][f],
                              "depends_on": [qid]})
        if o["count_slot"]:
            questions.append({"id": f"q{len(questions)}", "kind": "count", "text": f"Are there exactly {o['count']} {o['plural']}?",
                              "object": o["id"], "number": o["count"], "slot": "n1", "depends_on": [qid]})
    relations = []
    if rel:
        relations.append({"slot": "r", "family": "spatial", "name": rel, "text": SURFACE[rel], "inverse": INVERSE[rel],
                          "subject": "o1", "object": "o2"})
        questions.append({"id": f"q{len(questions)}", "kind": "relation",
                          "text": f"Is the {o1} {SURFACE[rel]} the {o2}?", "subject": "o1", "object": "o2",
                          "family": "spatial", "value": rel, "slot": "r",
                          "depends_on": [exists["o1"], exists["o2"]]})
    cat = category or ("spatial" if rel else "count" if n1 else "color_binding" if c2 else "color")
    pid = pid or "p" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return {"id": pid, "suite": "test", "suite_version": "1", "template": cat, "category": cat, "text": text,
            "slots": slots, "families": fam, "spans": spans, "objects": objects, "relations": relations,
            "questions": questions, "composition": "|".join(f"{k}={v}" for k, v in sorted(slots.items())),
            "bindings": [], "split": "train", "twin": None, "twin_id": None, "twin_swap": None}


def draw(shapes, size=64) -> Image.Image:
    """shapes: [(kind, color, (x0, y0, x1, y1))] on a white background."""
    im = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(im)
    for kind, color, box in shapes:
        rgb = COLORS.get(color, color)
        if kind == "circle":
            d.ellipse(box, fill=rgb)
        elif kind == "triangle":
            x0, y0, x1, y1 = box
            d.polygon([(x0, y1), (x1, y1), ((x0 + x1) / 2, y0)], fill=rgb)
        else:
            d.rectangle(box, fill=rgb)
    return im


def make_run(root: Path, scenes, flags=None) -> RunDir:
    """scenes: [(PromptRecord, PIL image)] (several images may share a prompt: samples)."""
    rd = RunDir(root)
    claim_output_dir(root, "run")  # `score RUN` writes into a run's folder only
    prompts, images, sample = {}, [], {}
    for i, (p, im) in enumerate(scenes):
        prompts[p["id"]] = p
        s = sample.get(p["id"], 0)
        sample[p["id"]] = s + 1
        path = rd.image_path(p["id"], s)
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        path.write_bytes(buf.getvalue())
        images.append({"prompt_id": p["id"], "sample": s, "seed": i, "path": rd.rel(path),
                       "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "width": im.width,
                       "height": im.height, "seconds": 0.0, "flags": list((flags or {}).get(i, [])),
                       "model": "pil", "rank": 0})
    rd.prompts.write_text("".join(json.dumps(p) + "\n" for p in prompts.values()))
    rd.images.write_text("".join(json.dumps(r) + "\n" for r in images))
    return rd
