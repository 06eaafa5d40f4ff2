"""Synthetic run directories for the report tests: real files in the formats of docs/records.md.

Images are small PIL drawings, scores come from a seeded random "model" whose success depends
on the concept (so heatmaps have structure), and probes files follow the documented rows.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from t2i_audit.rundir import RunDir, atomic_write_json, atomic_write_jsonl, atomic_write_text

COLORS = ["red", "green", "blue", "yellow", "purple"]
OBJECTS = ["cube", "sphere", "cone", "mug", "chair", "dog"]
RELATIONS = [("left of", "to the left of", "right of"), ("above", "above", "below"),
             ("on top of", "on top of", "under")]
COUNTS = [("two", 2), ("three", 3), ("four", 4)]
RGB = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220),
       "yellow": (230, 210, 40), "purple": (140, 50, 170)}


def _pid(*parts) -> str:
    return "p" + hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:12]


def _art(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _composition(slots: dict) -> str:
    return "|".join(f"{k}={v}" for k, v in sorted(slots.items()))


def _spans(text: str, slots: dict, forms: dict) -> dict:
    out, start = {}, 0
    for k in slots:
        w = forms.get(k, slots[k])
        i = text.find(w, start if k != "rel" else 0)
        if i < 0:
            i = text.find(w)
        out[k] = [i, i + len(w)]
    return out


def make_prompts(suite: str = "colors", n_binding: int | None = None, n_rel: int | None = None,
                 n_count: int | None = None, concept_override: str | None = None) -> list[dict]:
    """Prompts of three templates (colour binding with twins, spatial relation, counting)."""
    prompts: list[dict] = []
    colors = list(COLORS)
    if concept_override:
        colors[0] = concept_override
    pairs = [(c1, o1, c2, o2) for c1 in colors for c2 in colors if c1 != c2
             for o1 in OBJECTS[:4] for o2 in OBJECTS[:4] if o1 != o2]
    random.Random(0).shuffle(pairs)
    # keep twins together: add (c1,o1,c2,o2) and (c2,o1,c1,o2)
    seen, chosen = set(), []
    for c1, o1, c2, o2 in pairs:
        if (c1, o1, c2, o2) in seen:
            continue
        seen.update({(c1, o1, c2, o2), (c2, o1, c1, o2)})
        chosen.append((c1, o1, c2, o2))
    chosen = chosen[: (n_binding or 24) // 2]
    for c1, o1, c2, o2 in chosen:
        a = _binding(suite, c1, o1, c2, o2)
        b = _binding(suite, c2, o1, c1, o2)
        tid = "t" + a["id"][1:]
        a.update(twin=b["id"], twin_id=tid, twin_swap=[["c1", "c2"]])
        b.update(twin=a["id"], twin_id=tid, twin_swap=[["c1", "c2"]])
        prompts += [a, b]
    rel = [(o1, r, o2) for o1 in OBJECTS for r in RELATIONS for o2 in OBJECTS if o1 != o2]
    random.Random(1).shuffle(rel)
    for o1, r, o2 in rel[: n_rel or 12]:
        prompts.append(_relation(suite, o1, r, o2))
    cnt = [(n, o) for n in COUNTS for o in OBJECTS]
    random.Random(2).shuffle(cnt)
    for n, o in cnt[: n_count or 9]:
        prompts.append(_count(suite, n, o))
    return prompts


def _base(suite, template, category, text, slots, families, forms=None):
    return {"id": _pid(suite, 1, template, json.dumps(slots, sort_keys=True)), "suite": suite,
            "suite_version": "1", "template": template, "category": category, "text": text,
            "slots": slots, "families": families, "spans": _spans(text, slots, forms or {}),
            "composition": _composition(slots), "split": "train", "twin": None,
            "twin_id": None, "twin_swap": None, "relations": []}


def _binding(suite, c1, o1, c2, o2):
    text = f"a photo of {_art(c1)} {o1} and {_art(c2)} {o2}"
    slots = {"c1": c1, "o1": o1, "c2": c2, "o2": o2}
    p = _base(suite, "two_object", "color_binding", text, slots,
              {"c1": "color", "o1": "object", "c2": "color", "o2": "object"})
    p["objects"] = [
        {"id": "o1", "name": o1, "plural": o1 + "s", "count": 1, "attributes": {"color": c1},
         "attribute_slots": {"color": "c1"}},
        {"id": "o2", "name": o2, "plural": o2 + "s", "count": 1, "attributes": {"color": c2},
         "attribute_slots": {"color": "c2"}}]
    p["questions"] = [
        {"id": "q0", "kind": "exists", "text": f"Is there {_art(o1)}?", "object": "o1", "depends_on": []},
        {"id": "q1", "kind": "attribute", "text": f"Is the {o1} {c1}?", "object": "o1",
         "family": "color", "value": c1, "slot": "c1", "depends_on": ["q0"]},
        {"id": "q2", "kind": "exists", "text": f"Is there {_art(o2)}?", "object": "o2", "depends_on": []},
        {"id": "q3", "kind": "attribute", "text": f"Is the {o2} {c2}?", "object": "o2",
         "family": "color", "value": c2, "slot": "c2", "depends_on": ["q2"]}]
    p["bindings"] = [["color", c1, o1], ["color", c2, o2]]
    return p


def _relation(suite, o1, r, o2):
    name, phrase, inverse = r
    text = f"{_art(o1)} {phrase} {_art(o2)}"
    slots = {"o1": o1, "rel": name, "o2": o2}
    p = _base(suite, "spatial_pair", "spatial", text, slots,
              {"o1": "object", "rel": "spatial", "o2": "object"}, {"rel": phrase})
    p["objects"] = [{"id": "o1", "name": o1, "plural": o1 + "s", "count": 1, "attributes": {},
                     "attribute_slots": {}},
                    {"id": "o2", "name": o2, "plural": o2 + "s", "count": 1, "attributes": {},
                     "attribute_slots": {}}]
    p["relations"] = [{"slot": "rel", "family": "spatial", "name": name, "text": phrase,
                       "inverse": inverse, "subject": "o1", "object": "o2"}]
    p["questions"] = [
        {"id": "q0", "kind": "exists", "text": f"Is there {_art(o1)}?", "object": "o1", "depends_on": []},
        {"id": "q1", "kind": "exists", "text": f"Is there {_art(o2)}?", "object": "o2", "depends_on": []},
        {"id": "q2", "kind": "relation", "text": f"Is the {o1} {phrase} the {o2}?", "subject": "o1",
         "object": "o2", "family": "spatial", "value": name, "slot": "rel",
         "depends_on": ["q0", "q1"]}]
    p["bindings"] = []
    return p


def _count(suite, n, o):
    name, number = n
    text = f"a photo of {name} {o}s"
    slots = {"n1": name, "o1": o}
    p = _base(suite, "counting", "counting", text, slots, {"n1": "count", "o1": "object"})
    p["objects"] = [{"id": "o1", "name": o, "plural": o + "s", "count": number, "attributes": {},
                     "attribute_slots": {}}]
    p["questions"] = [
        {"id": "q0", "kind": "exists", "text": f"Is there {_art(o)}?", "object": "o1", "depends_on": []},
        {"id": "q1", "kind": "count", "text": f"Are there exactly {number} {o}s?", "object": "o1",
         "number": number, "slot": "n1", "depends_on": ["q0"]}]
    p["bindings"] = []
    return p


def _png(prompt: dict, sample: int, size: int, seed: int = 0) -> bytes:
    rng = random.Random(f"{prompt['id']}/{sample}" + (f"/{seed}" if seed else ""))
    im = Image.new("RGB", (size, size), (245, 243, 238))
    d = ImageDraw.Draw(im)
    for obj in prompt["objects"]:
        col = RGB.get(obj["attributes"].get("color", ""), (90, 90, 90))
        for _ in range(obj.get("count", 1)):
            x, y = rng.randrange(size - size // 3), rng.randrange(size - size // 3)
            s = size // 4 + rng.randrange(size // 8 + 1)
            (d.ellipse if rng.random() < 0.5 else d.rectangle)([x, y, x + s, y + s], fill=col)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def _difficulty(prompt: dict, q: dict, model_skill: float) -> float:
    """P(question passes) for the fake model: harder for some concepts."""
    base = {"exists": 0.93, "attribute": 0.75, "relation": 0.55, "count": 0.45}[q["kind"]]
    v = str(q.get("value", ""))
    if v in ("purple", "on top of", "yellow"):
        base -= 0.25
    if q["kind"] == "count" and q.get("number", 0) >= 4:
        base -= 0.2
    return max(0.02, min(0.99, base * model_skill))


def score_image(prompt: dict, sample: int, sha: str, scorer: str, skill: float, noise: int = 0,
                flagged: bool = False) -> list[dict]:
    rng = random.Random(f"{prompt['id']}/{sample}/{noise}")
    recs, verdicts = [], {}
    base = {"prompt_id": prompt["id"], "sample": sample, "image_sha256": sha, "scorer": scorer,
            "scorer_model": f"{scorer}-tiny", "scorer_revision": "0", "metric": None,
            "truncated": False, "extra": {}}
    for q in prompt["questions"]:
        if flagged or any(verdicts.get(d) is False for d in q["depends_on"]):
            v, val = None, None
        else:
            p = _difficulty(prompt, q, skill)
            val = round(rng.random(), 4)
            v = val < p
        verdicts[q["id"]] = v
        recs.append({**base, "kind": "question", "question_id": q["id"], "value": val, "verdict": v,
                     "failures": []})
    failures = []
    objs = {o["id"]: o for o in prompt["objects"]}
    for q in prompt["questions"]:
        if verdicts[q["id"]] is not False:
            continue
        if q["kind"] == "exists":
            failures.append({"type": "missing_object", "slot": q["object"], "object": q["object"],
                             "detail": f"no {objs[q['object']]['name']}"})
        elif q["kind"] == "attribute":
            t = "swapped_binding" if prompt.get("twin") and rng.random() < 0.5 else "wrong_attribute"
            if t == "wrong_attribute" and rng.random() < 0.3:
                t = "attribute_leakage"
            failures.append({"type": t, "slot": q["slot"], "object": q["object"], "detail": ""})
        elif q["kind"] == "relation":
            t = "reversed_relation" if rng.random() < 0.5 else "wrong_relation"
            failures.append({"type": t, "slot": q["slot"], "object": q["object"], "detail": ""})
        elif q["kind"] == "count":
            failures.append({"type": "wrong_count", "slot": q["slot"], "object": q["object"],
                             "detail": "saw 2"})
    verdict = None if flagged else all(v is True for v in verdicts.values())
    recs.append({**base, "kind": "prompt", "question_id": None, "value": None, "verdict": verdict,
                 "failures": [] if flagged else failures})
    return recs


def make_run(root: Path, *, prompts: list[dict] | None = None, samples: int = 2, size: int = 48,
             scorers: tuple[str, ...] = ("clip-foil", "vqa-blip"), skill: float = 1.0,
             model: str = "tiny-sd", probes: bool = True, black: int = 1, config: dict | None = None,
             seed: int = 0) -> Path:
    """Write a complete run directory and return its path. ``config``: settings to record in run.yaml (as
    `run` resolves them; none written when omitted); ``seed``: the base seed the image seeds derive from."""
    root = Path(root)
    rd = RunDir(root)
    prompts = prompts if prompts is not None else make_prompts()
    atomic_write_jsonl(rd.prompts, prompts)
    images, flagged = [], set()
    rd.images_dir.mkdir(parents=True, exist_ok=True)
    for i, p in enumerate(prompts):
        (rd.images_dir / p["id"]).mkdir(exist_ok=True)
        for s in range(samples):
            data = _png(p, s, size, seed)
            path = rd.image_path(p["id"], s)
            path.write_bytes(data)
            flags = ["black"] if (i * samples + s) < black else []
            if flags:
                flagged.add((p["id"], s))
            images.append({"prompt_id": p["id"], "sample": s, "seed": 1000 * i + s + 7919 * seed,
                           "path": rd.rel(path), "sha256": hashlib.sha256(data).hexdigest(),
                           "width": size, "height": size, "seconds": 0.01, "flags": flags,
                           "model": model, "rank": 0})
    atomic_write_jsonl(rd.images, images)
    byid = {p["id"]: p for p in prompts}
    for k, sc in enumerate(scorers):
        recs = []
        for im in images:
            recs += score_image(byid[im["prompt_id"]], im["sample"], im["sha256"], sc, skill,
                                noise=k + 100 * seed, flagged=(im["prompt_id"], im["sample"]) in flagged)
        atomic_write_jsonl(rd.scores(sc), recs)
    atomic_write_json(rd.manifest, {
        "model": {"name": model, "repo": "hf:tiny/tiny-sd", "revision": "abc123"},
        "suite": {"name": prompts[0]["suite"] if prompts else "colors", "version": "1"},
        "versions": {"python": "3.11", "torch": "2.14.1", "diffusers": "0.42.1"},
        "device": "cpu", "seeds": {"base": 1234}, "flags": {"black": black},
        "stages": {"generate": {"status": "done", "count": len(images)}}})
    atomic_write_json(rd.summary, {"generate": {"images": len(images)}})
    if config is not None:
        import yaml

        atomic_write_text(rd.config, yaml.safe_dump({"model": model, "prompts": ["colors.yaml"], "seed": seed,
                                                     "images_per_prompt": samples, **config}, sort_keys=False))
    if probes:
        write_probes(rd, prompts)
    return root


def write_probes(rd: RunDir, prompts: list[dict]) -> None:
    """probes/*.jsonl in the format t2i_audit/probes/__init__.py documents."""
    rng = random.Random(7)
    dec, fp, cor = [], [], []
    layers = [f"h{i:02d}" for i in range(13)] + ["final"]
    for li, layer in enumerate(layers):
        for slot, fam in [("c1", "color"), ("o1", "object"), ("rel", "spatial")]:
            acc = min(0.99, 0.3 + 0.05 * li + rng.random() * 0.05)
            for pooling in ("eos", f"slot-{slot}"):
                dec.append({"encoder": "clip-l", "layer": layer, "pooling": pooling, "target": slot,
                            "family": fam, "accuracy": acc, "accuracy_folds": [acc] * 5,
                            "chance": 0.2, "chance_uniform": 0.2, "control_accuracy": 0.22,
                            "control_chance": 0.2, "selectivity": acc - 0.22, "n": 120,
                            "n_classes": 5, "n_compositions": 60, "n_folds": 5})
        a = 0.5 + 0.02 * li
        fp.append({"encoder": "clip-l", "layer": layer, "pooling": "eos",
                   "auroc": {"auroc": a, "ci": [a - 0.06, a + 0.06], "n": 45},
                   "baseline_auroc": {"auroc": 0.56, "ci": [0.5, 0.62], "n": 45},
                   "auroc_diff": {"diff": a - 0.56, "ci": [a - 0.66, a - 0.46], "p": 0.2},
                   "verdict": "the probe is no better than the prompt-only baseline",
                   "n": 45, "failure_rate": 0.5, "n_folds": 5})
        for unit in ("composition", "binding"):
            r = 0.1 + 0.02 * li
            cor.append({"encoder": "clip-l", "layer": layer, "pooling": "eos",
                        "mean_decodability": 0.5, "n": 40, "unit": unit, "n_units": 40,
                        "spearman": {"r": r, "ci": [r - 0.3, r + 0.3], "p_perm": 0.2},
                        "pearson": {"r": r - 0.02, "ci": [r - 0.32, r + 0.28], "p_perm": 0.25}})
    comps = sorted({p["composition"] for p in prompts})[:40]
    cor[-2]["points"] = [{"unit": c, "x": rng.random(), "y": rng.random()} for c in comps]
    atomic_write_jsonl(rd.probes_dir / "decodability.jsonl", dec)
    atomic_write_jsonl(rd.probes_dir / "failure.jsonl", fp)
    atomic_write_jsonl(rd.probes_dir / "correlation.jsonl", cor)
