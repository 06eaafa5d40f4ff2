"""Building PromptRecords from parsed structure (shared by every importer)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional

from ..errors import AuditError
from ..prompts import _attribute_question
from ..safeload import read_text  # noqa: F401  (re-exported: every importer reads through it)
from ..suite import Value
from . import lexicon
from .vocab import NUMBERS

SLOT_PREFIX = {"color": "c", "shape": "s", "texture": "t", "material": "m", "size": "z"}
NUMBER_WORDS = {"zero": 0, **NUMBERS, "a": 1, "an": 1}
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above",
           "next to": "next to"}


def value_of(name: str, plural_form: Optional[str] = None) -> Value:
    return Value(name=name, plural=plural_form or lexicon.plural(name))


def find_phrase(text: str, phrase: str, start: int) -> Optional[list[int]]:
    """[start, end) of ``phrase`` as whole words in ``text`` at or after ``start`` (else anywhere)."""
    pat = re.compile(r"(?<![\w-])" + re.escape(phrase) + r"(?![\w-])", re.IGNORECASE)
    m = pat.search(text, start) or pat.search(text)
    return [m.start(), m.end()] if m else None


def stable_id(source: str, template: str, text: str, occurrence: int = 0) -> str:
    key = "\x1f".join([source, template, text, str(occurrence)])
    return "p" + hashlib.sha1(key.encode()).hexdigest()[:12]


def whole_prompt_question(qid: str, text: str) -> dict:
    return {"id": qid, "kind": "prompt", "text": f'Does the image show "{text}"?', "depends_on": []}


def make_record(source: str, category: str, text: str, objects: list[dict], relations: list[dict],
                *, template: Optional[str] = None, where: tuple[str, int] = ("", 0),
                questions: Optional[list[dict]] = None, extra: Optional[dict] = None,
                whole_prompt: bool = False, reason: Optional[str] = None) -> dict:
    """A PromptRecord from parsed structure.

    ``objects``: ``[{"name", "plural"?, "count", "number_word"?, "ask_count"?, "exact"?, "attributes":
    {family: value}, "modifiers"?: [adjective], "plural_np"?, "spans"?: {"object" | "count" | family:
    [start, end]}}]`` in prompt order; ``relations``: ``[{"subject": i, "object": j, "name", "text",
    "family"? (default spatial), "inverse"?, "span"?}]`` (object indices). Questions are derived as in
    :func:`t2i_audit.prompts.build_structure` unless ``questions`` is given (DPG brings its own);
    ``whole_prompt`` adds one whole-prompt question for content the grammar typed but did not
    decompose. With no objects and no questions, the record gets only the whole-prompt question,
    ``parsed: false`` and ``parse_reason`` (``reason``).
    """
    slots, families, spans, objs, bindings = {}, {}, {}, [], []
    cursor = 0

    def slot(sid: str, family: str, value: str, phrase: str, given=None) -> None:
        nonlocal cursor
        slots[sid], families[sid] = value, family
        sp = list(given) if given else find_phrase(text, phrase, cursor)
        if sp is not None and not any(a < sp[1] and sp[0] < b for a, b in spans.values()):
            spans[sid] = sp
            cursor = sp[1]

    for i, o in enumerate(objects, 1):
        oid, v = f"o{i}", value_of(o["name"], o.get("plural"))
        given = o.get("spans") or {}
        count = int(o.get("count") or 1)
        count_slot = None
        if o.get("number_word"):
            count_slot = f"n{i}"
            slot(count_slot, "count", o["number_word"], o["number_word"], given.get("count"))
        attr_slots = {}
        for fam, val in (o.get("attributes") or {}).items():
            sid = f"{SLOT_PREFIX.get(fam, fam[:1])}{i}"
            attr_slots[fam] = sid
            slot(sid, fam, val, val, given.get(fam))
            bindings.append([fam, val, v.name])
        word = o.get("surface") or (v.plural if count != 1 or o.get("plural_np") else v.name)
        slot(oid, "object", v.name, word, given.get("object"))
        ob = {"id": oid, "name": v.name, "plural": v.plural, "count": count, "count_slot": count_slot,
              "attributes": dict(o.get("attributes") or {}), "attribute_slots": attr_slots}
        for k in ("modifiers", "plural_np"):
            if o.get(k):
                ob[k] = o[k]
        objs.append(ob)
    rels = []
    for k, r in enumerate(relations, 1):
        sid = "r" if len(relations) == 1 else f"r{k}"
        fam = r.get("family", "spatial")
        slot(sid, fam, r["name"], r.get("text") or r["name"], r.get("span"))
        rels.append({"slot": sid, "family": fam, "name": r["name"], "text": r.get("text") or r["name"],
                     "inverse": r.get("inverse", INVERSE.get(r["name"])),
                     "subject": objs[r["subject"]]["id"], "object": objs[r["object"]]["id"]})
    if questions is None:
        questions = _derive_questions(objs, rels, objects)
    parsed = bool(questions)
    if parsed and whole_prompt:
        questions.append(whole_prompt_question(f"q{len(questions)}", text))
    if not questions:
        questions = [whole_prompt_question("q0", text)]
    template = template or category
    rec = {
        "id": stable_id(source, template, text), "suite": source, "suite_version": "import",
        "template": template, "category": category, "text": text, "slots": slots, "families": families,
        "spans": spans, "objects": objs, "relations": rels, "questions": questions,
        "composition": "|".join(f"{k}={v}" for k, v in sorted(slots.items())) or f"text={text}",
        "bindings": bindings, "split": "train", "twin": None, "twin_id": None, "twin_swap": None,
        "source": source, "source_file": where[0], "source_line": where[1], "parsed": parsed,
    }
    if not parsed:
        rec["parse_reason"] = reason or "nothing parsed"
    rec.update(extra or {})
    return rec


def _the(o: dict) -> tuple[str, str]:
    """("the cat", "Is") or ("the cats", "Are"): the phrase a question names an object by."""
    many = o["count"] != 1 or o.get("plural_np")
    return (f"the {o['plural']}", "Are") if many else (f"the {o['name']}", "Is")


def _derive_questions(objs: list[dict], rels: list[dict], raw: list[dict]) -> list[dict]:
    questions: list[dict] = []
    exists: dict[str, str] = {}

    def q(**kw) -> str:
        qid = f"q{len(questions)}"
        questions.append({"id": qid, **kw})
        return qid

    for o, r in zip(objs, raw):
        name, plural = o["name"], o["plural"]
        text = f"Are there {plural}?" if o.get("plural_np") else f"Is there {lexicon.article(name)} {name}?"
        exists[o["id"]] = q(kind="exists", text=text, object=o["id"], depends_on=[])
        be = _the(o)[1]
        for fam, val in o["attributes"].items():
            text = (_attribute_question(fam, name, val) if be == "Is" else
                    f"Are the {plural} made of {val}?" if fam == "material" else f"Are the {plural} {val}?")
            q(kind="attribute", text=text, object=o["id"], family=fam, value=val, slot=o["attribute_slots"][fam],
              depends_on=[exists[o["id"]]])
        if r.get("ask_count"):
            n = o["count"]
            if r.get("exact", True):
                text = f"Is there exactly one {name}?" if n == 1 else f"Are there exactly {n} {plural}?"
                q(kind="count", text=text, object=o["id"], number=n, slot=o["count_slot"],
                  depends_on=[exists[o["id"]]])
            else:  # "at least n": scorers' count kind means exactly n, so VQA answers the text
                q(kind="other", text=f"Are there at least {n} {plural}?", object=o["id"], number=n,
                  slot=o["count_slot"], depends_on=[exists[o["id"]]])
    by_id = {o["id"]: o for o in objs}
    for rel in rels:
        s, t = by_id[rel["subject"]], by_id[rel["object"]]
        (subj, be), (obj, _) = _the(s), _the(t)
        q(kind="relation", text=f"{be} {subj} {rel['text']} {obj}?", subject=s["id"],
          object=t["id"], family=rel["family"], value=rel["name"], slot=rel["slot"],
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


def nonempty(records: list[dict], path: Path) -> list[dict]:
    if not records:
        raise AuditError(f"{path}: no prompts in the file")
    return records
