"""The prompts the README's fresh-seed `select --budget` runs score: half of the prompt groups of each category.

    python benchmarks/selection_half.py RUN --out half.jsonl [--categories spatial,color_binding]

Per category, the prompt groups (``scenes.prompt_groups``: prompts showing one scene, and swap twins — "A left of
B", "B left of A", "B right of A" together) are ordered by the SHA-256 of their label and the first half kept, so
the split depends on the prompts alone (not on the run's seeds, results or machine). `select --budget` then
chooses its policy on the other half only. (Until 2026-12-06 the unit was the twin group alone, which let 8 of
the 80 scored spatial prompts and 4 of the 48 colour-binding ones keep a same-scene paraphrase on the other
side.)
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from t2i_audit.scenes import prompt_groups
from t2i_audit.rundir import atomic_write_jsonl, read_jsonl


def half_of_the_groups(records: list[dict], categories: list[str]) -> list[dict]:
    kept = []
    for cat in categories:
        mine = [r for r in records if r.get("category") == cat]
        group = prompt_groups(mine)
        groups = sorted(set(group), key=lambda g: hashlib.sha256(g.encode()).hexdigest())
        chosen = set(groups[: len(groups) // 2])
        kept += [r for r, g in zip(mine, group) if g in chosen]
    return kept


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--categories", default="spatial,color_binding")
    a = ap.parse_args()
    recs = half_of_the_groups(read_jsonl(a.run / "prompts.jsonl"), a.categories.split(","))
    atomic_write_jsonl(a.out, recs)
    print(f"{a.out}: {len(recs)} prompts")
