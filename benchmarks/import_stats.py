"""Import statistics on the benchmarks' real prompt files (docs/benchmarks.md, "Importers").

The files are not shipped (licence); fetch them and point this script at them:

    python benchmarks/import_stats.py --t2i T2I-CompBench/examples/dataset \
        --geneval geneval/prompts/evaluation_metadata.jsonl [--dpg ELLA/dpg_bench/dpg_bench.csv] \
        [--dpg-prompts ELLA/dpg_bench/prompts] [--sample 50 --seed 0 --markdown]

``--dpg-prompts`` runs the grammar on DPG-Bench's free-text prompts (one .txt per prompt), for when
the CSV with their DSG questions is not at hand. ``--questions-by CARD`` (cards/questioners.yaml) then
has that LLM write DSG questions for the prompts the grammar declined (``--questions-limit N``: the
first N), and reports how many got questions, why the rest fell back, questions a prompt and seconds.

Prints, per file: records, parsed, the share parsed, why the rest was declined, and with
``--sample`` a fixed-seed random sample of records with their parse, for reading.
"""

from __future__ import annotations

import argparse
import json
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


def question_stats(folder: Path, card: str, limit: int = 0) -> dict:
    """An LLM's DSG questions for DPG-Bench's free-text prompts, as `prompts import --questions-by` writes them."""
    import time

    from t2i_audit.importers.llm_questions import LlmQuestioner, generate_questions, questioner_card
    from t2i_audit.importers.records import make_record

    files = sorted(folder.glob("*.txt"))[:limit or None]
    recs = [make_record("dpg-prompts", "dpg", " ".join(f.read_text(encoding="utf-8").split()), [], [],
                        where=(f.name, 1), reason="free text") for f in files]
    q = LlmQuestioner(questioner_card(card)).load()
    t0 = time.perf_counter()
    out = generate_questions(recs, q, progress=True)
    got = [r for r in recs if r["questions_by"]["status"] == "generated"]
    kinds = Counter(x["kind"] for r in got for x in r["questions"])
    return {**out, "seconds_a_prompt": (time.perf_counter() - t0) / max(len(recs), 1),
            "questions_a_prompt": sum(len(r["questions"]) for r in got) / max(len(got), 1), "kinds": dict(kinds),
            "with_dependencies": sum(1 for r in got for x in r["questions"] if x["depends_on"]),
            "generator": q.identity}


NOTE_KINDS = ("not of the form", "no question", "question without ?", "same question as", "no dependency line",
              "not another question or closing a cycle")


def dsg_replay(path: Path) -> dict:
    """DSG-1k's published questions (j-min/DSG dsg/data/dsg-1k-anns.csv, PaLM 2 output) written back
    as the three `id | …` answers an LLM gives, then parsed and built exactly as for an LLM: what the
    parser keeps, and how the tuples type (exists / attribute / count / relation / other)."""
    from t2i_audit.importers import dsg
    from t2i_audit.importers.dpg import dsg_record
    from t2i_audit.safeload import csv_dict_rows

    _, rows = csv_dict_rows(path.read_text(encoding="utf-8"), str(path))
    items: dict = {}
    for _, r in rows:
        items.setdefault(r["item_id"], []).append(r)
    kinds, notes, failed, props, kept, deps_in, deps_out = Counter(), Counter(), Counter(), 0, 0, 0, 0
    for item, rs in items.items():
        lines = {k: "\n".join(f"{r['proposition_id']} | {r[c]}" for r in rs)
                 for k, c in (("t", "tuple"), ("q", "question_natural_language"), ("d", "dependency"))}
        props += len(rs)
        deps_in += sum(len(dsg.parse_dependencies(r["dependency"])) for r in rs)
        n: list = []
        try:
            out = dsg.assemble(dsg.parse_tuples(lines["t"], n), lines["q"], lines["d"], n)
        except dsg.DsgError as e:
            failed[str(e)] += 1
            continue
        kept += len(out)
        deps_out += sum(len(r["deps"]) for r in out)
        notes.update(next((k for k in NOTE_KINDS if k in x), x) for x in n)
        rec = dsg_record("dsg-1k", "dsg", rs[0]["text"], out, template="dsg", where=(path.name, 0))
        kinds.update(q["kind"] for q in rec["questions"])
    return {"items": len(items), "propositions": props, "kept": kept, "dependencies": deps_in,
            "dependencies_kept": deps_out, "failed": dict(failed), "kinds": dict(kinds), "notes": dict(notes.most_common(12))}


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
    ap.add_argument("--dsg-anns", type=Path, help="j-min/DSG dsg/data/dsg-1k-anns.csv: replay its questions through the parser")
    ap.add_argument("--questions-by", help="question generator card for the --dpg-prompts (cards/questioners.yaml)")
    ap.add_argument("--questions-limit", type=int, default=0, help="only the first N prompts (0: all)")
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
    if a.dsg_anns:
        print(json.dumps(dsg_replay(a.dsg_anns), indent=1))
    if a.dpg_prompts and a.questions_by:
        print(json.dumps(question_stats(a.dpg_prompts, a.questions_by, a.questions_limit), indent=1))
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
