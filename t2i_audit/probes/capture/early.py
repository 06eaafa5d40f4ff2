"""Per-image features from the first denoising steps: read the failure before the image exists.

Whether an image fails depends on its seed as much as on its prompt, so a probe that is to predict
*which image* fails must look at that image's own trajectory. For every image of a run (every
sample, not only sample 0) the pipeline is replayed **in the generation's planned batches**
(``generate.plan_batches``: the batch-mates, hence the bytes, of the scored images) with the run's
recorded settings, and stopped right after the last step asked for (``stop_after``: nothing later
can change what was recorded up to it, so the cost is the fraction of steps, not a generation).
At each step (default: after the first 10 % and 20 % of loop iterations, ``step_at``) it keeps:

* ``pooled-<block>`` — each denoiser block's image stream, mean-pooled (capture/denoiser.py hooks);
* ``attn-<grid>`` — composition statistics of the cross-attention maps of the slot tokens on each
  spatial grid (capture/attention.py captures, features/map_features.py reduces): where each
  object and attribute token looks, whether an attribute looks where its own object does, whether
  the two objects sit in the order the relation names;
* ``x0`` — the **x0 preview** (capture/preview.py), judged by the run's deciding scorer for the
  prompt's category: column 0 the fraction of its questions passed (the cheap reference to beat),
  then each question's value.

Slot tokens are the pipeline's own: its ``encode_prompt`` is run with recording tokenizers
(pipeline_text.capture_encoder_calls) and each slot's character span mapped onto the tokens the
tokenizer saw; the attention keys must be those tokens (their count is checked).

Stored like every activation (``activations/early/``): ``<family>__t<step>.npy`` rows in
``index.jsonl`` order (prompt_id, sample), ``meta.json`` with the key, the steps, their timesteps,
denoiser calls per image and sha256 of every array; rank-sharded parts, resumable.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import AuditError
from ...generate import plan_batches
from ...rundir import RunDir, atomic_write_json, atomic_write_jsonl
from .activations import array_hashes, arrays_intact, merge_parts, save_part

DEFAULT_FRACTIONS = (0.1, 0.2)
CHUNK = 64
FORMAT = 2
MAX_QUESTIONS = 8  # per-question x0 values kept (the mini suite asks at most 5)


def step_at(fraction: float, n_steps: int) -> int:
    """Loop index whose end completes ``ceil(fraction · n_steps)`` iterations (20 % of 20 steps: index 3)."""
    if not 0 < fraction <= 1:
        raise AuditError(f"--at {fraction}: a fraction of the steps in (0, 1]")
    return max(0, math.ceil(fraction * n_steps - 1e-9) - 1)


def step_label(index: int, loop_steps: int) -> str:
    """How every command names a loop step: iterations done, of the loop ("step 4/20" for loop index 3) —
    `probe --early`, `select --study`, the binding study and the report alike."""
    return f"step {index + 1}/{loop_steps}"


def slot_positions(pipe, texts: Sequence[str], prompts: Sequence[dict], call: dict | None):
    """Per prompt: ``{slot: key positions}``, the word-token positions, and the sequence length, from the
    pipeline's own tokenizer call (its first text encoder: SDXL's two CLIPs tokenize alike)."""
    from .pipeline_text import capture_encoder_calls, map_spans, token_slots

    calls, _ = capture_encoder_calls(pipe, list(texts), call, offsets=True)
    c = calls[0]
    if c.offsets is None:
        raise AuditError(f"{type(pipe).__name__} {c.encoder}: the tokenizer gives no offsets, slot tokens unknown")
    rows = denoiser_rows(pipe, c.encoder, int(c.input_ids.shape[1]), call)
    key_of = {r: i for i, r in enumerate(rows)}
    slots, words = [], []
    for b, p in enumerate(prompts):
        spans = p.get("spans") or {}
        moved = map_spans(p["text"], c.seen_texts[b], spans)
        found = token_slots(c.offsets[b], moved, list(spans), c.real[b])
        slots.append({k: [key_of[i] for i in v if i in key_of] for k, v in found.items()})
        words.append([key_of[i] for i, (s, e) in enumerate(c.offsets[b])
                      if e > s and bool(c.real[b][i]) and i in key_of])
    return slots, words, len(rows)


def denoiser_rows(pipe, encoder: str, length: int, call: dict | None) -> list[int]:
    """The tokenizer positions the denoiser receives, in order: key ``i`` is token ``rows[i]``. families.yaml
    ``drop_prefix`` / ``select_rows`` (Sana: token 0 and the last ``max_sequence_length − 1``), as
    pipeline_text._rows_the_denoiser_sees marks them."""
    from ...families import pipeline_family
    from .pipeline_text import encode_kwargs

    fam = pipeline_family(type(pipe).__name__) or {}
    rows = list(range(length))
    attr = (fam.get("drop_prefix") or {}).get(encoder)
    if attr:
        rows = rows[int(getattr(pipe, attr)):]
    sel = (fam.get("select_rows") or {}).get(encoder)
    if sel:
        last = int(encode_kwargs(pipe, call)[sel["last"]]) + int(sel.get("last_offset", 0))
        rows = [r for r in rows if r < sel["first"] or r >= max(length - last, 0)]
    return rows


def replay_batch(pipe, batch: list[tuple[dict, int]], seeds: list[int], s: dict, steps: list[int],
                  previews: bool, extra: Sequence = ()) -> dict[str, np.ndarray]:
    """One planned batch replayed to ``max(steps)``: ``{"<family>__t<step>": (len(batch), …)}``. ``extra``: more
    ``run_hooked`` attach makers (select's snapshot of the latents, select/continuation.py)."""
    from .attention import AttentionRecorder, has_cross_attention
    from .denoiser import run_hooked
    from ..features.map_features import image_features
    from .preview import PreviewRecorder, decode_previews

    prompts = [p for p, _ in batch]
    texts = [p["text"] for p in prompts]
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    attach, holders = [], {}
    if has_cross_attention(denoiser):
        def make_attn(pipe_, den, clock):
            holders["attn"] = AttentionRecorder(den, clock, steps, len(texts), type(pipe_).__name__)
            return holders["attn"]
        attach.append(make_attn)
    if previews:
        def make_preview(pipe_, _den, clock):
            holders["x0"] = PreviewRecorder(pipe_, clock, steps)
            return holders["x0"]
        attach.append(make_preview)
    pooled, info = run_hooked(pipe, texts, seeds, steps=s["steps"], guidance=s["guidance"], size=s["size"],
                              at_steps=steps, call_kwargs=s["call"], attach=attach + list(extra),
                              stop_after=max(steps))
    out = {}
    for step in steps:
        blocks = sorted(k for k in pooled if k.endswith(f"__t{step:03d}-cond"))
        for k in blocks:
            out[f"pooled-{k.split('__')[0]}__t{step:03d}"] = pooled[k]
    if "attn" in holders:
        slots, words, length = slot_positions(pipe, texts, prompts, s["call"])
        for (grid, step), maps in holders["attn"].maps().items():
            if maps.shape[-1] != length:
                raise AuditError(f"{type(pipe).__name__}: cross-attention has {maps.shape[-1]} keys but the "
                                 f"prompt has {length} tokens: slot positions unknown")
            out[f"attn-{grid}__t{step:03d}"] = np.stack(
                [image_features(maps[b], slots[b], words[b], prompts[b]) for b in range(len(texts))])
    if "x0" in holders:
        for step, lat in holders["x0"].latents.items():
            out[f"x0img__t{step:03d}"] = decode_previews(pipe, lat)
    out["_n_calls"] = info.get("n_steps", 0)
    return out


class PreviewJudge:
    """The run's deciding scorer per category, applied to x0 previews: fraction of questions passed."""

    def __init__(self, rd: RunDir, prompts: Sequence[dict], device: str):
        from ...scorers.registry import create_scorer
        from ..stage import label_scorers

        self.by_cat = {c: d.get("scorer") for c, d in label_scorers(rd, prompts).items() if d.get("scorer")}
        self.scorers = {}
        for name in sorted(set(self.by_cat.values())):
            sc = create_scorer(name, device=device)
            sc.load()
            self.scorers[name] = sc

    def names(self) -> dict:
        return dict(self.by_cat)

    def __call__(self, batch: list[tuple[dict, int]], records: list[dict], images) -> np.ndarray:
        """``(len(batch), 1 + MAX_QUESTIONS)``: the fraction of questions passed, then each question's value
        in the prompt's question order (NaN past its questions or where the scorer declined)."""
        from ...scorers.base import ScoreItem

        out = np.full((len(batch), 1 + MAX_QUESTIONS), np.nan, dtype=np.float32)
        for name, sc in self.scorers.items():
            rows = [j for j, (p, _) in enumerate(batch) if self.by_cat.get(p.get("category")) == name]
            if not rows:
                continue
            items = [ScoreItem(batch[j][0], records[j], images[j]) for j in rows]
            for j, recs in zip(rows, sc.score(items)):
                v = recs[-1].get("value")
                out[j, 0] = np.nan if v is None else float(v)
                qs = [r.get("value") for r in recs if r.get("kind") == "question"][:MAX_QUESTIONS]
                out[j, 1:1 + len(qs)] = [np.nan if q is None else float(q) for q in qs]
        return out


def extract_early_features(rd: RunDir | str | Path, model: str, *, device: str = "cpu",
                           fractions: Sequence[float] = DEFAULT_FRACTIONS, previews: bool = True,
                           progress: bool = True, state=None, variant=None) -> dict:
    """Replay every image's first steps in the generation's planned batches; store per-image features.
    Returns meta (``{}`` on a non-main process). ``variant``: the run's LoRAs / components (t2i_audit.variants)."""
    from ...generate import load_pipeline
    from ...models import resolve_model
    from ...processes import process_state
    from ...variants import cache_key
    from .denoiser import run_settings

    rd = rd if isinstance(rd, RunDir) else RunDir(rd)
    state = state or process_state(device)
    state.wait_for_everyone()
    prompts = rd.read_prompts()
    images = {(r["prompt_id"], int(r.get("sample", 0))): r for r in rd.read_images()}
    if not images:
        raise AuditError(f"{rd.images}: no images; run the generate stage first")
    card = resolve_model(model).with_variant(variant)
    s = run_settings(rd, card, device)
    steps = sorted({step_at(f, s["steps"]) for f in fractions})
    plan = [[(p, k) for p, k in b if (p["id"], k) in images]
            for b in plan_batches(prompts, s["images_per_prompt"], s["batch_size"])]
    plan = [b for b in plan if b]
    if sum(len(b) for b in plan) != len(images):
        raise AuditError(f"{rd.images}: images not in the run's batch plan (other prompts or samples)")
    rows = [(p["id"], k) for b in plan for p, k in b]
    seeds = [[int(images[(p["id"], k)]["seed"]) for p, k in b] for b in plan]
    key = hashlib.sha1(json.dumps([card.source, card.revision, s, steps, previews, rows, seeds, FORMAT,
                                   *cache_key(card)],
                                  default=str, sort_keys=True).encode()).hexdigest()[:16]
    enc_dir = rd.activations_dir / "early"
    meta_path = enc_dir / "meta.json"
    if meta_path.exists():
        from ...safeload import read_json

        meta = read_json(meta_path)
        if meta.get("key") == key and arrays_intact(enc_dir, meta):
            return meta
    main = state.is_main_process
    parts = enc_dir / ".parts" / key
    parts.mkdir(parents=True, exist_ok=True)
    per_chunk = max(1, CHUNK // s["batch_size"])
    n_chunks = (len(plan) + per_chunk - 1) // per_chunk
    with state.split_between_processes(list(range(n_chunks))) as share:
        missing = [c for c in share if not (parts / f"part_{c:05d}.npz").exists()]
    pipe = load_pipeline(card, device, s["dtype"]) if missing else None
    judge = PreviewJudge(rd, prompts, device) if (missing and previews) else None
    if progress and main:
        print(f"[early] {len(rows)} images replayed to {step_label(max(steps), s['steps'])} (read at "
              f"{', '.join(step_label(i, s['steps']) for i in steps)}) in {len(plan)} planned batches", file=sys.stderr)
    for c in missing:
        acc: dict[str, list] = {}
        for b in range(c * per_chunk, min((c + 1) * per_chunk, len(plan))):
            got = replay_batch(pipe, plan[b], seeds[b], s, steps, previews)
            got.pop("_n_calls")
            recs = [images[(p["id"], k)] for p, k in plan[b]]
            for name, v in got.items():
                if name.startswith("x0img__"):
                    acc.setdefault("x0" + name[5:], []).append(judge(plan[b], recs, v))
                else:
                    acc.setdefault(name, []).append(np.asarray(v, dtype=np.float32))
        save_part(parts / f"part_{c:05d}.npz", {k: np.concatenate(v).astype(np.float32) for k, v in acc.items()})
        if progress and main:
            print(f"[early] batch {min((c + 1) * per_chunk, len(plan))}/{len(plan)}", file=sys.stderr)
    state.wait_for_everyone()
    if not main:
        return {}
    names, _ = merge_parts(enc_dir, parts, n_chunks, len(rows))
    atomic_write_jsonl(enc_dir / "index.jsonl",
                       ({"row": i, "prompt_id": pid, "sample": k} for i, (pid, k) in enumerate(rows)))
    from ..features.map_features import feature_names

    meta = {"key": key, "kind": "early", "model": model, "n": len(rows), "format": FORMAT,
            "steps": steps, "loop_steps": s["steps"], "fractions": list(fractions),
            "denoiser_iterations": {f"t{t:03d}": t + 1 for t in steps},
            "arrays": names, "attention_features": feature_names(),
            "x0_judges": judge.names() if judge else None,
            "settings": s, "batch_size": s["batch_size"], "parts": n_chunks,
            "sha256": array_hashes(enc_dir, names)}
    atomic_write_json(meta_path, meta)
    shutil.rmtree(enc_dir / ".parts", ignore_errors=True)
    return meta


def load_early(rd: RunDir) -> tuple[dict[str, np.ndarray], list[tuple[str, int]], dict]:
    """The stored per-image arrays, their (prompt_id, sample) rows and meta.json."""
    return load_feature_folder(rd.activations_dir / "early", f"no early features; run `t2i-audit probe {rd.root} "
                                                            "--early` first")


def load_feature_folder(folder, missing: str) -> tuple[dict[str, np.ndarray], list[tuple[str, int]], dict]:
    """Arrays, (prompt_id, sample) rows and meta.json of a per-image feature folder (early, trajectory);
    ``missing``: what to tell the user when it has not been made."""
    from ...records import read_records
    from ...safeload import read_json

    if not (folder / "meta.json").exists():
        raise AuditError(f"{folder}: {missing}")
    meta = read_json(folder / "meta.json")
    rows = [(r["prompt_id"], int(r["sample"])) for r in read_records(folder / "index.jsonl", "activation-index", strict=True)]
    return {n: np.load(folder / f"{n}.npy") for n in meta["arrays"]}, rows, meta
