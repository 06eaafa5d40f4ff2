"""VLM judge throughput: records/s of `run_score_stage` with a tiny VlmJudge (tiny-qwen3-vl by
default) and its overhead against a bare batched forward on the same queries, timed alternately
in one process, model loaded once outside both timings.

The bare baseline replays the (image, query) pairs the judge sent to ``yes_no`` in a warm-up run,
in the same batches: the processor's ``apply_chat_template`` text + ``processor(...)`` (left
padding, same image budget) + ``model(**enc, use_cache=False, logits_to_keep=1)`` + softmax over
the answer ids — no record building, no image-encoding reuse. It checks it gets the same numbers.
Also timed: the judge with ``share_image_encoding: false``.

    python benchmarks/bench_vlm.py [--images 32] [--batch-size 16] [--reps 5] [--scorer tiny-qwen3-vl]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from _common import alternate, summary, write

REPO = Path(__file__).resolve().parents[1]


def bare_vlm(s, calls):
    """Minimal library calls giving VlmJudge.yes_no's numbers for the captured pairs."""
    import torch

    bs = int(s.options.get("batch_size", 16))
    jobs = [a[0][i:i + bs] for a, _, _ in calls["yes_no"] for i in range(0, len(a[0]), bs)]
    proc, model = s.processor, s.model

    def run():
        outs = []
        with torch.inference_mode():
            for pairs in jobs:
                texts = [proc.apply_chat_template([{"role": "user", "content": [
                    {"type": "image"}, {"type": "text", "text": q}]}], add_generation_prompt=True)
                    if not s.templates.get("raw") else s.templates["raw"].format(query=q) for _, q in pairs]
                enc = proc(text=texts, images=[im for im, _ in pairs], padding=True, return_tensors="pt",
                           **s._image_kwargs)
                p = model(**enc, use_cache=False, logits_to_keep=1).logits[:, -1].float().softmax(-1)
                outs.extend(zip(p[:, s.yes_ids].sum(-1).tolist(), p[:, s.no_ids].sum(-1).tolist()))
        return outs

    def check(outs):
        want = [(py, pn) for _, _, res in calls["yes_no"] for py, pn, _ in res]
        worst = max(abs(a - b) for x, y in zip(outs, want) for a, b in zip(x, y))
        assert len(outs) == len(want) and worst < 1e-5, worst

    return run, check


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16, help="images per stage batch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scorer", default="tiny-qwen3-vl")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(REPO))
    from tests.scorers.scenes import draw, make_run, prompt

    from t2i_audit.scorers.registry import create_scorer
    from t2i_audit.scorers.stage import run_score_stage

    colours, shapes = ["red", "blue", "green", "yellow"], ["square", "circle", "triangle"]
    scenes = []
    for i in range(args.images):
        c1, c2 = colours[i % 4], colours[(i + 1) % 4]
        o1, o2 = shapes[i % 3], shapes[(i + 1) % 3]
        p = prompt(c1, o1, c2, o2, rel="left of" if i % 2 else "above")
        scenes.append((p, draw([(o1, c1, (4, 20, 24, 40)), (o2, c2, (40, 20, 60, 40))])))
    tmp = Path(tempfile.mkdtemp())
    make_run(tmp / "src", scenes)
    counter = iter(range(10**6))

    def fresh() -> Path:
        d = tmp / f"r{next(counter)}"
        shutil.copytree(tmp / "src", d, ignore=shutil.ignore_patterns("scores"))
        return d

    s = create_scorer(args.scorer).load()
    dirs = [fresh() for _ in range(6 * args.reps + 4)]
    last: dict = {}

    def harness():
        last["counts"] = run_score_stage(dirs.pop(), [], instances=[s], batch_size=args.batch_size, progress=False)

    calls: dict = {"yes_no": []}
    orig = s.yes_no

    def spy(pairs, *a, **kw):
        out = orig(pairs, *a, **kw)
        calls["yes_no"].append(((pairs,), kw, out))
        return out

    s.yes_no = spy
    harness()  # warm-up + capture
    del s.yes_no
    run, check = bare_vlm(s, calls)
    check(run())
    t_h, t_b = alternate(harness, run, args.reps)
    s.card.setdefault("options", {})["share_image_encoding"] = False
    t_hn, t_bn = alternate(harness, run, args.reps)
    s.card["options"]["share_image_encoding"] = True
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    n_rec = last["counts"][args.scorer]["records"]
    queries = sum(len(a[0]) for a, _, _ in calls["yes_no"])
    res = {
        "scorer": args.scorer, "model": s.model_id, "images": args.images, "queries_per_run": queries,
        "records_per_run": n_rec, "max_pixels": s.max_pixels, "judge_batch_size": s.options.get("batch_size"),
        "harness": summary(t_h), "bare_forward": summary(t_b),
        "records_per_s": round(n_rec / med(t_h), 1), "queries_per_s_bare": round(queries / med(t_b), 1),
        "ratio_harness_over_bare": round(med(t_h) / med(t_b), 3),
        "no_shared_image_encoding": {"harness": summary(t_hn), "bare_forward": summary(t_bn),
                                     "ratio_harness_over_bare": round(med(t_hn) / med(t_bn), 3)},
        "threads": args.threads,
    }
    write("vlm", res)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
