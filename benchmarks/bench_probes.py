"""Activations and probes.

1. Extraction throughput (prompts/s) of `t2i_audit.probes.activations.encode_batch` — every layer,
   poolings eos + mean + slot — padded to the longest prompt of each batch (what extraction does)
   vs padded to 77, on the same encoder and prompts, timed alternately: tiny-sd's CLIP text
   encoder, and an SD1.5-sized random CLIPTextModel (12 layers x 768, built from its config) with
   the full-size CLIP BPE tokenizer (token ids as SD's).
2. Probe fitting time with `t2i_audit.probes.linear` — `decodability` (grouped 5-fold CV, with its
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


def extraction(records, tok, model, batch_size: int, reps: int) -> dict:
    from t2i_audit.probes.activations import _slot_names, encode_batch

    slots = _slot_names(records)
    batches = [records[i:i + batch_size] for i in range(0, len(records), batch_size)]

    def run(pad_to):
        def go():
            for b in batches:
                encode_batch([p["text"] for p in b], [p.get("spans") or {} for p in b], tok, model,
                             slot_names=slots, pad_to=pad_to)
        return go

    longest, padded77 = run(None), run(77)
    # the two agree on real tokens (causal, masked attention): check the pooled states
    b = batches[0]
    a1 = encode_batch([p["text"] for p in b], [p.get("spans") or {} for p in b], tok, model, slot_names=slots)
    a2 = encode_batch([p["text"] for p in b], [p.get("spans") or {} for p in b], tok, model, slot_names=slots, pad_to=77)
    import numpy as np

    diffs = [np.abs(a1[k] - a2[k]) for k in a1 if not k.startswith("_")]
    diff = max(float(d[np.isfinite(d)].max()) for d in diffs if np.isfinite(d).any())
    longest()  # warm-up
    t_long, t_77 = alternate(longest, padded77, reps)
    lens = [max(len(x) for x in tok([p["text"] for p in bb])["input_ids"]) for bb in batches]
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"prompts": len(records), "batch_size": batch_size, "arrays_per_prompt": len([k for k in a1 if not k.startswith("_")]),
            "mean_padded_length_longest": round(sum(lens) / len(lens), 1),
            "pad_longest": summary(t_long), "pad_77": summary(t_77),
            "prompts_per_s_longest": round(len(records) / med(t_long), 1),
            "prompts_per_s_77": round(len(records) / med(t_77), 1),
            "speedup_longest_over_77": round(med(t_77) / med(t_long), 2),
            "max_abs_diff_longest_vs_77": diff}


def fitting(sizes, n_layers: int, dim: int, n_boot: int, seed: int = 0) -> list[dict]:
    import numpy as np

    from t2i_audit.probes import linear

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
    from t2i_audit.probes.activations import load_text_encoder, resolve_text_encoders

    suites = [str(REPO / "prompts/colors.yaml")]
    records = api.expand_suites(suites, max(args.prompts, args.big_prompts), 0)
    info = resolve_text_encoders("tiny-sd")
    tok, model = load_text_encoder(info["path"], info["text_encoders"][0])
    res = {"tiny_sd_clip": {"config": {"layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
                                       "vocab": model.config.vocab_size},
                            **extraction(records[:args.prompts], tok, model, args.batch_size, args.reps)}}
    print(res)
    if args.big_prompts:
        from transformers import CLIPTextConfig, CLIPTextModel

        from t2i_audit.scorers.tiny import clip_tokenizer

        big_tok = clip_tokenizer(merges_n=48_894)  # the full CLIP BPE: SD's token ids
        torch.manual_seed(0)
        cfg = CLIPTextConfig(vocab_size=49_408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                             num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                             bos_token_id=big_tok.bos_token_id, eos_token_id=big_tok.eos_token_id,
                             pad_token_id=big_tok.pad_token_id)
        big = CLIPTextModel(cfg).eval()
        res["sd15_size_clip_random"] = {"config": {"layers": 12, "hidden": 768, "vocab": 49_408},
                                        **extraction(records[:args.big_prompts], big_tok, big, args.batch_size, args.reps)}
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
