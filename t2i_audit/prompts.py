"""Expansion: concepts × templates → PromptRecords (format in docs/records.md).

Each record carries its structure — slot values and character spans, the objects, attributes,
relations and counts the image must show, the yes/no questions that check them (with
dependencies), its composition key, split and swap twin — so that scorers and probes never
re-parse text. Ids are hashes of (suite, version, template, slot values): the same on every
machine and independent of order or sampling.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import random
from collections import Counter
from pathlib import Path
from typing import Iterable

from .errors import SuiteError
from .scenes import prompt_groups, scene_key, twin_group  # grouping lives in scenes.py; these names stay here
from .suite import ATTRIBUTE_FAMILIES, CONSTRAINT, PLACEHOLDER, Suite, Template, Value, load_suite

__all__ = ["load_suite", "expand", "expand_files", "sample_records", "stable_hash", "twin_group", "prompt_groups",
           "scene_key"]


def stable_hash(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


# --- words ------------------------------------------------------------------------------


def plural(v: Value) -> str:
    if v.plural:
        return v.plural
    w = v.name
    if w.endswith(("s", "x", "z", "ch", "sh")):
        return w + "es"
    if w.endswith("y") and len(w) > 1 and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"


def article(v: Value, word: str) -> str:
    if v.article is not None:
        return v.article
    return "an" if word[:1].lower() in "aeiou" else "a"


def surface(v: Value) -> str:
    """The words a value contributes to a prompt: a relation's phrase, else its name."""
    return v.text or v.name


def render(text: str, values: dict[str, Value]) -> tuple[str, dict[str, list[int]]]:
    """Fill placeholders; return the text and each slot's [start, end) (first use, word only)."""
    out, spans, pos = [], {}, 0
    length = 0
    for m in PLACEHOLDER.finditer(text):
        lit = text[pos : m.start()]
        out.append(lit)
        length += len(lit)
        slot, field = m.group(1), m.group(2) or "name"
        v = values[slot]
        word = {"name": surface(v), "text": surface(v), "plural": plural(v),
                "number": str(v.number) if v.number is not None else v.name, "a": surface(v)}[field]
        prefix = f"{article(v, word)} " if field == "a" else ""
        spans.setdefault(slot, [length + len(prefix), length + len(prefix) + len(word)])
        out.append(prefix + word)
        length += len(prefix) + len(word)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out), spans


# --- structure --------------------------------------------------------------------------


def _attribute_question(family: str, obj: str, value: str) -> str:
    if family == "material":
        return f"Is the {obj} made of {value}?"
    return f"Is the {obj} {value}?"


def build_structure(suite: Suite, t: Template, values: dict[str, Value]) -> dict:
    fam = {s: suite.family_of_slot(t, s) for s in t.slots}
    objects, questions, bindings = [], [], []
    exists_q: dict[str, str] = {}

    def q(**kw) -> str:
        qid = f"q{len(questions)}"
        questions.append({"id": qid, **kw})
        return qid

    for spec in t.expect.objects:
        oid = spec["id"]
        v = values[oid]
        count_slot = spec.get("count")
        number = values[count_slot].number if count_slot else 1
        attrs = {k: values[s].name for k, s in spec.items() if k in ATTRIBUTE_FAMILIES}
        attr_slots = {k: s for k, s in spec.items() if k in ATTRIBUTE_FAMILIES}
        objects.append({"id": oid, "name": v.name, "plural": plural(v), "count": number,
                        "count_slot": count_slot, "attributes": attrs, "attribute_slots": attr_slots})
        exists_q[oid] = q(kind="exists", text=f"Is there {article(v, v.name)} {v.name}?", object=oid, depends_on=[])
        for family, value in attrs.items():
            bindings.append([family, value, v.name])
            q(kind="attribute", text=_attribute_question(family, v.name, value), object=oid,
              family=family, value=value, slot=attr_slots[family], depends_on=[exists_q[oid]])
        if count_slot:
            q(kind="count", text=f"Are there exactly {number} {plural(v)}?", object=oid, number=number,
              slot=count_slot, depends_on=[exists_q[oid]])

    relations = []
    for r in t.expect.relations:
        rv = values[r.slot]
        relations.append({"slot": r.slot, "family": fam[r.slot], "name": rv.name, "text": surface(rv),
                          "inverse": rv.inverse, "subject": r.subject, "object": r.object})
        q(kind="relation", text=f"Is the {values[r.subject].name} {surface(rv)} the {values[r.object].name}?",
          subject=r.subject, object=r.object, family=fam[r.slot], value=rv.name, slot=r.slot,
          depends_on=[exists_q[r.subject], exists_q[r.object]])
    return {"families": fam, "objects": objects, "relations": relations, "questions": questions, "bindings": bindings}


def _constraints(t: Template, slot_names: list[str]) -> list[tuple[int, int | None, str | None, bool]]:
    """Each constraint parsed once: (left slot's index, right slot's index or None, literal, must be equal)."""
    out = []
    for c in t.constraints:
        m = CONSTRAINT.match(c)
        right = m.group(3)
        literal = None if right else (m.group(4) if m.group(4) is not None else m.group(5))
        out.append((slot_names.index(m.group(1)), slot_names.index(right) if right else None, literal,
                    m.group(2) == "=="))
    return out


def _heldout_set(suite: Suite) -> set[tuple[str, str]]:
    h = suite.model.heldout
    if h is None:
        return set()
    if h.compositions is not None:
        return {tuple(p) for p in h.compositions}
    fa, fo = h.bind
    attrs = sorted({v.name for c in suite.model.concepts.values() if c.family == fa for v in c.values})
    objs = sorted({v.name for c in suite.model.concepts.values() if c.family == fo for v in c.values})
    pairs = [(a, o) for a in attrs for o in objs]
    random.Random(h.seed).shuffle(pairs)
    want = round(h.fraction * len(pairs))
    held: set[tuple[str, str]] = set()
    left_a = {a: len(objs) for a in attrs}
    left_o = {o: len(attrs) for o in objs}
    for a, o in pairs:  # never hold out every pair of a concept: each must stay seen in training
        if len(held) >= want:
            break
        if left_a[a] > 1 and left_o[o] > 1:
            held.add((a, o))
            left_a[a] -= 1
            left_o[o] -= 1
    return held


def expand_template(suite: Suite, t: Template, held: set) -> list[dict]:
    """Enumerate slot combinations cheaply, pair twins, sample, then build full records."""
    slot_names = list(t.slots)
    lists = [suite.concept(t.slots[s]).values for s in slot_names]
    constraints = _constraints(t, slot_names)
    # the id: a hash of "suite\x1fversion\x1ftemplate\x1fslot=value…" (slots sorted by name), the same on every
    # machine; one format string, filled from the names tuple, as this loop runs once per combination (212k for
    # mixed.yaml) before sampling keeps a few hundred
    by_slot = sorted(range(len(slot_names)), key=slot_names.__getitem__)
    escape = lambda x: x.replace("{", "{{").replace("}", "}}")  # noqa: E731
    id_key = "\x1f".join([escape(suite.name), escape(suite.version), escape(t.name),
                          *(escape(slot_names[i]) + "={}" for i in by_slot)])
    sorted_names = (operator.itemgetter(*by_slot) if len(by_slot) > 1
                    else (lambda names: tuple(names[i] for i in by_slot)))
    combos, kept_names, by_names = [], [], {}
    name_lists = [[v.name for v in values] for values in lists]
    for names, combo in zip(itertools.product(*name_lists), itertools.product(*lists)):
        for left, right, literal, equal in constraints:
            if (names[left] == (literal if right is None else names[right])) is not equal:
                break
        else:
            c = {"id": "p" + hashlib.sha1(id_key.format(*sorted_names(names)).encode()).hexdigest()[:12],
                 "template": t.name, "slots": dict(zip(slot_names, names)), "values": combo,
                 "twin": None, "twin_id": None}
            combos.append(c)
            kept_names.append(names)
            by_names[names] = c
    if t.twins:
        swaps = [(slot_names.index(a), slot_names.index(b)) for a, b in t.twins]
        for names, c in zip(kept_names, combos):
            swapped = list(names)
            for a, b in swaps:
                swapped[a], swapped[b] = names[b], names[a]
            twin = by_names.get(tuple(swapped))
            if twin is not None and twin is not c:
                c["twin"] = twin["id"]
                c["twin_id"] = "t" + hashlib.sha1("|".join(sorted([c["id"], twin["id"]])).encode()).hexdigest()[:12]
    if t.sample is not None:
        combos = sample_records(combos, t.sample.max, t.sample.seed)
    heldout_family = suite.model.heldout.bind[0] if suite.model.heldout else None
    records = []
    for c in combos:
        values = dict(zip(slot_names, c["values"]))  # the Value of each slot (a tuple until sampling kept it)
        text, spans = render(t.text, values)
        st = build_structure(suite, t, values)
        split = "heldout" if any((b[1], b[2]) in held for b in st["bindings"] if b[0] == heldout_family) else "train"
        records.append({
            "id": c["id"], "suite": suite.name, "suite_version": suite.version,
            "template": t.name, "category": t.category, "text": text, "slots": c["slots"],
            "families": st["families"], "spans": spans, "objects": st["objects"],
            "relations": st["relations"], "questions": st["questions"],
            "composition": "|".join(f"{k}={v}" for k, v in sorted(c["slots"].items())),
            "bindings": st["bindings"], "split": split, "twin": c["twin"], "twin_id": c["twin_id"],
            "twin_swap": [list(p) for p in t.twins] or None})
    return records


def sample_records(records: list[dict], max_count: int, seed: int = 0, candidates: int = 128) -> list[dict]:
    """A deterministic, balanced subset: twins stay together, slot values are used evenly.

    Greedy: at each pick, of a few random remaining groups take the one whose
    (template, slot, value)s have been used least so far. Output keeps expansion order.
    """
    if len(records) <= max_count:
        return records
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault(r["twin_id"] or r["id"], []).append(i)
    keys = sorted(groups)
    rng = random.Random(seed)
    rng.shuffle(keys)
    used: Counter = Counter()  # (template, slot, value) → times picked
    chosen: list[int] = []
    uses: dict[str, list[tuple]] = {}  # a group's (template, slot, value)s, made when it first enters the window

    def cost(k: str) -> int:
        if k not in uses:
            uses[k] = [(records[i]["template"], s, v) for i in groups[k] for s, v in records[i]["slots"].items()]
        return sum(map(used.get, uses[k], itertools.repeat(0)))

    while keys and len(chosen) < max_count:
        window = min(candidates, len(keys))
        j = min(range(window), key=lambda x: cost(keys[x]))
        k = keys.pop(j)
        if len(chosen) + len(groups[k]) > max_count:  # a twin pair that would overshoot
            continue
        chosen += groups[k]
        used.update(uses[k])
    kept = set(chosen)
    kept_ids = {records[i]["id"] for i in kept}
    out = []
    for i in sorted(kept):
        r = records[i]
        if r["twin"] and r["twin"] not in kept_ids:  # its twin fell outside max_count
            r = {**r, "twin": None, "twin_id": None}
        out.append(r)
    return out


def expand(suite: Suite) -> list[dict]:
    """All PromptRecords of a suite. Raises SuiteError if it expands to nothing."""
    held = _heldout_set(suite)
    records: list[dict] = []
    problems = []
    for ti, t in enumerate(suite.model.templates):
        recs = expand_template(suite, t, held)
        if not recs:
            problems.append(f"{suite.path}:{suite.lines.get(('templates', ti), 1)}: templates[{ti}] ({t.name}): "
                            "expands to no prompt (constraints exclude every combination)")
        records += recs
    if problems:
        raise SuiteError(problems)
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):  # same template name twice would be caught earlier; guard anyway
        raise SuiteError([f"{suite.path}: two prompts share an id"])
    return records


def expand_files(paths: Iterable[str | Path]) -> list[dict]:
    """Load, validate and expand several suites; every file's problems are reported together."""
    records, problems = [], []
    for p in paths:
        try:
            records += expand(load_suite(p))
        except SuiteError as e:
            problems += e.problems
    if problems:
        raise SuiteError(problems)
    return records


def template_counts(records: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in records:
        c = out.setdefault(f"{r['suite']}/{r['template']}", {"category": r["category"], "prompts": 0, "heldout": 0, "twins": 0})
        c["prompts"] += 1
        c["heldout"] += r["split"] == "heldout"
        c["twins"] += r["twin"] is not None
    return out
