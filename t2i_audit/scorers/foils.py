"""Foil captions built from a prompt's structure (spans and slots), never by parsing its text.

* ``swap_<family>``: the values of one attribute family exchanged between two objects
  ("a blue cube and a red sphere"); if the foil wins, both slots are a ``swapped_binding``;
* ``reverse_<slot>``: subject and object of a relation exchanged, with their attributes
  ("a blue sphere to the left of a red cube"); a win is a ``reversed_relation``;
* ``replace_<object>``: one object replaced by a distractor not in the prompt (chosen by a
  stable hash, so the same prompt always gets the same foil); a win is a ``missing_object``.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence


def substitute(text: str, spans: Mapping[str, Sequence[int]], new: Mapping[str, str]) -> str:
    """Replace the text at each slot's span; spans must not overlap."""
    parts = sorted(((spans[s][0], spans[s][1], v) for s, v in new.items() if s in spans),
                   reverse=True)
    for start, end, value in parts:
        head = _fix_article(text[:start], value)
        text = head + value + text[end:]
    return text


def _fix_article(head: str, word: str) -> str:
    """Keep "a"/"an" right before a replaced word grammatical (foils must not be ungrammatical,
    or CLIP rejects them for the wrong reason)."""
    want = "an" if word[:1].lower() in "aeiou" else "a"
    for art in ("an ", "a "):
        if head.endswith(art) and (len(head) == len(art) or head[-len(art) - 1] == " "):
            cap = head[-len(art)].isupper()
            return head[: -len(art)] + (want.capitalize() if cap else want) + " "
        if head.lower().endswith(art) and len(head) == len(art):
            return (want.capitalize()) + " "
    return head


def _span_text(prompt: Mapping, slot: str) -> str | None:
    sp = (prompt.get("spans") or {}).get(slot)
    return prompt["text"][sp[0]:sp[1]] if sp else None


def _distractor(prompt: Mapping, obj: Mapping, distractors: Sequence[str]) -> tuple[str, str] | None:
    used = {o["name"] for o in prompt.get("objects", [])}
    pool = []
    for d in distractors:
        name, _, pl = str(d).partition("/")
        if name not in used:
            pool.append((name, pl or name + "s"))
    if not pool:
        return None
    h = int(hashlib.sha1(f"{prompt.get('id')}|{obj['id']}".encode()).hexdigest(), 16)
    return pool[h % len(pool)]


def build_foils(prompt: Mapping, distractors: Sequence[str] = ()) -> list[dict]:
    """``[{"name", "text", "failures": [...]}]``; ``failures`` are what a win by the foil means."""
    spans = prompt.get("spans") or {}
    objs = list(prompt.get("objects", []))
    out: list[dict] = []
    # attributes swapped between two objects, one foil per family and pair
    families = sorted({f for o in objs for f in (o.get("attribute_slots") or {})})
    for fam in families:
        having = [o for o in objs if fam in (o.get("attribute_slots") or {})]
        for i in range(len(having)):
            for j in range(i + 1, len(having)):
                a, b = having[i], having[j]
                sa, sb = a["attribute_slots"][fam], b["attribute_slots"][fam]
                ta, tb = _span_text(prompt, sa), _span_text(prompt, sb)
                if ta is None or tb is None or ta == tb:
                    continue
                name = f"swap_{fam}" if len(having) == 2 else f"swap_{fam}_{a['id']}_{b['id']}"
                out.append({"name": name, "text": substitute(prompt["text"], spans, {sa: tb, sb: ta}),
                            "failures": [
                                {"type": "swapped_binding", "slot": sa, "object": a["id"],
                                 "detail": f"foil {name} beat the prompt"},
                                {"type": "swapped_binding", "slot": sb, "object": b["id"],
                                 "detail": f"foil {name} beat the prompt"}]})
    # relation reversed: exchange the two noun phrases (names, shared attribute and count slots)
    by_id = {o["id"]: o for o in objs}
    for rel in prompt.get("relations", []) or []:
        s, o = by_id.get(rel.get("subject")), by_id.get(rel.get("object"))
        if s is None or o is None:
            continue
        pairs = [(s["id"], o["id"])]
        for fam, slot in (s.get("attribute_slots") or {}).items():
            if fam in (o.get("attribute_slots") or {}):
                pairs.append((slot, o["attribute_slots"][fam]))
        if s.get("count_slot") and o.get("count_slot"):
            pairs.append((s["count_slot"], o["count_slot"]))
        new = {}
        for x, y in pairs:
            tx, ty = _span_text(prompt, x), _span_text(prompt, y)
            if tx is not None and ty is not None:
                new[x], new[y] = ty, tx
        text = substitute(prompt["text"], spans, new)
        if text != prompt["text"]:
            out.append({"name": f"reverse_{rel['slot']}", "text": text, "failures": [
                {"type": "reversed_relation", "slot": rel["slot"], "object": s["id"],
                 "detail": f"foil reverse_{rel['slot']} beat the prompt"}]})
    # one object replaced by a distractor
    for obj in objs:
        d = _distractor(prompt, obj, distractors)
        if d is None or obj["id"] not in spans:
            continue
        word = d[1] if int(obj.get("count") or 1) != 1 else d[0]
        out.append({"name": f"replace_{obj['id']}",
                    "text": substitute(prompt["text"], spans, {obj["id"]: word}),
                    "failures": [{"type": "missing_object", "slot": obj["id"], "object": obj["id"],
                                  "detail": f"foil replace_{obj['id']} ({word}) beat the prompt"}]})
    return out
