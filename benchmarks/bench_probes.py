"""Activations and probes.

1. Extraction throughput (prompts/s) of `PipelineTextEncoder.encode` (the pipeline's own
   `encode_prompt`, intercepted: every layer, poolings eos + mean + slot) vs a bare
   `pipe.encode_prompt` on the same prompts, timed alternately — the overhead of capturing and
   pooling every layer: tiny-sd (CLIP), tiny-sd3 (2 CLIP + T5 at 256 tokens), and an SD1.5-sized
   random CLIPTextModel (12 layers x 768, built from its config) with the full-size CLIP BPE
   tokenizer (token ids as SD's) in a StableDiffusionPipeline without UNet/VAE.
2. Probe fitting time with `t2i_audit.probes.fit.linear` — `decodability` (grouped 5-fold CV, with its
   control task) and `failure_prediction` (grouped 5-fold CV, probe + prompt-only baseline,
   bootstrap CIs) — for 1k / 5k / 10k prompts x all layers of an SD1.5-sized encoder
   (synthetic float32 arrays of that shape, a 10-class target with a weak linear signal).

    python benchmarks/bench_probes.py [--prompts 256] [--big-prompts 128] [--sizes 1000,5000,10000]

The defaults take about 10-15 minutes on a loaded 2-core CPU, nearly all of it the 10k fits;
`--sizes 1000,5000 --fit-layers 4` is a 2-minute smoke run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import alternate, summary, write

REPO = Path(__file__).resolve().parents[1]


def extraction(records, pipe, batch_size: int, reps: int) -> dict:
    from t2i_audit.probes.capture.activations import _slot_names
    from t2i_audit.probes.capture.pipeline_text import PipelineTextEncoder, encode_kwargs

    slots = _slot_names(records)
    batches = [records[i:i + batch_size] for i in range(0, len(records), batch_size)]
    encoder = PipelineTextEncoder(pipe)
    kw = encode_kwargs(pipe, {})

    def ours():
        for b in batches:
            encoder.encode([p["text"] for p in b], [p.get("spans") or {} for p in b], slot_names=slots)

    def bare():
        import inspect

        import torch

        params = inspect.signature(pipe.encode_prompt).parameters
        extra = {k: None for k in ("prompt_2", "prompt_3") if k in params}
        extra.update({k: v for k, v in (("do_classifier_free_guidance", False), ("num_images_per_prompt", 1))
                      if k in params})
        with torch.inference_mode():
            for b in batches:
                pipe.encode_prompt(prompt=[p["text"] for p in b], device=pipe._execution_device, **extra, **kw)

    ours()  # warm-up
    t_ours, t_bare = alternate(ours, bare, reps)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    first = encoder.encode([p["text"] for p in batches[0]], [{} for _ in batches[0]])
    return {"prompts": len(records), "batch_size": batch_size,
            "arrays_per_prompt": {k: len([n for n in v if not n.startswith("_")]) for k, v in first.items()},
            "ours": summary(t_ours), "bare_encode_prompt": summary(t_bare),
            "prompts_per_s_ours": round(len(records) / med(t_ours), 1),
            "prompts_per_s_bare": round(len(records) / med(t_bare), 1),
            "ratio_ours_over_bare": round(med(t_ours) / med(t_bare), 3)}


def fitting(sizes, n_layers: int, dim: int, n_boot: int, seed: int = 0) -> list[dict]:
    import numpy as np

    from t2i_audit.probes.fit import linear

    out = []
    for n in sizes:
        rng = np.random.default_rng(seed)
        y = rng.integers(0, 10, n)  # a 10-value slot (a colour)
        groups = rng.integers(0, max(n // 4, 10), n)  # ~4 prompts per composition
        failed = rng.random(n) < 0.3 + 0.04 * y
        base_X = np.eye(10, dtype=np.float32)[y]
        signal = rng.standard_normal((10, dim)).astype(np.float32)
        t_dec, t_fail = [], []
        for layer in range(n_layers):
            X = rng.standard_normal((n, dim)).astype(np.float32) + 0.05 * (layer + 1) * signal[y]
            t = time.perf_counter()
            linear.decodability(X, y, groups, n_splits=5, seed=seed)
            t_dec.append(time.perf_counter() - t)
            t = time.perf_counter()
            linear.failure_prediction(X, failed, groups, base_X, n_splits=5, seed=seed, n_boot=n_boot)
            t_fail.append(time.perf_counter() - t)
        row = {"prompts": n, "layers": n_layers, "dim": dim,
               "decodability_all_layers_s": round(sum(t_dec), 2),
               "failure_prediction_all_layers_s": round(sum(t_fail), 2),
               "total_s": round(sum(t_dec) + sum(t_fail), 2),
               "decodability_per_layer_s": [round(x, 2) for x in t_dec],
               "failure_prediction_per_layer_s": [round(x, 2) for x in t_fail]}
        print(row)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=256, help="prompts through tiny-sd's encoder")
    ap.add_argument("--big-prompts", type=int, default=128, help="prompts through the SD1.5-sized encoder (0: skip)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--fit-layers", type=int, default=14, help="SD1.5 CLIP: h00..h12 + final")
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    load_start = os.getloadavg()

    import torch

    torch.set_num_threads(args.threads)
    from t2i_audit import api
    from t2i_audit.models import resolve_model
    from t2i_audit.probes.capture.pipeline_text import load_text_pipeline

    suites = [str(REPO / "prompts/colors.yaml")]
    records = api.expand_suites(suites, max(args.prompts, args.big_prompts), 0)
    res = {}
    for name in ("tiny-sd", "tiny-sd3"):
        pipe = load_text_pipeline(resolve_model(name).pretrained_path())
        res[name] = extraction(records[:args.prompts], pipe, args.batch_size, args.reps)
        print(name, res[name])
    if args.big_prompts:
        from diffusers import DDIMScheduler, StableDiffusionPipeline
        from transformers import CLIPTextConfig, CLIPTextModel

        from t2i_audit.tiny.scorers import clip_tokenizer

        big_tok = clip_tokenizer(merges_n=48_894)  # the full CLIP BPE: SD's token ids
        torch.manual_seed(0)
        cfg = CLIPTextConfig(vocab_size=49_408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                             num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                             bos_token_id=big_tok.bos_token_id, eos_token_id=big_tok.eos_token_id,
                             pad_token_id=big_tok.pad_token_id)
        big = StableDiffusionPipeline(vae=None, unet=None, text_encoder=CLIPTextModel(cfg).eval(), tokenizer=big_tok,
                                      scheduler=DDIMScheduler(), safety_checker=None, feature_extractor=None,
                                      requires_safety_checker=False)
        res["sd15_size_clip_random"] = {"config": {"layers": 12, "hidden": 768, "vocab": 49_408},
                                        **extraction(records[:args.big_prompts], big, args.batch_size, args.reps)}
        print(res["sd15_size_clip_random"])
    sizes = [int(x) for x in args.sizes.split(",") if x]
    fits = fitting(sizes, args.fit_layers, args.dim, args.n_boot)
    write("probes", {
        "load_average_1_5_15_start": [round(x, 2) for x in load_start],
        "load_average_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
        "suite": "prompts/colors.yaml", "threads": args.threads, "extraction": res,
        "fitting": {"task": "per layer: linear.decodability (10 classes, grouped 5-fold, + control task) and "
                            f"linear.failure_prediction (grouped 5-fold, probe + baseline, n_boot={args.n_boot}) "
                            "on synthetic float32 arrays", "by_size": fits},
        "note": "random-weight encoders (throughput only, values meaningless); synthetic probe arrays. "
                "Shared 2-core CPU heavily loaded by a training job during the measurement.",
    })


if __name__ == "__main__":
    main()
