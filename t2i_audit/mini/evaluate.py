"""Measure the mini judges on fresh renders (truth known) and the mini generator by the pixel judge.

Judge categories (each on scenes drawn fresh from a seed unrelated to training, every
composition possible): ``shape`` and ``color`` (one attribute of one object changed),
``color_binding`` (colours swapped between the two objects), ``shape_binding`` (shapes
swapped), ``relation`` (relation reversed). A judge is right on a (render, true caption,
false caption) triple when — pixel judge — the true caption passes all its questions and the
false one does not; — open_clip judge — the true caption scores higher.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from pathlib import Path

from .world import caption, hard_negatives, render, sample_scene, scene_record

CATEGORIES = ("shape", "color", "color_binding", "shape_binding", "relation")
EVAL_SEED = 90210


def eval_triples(n_per_category: int = 300, seed: int = EVAL_SEED) -> list[tuple[str, object, object]]:
    """(category, scene, negative scene) triples, n per category."""
    rng = random.Random(seed)
    counts: dict[str, int] = defaultdict(int)
    out = []
    while any(counts[c] < n_per_category for c in CATEGORIES):
        s = sample_scene(rng)
        for cat, neg in hard_negatives(s, rng):
            if counts[cat] < n_per_category:
                counts[cat] += 1
                out.append((cat, s, neg))
    return out


def eval_pixel_judge(n_per_category: int = 300, seed: int = EVAL_SEED) -> dict:
    from .pixel_judge import prompt_passes

    right: dict[str, list[bool]] = defaultdict(list)
    for cat, s, neg in eval_triples(n_per_category, seed):
        img = render(s)
        right[cat].append(prompt_passes(img, scene_record(s)) and not prompt_passes(img, scene_record(neg)))
    return _summary(right, n_per_category, seed)


def eval_clip_judge(folder: Path | str, n_per_category: int = 300, seed: int = EVAL_SEED) -> dict:
    import torch

    from .train_judge import load_judge

    model, preprocess, tokenizer = load_judge(folder)
    triples = eval_triples(n_per_category, seed)
    right: dict[str, list[bool]] = defaultdict(list)
    with torch.no_grad():
        for i in range(0, len(triples), 256):
            chunk = triples[i:i + 256]
            x = torch.stack([preprocess(render(s)) for _, s, _ in chunk])
            img = torch.nn.functional.normalize(model.encode_image(x), dim=-1)
            pos = torch.nn.functional.normalize(model.encode_text(tokenizer([caption(s) for _, s, _ in chunk])), dim=-1)
            neg = torch.nn.functional.normalize(model.encode_text(tokenizer([caption(n) for _, _, n in chunk])), dim=-1)
            margin = (img * pos).sum(-1) - (img * neg).sum(-1)
            for (cat, _, _), m in zip(chunk, margin.tolist()):
                right[cat].append(m > 0)
    return _summary(right, n_per_category, seed)


def _summary(right: dict[str, list[bool]], n: int, seed: int) -> dict:
    return {"per_category": {c: round(sum(right[c]) / len(right[c]), 4) for c in CATEGORIES if right[c]},
            "n_per_category": n, "seed": seed, "count": "not in this world (no count templates)",
            "protocol": "fresh renders; pairwise true caption vs hard negative (see t2i_audit.mini.evaluate)"}


def _update_card(path: Path, key: str, value) -> None:
    from ..ownership import refuse_package_path
    from ..rundir import atomic_write_json
    from ..safeload import read_json

    refuse_package_path(path, "card")  # the shipped cards are never rewritten (issue 37)
    card = read_json(path) if path.exists() else {}
    if not isinstance(card, dict):
        from ..errors import AuditError

        raise AuditError(f"{path}: expected a JSON object (a card); not rewriting it")
    card[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, card)  # whole or not at all: a full disk never leaves a torn card


def eval_judges(judge_folder: Path | str | None, pixel_card: Path | str | None = None,
                n_per_category: int = 300, seed: int = EVAL_SEED) -> dict:
    """Measure both judges and write the numbers into their cards (``accuracy`` key)."""
    out = {"pixel": eval_pixel_judge(n_per_category, seed)}
    if pixel_card:
        _update_card(Path(pixel_card), "accuracy", out["pixel"])
    if judge_folder and (Path(judge_folder) / "model.safetensors").exists():
        out["clip"] = eval_clip_judge(judge_folder, n_per_category, seed)
        _update_card(Path(judge_folder) / "card.json", "accuracy", out["clip"])
    return out


def eval_generator(folder: Path | str, suite: Path | str, samples: int = 4, steps: int | None = None,
                   guidance: float | None = None, seed: int = 0, batch: int = 64, limit: int | None = None,
                   write_card: bool = False, grid: Path | str | None = None, threads: int = 1,
                   every: int = 1) -> dict:
    """Generate `samples` images per prompt of `suite` and judge them with the pixel judge:
    prompt success (all questions pass) and per-question-kind accuracy, seen vs held-out."""
    import torch

    from ..prompts import expand
    from ..suite import load_suite
    from .components import DEFAULT_GUIDANCE, DEFAULT_STEPS, load_pipeline
    from .pixel_judge import judge_image

    torch.set_num_threads(threads)
    steps, guidance = steps or DEFAULT_STEPS, guidance or DEFAULT_GUIDANCE
    records = expand(load_suite(suite))[::every][:limit]
    pipe = load_pipeline(folder)
    jobs = [(r, k) for r in records for k in range(samples)]
    t0 = time.time()
    stats: dict[tuple[str, str], list[bool]] = defaultdict(list)
    qstats: dict[tuple[str, str], list[bool]] = defaultdict(list)
    images = []
    for i in range(0, len(jobs), batch):
        chunk = jobs[i:i + batch]
        gens = [torch.Generator().manual_seed(seed * 100003 + j + i) for j in range(len(chunk))]
        imgs = pipe([r["text"] for r, _ in chunk], num_inference_steps=steps, guidance_scale=guidance,
                    generator=gens).images
        for (r, k), im in zip(chunk, imgs):
            v = judge_image(im, r)
            ok = all(x is True for x in v.values())
            stats[(r["split"], r["template"])].append(ok)
            stats[(r["split"], "all")].append(ok)
            kinds = {q["id"]: q["kind"] for q in r["questions"]}
            for qid, verdict in v.items():
                qstats[(r["split"], kinds[qid])].append(verdict is True)
            if k == 0 and len(images) < 48:
                images.append((im, r["split"]))
    result = {
        "suite": str(suite), "prompts": len(records), "every": every, "samples_per_prompt": samples,
        "steps": steps, "guidance": guidance, "seed": seed, "seconds": round(time.time() - t0, 1),
        "success": {f"{s}/{t}": round(sum(v) / len(v), 4) for (s, t), v in sorted(stats.items())},
        "n": {f"{s}/{t}": len(v) for (s, t), v in sorted(stats.items())},
        "question_accuracy": {f"{s}/{k}": round(sum(v) / len(v), 4) for (s, k), v in sorted(qstats.items())},
        "judge": "mini pixel judge (all questions of the prompt pass, DSG dependencies)",
    }
    if write_card:
        _update_card(Path(folder) / "card.json", "evaluation", result)
    if grid:
        _save_grid([im for im, _ in images], Path(grid))
    return result


def _save_grid(imgs, path: Path, cols: int = 8, scale: int = 4) -> None:
    from PIL import Image

    if not imgs:
        return
    w, h = imgs[0].size
    rows = (len(imgs) + cols - 1) // cols
    g = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), (128, 128, 128))
    for i, im in enumerate(imgs):
        g.paste(im, ((i % cols) * (w + 2), (i // cols) * (h + 2)))
    path.parent.mkdir(parents=True, exist_ok=True)
    g.resize((g.width * scale, g.height * scale), Image.NEAREST).save(path)


def eval_scorer_on_renders(scorer_name: str, suite: Path | str, seed: int = EVAL_SEED, batch: int = 32) -> dict:
    """Agreement of a registered scorer's question verdicts with the pixel truth, on renders
    of each suite prompt (truth: all yes) and of its twin's scene judged against the prompt
    (truth: the swapped questions no). Per question kind and for the prompt verdict."""
    from ..prompts import expand
    from ..scorers.base import ScoreItem
    from ..scorers.registry import create_scorer
    from ..suite import load_suite
    from .pixel_judge import judge_image
    from .world import scene_from_record

    records = expand(load_suite(suite))
    by_id = {r["id"]: r for r in records}
    rng = random.Random(seed)
    items, truths = [], []
    for r in records:
        shows = [r] + ([by_id[r["twin"]]] if r.get("twin") in by_id else [])
        for k, shown in enumerate(shows):
            img = render(scene_from_record(shown, rng))
            items.append(ScoreItem(r, {"prompt_id": r["id"], "sample": k, "sha256": None}, image=img))
            truths.append(judge_image(img, r))
    scorer = create_scorer(scorer_name).load()
    agree: dict[str, list[bool]] = defaultdict(list)
    for i in range(0, len(items), batch):
        for it, truth, recs in zip(items[i:i + batch], truths[i:i + batch], scorer.score(items[i:i + batch])):
            kinds = {q["id"]: q["kind"] for q in it.prompt["questions"]}
            for rec in recs:
                if rec["kind"] == "question" and rec["verdict"] is not None and truth.get(rec["question_id"]) is not None:
                    agree[kinds[rec["question_id"]]].append(rec["verdict"] == truth[rec["question_id"]])
                if rec["kind"] == "prompt" and rec["verdict"] is not None:
                    agree["prompt"].append(rec["verdict"] == all(v is True for v in truth.values()))
    return {"scorer": scorer_name, "images": len(items),
            "agreement": {k: round(sum(v) / len(v), 4) for k, v in sorted(agree.items())},
            "n": {k: len(v) for k, v in sorted(agree.items())}}
