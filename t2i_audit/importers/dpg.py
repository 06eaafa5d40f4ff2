"""DPG-Bench ``dpg_bench.csv`` (TencentQQGYLab/ELLA, read by ``dpg_bench/compute_dpg_bench.py``:
columns item_id, text, keywords, proposition_id, dependency, category_broad, category_detailed,
tuple, question_natural_language). Each row is one DSG question of a prompt; rows are grouped by
item_id into one record; ``dependency`` "0" means none, otherwise comma-separated proposition
ids. (ELLA's reader skips the first data row, ``if i == 0: continue``; we do not.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from ..errors import AuditError
from ..safeload import csv_dict_rows
from ..suite import ATTRIBUTE_FAMILIES
from .records import make_record, nonempty, read_text, stable_id

DPG_COLUMNS = ("item_id", "text", "proposition_id", "dependency", "tuple", "question_natural_language")
MAX_TUPLE = 500
_TUPLE = re.compile(r"^\s*([a-z ]+?)\s*-\s*([a-z _]*?)\s*\((.*)\)\s*$", re.I)


def _parse_tuple(s: str) -> Optional[tuple[str, str, list[str]]]:
    if len(s or "") > MAX_TUPLE:  # the pattern backtracks quadratically on long runs of spaces
        return None
    m = _TUPLE.match(s or "")
    if not m:
        return None
    return m.group(1).strip().lower(), m.group(2).strip().lower(), [a.strip() for a in m.group(3).split(",")]


def import_dpg(path: Path, **_) -> list[dict]:
    # rows come from the text itself: quoted fields may hold newlines, nothing splits on U+2028;
    # a field past the csv module's limit is a located error
    cols, rows = csv_dict_rows(read_text(path), str(path))
    missing = [c for c in DPG_COLUMNS if c not in cols]
    if missing:
        raise AuditError(f"{path}:1: missing column(s) {', '.join(missing)}; DPG-Bench CSV needs "
                         f"{', '.join(DPG_COLUMNS)} (found {', '.join(cols) or 'none'})")
    items: dict[str, dict] = {}
    for line, row in rows:
        where = f"{path}:{line}"
        if None in row or any(row.get(c) is None for c in DPG_COLUMNS):
            raise AuditError(f"{where}: expected {len(cols)} columns, got a different number")
        item_id = row["item_id"].strip()
        if not item_id:
            raise AuditError(f"{where}: empty item_id")
        try:
            pid = int(row["proposition_id"])
            deps = [int(d) for d in str(row["dependency"]).split(",") if d.strip()]
        except ValueError:
            raise AuditError(f"{where}: proposition_id {row['proposition_id']!r} / dependency "
                             f"{row['dependency']!r} must be integers (dependency: comma-separated, 0 = none)") from None
        it = items.setdefault(item_id, {"text": row["text"], "line": line, "rows": []})
        if row["text"] != it["text"]:
            raise AuditError(f"{where}: item {item_id!r} has a different text than on line {it['line']}")
        if any(r["pid"] == pid for r in it["rows"]):
            raise AuditError(f"{where}: item {item_id!r} repeats proposition_id {pid}")
        it["rows"].append({"pid": pid, "deps": [d for d in deps if d != 0], "row": row, "line": line})
    records = []
    for item_id, it in items.items():
        records.append(_dpg_record(path, item_id, it))
    return nonempty(records, path)


def _dpg_record(path: Path, item_id: str, it: dict) -> dict:
    pids = {r["pid"] for r in it["rows"]}
    for r in it["rows"]:
        bad = [d for d in r["deps"] if d not in pids]
        if bad:
            raise AuditError(f"{path}:{r['line']}: item {item_id!r} proposition {r['pid']} depends on "
                             f"{', '.join(map(str, bad))}, not a proposition of this item")
    rows = [{"pid": r["pid"], "deps": r["deps"], "tuple": r["row"]["tuple"],
             "question": r["row"]["question_natural_language"], "category_broad": r["row"].get("category_broad"),
             "category_detailed": r["row"].get("category_detailed")} for r in it["rows"]]
    rec = dsg_record("dpg", "dpg", it["text"], rows, template="dpg", where=(path.name, it["line"]),
                     extra={"source_item": item_id})
    rec["id"] = stable_id("dpg", "dpg", item_id + "\x1f" + it["text"])
    return rec


def dsg_record(source: str, category: str, text: str, rows: list[dict], *, template: str,
               where: tuple[str, int], extra: dict | None = None) -> dict:
    """A PromptRecord from DSG propositions (DPG-Bench's CSV rows, or an LLM's DSG output:
    importers/llm_questions.py). ``rows``: ``[{"pid", "deps" (pids, no 0), "tuple", "question",
    "category_broad"?, "category_detailed"?}]``, dependencies already checked.

    Entities (``entity - whole (X)``) become objects; attribute/count/spatial-relation tuples
    about them become typed questions; every other tuple stays a question of kind ``other``
    that a VQA scorer answers from its text."""
    objects, index = [], {}
    for r in rows:
        t = _parse_tuple(r["tuple"])
        if t and t[0] == "entity" and t[1] == "whole" and t[2] and t[2][0] and t[2][0].lower() not in index:
            index[t[2][0].lower()] = len(objects)
            objects.append({"name": t[2][0], "count": 1, "attributes": {}})
    questions, relations = [], []
    for r in sorted(rows, key=lambda x: x["pid"]):
        t = _parse_tuple(r["tuple"])
        q = {"id": f"q{r['pid']}", "kind": "other", "text": r["question"],
             "depends_on": [f"q{d}" for d in r["deps"]], "tuple": r["tuple"],
             "category_broad": r.get("category_broad") or (t[0] if t else None),
             "category_detailed": r.get("category_detailed") or (t[1] if t else None)}
        args = [a.lower() for a in t[2]] if t else []
        if t and t[0] == "entity" and t[1] == "whole" and args and args[0] in index:
            q.update(kind="exists", object=f"o{index[args[0]] + 1}")
        elif t and t[0] == "attribute" and t[1] in ATTRIBUTE_FAMILIES and len(args) == 2 and args[0] in index:
            i = index[args[0]]
            if objects[i]["attributes"].setdefault(t[1], t[2][1]) == t[2][1]:  # one value per family and object
                q.update(kind="attribute", object=f"o{i + 1}", family=t[1], value=t[2][1])
        elif t and t[1] == "count" and len(args) == 2 and args[0] in index and re.fullmatch(r"=*\s*\d{1,6}", args[1]):
            i, n = index[args[0]], int(args[1].lstrip("= "))
            objects[i]["count"] = n
            q.update(kind="count", object=f"o{i + 1}", number=n)
        elif t and t[0] == "relation" and t[1] == "spatial" and len(args) == 3 and args[0] in index and args[1] in index:
            relations.append({"subject": index[args[0]], "object": index[args[1]], "name": t[2][2], "text": t[2][2]})
            q.update(kind="relation", subject=f"o{index[args[0]] + 1}", object=f"o{index[args[1]] + 1}",
                     family="spatial", value=t[2][2], relation=len(relations) - 1)
        questions.append(q)
    rec = make_record(source, category, text, objects, relations, template=template, where=where,
                      questions=questions, extra=extra)
    # point typed questions at their slots (make_record names them)
    by_id = {o["id"]: o for o in rec["objects"]}
    for q in rec["questions"]:
        if q["kind"] == "attribute":
            q["slot"] = by_id[q["object"]]["attribute_slots"][q["family"]]
        elif q["kind"] == "relation":
            q["slot"] = rec["relations"][q.pop("relation")]["slot"]
    return rec
