"""GenEval (djghosh13/geneval) ``prompts/evaluation_metadata.jsonl``: one JSON object a line,
``{"tag", "include": [{"class", "count", "color"?, "position"?: [relation, index]}], "exclude"?,
"prompt"}`` (written by their ``prompts/create_prompts.py``). ``position`` on include[i] =
[rel, j] means include[i] is ``rel`` include[j] (their ``evaluation/evaluate_images.py``,
``evaluate`` + ``relative_position``). Counting prompts pair include ``count: n`` with exclude
``count: n + 1``: exactly n.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import AuditError
from ..prompts import plural
from .records import INVERSE, NUMBER_WORDS, find_phrase, make_record, nonempty, number_ids, read_text, value_of

def import_geneval(path: Path, **_) -> list[dict]:
    records = []
    for line_no, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            meta = json.loads(line)
        except json.JSONDecodeError as e:
            raise AuditError(f"{where}: not a JSON object ({e.msg})") from None
        if not isinstance(meta, dict):
            raise AuditError(f"{where}: expected a JSON object, got {type(meta).__name__}")
        missing = [k for k in ("tag", "include", "prompt") if k not in meta]
        if missing:
            raise AuditError(f"{where}: missing key(s) {', '.join(missing)} (GenEval metadata needs tag, include, prompt)")
        include = meta["include"]
        if not isinstance(include, list) or not include or not all(isinstance(x, dict) and "class" in x for x in include):
            raise AuditError(f"{where}: 'include' must be a non-empty list of {{class, count, …}} objects")
        text = str(meta["prompt"])
        excl = {(e.get("class"), e.get("count")) for e in meta.get("exclude") or [] if isinstance(e, dict)}
        objects, relations = [], []
        for req in include:
            try:
                count = int(req.get("count", 1))
            except (TypeError, ValueError):
                raise AuditError(f"{where}: count {req.get('count')!r} of {req['class']!r} is not an integer") from None
            o = {"name": str(req["class"]), "count": count, "attributes": {}}
            if "color" in req:
                o["attributes"]["color"] = str(req["color"])
            if meta["tag"] == "counting" or count > 1:
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
                name = str(pos[0])
                relations.append({"subject": i, "object": pos[1], "name": name, "text": name,
                                  "inverse": INVERSE.get(name)})
        order = _text_order(text, objects)
        objects = [objects[i] for i in order]
        remap = {old: new for new, old in enumerate(order)}
        relations = [dict(r, subject=remap[r["subject"]], object=remap[r["object"]]) for r in relations]
        records.append(make_record("geneval", str(meta["tag"]), text, objects, relations, where=(path.name, line_no),
                                   extra={"source_meta": meta}))
    return number_ids(nonempty(records, path))


def _text_order(text: str, objects: list[dict]) -> list[int]:
    """Object indices in the order their names appear in the prompt (slot o1 = first named)."""
    pos = []
    for i, o in enumerate(objects):
        v = value_of(o["name"])
        sp = find_phrase(text, plural(v) if o["count"] != 1 else v.name, 0) or find_phrase(text, v.name, 0)
        pos.append((sp[0] if sp else len(text), i))
    return [i for _, i in sorted(pos)]
