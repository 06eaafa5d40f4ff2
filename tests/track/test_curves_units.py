"""The track's CIs and probe folds group prompts as every other grouping site does (scenes.prompt_groups): a
composition and its swap twin, and prompts showing one scene, are one unit; the mini track's single-object prompts
keep their compositions as units (its pre-registered unit)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from t2i_audit.prompts import expand_files
from t2i_audit.scenes import prompt_groups
from t2i_audit.suite import resolve_suite_path
from t2i_audit.track.curves import Point, success_rows, units


def _binding_prompts(n: int = 8) -> dict:
    records = [r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "color_binding"]
    by_id = {r["id"]: r for r in records}
    chosen: list[dict] = []
    for r in records:  # whole twin pairs
        if r["id"] not in {c["id"] for c in chosen} and r.get("twin") in by_id:
            chosen += [r, by_id[r["twin"]]]
        if len(chosen) >= n:
            break
    return {r["id"]: r for r in chosen}


def test_success_rows_count_prompt_groups_not_compositions():
    prompts = _binding_prompts()
    assert len({p["composition"] for p in prompts.values()}) == 8  # a twin is another composition
    df = pd.DataFrame([{"prompt_id": pid, "sample": 0, "category": "color_binding", "split": "train",
                        "verdict": i % 2 == 0} for i, pid in enumerate(prompts)])
    point = Point(entry=None, run=SimpleNamespace(images_df=df), prompts=prompts)
    row = next(r for r in success_rows(point) if r["category"] == "color_binding" and r["split"] == "all")
    assert row["n_groups"] == len(set(prompt_groups(prompts.values()))) == 4  # the 4 twin pairs


def test_units_never_split_a_group_and_keep_single_object_compositions():
    prompts = _binding_prompts()
    unit = units(prompts)
    groups = dict(zip(prompts, prompt_groups(prompts.values())))
    for a in prompts:
        for b in prompts:
            if groups[a] == groups[b]:
                assert unit[a] == unit[b]
    assert set(unit.values()) <= {p["composition"] for p in prompts.values()}  # named by a member's composition
    single = {r["id"]: r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "color"}
    u = units(single)  # "a red circle": one object, its own scene, no twin
    assert u == {i: r["composition"] for i, r in single.items()} and len(set(u.values())) == 24
