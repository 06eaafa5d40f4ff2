"""A probed mini-world run that `select --from` and `predict --early --from` read, built once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def probed_mini(tmp_path_factory, repo_root) -> Path:
    """8 prompts × 2 seeds of the mini generator at 2 steps, early features at loop steps 0 and 1 from the real
    replay, and one per-image probe per step fitted on alternating labels, used for every category (a fitted
    probe proves the plumbing of select, not a prediction). A few seconds on one core."""
    return make_probed(tmp_path_factory.mktemp("probed") / "run", repo_root)


def make_probed(out: Path, repo_root, **settings) -> Path:
    """The run of ``probed_mini`` at ``out``, with other run ``settings`` (e.g. ``loras``, a smaller ``limit``)."""
    from t2i_audit import api
    from t2i_audit.probes.capture.early import extract_early_features, load_early
    from t2i_audit.probes.early_stage import _clean
    from t2i_audit.probes.fit.linear import onehot_constituents
    from t2i_audit.probes.fit.per_image import design, export_probe
    from t2i_audit.rundir import RunDir, atomic_write_json
    from t2i_audit.variants.of_run import for_run

    cfg = api.make_config({**dict(model="mini", prompts=[str(repo_root / "prompts/mini.yaml")], limit=8,
                                  images_per_prompt=2, steps=2, stages=["prompts", "generate"], out=str(out),
                                  device="cpu"), **settings})
    rd = RunDir(api.run_audit(cfg, progress=False))
    meta = extract_early_features(rd, "mini", fractions=(0.5, 1.0), previews=False, progress=False,
                                  variant=for_run(rd, "mini"))
    arrays, rows, _ = load_early(rd)
    by_id = {p["id"]: p for p in rd.read_prompts()}
    onehot, names = onehot_constituents([by_id[pid] for pid, _ in rows])
    y = np.array([k % 2 for _, k in rows])  # each prompt: one "failed" seed, one not
    groups = np.array([pid for pid, _ in rows])
    probes = {f"t{step:03d}": export_probe(design(arrays, step, "probe", slice(None), onehot), y, groups)
              for step in meta["steps"]}
    cats = sorted({str(p["category"]) for p in api.expand_suites(cfg.prompts)})  # any subset of the suite
    atomic_write_json(rd.probes_dir / "early_probes.json", _clean(
        {"onehot": names, "steps": meta["steps"], "settings": meta["settings"], "model": "mini", "key": meta["key"],
         "categories": {c: probes for c in cats}}))
    return rd.root


@pytest.fixture(scope="session")
def clean_tiny(tmp_path_factory, repo_root) -> Path:
    """An uninterrupted tiny-sd run of 4 colour prompts × 2 images at 2 steps in batches of 2 (the CLI call of
    test_drill_three._tiny): what a run interrupted and resumed with the same command must end byte-identical to."""
    from t2i_audit import api

    out = tmp_path_factory.mktemp("clean") / "run"
    cfg = api.make_config(dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2,
                               images_per_prompt=2, batch_size=2, stages=["prompts", "generate"], out=str(out),
                               device="cpu"))
    return api.run_audit(cfg, progress=False)
