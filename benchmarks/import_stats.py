"""Import statistics on the benchmarks' real prompt files (docs/benchmarks.md, "Importers").

The files are not shipped (licence); fetch them and point this script at them:

    python benchmarks/import_stats.py --t2i T2I-CompBench/examples/dataset \
        --geneval geneval/prompts/evaluation_metadata.jsonl [--dpg ELLA/dpg_bench/dpg_bench.csv] \
        [--dpg-prompts ELLA/dpg_bench/prompts] [--sample 50 --seed 0 --markdown]

``--dpg-prompts`` runs the grammar on DPG-Bench's free-text prompts (one .txt per prompt), for when
the CSV with their DSG questions is not at hand.

Prints, per file: records, parsed, the share parsed, why the rest was declined, and with
``--sample`` a fixed-seed random sample of records with their parse, for reading.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

from t2i_audit.importers import import_prompts

T2I_FILES = ("color_val", "shape_val", "texture_val", "spatial_val", "non_spatial_val", "complex_val",
             "numeracy_val", "3d_spatial_val")


def describe(r: dict) -> str:
    """One line: objects with count/attributes/other adjectives, relations, whole-prompt question."""
    if not r["parsed"]:
        return f"declined: {r.get('parse_reason', '')}"
    by_id = {o["id"]: o for o in r["objects"]}
    parts = []
    for o in r["objects"]:
        bits = [f"{o['count']}×" if o.get("count_slot") else ("pl." if o.get("plural_np") else "")]
        bits += [f"{v}" for v in o["attributes"].values()] + [f"~{m}" for m in o.get("modifiers", ())]
        parts.append(" ".join(b for b in bits + [f"**{o['name']}**"] if b))
    rels = [f"{by_id[x['subject']]['name']} —{x['text']} ({x['family']})→ {by_id[x['object']]['name']}"
            for x in r["relations"]]
    whole = any(q["kind"] == "prompt" for q in r["questions"])
    return "; ".join(parts) + (" | " + "; ".join(rels) if rels else "") + (" | +whole prompt" if whole else "")


def stats(name: str, recs: list[dict]) -> dict:
    n, p = len(recs), sum(bool(r["parsed"]) for r in recs)
    reasons = Counter(_reason(r.get("parse_reason", "")) for r in recs if not r["parsed"])
    whole = sum(1 for r in recs if r["parsed"] and any(q["kind"] == "prompt" for q in r["questions"]))
    return {"file": name, "records": n, "parsed": p, "share": p / n if n else 0.0, "with_whole": whole,
            "declined": reasons.most_common()}


def free_text_stats(folder: Path) -> dict:
    """The grammar on one-prompt-per-file free text (DPG-Bench's prompts/*.txt)."""
    from t2i_audit.importers.grammar import Declined, Grammar
    from t2i_audit.importers.t2i_compbench import concept_vocabulary

    g, reasons, n, p, words = Grammar(concept_vocabulary()), Counter(), 0, 0, 0
    for f in sorted(folder.glob("*.txt")):
        text = " ".join(f.read_text(encoding="utf-8").split())
        n, words = n + 1, words + len(text.split())
        try:
            g.analyse(text)
            p += 1
        except Declined as e:
            reasons[_reason(str(e))] += 1
    return {"file": f"{folder.name}/*.txt ({words / max(n, 1):.0f} words a prompt)", "records": n, "parsed": p,
            "share": p / n if n else 0.0, "with_whole": 0, "declined": reasons.most_common()}


def _reason(s: str) -> str:
    for key in ("unknown word", "no rule for the word", "unsupported character"):
        if s.startswith(key):
            return key
    return s.split(":")[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t2i", type=Path, help="T2I-CompBench examples/dataset folder")
    ap.add_argument("--geneval", type=Path, help="GenEval prompts/evaluation_metadata.jsonl")
    ap.add_argument("--dpg", type=Path, help="DPG-Bench dpg_bench/dpg_bench.csv")
    ap.add_argument("--dpg-prompts", type=Path, help="DPG-Bench dpg_bench/prompts folder (free text)")
    ap.add_argument("--sample", type=int, default=0, help="records to list per file for reading")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    files = []
    if a.t2i:
        files += [(a.t2i / f"{f}.txt", "t2i-compbench") for f in T2I_FILES]
    if a.geneval:
        files.append((a.geneval, "geneval"))
    if a.dpg:
        files.append((a.dpg, "dpg"))
    table, samples = [], []
    for path, fmt in files:
        recs = import_prompts(path, fmt)
        table.append(stats(path.name, recs))
        if a.sample:
            pick = sorted(random.Random(a.seed).sample(range(len(recs)), min(a.sample, len(recs))))
            samples.append((path.name, [(recs[i]["source_line"], recs[i]["text"], describe(recs[i])) for i in pick]))
    if a.dpg_prompts:
        table.append(free_text_stats(a.dpg_prompts))
    if a.markdown:
        print("| file | records | parsed | share | parsed with a whole-prompt question | declined (why) |")
        print("|---|---|---|---|---|---|")
        for s in table:
            why = ", ".join(f"{k} {v}" for k, v in s["declined"]) or "—"
            print(f"| {s['file']} | {s['records']} | {s['parsed']} | {100 * s['share']:.1f} % | {s['with_whole']} | {why} |")
        for name, rows in samples:
            print(f"\n#### {name} (seed {a.seed})\n\n| line | prompt | parse |\n|---|---|---|")
            for line, text, d in rows:
                print(f"| {line} | {text.replace('|', '/')} | {d.replace('|', '/')} |")
    else:
        for s in table:
            print(f"{s['file']:<28} {s['records']:>5} {s['parsed']:>5} {100 * s['share']:6.1f} %  "
                  f"whole {s['with_whole']:>4}  {s['declined'][:4]}")
        for name, rows in samples:
            print(f"\n== {name}")
            for line, text, d in rows:
                print(f"{line:>4}  {text}\n      {d}")


if __name__ == "__main__":
    main()
