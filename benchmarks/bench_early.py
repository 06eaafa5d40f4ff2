"""Cost of per-image early-step capture (t2i_audit/probes/capture/early.py), as ratios in one run.

1. **Capture overhead** — one generation call (the shipped mini generator: 32 px, 20 steps, CFG;
   and tiny-sd, the SD 1.5 twin) bare, against the same call with every hook the early stage uses
   attached for the whole trajectory: pooled block outputs (every step), cross-attention maps
   recomputed at the steps of 10 % and 20 %, and the x0 preview there. Timed alternately.
2. **Early replay** — the replay the stage runs (stopped after 20 % of the steps) against the full
   generation: the fraction of a generation's time the features cost.

    python benchmarks/bench_early.py [--reps 5] [--batch 4]

On the GPU the goal is a capture overhead under 10 % (benchmarks/gpu.py runs the same on a real model).
"""

from __future__ import annotations

import argparse

from _common import alternate, summary, write


def case(model: str, batch: int, reps: int) -> dict:
    import torch

    from t2i_audit.generate import load_pipeline, output_images, pipeline_call_kwargs
    from t2i_audit.models import resolve_model
    from t2i_audit.probes.capture.attention import AttentionRecorder
    from t2i_audit.probes.capture.denoiser import run_hooked
    from t2i_audit.probes.capture.early import step_at
    from t2i_audit.probes.capture.preview import PreviewRecorder

    card = resolve_model(model)
    pipe = load_pipeline(card, "cpu", "float32")
    steps, guidance, size = card.defaults["steps"], card.defaults["guidance"], card.defaults["size"]
    texts = ["a red circle to the left of a blue square", "a green triangle and a purple cross",
             "a yellow square", "an orange cross below a red circle"][:batch] * max(1, batch // 4)
    seeds = list(range(len(texts)))
    at = sorted({step_at(f, steps) for f in (0.1, 0.2)})

    def bare():
        gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
        kw, _ = pipeline_call_kwargs(type(pipe), texts, gens, steps=steps, guidance=guidance, size=size,
                                     output_type="np", call=card.call)
        with torch.inference_mode():
            output_images(pipe(**kw))

    attach = [lambda p, d, c: AttentionRecorder(d, c, at, len(texts), type(p).__name__),
              lambda p, d, c: PreviewRecorder(p, c, at)]

    def captured():
        run_hooked(pipe, texts, seeds, steps=steps, guidance=guidance, size=size, call_kwargs=card.call,
                   output_type="np", attach=attach)

    def replay():
        run_hooked(pipe, texts, seeds, steps=steps, guidance=guidance, size=size, at_steps=at, call_kwargs=card.call,
                   attach=attach, stop_after=max(at))

    bare()  # warm-up
    t_bare, t_cap = alternate(bare, captured, reps)
    t_bare2, t_rep = alternate(bare, replay, reps)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"model": model, "steps": steps, "batch": len(texts), "size": size, "hooked_steps": at,
            "bare": summary(t_bare), "captured": summary(t_cap), "replay_to_20pct": summary(t_rep),
            "capture_overhead_ratio": round(med(t_cap) / med(t_bare), 3),
            "replay_fraction_of_generation": round(med(t_rep) / med(t_bare2), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--models", default="mini,tiny-sd")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    write("early", {"threads": 1, "cases": [case(m, a.batch, a.reps) for m in a.models.split(",")],
                    "note": "CPU, one thread; capture = pooled blocks every step + attention maps and x0 "
                            "previews at the 10 % and 20 % steps"})


if __name__ == "__main__":
    main()
