"""GenEval (djghosh13/geneval) ``prompts/evaluation_metadata.jsonl``: one JSON object a line,
``{"tag", "include": [{"class", "count", "color"?, "position"?: [relation, index]}], "exclude"?,
"prompt"}`` (written by their ``prompts/create_prompts.py``). ``position`` on include[i] =
[rel, j] means include[i] is ``rel`` include[j] (their ``evaluation/evaluate_images.py``,
``evaluate`` + ``relative_position``). Counting prompts pair include ``count: n`` with exclude
``count: n + 1``: exactly n.
"""

from __future__ import annotations

import reprlib
from pathlib import Path

from ..errors import AuditError
from ..safeload import loads_json, split_lines
from .records import INVERSE, NUMBER_WORDS, find_phrase, make_record, nonempty, number_ids, read_text, value_of

def import_geneval(path: Path, **_) -> list[dict]:
    records = []
    for line_no, line in split_lines(read_text(path)):  # "\n" only: U+2028 may sit inside a JSON string
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        meta = loads_json(line, where, what="not a JSON object")
        if not isinstance(meta, dict):
            raise AuditError(f"{where}: expected a JSON object, got {type(meta).__name__}")
        missing = [k for k in ("tag", "include", "prompt") if k not in meta]
        if missing:
            raise AuditError(f"{where}: missing key(s) {', '.join(missing)} (GenEval metadata needs tag, include, prompt)")
        include = meta["include"]
        if not isinstance(include, list) or not include or not all(isinstance(x, dict) and "class" in x for x in include):
            raise AuditError(f"{where}: 'include' must be a non-empty list of {{class, count, …}} objects")
        text, tag = _name(meta["prompt"], "prompt", where), _name(meta["tag"], "tag", where)
        exclude = meta.get("exclude") or []
        excl = {(e.get("class"), e.get("count")) for e in exclude if isinstance(e, dict)} if isinstance(exclude, list) else set()
        objects, relations = [], []
        for req in include:
            name = _name(req["class"], "class", where)
            count = _count(req.get("count", 1), name, where)
            o = {"name": name, "count": count, "attributes": {}}
            if "color" in req:
                o["attributes"]["color"] = _name(req["color"], f"color of {name!r}", where)
            if tag == "counting" or count > 1:
                o["number_word"] = next((w for w, n in NUMBER_WORDS.items() if n == count and len(w) > 2), str(count))
                o["ask_count"] = True
                o["exact"] = (req["class"], count + 1) in excl
            objects.append(o)
        for i, req in enumerate(include):
            if "position" in req:
                pos = req["position"]
                if not (isinstance(pos, (list, tuple)) and len(pos) == 2 and isinstance(pos[1], int)
                        and 0 <= pos[1] < len(include) and pos[1] != i):
                    raise AuditError(f"{where}: position {pos!r} must be [relation, index of another include entry]")
                name = _name(pos[0], "position relation", where)
                relations.append({"subject": i, "object": pos[1], "name": name, "text": name,
                                  "inverse": INVERSE.get(name)})
        order = _text_order(text, objects)
        objects = [objects[i] for i in order]
        remap = {old: new for new, old in enumerate(order)}
        relations = [dict(r, subject=remap[r["subject"]], object=remap[r["object"]]) for r in relations]
        records.append(make_record("geneval", tag, text, objects, relations, where=(path.name, line_no),
                                   extra={"source_meta": meta}))
    return number_ids(nonempty(records, path))


def _name(value, what: str, where: str) -> str:
    """A name or text from the file: a non-empty string, never a list or mapping made into one."""
    if not isinstance(value, str) or not value.strip():
        raise AuditError(f"{where}: {what} {reprlib.repr(value)} must be a non-empty string")
    return value


def _count(value, name: str, where: str) -> int:
    """An include count: a whole number ≥ 1 (an int, or digits in a string); never a bool,
    a fraction or a negative number ("Are there at least -3 cats?")."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 9:
        value, ok = int(value), True
    if not ok or value < 1:
        raise AuditError(f"{where}: count {reprlib.repr(value)} of {name!r} must be a whole number of at least 1")
    return value


def _text_order(text: str, objects: list[dict]) -> list[int]:
    """Object indices in the order their names appear in the prompt (slot o1 = first named); each
    object gets the word the prompt uses as ``surface`` (questions use inflect's plural)."""
    pos = []
    for i, o in enumerate(objects):
        v = value_of(o["name"])
        # GenEval's create_prompts.py make_plural: "es" after s, else "s" ("benchs", "sheeps")
        forms = [v.plural, o["name"] + ("es" if o["name"].endswith("s") else "s")] if o["count"] != 1 else []
        sp = next((x for x in (find_phrase(text, f, 0) for f in forms + [v.name]) if x), None)
        if sp:
            o["surface"] = text[sp[0]:sp[1]]
        pos.append((sp[0] if sp else len(text), i))
    return [i for _, i in sorted(pos)]
