"""Seconds per unit of a selection policy's cost (t2i_audit/select/cost.py), in one run.

On one planned batch of the mini world (4 images of one prompt, 32 px, 20 steps, CFG batched), timed
alternately: a whole generation (T loop iterations + the VAE decode), the VAE decode alone, and the
deciding judge on the finished images (mini-pixel: what decides colour, binding and spatial in the
mini world; mini-judge, the second scorer, for scale). Per-image seconds:

* ``iteration`` = (generation − decode) / (T · batch);
* ``decode`` = decode / batch;
* ``judge_call`` = judge / batch (mini-pixel; a real VLM judge costs orders of magnitude more — put its
  own measured number here before comparing policies that judge previews).

    python benchmarks/bench_selection_costs.py [--reps 7]

Writes benchmarks/results/selection_costs.json (``seconds_per``: what ``select --study`` reads).
"""

from __future__ import annotations

import argparse
import statistics

from _common import alternate, summary, timed, write


def main(reps: int) -> dict:
    import numpy as np
    import torch

    from t2i_audit.generate import load_pipeline, output_images, pipeline_call_kwargs
    from t2i_audit.models import resolve_model
    from t2i_audit.api import expand_suites
    from t2i_audit.scorers.base import ScoreItem
    from t2i_audit.scorers.registry import create_scorer

    card = resolve_model("mini")
    pipe = load_pipeline(card, "cpu", "float32")
    T, guidance, size = card.defaults["steps"], card.defaults["guidance"], card.defaults["size"]
    prompt = next(p for p in expand_suites(["prompts/mini.yaml"], None, 0) if p["category"] == "spatial")
    texts, batch = [prompt["text"]] * 4, 4

    def generate(output_type="np"):
        gens = [torch.Generator("cpu").manual_seed(i) for i in range(batch)]
        kwargs, _ = pipeline_call_kwargs(type(pipe), texts, gens, steps=T, guidance=guidance, size=size,
                                         output_type=output_type, call=card.call)
        with torch.inference_mode():
            return pipe(**kwargs)

    latents = generate("latent").images

    def decode():
        with torch.inference_mode():
            img = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
            return pipe.image_processor.postprocess(img, output_type="np")

    from PIL import Image

    # as the score stage sees them: the PNGs generate writes, read back as PIL images
    images = [Image.fromarray((np.clip(a, 0, 1) * 255).round().astype(np.uint8)) for a in output_images(generate())]
    records = [{"prompt_id": prompt["id"], "sample": i, "path": f"{i}.png"} for i in range(batch)]
    judges = {}
    for name in ("mini-pixel", "mini-judge"):
        sc = create_scorer(name, device="cpu")
        sc.load()
        items = [ScoreItem(prompt, records[i], images[i]) for i in range(batch)]
        judges[name] = [timed(lambda: sc.score(items)) for _ in range(reps)]
    gen, dec = alternate(generate, decode, reps)
    g, d = statistics.median(gen), statistics.median(dec)
    per = {"iteration": (g - d) / (T * batch), "decode": d / batch,
           "judge_call": statistics.median(judges["mini-pixel"]) / batch}
    return {"setting": {"model": "mini", "steps": T, "batch": batch, "size": size, "threads": torch.get_num_threads(),
                        "prompt": prompt["text"], "deciding_judge": "mini-pixel"},
            "generation": summary(gen), "decode": summary(dec),
            "judges": {k: summary(v) for k, v in judges.items()},
            "seconds_per": {k: round(v, 6) for k, v in per.items()},
            "judge_call_in_iterations": round(per["judge_call"] / per["iteration"], 3),
            "mini_judge_call_in_iterations": round(statistics.median(judges["mini-judge"]) / batch / per["iteration"],
                                                   3),
            "note": "per image; one loop iteration = one denoiser call on the CFG-doubled batch, per image",
            "numpy": np.__version__}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    write("selection_costs", main(ap.parse_args().reps))
