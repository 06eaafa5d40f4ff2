"""Render time at scale: a synthetic run of ~10,000 images (opt-in: T2I_AUDIT_SCALE=1).

Measures, does not assert speed (benchmarks are ratios, not timed tests); it asserts what
makes re-rendering cheap: the second render makes no thumbnail.
    T2I_AUDIT_SCALE=1 pytest -s tests/report/test_scale.py
"""

import json
import os
import time

import pytest

from synth import make_prompts, make_run

pytestmark = pytest.mark.skipif(not os.environ.get("T2I_AUDIT_SCALE"), reason="set T2I_AUDIT_SCALE=1 to build a 10,000-image run")


def test_render_10k_images(tmp_path):
    from t2i_audit.report import render_report

    prompts = make_prompts(n_binding=240, n_rel=90, n_count=18)
    samples = -(-10_000 // len(prompts))
    t = time.perf_counter()
    run = make_run(tmp_path / "big", prompts=prompts, samples=samples, size=64)
    build = time.perf_counter() - t
    n = len((run / "images.jsonl").read_text().splitlines())
    t = time.perf_counter()
    render_report(run, progress=False)
    first = time.perf_counter() - t
    made = json.loads((run / "summary.json").read_text())["report"]["thumbnails"]["made"]
    t = time.perf_counter()
    render_report(run, progress=False)
    second = time.perf_counter() - t
    rep = json.loads((run / "summary.json").read_text())["report"]
    print(f"\n{n} images, {len(prompts)} prompts, {rep['tables']['rows']} table rows: build {build:.1f}s, "
          f"first render {first:.2f}s ({made} thumbnails), re-render {second:.2f}s")
    assert n >= 10_000
    assert rep["thumbnails"]["made"] == 0 and rep["thumbnails"]["reused"] == made
