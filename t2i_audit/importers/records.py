"""Building PromptRecords from parsed structure (shared by every importer)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional

from ..errors import AuditError
from ..prompts import _attribute_question, article, plural
from ..suite import Value

SLOT_PREFIX = {"color": "c", "shape": "s", "texture": "t", "material": "m", "size": "z"}
NUMBER_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "a": 1, "an": 1}
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above",
           "next to": "next to"}


def value_of(name: str, plural_form: Optional[str] = None) -> Value:
    return Value(name=name, plural=plural_form)


def find_phrase(text: str, phrase: str, start: int) -> Optional[list[int]]:
    """[start, end) of ``phrase`` as whole words in ``text`` at or after ``start`` (else anywhere)."""
    pat = re.compile(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", re.IGNORECASE)
    m = pat.search(text, start) or pat.search(text)
    return [m.start(), m.end()] if m else None


def stable_id(source: str, template: str, text: str, occurrence: int = 0) -> str:
    key = "\x1f".join([source, template, text, str(occurrence)])
    return "p" + hashlib.sha1(key.encode()).hexdigest()[:12]


def make_record(source: str, category: str, text: str, objects: list[dict], relations: list[dict],
                *, template: Optional[str] = None, where: tuple[str, int] = ("", 0),
                questions: Optional[list[dict]] = None, extra: Optional[dict] = None) -> dict:
    """A PromptRecord from parsed structure.

    ``objects``: ``[{"name", "plural"?, "count", "number_word"?, "attributes": {family: value}}]``
    in prompt order; ``relations``: ``[{"subject": i, "object": j, "name", "text", "inverse"?}]``
    (object indices). Questions are derived as in :func:`t2i_audit.prompts.build_structure`
    unless ``questions`` is given (DPG brings its own). With no objects and no questions, the
    record gets one whole-prompt question and ``parsed: false``.
    """
    slots, families, spans, objs, bindings = {}, {}, {}, [], []
    cursor = 0

    def slot(sid: str, family: str, value: str, phrase: str) -> None:
        nonlocal cursor
        slots[sid], families[sid] = value, family
        sp = find_phrase(text, phrase, cursor)
        if sp is not None and not any(a < sp[1] and sp[0] < b for a, b in spans.values()):
            spans[sid] = sp
            cursor = sp[1]

    for i, o in enumerate(objects, 1):
        oid, v = f"o{i}", value_of(o["name"], o.get("plural"))
        count = int(o.get("count") or 1)
        count_slot = None
        if o.get("number_word"):
            count_slot = f"n{i}"
            slot(count_slot, "count", o["number_word"], o["number_word"])
        attr_slots = {}
        for fam, val in (o.get("attributes") or {}).items():
            sid = f"{SLOT_PREFIX.get(fam, fam[:1])}{i}"
            attr_slots[fam] = sid
            slot(sid, fam, val, val)
            bindings.append([fam, val, v.name])
        word = o.get("surface") or (plural(v) if count != 1 else v.name)
        slot(oid, "object", v.name, word)
        objs.append({"id": oid, "name": v.name, "plural": plural(v), "count": count, "count_slot": count_slot,
                     "attributes": dict(o.get("attributes") or {}), "attribute_slots": attr_slots})
    rels = []
    for k, r in enumerate(relations, 1):
        sid = "r" if len(relations) == 1 else f"r{k}"
        slot(sid, "spatial", r["name"], r.get("text") or r["name"])
        rels.append({"slot": sid, "family": "spatial", "name": r["name"], "text": r.get("text") or r["name"],
                     "inverse": r.get("inverse", INVERSE.get(r["name"])),
                     "subject": objs[r["subject"]]["id"], "object": objs[r["object"]]["id"]})
    if questions is None:
        questions = _derive_questions(objs, rels, objects)
    parsed = bool(questions)
    if not questions:
        questions = [{"id": "q0", "kind": "prompt", "text": f'Does the image show "{text}"?', "depends_on": []}]
    template = template or category
    rec = {
        "id": stable_id(source, template, text), "suite": source, "suite_version": "import",
        "template": template, "category": category, "text": text, "slots": slots, "families": families,
        "spans": spans, "objects": objs, "relations": rels, "questions": questions,
        "composition": "|".join(f"{k}={v}" for k, v in sorted(slots.items())) or f"text={text}",
        "bindings": bindings, "split": "train", "twin": None, "twin_id": None, "twin_swap": None,
        "source": source, "source_file": where[0], "source_line": where[1], "parsed": parsed,
    }
    rec.update(extra or {})
    return rec


def _derive_questions(objs: list[dict], rels: list[dict], raw: list[dict]) -> list[dict]:
    questions: list[dict] = []
    exists: dict[str, str] = {}

    def q(**kw) -> str:
        qid = f"q{len(questions)}"
        questions.append({"id": qid, **kw})
        return qid

    for o, r in zip(objs, raw):
        v = value_of(o["name"], r.get("plural"))
        exists[o["id"]] = q(kind="exists", text=f"Is there {article(v, v.name)} {v.name}?", object=o["id"],
                            depends_on=[])
        for fam, val in o["attributes"].items():
            q(kind="attribute", text=_attribute_question(fam, v.name, val), object=o["id"], family=fam,
              value=val, slot=o["attribute_slots"][fam], depends_on=[exists[o["id"]]])
        if r.get("ask_count"):
            n = o["count"]
            if r.get("exact", True):
                text = f"Is there exactly one {v.name}?" if n == 1 else f"Are there exactly {n} {plural(v)}?"
                q(kind="count", text=text, object=o["id"], number=n, slot=o["count_slot"],
                  depends_on=[exists[o["id"]]])
            else:  # "at least n": scorers' count kind means exactly n, so VQA answers the text
                q(kind="other", text=f"Are there at least {n} {plural(v)}?", object=o["id"], number=n,
                  slot=o["count_slot"], depends_on=[exists[o["id"]]])
    by_id = {o["id"]: o for o in objs}
    for rel in rels:
        s, t = by_id[rel["subject"]], by_id[rel["object"]]
        q(kind="relation", text=f"Is the {s['name']} {rel['text']} the {t['name']}?", subject=s["id"],
          object=t["id"], family="spatial", value=rel["name"], slot=rel["slot"],
          depends_on=[exists[s["id"]], exists[t["id"]]])
    return questions


def number_ids(records: list[dict]) -> list[dict]:
    """A prompt repeated in one file keeps its own stable id (occurrence 1, 2 … in file order)."""
    seen: dict[str, int] = {}
    for r in records:
        n = seen.get(r["id"], 0)
        seen[r["id"]] = n + 1
        if n:
            r["id"] = stable_id(r["source"], r["template"], r["text"], n)
    return records


def read_text(path: Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"{path}: file not found")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise AuditError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def nonempty(records: list[dict], path: Path) -> list[dict]:
    if not records:
        raise AuditError(f"{path}: no prompts in the file")
    return records
