"""One sweep model evaluated (see t2i_audit.mini.sweep_design for the design): the 24 prompts × (N judged +
M decoded) samples with fixed seeds through one hooked pipeline call per batch (images + the denoiser's block
activations), the pixel judge's success per split on the N judged seeds, and grouped-CV linear probes of colour
and shape per (block, step) on the M other seeds, beside a control task, a text-encoder-only reference (the
conditioning the denoiser receives, ``encode_prompt``) and the headline probe read on the judged seeds."""

from __future__ import annotations

import base64
import io
import random
import time
from pathlib import Path

import numpy as np

from .sweep_design import ALL_PAIRS, HELDOUT_PAIRS, TARGETS, SweepConfig, pair_key, seen_pairs
from .sweep_stats import _r
from .world import SHAPES, scene_for, scene_record

SPLITS = ("heldout", "seen", "uncovered")


def eval_prompts() -> list[dict]:
    """The 24 single-object prompts (records as the suite's), same for every model."""
    rng = random.Random(0)
    return [scene_record(scene_for([c], [s], rng=rng)) for c, s in ALL_PAIRS]


def eval_groups(prompts: list[dict], jobs: list[tuple[int, int]]) -> np.ndarray:
    """The CV group of every image (prompt index, sample): its prompt's group (``scenes.prompt_groups``; here each
    of the 24 single-object prompts is its own scene, so a composition is never on both sides of a fold)."""
    from ..scenes import prompt_groups

    group = prompt_groups(prompts)
    return np.array([group[i] for i, _ in jobs])


def image_seed(prompt_index: int, sample: int) -> int:
    """The same image seed for a prompt/sample in every model."""
    return 7919 * sample + prompt_index


def step_tags(n_steps: int) -> dict[str, int]:
    return {"first": 0, "middle": n_steps // 2, "last": n_steps - 1}


def grid_png(images, cols: int = len(SHAPES), side: int = 96) -> str:
    """Images in a grid, each upscaled (nearest) to about `side` px, as base64 PNG."""
    from PIL import Image

    w, h = images[0].size
    scale = max(1, side // w)
    rows = (len(images) + cols - 1) // cols
    g = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), (128, 128, 128))
    for i, im in enumerate(images):
        g.paste(im, ((i % cols) * (w + 2), (i // cols) * (h + 2)))
    g = g.resize((g.width * scale, g.height * scale), Image.NEAREST)
    buf = io.BytesIO()
    g.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def generate_and_hook(folder: Path, cfg: SweepConfig):
    """Images + denoiser activations for every prompt × sample (seeds fixed across models; samples
    0…samples−1 are judged, the next decode_samples give the decodability), and each prompt's text features."""
    import torch

    from ..probes.capture.denoiser import run_hooked
    from .components import load_pipeline

    torch.set_num_threads(1)
    pipe = load_pipeline(folder)
    pipe.to(cfg.device)
    pipe.set_progress_bar_config(disable=True)
    prompts = eval_prompts()
    jobs = [(i, k) for i in range(len(prompts)) for k in range(cfg.samples + cfg.decode_samples)]
    tags = step_tags(cfg.eval_steps)
    images, acts = [], {}
    for j in range(0, len(jobs), cfg.eval_batch):
        chunk = jobs[j:j + cfg.eval_batch]
        texts = [prompts[i]["text"] for i, _ in chunk]
        seeds = [image_seed(i, k) for i, k in chunk]
        out, info = run_hooked(pipe, texts, seeds, steps=cfg.eval_steps, guidance=cfg.guidance, size=cfg.size,
                               at_steps=sorted(set(tags.values())), output_type="pil")
        images.extend(info["images"])
        for key, arr in out.items():
            if key.endswith("-cond"):
                acts.setdefault(key, []).append(arr)
    acts = {k: np.concatenate(v) for k, v in acts.items()}
    return prompts, jobs, images, acts, tags, text_features(pipe, [p["text"] for p in prompts])


def text_features(pipe, texts: list[str]) -> np.ndarray:
    """(len(texts), tokens × width): the conditioning the UNet's cross-attention receives for each prompt —
    ``StableDiffusionPipeline.encode_prompt`` (diffusers 0.42.1 pipeline_stable_diffusion.py; ``__call__`` passes
    its ``prompt_embeds``, after the unconditional half under guidance, as ``encoder_hidden_states``), flattened."""
    import torch

    with torch.inference_mode():
        emb, _ = pipe.encode_prompt(list(texts), pipe.device, 1, False)
    return emb.reshape(len(texts), -1).float().cpu().numpy()


def layer_name(key: str, tags: dict[str, int]) -> str | None:
    """"mid__t005-cond" → "mid@middle" (None for steps not in tags)."""
    block, rest = key.split("__t")
    step = int(rest.split("-")[0])
    names = [n for n, s in tags.items() if s == step]
    return f"{block}@{names[-1]}" if names else None


def probe_layers(acts: dict, tags: dict, y: dict[str, np.ndarray], groups: np.ndarray, cfg: SweepConfig) -> dict:
    """Per layer and target: out-of-fold proba of the true value for every item, plus
    control (random labels per composition) out-of-fold correctness and proba."""
    named = {}
    for key, X in sorted(acts.items()):
        name = layer_name(key, tags)
        if name is not None:
            named[name] = X
    return probe_arrays(named, y, groups, cfg)


def probe_arrays(named: dict[str, np.ndarray], y: dict[str, np.ndarray], groups: np.ndarray, cfg: SweepConfig) -> dict:
    """``probe_layers`` for arrays already named (the denoiser's layers, the text features)."""
    from ..probes.fit.linear import control_labels, grouped_folds, oof_proba_many

    folds = grouped_folds(groups, cfg.n_splits, seed=0)
    names, items = [], []
    for name, X in named.items():
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


def _success(ok: np.ndarray, split: np.ndarray) -> dict:
    from ..analysis import wilson

    res = {}
    for s in SPLITS:
        m = split == s
        k, n = int(ok[m].sum()), int(m.sum())
        rate, lo, hi = wilson(k, n)
        res[s] = {"k": k, "n": n, "rate": _r(rate), "ci": [_r(lo), _r(hi)]}
    return res


def _decodability(probes: dict, y: dict, split: np.ndarray) -> dict:
    decod = {}
    for layer, per_t in probes.items():
        row = {}
        for t, d in per_t.items():
            row[t] = {s: {"accuracy": _r(d["probe"]["correct"][split == s].mean()) if (split == s).any() else None,
                          "p_true": _r(d["probe"]["p_true"][split == s].mean()) if (split == s).any() else None}
                      for s in SPLITS}
            row[t]["all"] = {"accuracy": _r(d["probe"]["correct"].mean()), "p_true": _r(d["probe"]["p_true"].mean())}
            row[t]["control_accuracy"] = _r(d["control"]["correct"].mean())
            row[t]["chance_uniform"] = _r(1 / len(np.unique(y[t])))
        decod[layer] = row
    return decod


def _mean_p_true(per_t: dict, m: np.ndarray, kind: str = "probe") -> float:
    """Mean over items and the two constituents of p(true value): a composition's decodability."""
    return _r(np.mean([per_t[t][kind]["p_true"][m].mean() for t in TARGETS]))


def evaluate_model(folder: Path, cfg: SweepConfig, coverage: float, seed: int) -> dict:
    """Pixel-judge success (held-out / seen / outside coverage) on the judged seeds; decodability of the other
    seeds, the text-encoder reference and the judged seeds' own headline decodability."""
    from .pixel_judge import prompt_passes
    from .sweep_design import HEADLINE_BLOCK, HEADLINE_STEP

    t0, c0 = time.time(), time.process_time()
    prompts, jobs, images, acts, tags, text = generate_and_hook(folder, cfg)
    judged = np.array([k < cfg.samples for _, k in jobs])
    decode = ~judged
    seen = {pair_key(p) for p in seen_pairs(coverage, seed)}
    held = {pair_key(p) for p in HELDOUT_PAIRS}
    comp = np.array([pair_key((prompts[i]["slots"]["c1"], prompts[i]["slots"]["o1"])) for i, _ in jobs])
    split = np.array(["heldout" if c in held else ("seen" if c in seen else "uncovered") for c in comp])
    ok = np.array([bool(j) and prompt_passes(im, prompts[i]) for (i, _), im, j in zip(jobs, images, judged)])
    y = {"color": np.array([prompts[i]["slots"]["c1"] for i, _ in jobs]),
         "shape": np.array([prompts[i]["slots"]["o1"] for i, _ in jobs])}
    groups = eval_groups(prompts, jobs)
    on = lambda rows: {t: v[rows] for t, v in y.items()}  # noqa: E731
    probes = probe_layers({k: v[decode] for k, v in acts.items()}, tags, on(decode), groups[decode], cfg)
    head = f"{HEADLINE_BLOCK}@{HEADLINE_STEP}"
    head_key = next(k for k in acts if layer_name(k, tags) == head)
    same = probe_arrays({head: acts[head_key][judged]}, on(judged), groups[judged], cfg)[head]
    prompt_of = np.array([i for i, _ in jobs])
    txt = probe_arrays({"text": text[prompt_of[decode]]}, on(decode), groups[decode], cfg)["text"]
    per_comp = []
    for c in sorted(set(comp)):
        mj, md = (comp == c) & judged, (comp[decode] == c)
        entry = {"composition": c, "split": str(split[mj][0]), "k": int(ok[mj].sum()), "n": int(mj.sum()),
                 "success": _r(ok[mj].mean()), "decodability": {}, "control_decodability": {},
                 "decodability_judged_seeds": {head: _mean_p_true(same, (comp[judged] == c))},
                 "text_decodability": _mean_p_true(txt, md), "text_control_decodability": _mean_p_true(txt, md, "control")}
        for layer, per_t in probes.items():
            entry["decodability"][layer] = _mean_p_true(per_t, md)
            entry["control_decodability"][layer] = _mean_p_true(per_t, md, "control")
        per_comp.append(entry)
    first = [images[j] for j, (_i, k) in enumerate(jobs) if k == 0]
    return {"success": _success(ok[judged], split[judged]), "decodability": _decodability(probes, on(decode),
                                                                                          split[decode]),
            "per_composition": per_comp, "layers": sorted(probes), "steps_hooked": tags,
            "seeds": {"judged": f"samples 0–{cfg.samples - 1} (image_seed(prompt, sample))",
                      "decoded": f"samples {cfg.samples}–{cfg.samples + cfg.decode_samples - 1}: other seeds, never judged"},
            "text_features": {"what": "encode_prompt's prompt_embeds (the UNet's encoder_hidden_states), flattened",
                              "dim": int(text.shape[1])},
            "grid_png_b64": grid_png(first), "eval_seconds": round(time.time() - t0, 1),
            "eval_cpu_seconds": round(time.process_time() - c0, 1)}
