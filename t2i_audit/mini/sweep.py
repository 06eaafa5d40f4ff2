"""The paper's two claims, measured in the mini world: training coverage → held-out success →
decodability (``t2i-audit mini sweep``).

Design (fixed here before any result was seen):

* Composition space: the 6 colours × 4 shapes = 24 (colour, shape) pairs, one object per image
  ("a red circle"). Single objects only: a model trains in a few CPU-minutes, too little for the
  shipped generator's two-object and spatial scenes (the page says so).
* Held-out set: ``world.HELDOUT_PAIRS`` (6 pairs, each colour once) — seen by NO sweep model.
* Coverage = fraction of the 18 remaining pairs a model trains on. For one seed the subsets are
  nested (the first k pairs of one seeded order, whose first 6 pairs cover every colour and
  every shape, so every held-out pair's constituents are always seen). Every model gets the same
  number of optimisation steps (same compute) and, for one seed, the same initial weights.
* Evaluation (same for every model): every one of the 24 prompts × N samples with the same
  seeds; the pixel judge decides success; one hooked pipeline call per batch gives both the
  images and the denoiser's block activations (``probes.denoiser.run_hooked``) at the first,
  middle and last sampling steps.
* Decodability: a linear probe per (block, step) and constituent (colour, shape), grouped CV by
  composition over all 24 compositions (a held-out composition is never in its probe's
  training fold); reported on the held-out compositions' items, beside chance and a control
  task (random labels per composition).
* PRE-REGISTERED headline layer: ``HEADLINE`` = the UNet mid block at the middle sampling step.
  The other blocks/steps are exploration, Holm-corrected.
"""

from __future__ import annotations

import base64
import io
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..rundir import claim_output_dir
from .sweep_stats import _r, aggregate
from .world import COLORS, HELDOUT_PAIRS, SHAPES, scene_for, scene_record

HEADLINE_BLOCK = "mid"          # pre-registered: declared before any sweep result existed
HEADLINE_STEP = "middle"        # the middle sampling step
DEFAULT_COVERAGES = (1 / 3, 0.5, 0.75, 1.0)
DEFAULT_SEEDS = (0, 1)
TARGETS = ("color", "shape")
ALL_PAIRS: tuple[tuple[str, str], ...] = tuple((c, s) for c in COLORS for s in SHAPES)
TRAINABLE_PAIRS: tuple[tuple[str, str], ...] = tuple(p for p in ALL_PAIRS if p not in HELDOUT_PAIRS)
MIN_SEEN = 6  # fewest pairs that can show every colour (6) and every shape (4)


@dataclass
class SweepConfig:
    coverages: tuple[float, ...] = DEFAULT_COVERAGES
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    steps: int = 300                      # optimisation steps per model (equal compute)
    batch: int = 16
    lr: float = 2e-3
    warmup: int = 20
    block_out_channels: tuple[int, ...] = (16, 32, 32)
    text_width: int = 32
    text_layers: int = 2
    samples: int = 8                      # images per prompt at evaluation
    eval_steps: int = 10                  # sampling steps (DDIM trailing)
    guidance: float = 7.0
    eval_batch: int = 96
    n_splits: int = 6                     # grouped CV folds (24 compositions → 4 per fold)
    n_boot: int = 1000
    n_perm: int = 1000
    device: str = "cpu"
    smoke: bool = False
    extra: dict = field(default_factory=dict)


def smoke_sweep_config(**kw) -> SweepConfig:
    base = dict(coverages=(0.5, 1.0), seeds=(0,), steps=3, batch=4, block_out_channels=(8, 16), text_width=16,
                text_layers=1, samples=2, eval_steps=3, eval_batch=48, n_boot=200, n_perm=200, smoke=True)
    base.update(kw)
    return SweepConfig(**base)


# ---------------------------------------------------------------- coverage subsets


def pair_order(seed: int) -> list[tuple[str, str]]:
    """A seeded order of the 18 trainable pairs whose first MIN_SEEN cover every colour and shape."""
    rng = random.Random(1000 + seed)
    while True:
        order = list(TRAINABLE_PAIRS)
        rng.shuffle(order)
        head = order[:MIN_SEEN]
        if {c for c, _ in head} == set(COLORS) and {s for _, s in head} == set(SHAPES):
            return order


def seen_pairs(coverage: float, seed: int) -> list[tuple[str, str]]:
    """The pairs a model at `coverage` (fraction of the 18 trainable pairs) trains on; nested in
    coverage for one seed."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage {coverage}: must be in (0, 1]")
    k = max(MIN_SEEN, int(round(coverage * len(TRAINABLE_PAIRS))))
    return pair_order(seed)[:k]


def model_name(coverage: float, seed: int) -> str:
    return f"cov{round(coverage * 100):03d}_seed{seed}"


def _pair_key(p) -> str:
    return f"{p[0]} {p[1]}"


# ---------------------------------------------------------------- training


def generator_config(cfg: SweepConfig, coverage: float, seed: int):
    from .train_generator import GeneratorConfig

    seen = set(seen_pairs(coverage, seed))
    excluded = tuple(p for p in ALL_PAIRS if p not in seen)  # held-out + outside this coverage
    return GeneratorConfig(seed=seed, size=32, batch=cfg.batch, lr=cfg.lr, warmup=cfg.warmup, steps=cfg.steps,
                           block_out_channels=tuple(cfg.block_out_channels), attention_heads=2,
                           text_width=cfg.text_width, text_layers=cfg.text_layers, threads=1,
                           checkpoint_minutes=1e9, heldout=excluded, kind_weights=(1.0, 0.0, 0.0), device=cfg.device,
                           extra={"sweep": {"coverage": coverage, "seed": seed}})


def _done(folder: Path, cfg: SweepConfig) -> bool:
    card = folder / "card.json"
    if not card.exists():
        return False
    c = json.loads(card.read_text())
    return bool(c.get("final")) and c.get("steps") == cfg.steps


def training_order(cfg: SweepConfig) -> list[tuple[float, int]]:
    """Seed by seed; within a seed the extreme coverages first, so a sweep cut short still has
    every coverage of the first seed and spans the range for the next."""
    covs = sorted(cfg.coverages)
    pri = sorted(range(len(covs)), key=lambda i: (min(i, len(covs) - 1 - i), i))
    return [(covs[i], seed) for seed in cfg.seeds for i in pri]


def train_models(out: Path, cfg: SweepConfig, log: Callable = print) -> list[dict]:
    """Train every (coverage, seed) model not yet finished (resumable); returns their cards."""
    from .train_generator import train_generator

    cards = []
    for cov, seed in training_order(cfg):
        folder = out / "models" / model_name(cov, seed)
        if _done(folder, cfg):
            log(f"{folder.name}: done, skipped")
            cards.append(json.loads((folder / "card.json").read_text()))
            continue
        log(f"{folder.name}: training {cfg.steps} steps on {len(seen_pairs(cov, seed))} pairs")
        def progress(msg: str, name: str = folder.name) -> None:  # every 100th step only
            if msg.startswith("step") and int(msg.split()[1]) % 100 == 0:
                log(f"{name}: {msg}")

        card = train_generator(folder, generator_config(cfg, cov, seed), log=progress)
        log(f"{folder.name}: {card['steps']} steps, {card['cpu_seconds']} CPU s")
        cards.append(card)
    return cards


# ---------------------------------------------------------------- evaluation of one model


def eval_prompts() -> list[dict]:
    """The 24 single-object prompts (records as the suite's), same for every model."""
    rng = random.Random(0)
    return [scene_record(scene_for([c], [s], rng=rng)) for c, s in ALL_PAIRS]


def step_tags(n_steps: int) -> dict[str, int]:
    return {"first": 0, "middle": n_steps // 2, "last": n_steps - 1}


def _grid_png(images, cols: int = len(SHAPES), scale: int = 3) -> str:
    from PIL import Image

    w, h = images[0].size
    rows = (len(images) + cols - 1) // cols
    g = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), (128, 128, 128))
    for i, im in enumerate(images):
        g.paste(im, ((i % cols) * (w + 2), (i // cols) * (h + 2)))
    g = g.resize((g.width * scale, g.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    g.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def generate_and_hook(folder: Path, cfg: SweepConfig):
    """Images + denoiser activations for every prompt × sample (seeds fixed across models)."""
    import torch

    from ..probes.denoiser import run_hooked
    from .components import load_pipeline

    torch.set_num_threads(1)
    pipe = load_pipeline(folder)
    pipe.to(cfg.device)
    pipe.set_progress_bar_config(disable=True)
    prompts = eval_prompts()
    jobs = [(i, k) for i in range(len(prompts)) for k in range(cfg.samples)]
    tags = step_tags(cfg.eval_steps)
    images, acts = [], {}
    for j in range(0, len(jobs), cfg.eval_batch):
        chunk = jobs[j:j + cfg.eval_batch]
        texts = [prompts[i]["text"] for i, _ in chunk]
        seeds = [7919 * k + i for i, k in chunk]  # same image seed for a prompt/sample in every model
        out, info = run_hooked(pipe, texts, seeds, steps=cfg.eval_steps, guidance=cfg.guidance, size=32,
                               at_steps=sorted(set(tags.values())), output_type="pil")
        images.extend(info["images"])
        for key, arr in out.items():
            if key.endswith("-cond"):
                acts.setdefault(key, []).append(arr)
    acts = {k: np.concatenate(v) for k, v in acts.items()}
    return prompts, jobs, images, acts, tags


def layer_name(key: str, tags: dict[str, int]) -> str | None:
    """"mid__t005-cond" → "mid@middle" (None for steps not in tags)."""
    block, rest = key.split("__t")
    step = int(rest.split("-")[0])
    names = [n for n, s in tags.items() if s == step]
    return f"{block}@{names[-1]}" if names else None


def probe_layers(acts: dict, tags: dict, y: dict[str, np.ndarray], groups: np.ndarray, cfg: SweepConfig) -> dict:
    """Per layer and target: out-of-fold proba of the true value for every item, plus
    control (random labels per composition) out-of-fold correctness."""
    from ..probes.linear import control_labels, grouped_folds, oof_proba_many

    folds = grouped_folds(groups, cfg.n_splits, seed=0)
    names, items = [], []
    for key, X in sorted(acts.items()):
        name = layer_name(key, tags)
        if name is None:
            continue
        X = np.asarray(X, np.float32)
        for t in TARGETS:
            names.append((name, t, "probe"))
            items.append((X, None, y[t], folds, True))
            names.append((name, t, "control"))
            items.append((X, None, control_labels(y[t], groups, seed=0), folds, True))
    fits = oof_proba_many(items, seed=0, backend="torch", device="cpu")
    out: dict = {}
    for (name, t, kind), (_x, _rows, yy, _f, _s), (proba, classes) in zip(names, items, fits):
        correct = classes[proba.argmax(1)] == yy
        p_true = proba[np.arange(len(yy)), np.searchsorted(classes, yy)]
        out.setdefault(name, {}).setdefault(t, {})[kind] = {"correct": correct, "p_true": p_true}
    return out


def evaluate_model(folder: Path, cfg: SweepConfig, coverage: float, seed: int) -> dict:
    """Pixel-judge success (held-out / seen / outside coverage) and decodability of one model."""
    from ..analysis import wilson
    from .pixel_judge import prompt_passes

    t0 = time.time()
    prompts, jobs, images, acts, tags = generate_and_hook(folder, cfg)
    seen = {_pair_key(p) for p in seen_pairs(coverage, seed)}
    held = {_pair_key(p) for p in HELDOUT_PAIRS}

    def split_of(p: dict) -> str:
        key = _pair_key((p["objects"][0]["attributes"]["color"], p["objects"][0]["name"]))
        return "heldout" if key in held else ("seen" if key in seen else "uncovered")

    comp = np.array([_pair_key((prompts[i]["slots"]["c1"], prompts[i]["slots"]["o1"])) for i, _ in jobs])
    split = np.array([split_of(prompts[i]) for i, _ in jobs])
    ok = np.array([prompt_passes(im, prompts[i]) for (i, _), im in zip(jobs, images)])
    y = {"color": np.array([prompts[i]["slots"]["c1"] for i, _ in jobs]),
         "shape": np.array([prompts[i]["slots"]["o1"] for i, _ in jobs])}
    probes = probe_layers(acts, tags, y, comp, cfg)

    success = {}
    for s in ("heldout", "seen", "uncovered"):
        m = split == s
        k, n = int(ok[m].sum()), int(m.sum())
        rate, lo, hi = wilson(k, n)
        success[s] = {"k": k, "n": n, "rate": _r(rate), "ci": [_r(lo), _r(hi)]}
    decod = {}
    for layer, per_t in probes.items():
        row = {}
        for t, d in per_t.items():
            row[t] = {s: {"accuracy": _r(d["probe"]["correct"][split == s].mean()) if (split == s).any() else None,
                          "p_true": _r(d["probe"]["p_true"][split == s].mean()) if (split == s).any() else None}
                      for s in ("heldout", "seen", "uncovered")}
            row[t]["all"] = {"accuracy": _r(d["probe"]["correct"].mean()), "p_true": _r(d["probe"]["p_true"].mean())}
            row[t]["control_accuracy"] = _r(d["control"]["correct"].mean())
            row[t]["chance_uniform"] = _r(1 / len(np.unique(y[t])))
        decod[layer] = row
    per_comp = []
    for c in sorted(set(comp)):
        m = comp == c
        entry = {"composition": c, "split": str(split[m][0]), "k": int(ok[m].sum()), "n": int(m.sum()),
                 "success": _r(ok[m].mean()), "decodability": {}}
        for layer, per_t in probes.items():  # mean over items and constituents of p(true value)
            entry["decodability"][layer] = _r(np.mean([per_t[t]["probe"]["p_true"][m].mean() for t in TARGETS]))
        per_comp.append(entry)
    first = [images[j] for j, (_i, k) in enumerate(jobs) if k == 0]
    return {"success": success, "decodability": decod, "per_composition": per_comp,
            "layers": sorted(probes), "steps_hooked": tags, "grid_png_b64": _grid_png(first),
            "eval_seconds": round(time.time() - t0, 1)}



# ---------------------------------------------------------------- the whole sweep


def _eval_key(cfg: SweepConfig) -> dict:
    return {"samples": cfg.samples, "eval_steps": cfg.eval_steps, "guidance": cfg.guidance,
            "n_splits": cfg.n_splits, "prompts": len(ALL_PAIRS), "version": 1,
            **({"device": cfg.device} if cfg.device != "cpu" else {})}  # GPU kernels give other images


def model_entry(out: Path, cfg: SweepConfig, cov: float, seed: int) -> dict:
    name = model_name(cov, seed)
    seen = seen_pairs(cov, seed)
    return {"name": name, "coverage": _r(cov), "seed": seed, "n_seen_pairs": len(seen),
            "coverage_of_space": _r(len(seen) / len(ALL_PAIRS)),
            "seen_pairs": [_pair_key(p) for p in seen],
            "uncovered_pairs": [_pair_key(p) for p in TRAINABLE_PAIRS if p not in seen],
            "heldout_pairs": [_pair_key(p) for p in HELDOUT_PAIRS],
            "folder": f"models/{name}"}


def run_sweep(out: Path | str, cfg: SweepConfig | None = None, *, eval_only: bool = False,
              train_only: bool = False, log: Callable = print) -> dict:
    """Train (resumable), evaluate (cached per model), aggregate, write sweep.json + index.html."""
    cfg = cfg or SweepConfig()
    out = claim_output_dir(out, "sweep")  # a new, empty or sweep folder only
    if not eval_only:
        train_models(out, cfg, log)
    if train_only:
        return {}
    models = []
    for seed in cfg.seeds:
        for cov in cfg.coverages:
            entry = model_entry(out, cfg, cov, seed)
            folder = out / entry["folder"]
            if not _done(folder, cfg):
                entry["status"] = "not trained yet"
                models.append(entry)
                continue
            card = json.loads((folder / "card.json").read_text())
            trained_on = {_pair_key(p) for p in ALL_PAIRS} - {_pair_key(p) for p in card["heldout_pairs"]}
            if trained_on != set(entry["seen_pairs"]):
                raise ValueError(f"{folder}: trained on {sorted(trained_on)}, expected {entry['seen_pairs']}")
            entry["train"] = {k: card.get(k) for k in ("steps", "cpu_seconds", "wall_seconds", "final_loss_ema100",
                                                       "parameters", "threads")}
            cache = folder / "sweep_eval.json"
            cached = json.loads(cache.read_text()) if cache.exists() else {}
            if cached.get("key") == _eval_key(cfg):
                entry["eval"] = cached["eval"]
            else:
                log(f"{entry['name']}: evaluating ({len(ALL_PAIRS)} prompts × {cfg.samples} samples)")
                entry["eval"] = evaluate_model(folder, cfg, cov, seed)
                cache.write_text(json.dumps({"key": _eval_key(cfg), "eval": entry["eval"]}))
            entry["status"] = "evaluated"
            h, s = entry["eval"]["success"]["heldout"], entry["eval"]["success"]["seen"]
            log(f"{entry['name']}: held-out {h['rate']} {h['ci']}  seen {s['rate']} {s['ci']}")
            models.append(entry)
    result = {
        "kind": "t2i-audit mini sweep", "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": json.loads(json.dumps(asdict(cfg), default=list)),
        "design": {"space": f"{len(COLORS)} colours × {len(SHAPES)} shapes = {len(ALL_PAIRS)} pairs, single objects",
                   "heldout_pairs": [_pair_key(p) for p in HELDOUT_PAIRS],
                   "trainable_pairs": [_pair_key(p) for p in TRAINABLE_PAIRS],
                   "coverage": "fraction of the trainable pairs a model trains on; nested across coverages for "
                               "one seed; never fewer than 6 (every colour and shape seen)",
                   "compute": f"{cfg.steps} optimisation steps × batch {cfg.batch} for every model",
                   "headline_layer": f"{HEADLINE_BLOCK}@{HEADLINE_STEP}",
                   "preregistered": "HEADLINE_BLOCK/HEADLINE_STEP are constants in t2i_audit/mini/sweep.py, "
                                    "written before any sweep model was evaluated"},
        "models_expected": len(cfg.seeds) * len(cfg.coverages),
        "models": [{k: v for k, v in m.items()} for m in models],
    }
    for m in result["models"]:
        if m.get("eval"):
            m["eval"] = {k: v for k, v in m["eval"].items() if k != "grid_png_b64"}
    result["complete"] = all(m["status"] == "evaluated" for m in models)
    result["aggregate"] = aggregate(models, cfg, f"{HEADLINE_BLOCK}@{HEADLINE_STEP}")
    (out / "sweep.json").write_text(json.dumps(result, indent=1))
    from .sweep_page import render_page

    (out / "index.html").write_text(render_page(result, {m["name"]: m["eval"]["grid_png_b64"]
                                                         for m in models if m.get("eval")}))
    log(f"wrote {out / 'sweep.json'} and {out / 'index.html'}")
    return result
