"""Generation overhead: `t2i-audit run` (prompts + generate stages) against a bare loop over the
same diffusers pipeline call — same tiny pipeline, prompts, seeds, steps, batch size — timed
alternately in one process. Also the fresh-run vs finished-rerun (resume) cost.

    python benchmarks/bench_generate.py [--model tiny-sd] [--prompts 64] [--steps 10] [--size 64]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _common import alternate, summary, timed, write

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-sd")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from t2i_audit import api
    from t2i_audit.generate import image_seed, load_pipeline
    from t2i_audit.models import resolve_model

    suite = str(REPO / "prompts/colors.yaml")
    records = api.expand_suites([suite], args.prompts, 0)
    card = resolve_model(args.model)
    card.pretrained_path()  # materialise once, outside the timings
    tmp = Path(tempfile.mkdtemp())
    cfg = dict(model=args.model, prompts=[suite], limit=args.prompts, steps=args.steps, size=args.size,
               batch_size=args.batch_size, device="cpu", stages=["prompts", "generate"])
    runs = iter(range(10_000))

    def harness():
        api.run_audit(api.make_config({**cfg, "out": str(tmp / f"run{next(runs)}")}), progress=False)

    def bare():
        pipe = load_pipeline(card, "cpu", "float32")
        for i in range(0, len(records), args.batch_size):
            batch = records[i : i + args.batch_size]
            gens = [torch.Generator("cpu").manual_seed(image_seed(r["id"], 0, 0)) for r in batch]
            pipe(prompt=[r["text"] for r in batch], generator=gens, num_inference_steps=args.steps,
                 guidance_scale=card.defaults["guidance"], height=args.size, width=args.size, output_type="np", **card.call)

    harness(), bare()  # warm-up: imports, allocator, caches
    t_harness, t_bare = alternate(harness, bare, args.reps)
    finished = tmp / "run1"
    t_resume = [timed(lambda: api.run_audit(api.make_config({**cfg, "out": str(finished)}), progress=False))
                for _ in range(3)]
    shutil.rmtree(tmp)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    write("generate", {
        "model": args.model, "images": len(records), "steps": args.steps, "size": args.size,
        "batch_size": args.batch_size, "threads": args.threads,
        "harness": summary(t_harness), "bare_pipeline_loop": summary(t_bare),
        "ratio_harness_over_bare": round(med(t_harness) / med(t_bare), 3),
        "per_image_overhead_ms": round((med(t_harness) - med(t_bare)) / len(records) * 1000, 2),
        "resume_finished_run": summary(t_resume),
        "resume_fraction_of_fresh": round(med(t_resume) / med(t_harness), 4),
        "note": "tiny random-weight pipeline on CPU; the overhead is per image, so it shrinks as the model grows",
    })


if __name__ == "__main__":
    main()
