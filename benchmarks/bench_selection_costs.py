"""Seconds per unit of a selection policy's cost (t2i_audit/select/cost.py), measured on one machine in one run.

On one planned batch of the mini world (4 images of one spatial prompt, 32 px, 20 steps, CFG batched), in
rounds that run every measurement once in a rotated order (drift and other jobs hit all alike):

* ``iteration`` — a plain loop iteration: (whole generation − its decode) / (T · batch);
* ``decode`` — the VAE decode of one image;
* ``scan_iteration[score]`` — a loop iteration of a scan to loop index ``s`` (``--at``, 20 %: s = 3) with the
  capture that ranking needs and the snapshot a continuation starts from, per image: ``probe`` (cross-attention
  composition maps + pooled block activations: ``early.replay_batch``), ``rawmaps`` (per-head cross-attention
  maps reduced to the raw slot maps of the binding study), ``x0`` / ``x0-fitted`` (the x0 latents; their decode
  and judge call are counted as decode and judge call), ``cfg`` (the CFG gap);
* ``read`` — one risk from a scanned seed's features: the probe design matrix and its logistic function;
* ``continued_iteration`` — (a continuation from the snapshot − its decode) / ((T − s − 1) · batch);
* ``judge_call`` — the deciding judge on one finished image (mini-pixel: the pixel judge that defines success in
  the mini world, so best-of-n by it is an oracle); ``judge_call_by`` also gives mini-judge (the open_clip judge,
  the non-oracle whole-image baseline's picker).

    python benchmarks/bench_selection_costs.py [--reps 7]

Writes a new benchmarks/results/selection_costs-<UTC time>.json (``seconds_per``: the figures
t2i_audit/data/selection_costs.json gives ``select --study``). The machine is
shared: ``load_during_run`` records the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import summary, write

AT_STEP = 3  # step_at(0.2, 20): the pre-registered scan


def main(reps: int) -> dict:
    import numpy as np
    import torch

    from t2i_audit.api import expand_suites
    from t2i_audit.generate import load_pipeline, output_images, pipeline_call_kwargs
    from t2i_audit.models import resolve_model
    from t2i_audit.probes.capture.denoiser import run_hooked
    from t2i_audit.probes.capture.early import replay_batch, slot_positions
    from t2i_audit.probes.capture.preview import PreviewRecorder
    from t2i_audit.probes.fit.linear import onehot_constituents
    from t2i_audit.probes.fit.per_image import apply_probe, design
    from t2i_audit.probes.studies import binding_features as bf
    from t2i_audit.probes.studies.trajectory import CFGGap, HeadMaps
    from t2i_audit.scorers.base import ScoreItem
    from t2i_audit.scorers.registry import create_scorer
    from t2i_audit.select.continuation import continue_batch, snapshot_maker

    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    card = resolve_model("mini")
    pipe = load_pipeline(card, "cpu", "float32")
    T, guidance, size = card.defaults["steps"], card.defaults["guidance"], card.defaults["size"]
    prompt = next(p for p in expand_suites(["prompts/mini.yaml"], None, 0) if p["category"] == "spatial")
    batch = 4
    texts, seeds = [prompt["text"]] * batch, list(range(batch))
    s = {"steps": T, "guidance": guidance, "size": size, "call": card.call}
    plan = [(prompt, k) for k in range(batch)]

    def generate(output_type="np"):
        gens = [torch.Generator("cpu").manual_seed(i) for i in seeds]
        kwargs, _ = pipeline_call_kwargs(type(pipe), texts, gens, steps=T, guidance=guidance, size=size,
                                         output_type=output_type, call=card.call)
        with torch.inference_mode():
            return pipe(**kwargs)

    latents = generate("latent").images

    def decode():
        with torch.inference_mode():
            img = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)[0]
            return pipe.image_processor.postprocess(img, output_type="np")

    held: dict = {}

    def scan_probe():
        h = {}
        held["arrays"] = replay_batch(pipe, plan, seeds, s, [AT_STEP], previews=False, extra=[snapshot_maker(AT_STEP, h)])
        held["snap"] = h["snap"].snapshot

    onehot = onehot_constituents([prompt] * batch)[0]

    def read():
        X = design(held["arrays"], AT_STEP, "probe", slice(None), onehot)
        probe = {"median": np.zeros(X.shape[1]), "mean": np.zeros(X.shape[1]), "scale": np.ones(X.shape[1]),
                 "coef": np.zeros(X.shape[1]), "intercept": 0.0}
        return apply_probe(probe, X)

    def hooked(*makers):
        h = {}
        run_hooked(pipe, texts, seeds, steps=T, guidance=guidance, size=size, at_steps=[AT_STEP], call_kwargs=card.call,
                   attach=[*makers, snapshot_maker(AT_STEP, h)], stop_after=AT_STEP)
        return h

    def scan_rawmaps():
        got = {}

        def mk(pipe_, den, clock):
            got["heads"] = HeadMaps(den, clock, [AT_STEP], batch, type(pipe_).__name__)
            return got["heads"]
        hooked(mk)
        slots, words, _ = slot_positions(pipe, texts, [prompt] * batch, card.call)
        maps = got["heads"].maps
        by_grid: dict = {}
        for (_m, _st), a in maps.items():
            by_grid.setdefault(f"{a.shape[2]}x{a.shape[3]}", []).append(a.mean(1))
        grids = {g: np.mean(v, axis=0) for g, v in by_grid.items()}
        return [bf.rawmaps({g: a[b] for g, a in grids.items()}, bf.slot_keys(prompt, slots[b]), words[b], prompt)
                for b in range(batch)]

    def scan_x0():
        def mk(pipe_, _den, clock):
            return PreviewRecorder(pipe_, clock, [AT_STEP])
        hooked(mk)

    def scan_cfg():
        def mk(pipe_, den, clock):
            return CFGGap(pipe_, den, clock, [AT_STEP], batch)
        hooked(mk)

    scan_probe()
    snap = held["snap"]

    def cont():
        return continue_batch(pipe, texts, snap, steps=T, guidance=guidance, size=size, call=card.call)

    from PIL import Image

    # as the score stage sees them: the PNGs generate writes, read back as PIL images
    images = [Image.fromarray((np.clip(a, 0, 1) * 255).round().astype(np.uint8)) for a in output_images(generate())]
    records = [{"prompt_id": prompt["id"], "sample": i, "path": f"{i}.png"} for i in range(batch)]
    judges = {}
    for name in ("mini-pixel", "mini-judge"):
        sc = create_scorer(name, device="cpu")
        sc.load()
        items = [ScoreItem(prompt, records[i], images[i]) for i in range(batch)]
        judges[name] = (lambda sc=sc, items=items: sc.score(items))
    tasks = {"generation": generate, "decode": decode, "scan_probe": scan_probe, "read": read,
             "scan_rawmaps": scan_rawmaps, "scan_x0": scan_x0, "scan_cfg": scan_cfg, "continuation": cont,
             **{f"judge_{k}": v for k, v in judges.items()}}
    times: dict[str, list] = {k: [] for k in tasks}
    names = list(tasks)
    for r in range(reps):  # every measurement once per round, the order rotated
        for k in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            tasks[k]()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    d = med["decode"]
    scan_it = lambda k: med[k] / ((AT_STEP + 1) * batch)  # noqa: E731
    per = {"iteration": (med["generation"] - d) / (T * batch), "decode": d / batch,
           "judge_call": med["judge_mini-pixel"] / batch,
           "continued_iteration": (med["continuation"] - d) / ((T - AT_STEP - 1) * batch),
           "read": med["read"] / batch,
           "scan_iteration": {"probe": scan_it("scan_probe"), "rawmaps": scan_it("scan_rawmaps"),
                              "x0": scan_it("scan_x0"), "x0-fitted": scan_it("scan_x0"), "cfg": scan_it("scan_cfg")},
           "judge_call_by": {"mini-pixel": med["judge_mini-pixel"] / batch, "mini-judge": med["judge_mini-judge"] / batch}}
    rounded = {k: ({a: round(b, 6) for a, b in v.items()} if isinstance(v, dict) else round(v, 6))
               for k, v in per.items()}
    return {"setting": {"model": "mini", "steps": T, "batch": batch, "size": size, "threads": torch.get_num_threads(),
                        "prompt": prompt["text"], "scan_step": AT_STEP, "deciding_judge": "mini-pixel", "reps": reps},
            "timings": {k: summary(v) for k, v in times.items()},
            "seconds_per": rounded,
            "in_plain_iterations": {"scan_iteration": {k: round(v / per["iteration"], 3)
                                                       for k, v in per["scan_iteration"].items()},
                                    "continued_iteration": round(per["continued_iteration"] / per["iteration"], 3),
                                    "read": round(per["read"] / per["iteration"], 3),
                                    "decode": round(per["decode"] / per["iteration"], 3),
                                    "judge_call_by": {k: round(v / per["iteration"], 3)
                                                      for k, v in per["judge_call_by"].items()}},
            "load_during_run": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2),
                                "note": "1-minute load average of a 2-core machine shared with other jobs"},
            "note": "per image; one loop iteration = one denoiser call on the CFG-doubled batch, per image",
            "numpy": np.__version__}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    write("selection_costs", main(ap.parse_args().reps))
