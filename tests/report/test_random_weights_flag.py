"""Every page made from a random-weight tiny model says so at its top — the run report, a compare page and the
labelling page — and `run`'s headline carries the same sentence (summary.json); a run of the trained mini model or a
real one carries none (issue 37 point 9)."""

from __future__ import annotations

import json

from synth import make_run

from t2i_audit.report import compare_runs, render_report
from t2i_audit.report.headline import headline_text
from t2i_audit.report.label import render_label_page
from t2i_audit.rundir import RunDir, atomic_write_json

BANNER = "Random weights.</b> tiny-sd: a tiny test model with random weights"


def _with_source(root, name: str, source: str):
    rd = RunDir(root)
    manifest = rd.read_manifest()
    manifest["model"] = {**manifest["model"], "name": name, "source": source}
    atomic_write_json(rd.manifest, manifest)
    return root


def test_pages_of_a_tiny_model_say_random_weights(tmp_path):
    tiny = _with_source(make_run(tmp_path / "tiny", samples=1), "tiny-sd", "tiny:tiny-sd")
    other = _with_source(make_run(tmp_path / "other", samples=1, skill=0.6), "tiny-sd", "tiny:tiny-sd")
    assert BANNER in render_report(tiny, progress=False).read_text()
    assert BANNER in compare_runs([tiny, other], tmp_path / "cmp", seed=1).read_text()
    assert BANNER in render_label_page(tiny, n=2, progress=False).read_text()
    report = json.loads((tiny / "summary.json").read_text())["report"]
    assert report["random_weights"].startswith("tiny-sd: a tiny test model with random weights")
    assert headline_text(report).endswith(f". {report['random_weights']}")


def test_pages_of_a_trained_or_real_model_carry_no_flag(tmp_path):
    for name, source in (("mini", "/site-packages/t2i_audit/mini/weights/generator"),
                         ("sd-xl", "hf:stabilityai/stable-diffusion-xl-base-1.0")):
        root = _with_source(make_run(tmp_path / name, samples=1), name, source)
        assert "Random weights." not in render_report(root, progress=False).read_text()
        assert "Random weights." not in render_label_page(root, n=2, progress=False).read_text()
        assert json.loads((root / "summary.json").read_text())["report"]["random_weights"] is None
