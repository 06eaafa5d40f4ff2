"""Report render time at scale: a synthetic run directory of ~10,000 images (tests/report/synth.py:
real files in the docs/records.md formats), first render (thumbnails made) and re-renders
(thumbnails reused), all through `t2i_audit.report.render_report`.

    python benchmarks/bench_report.py [--images 10000] [--size 64] [--rerenders 3]
"""

from __future__ import annotations

import argparse
import os
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import summary, timed, write

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "report"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=64, help="synthetic image side, px")
    ap.add_argument("--rerenders", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the synthetic run directory")
    args = ap.parse_args()
    load_start = os.getloadavg()

    from synth import make_prompts, make_run

    from t2i_audit.report import render_report

    prompts = make_prompts(n_binding=240, n_rel=90, n_count=18)  # as tests/report/test_scale.py
    samples = -(-args.images // len(prompts))
    tmp = Path(tempfile.mkdtemp())
    t = time.perf_counter()
    run = make_run(tmp / "big", prompts=prompts, samples=samples, size=args.size)
    build = time.perf_counter() - t
    n_images = len((run / "images.jsonl").read_text().splitlines())
    n_score_lines = sum(len(p.read_text().splitlines()) for p in (run / "scores").glob("*.jsonl"))

    first = timed(lambda: render_report(run, progress=False))
    rep1 = json.loads((run / "summary.json").read_text())["report"]
    again = [timed(lambda: render_report(run, progress=False)) for _ in range(args.rerenders)]
    rep2 = json.loads((run / "summary.json").read_text())["report"]
    out = run / "report"
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    if not args.keep:
        shutil.rmtree(tmp)
    else:
        print(f"kept {run}")
    write("report", {
        "load_average_1_5_15_start": [round(x, 2) for x in load_start],
        "load_average_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
        "images": n_images, "prompts": len(prompts), "samples_per_prompt": samples,
        "score_records": n_score_lines, "image_size_px": args.size,
        "table_rows": rep2.get("tables", {}).get("rows"),
        "build_synthetic_run_s": round(build, 2),
        "first_render_s": round(first, 3),
        "first_render_thumbnails": rep1.get("thumbnails"),
        "rerender": summary(again),
        "rerender_thumbnails": rep2.get("thumbnails"),
        "rerender_fraction_of_first": round(sorted(again)[len(again) // 2] / first, 3),
        "report_dir_mib": round(size / 2**20, 2),
        "note": "synthetic run (tests/report/synth.py), 2 scorers; shared 2-core CPU heavily loaded by a "
                "training job during the measurement, so absolute seconds are pessimistic",
    })


if __name__ == "__main__":
    main()
