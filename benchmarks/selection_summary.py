"""A compact, committed summary of the mini world's selection study (the run folders are not committed).

Made from a fitted run that went through

    t2i-audit run --model mini --prompts prompts/mini.yaml -n 8
    t2i-audit probe RUN --early --at 0.05,0.1,0.2,0.3,0.5
    t2i-audit select --from RUN --study --binding

and, optionally, ``select --budget`` runs on fresh seeds:

    python benchmarks/selection_summary.py RUN [SELECT_RUN …] --out benchmarks/results/selection_mini.json

``--key NAME`` writes the summary under NAME inside the --out file, keeping its other keys (the replication of
issue 35: ``--key replication``).

Keeps: the pre-registered headline, the whole-image curve, each family's frontier at every cost, the
nested-CV budget rows, the controls, the binding AUROC table and each select run's per-category result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _r(v, d=4):
    return None if v is None else round(float(v), d)


def _summ(s: dict) -> dict:
    return {"mean": _r(s.get("mean")), "ci": [_r(x) for x in s.get("ci", [])]}


def _base_seed(run: Path):
    m = run / "manifest.json"
    if not m.exists():
        return None
    gen = (json.loads(m.read_text()).get("stages") or {}).get("generate") or {}
    return (gen.get("settings") or {}).get("seed")


def summarise(run: Path, selects: list[Path]) -> dict:
    sel = json.loads((run / "probes" / "selection.json").read_text())
    out = {"run": run.name, "loop_steps": sel["loop_steps"], "seeds_per_prompt": sel["seeds_per_prompt"],
           "base_seed": _base_seed(run), "preregistered": sel["preregistered"], "registration": sel.get("registration"),
           "unit_seconds": sel.get("unit_seconds"),
           "exploration": {k: (len(v) if isinstance(v, list) else v) for k, v in sel["exploration"].items()},
           "categories": {}}
    for cat, c in sel["categories"].items():
        if "policies" not in c:
            out["categories"][cat] = c
            continue
        out["categories"][cat] = {
            "n_prompts": c["n_prompts"], "n_groups": c["n_groups"], "failure_rate": _r(c["failure_rate"]),
            "whole_images": {w["n"]: _summ(w) for w in c["whole_images"]},
            "frontiers": {fam: [[f["cost"]["iterations"], _r(f["success"]), f["policy"]] for f in fr]
                          for fam, fr in c["frontiers"].items()},
            "headline": c.get("headline"),
            "registered": c.get("registered"),
            "whole_images_seconds": c.get("whole_images_seconds"),
            "frontiers_seconds": {fam: [[_r(f["seconds"]), _r(f["success"]), f["policy"]] for f in fr]
                                  for fam, fr in (c.get("frontiers_seconds") or {}).items()},
            "non_oracle_whole_images": {p["spec"]["n"]: {"success": _r(p["success"]), "ci": [_r(x) for x in p["ci"]],
                                                         "seconds": _r(p.get("seconds")), "judge": p["spec"]["judge"]}
                                        for p in c["policies"] if p["spec"].get("kind") == "whole-judged"},
            "budgets": {B: {"success": _summ(b["success"]), "whole_images_at_same_cost": _summ(b["whole_images_at_same_cost"]),
                            "gap_to_whole": _summ(b["gap_to_whole"]), "lift_over_random": _summ(b["lift_over_random"]),
                            "chosen": sorted({x["policy"] for x in b["chosen"]}),
                            "folds_fell_back": sum(bool(x.get("fell_back")) for x in b["chosen"])}
                        for B, b in c["budgets"].items()},
            "permutation_control": c.get("permutation_control"), "seen_vs_unseen": c.get("seen_vs_unseen"),
            "auroc_differences": c.get("differences")}
    b = run / "probes" / "binding.json"
    if b.exists():
        bind = json.loads(b.read_text())
        out["binding"] = {cat: {"prompt_only": _r(r["prompt-only"]["auroc"]), "first_readable": r["first_readable"],
                                "auroc_by_step": {f: {st["iterations"]: [_r(st["families"][f]["auroc"]["auroc"], 3),
                                                                         st["families"][f]["readable"]]
                                                      for st in r["steps"].values()}
                                                  for f in next(iter(r["steps"].values()))["families"]}}
                          for cat, r in bind["categories"].items() if "steps" in r}
        out["binding_correction"] = bind.get("correction")
    out["select_runs"] = {}
    for s in selects:
        got = json.loads((s / "selection.json").read_text())
        out["select_runs"][s.name] = {k: got.get(k) for k in ("budget", "base_seed", "holdout",
                                                               "seeds_seen_by_the_fitted_run", "prompts_seen_by_the_probe",
                                                               "fitted_images_left_out", "n_prompts", "spent")}
        out["select_runs"][s.name]["categories"] = {
            cat: {"policy": c["policy"], "fell_back": c["fell_back_to_whole_images"], "cost": c["cost_per_prompt"],
                  **{k: _summ(c[k]) for k in ("success", "random_seed", "whole_images_at_same_cost",
                                               "lift_over_random", "gap_to_whole")}, "n_prompts": c["success"]["n_prompts"]}
            for cat, c in got["categories"].items()}
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("selects", type=Path, nargs="*")
    # required: the default was the committed results/selection_mini.json, overwritten silently by any rerun
    ap.add_argument("--out", type=Path, required=True, help="where to write the summary (the committed figures are "
                    "benchmarks/results/selection_mini.json: name it to replace them)")
    ap.add_argument("--key", default=None, help="write under this key of the --out file, keeping its other keys")
    a = ap.parse_args()
    got = summarise(a.run, a.selects)
    if a.key:
        got = {**(json.loads(a.out.read_text()) if a.out.exists() else {}), a.key: got}
    a.out.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    print(a.out)
