"""Which prompts show the same picture, and the groups every fold, split and bootstrap cluster uses.

Two prompts are one unit of independence when they describe one scene — "a cat left of a dog" and "a dog
right of a cat"; "a red cube and a blue sphere" and "a blue sphere and a red cube"; "three cats and two
dogs" and "two dogs and three cats" — or when one is the other's swap twin (the same constituents bound the
other way: a probe must never train on one and be scored on the other). ``prompt_groups`` is the ONE
function that groups prompts: the connected components of scene identity and twinship. Every place that
folds, splits, holds out or resamples prompts calls it (tests/spine/test_prompt_groups.py enumerates them).

The scene is read from the record's structure (``objects``, ``relations``; docs/records.md), never from its
words, so it is the same for every suite and every importer:

* an object is its name, its attributes and modifiers; objects described alike are one multiset entry whose
  count is the sum of their counts (``a cat and a cat`` ≡ ``two cats``), and the order of objects is free;
* a relation is first given one name whatever source wrote it (``canonical_relation``): an action is its
  verb's lemma (the suites' "chasing" and the importers' "chase" are one action); a passive is its active
  ("a dog chased by a cat" ≡ "a cat chasing a dog": an action named "<lemma> by" has its ends swapped);
  containment is ``in`` ("a box containing a cat" ≡ "a cat in a box"); and **``on`` is read as ``above``**
  ("a cup on a table" ≡ "a cup on top of a table" ≡ "a table under a cup"; "hidden by" as "behind"). A
  scene key decides what must not be split, so where a reading is in doubt it merges: ``on`` also covers "a
  picture on a wall", which is not above — two groups made one costs a little power, one scene split in two
  is a leak;
* a relation with an inverse is then stored in one direction (``left of(A, B)`` ≡ ``right of(B, A)``,
  ``above`` ≡ ``below`` swapped); a symmetric one (its inverse is itself: ``next to``) orders its two ends;
  one without an inverse (an action) keeps its direction;
* a record with no parsed object (free text an importer could not decompose) is its whitespace-normalised,
  lower-cased text.

A prompt's twin is read from its record too (``twin_swap``: which slots the twin exchanges), so its group
label (``twin_group``) does not depend on which other prompts are in the set. Imported prompts carry no
``twin_swap``, so ``prompt_groups`` also joins prompts with one **constituent bag** (``constituent_bag``: the
scene's object names, attribute values, counts, modifiers and relation names, each as a multiset, with who
has which left out): "a red cube and a blue ball" and "a blue cube and a red ball" are each other's swap
twins whichever source wrote them, and a fold must not train on one and score the other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Sequence

# what an importer's record and a suite's both write into ``relations[].inverse``; used only for a twin whose
# swap moves a relation slot onto another relation's value (the record carries the inverse of its own)
KNOWN_INVERSES = {"left of": "right of", "right of": "left of", "above": "below", "below": "above",
                  "next to": "next to", "in front of": "behind", "behind": "in front of"}
# relations read as another for scene identity (the module's docstring says why): name -> (family, name)
SAME_AS = {"on": ("spatial", "above"), "hidden by": ("depth", "behind")}
# actions that are a relation's converse: lemma -> the relation, its ends swapped
CONVERSE_ACTIONS = {"contain": ("spatial", "in")}


def canonical_relation(family, name, inverse=None) -> tuple[str, str, str | None, bool]:
    """(family, name, inverse, ends swapped) of a relation under one naming for every source: a spatial word by
    the grammar's name for it (``importers.vocab.RELATIONS``: "under" is ``below``), actions by lemma,
    passives as actives, containment as ``in``, ``on`` as ``above`` (the module's docstring)."""
    from .importers.vocab import RELATIONS

    family, name, swapped = str(family), str(name), False
    if family != "action" and name in RELATIONS:  # a source's surface word ("under", DSG's tuples) by its name
        name, family, inverse = RELATIONS[name]
    if family == "action":
        from .importers.lexicon import action_lemma

        name = action_lemma(name)
        if name.endswith(" by"):  # "chase by": the grammar's and DSG's passive
            name, swapped = action_lemma(name[:-3]), True
        if name in CONVERSE_ACTIONS:
            (family, name), swapped = CONVERSE_ACTIONS[name], not swapped
        inverse = None
    if name in SAME_AS:
        family, name = SAME_AS[name]
        inverse = None
    return family, name, inverse or KNOWN_INVERSES.get(name), swapped


def _describe(o: dict) -> str:
    """"circle(color=red)", "car(color=red)[old]": the object's name, attributes and modifiers."""
    attrs = ", ".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in (o.get("attributes") or {}).items()))
    mods = ",".join(sorted(str(m) for m in (o.get("modifiers") or ())))
    return f"{o.get('name')}" + (f"({attrs})" if attrs else "") + (f"[{mods}]" if mods else "")


def _count(o: dict):
    return "some" if o.get("plural_np") and int(o.get("count") or 1) == 1 else int(o.get("count") or 1)


def scene_structure(objects: Sequence[dict], relations: Sequence[dict]) -> dict:
    """The canonical scene of some objects and relations (see the module's docstring)."""
    desc = {o["id"]: _describe(o) for o in objects}
    counts: dict[str, list] = {}
    for o in objects:
        counts.setdefault(desc[o["id"]], []).append(_count(o))
    multiset = sorted([d, (sum(c) if all(isinstance(x, int) for x in c) else sorted(map(str, c)))]
                      for d, c in counts.items())
    rels = []
    for r in relations:
        family, name, inv, swapped = canonical_relation(r.get("family"), r.get("name"), r.get("inverse"))
        a, b = desc.get(r.get("subject"), str(r.get("subject"))), desc.get(r.get("object"), str(r.get("object")))
        if swapped:
            a, b = b, a
        if inv == name:
            a, b = sorted((a, b))
        elif inv and str(inv) < name:
            name, a, b = str(inv), b, a
        rels.append([family, name, a, b])
    return {"objects": multiset, "relations": sorted(rels)}


def scene_key(record: dict) -> str:
    """The picture a prompt describes, as a canonical string: equal for two prompts that show one scene."""
    objects = record.get("objects") or []
    if not objects:
        return "text:" + " ".join(str(record.get("text", "")).lower().split())
    return json.dumps(scene_structure(objects, record.get("relations") or []), ensure_ascii=False,
                      separators=(",", ":"))


def constituent_bag(record: dict) -> str | None:
    """What a prompt is made of, with who has which left out: the multisets of its object names, attribute
    values, modifiers, counts and relation names (canonical, as in the scene). Equal for a prompt and every
    rebinding of its constituents — its swap twins, whether or not a record says so. None without objects."""
    objects = record.get("objects") or []
    if not objects:
        return None
    merged: dict[str, dict] = {}
    for o in objects:  # objects described alike are one entry, as in the scene ("two cats" ≡ "a cat and a cat")
        entry = merged.setdefault(_describe(o), {"o": o, "n": []})
        entry["n"].append(_count(o))
    names, attrs, mods, counts = [], [], [], []
    for entry in merged.values():
        o, n = entry["o"], entry["n"]
        names.append(str(o.get("name")))
        attrs += [f"{k}={v}" for k, v in (o.get("attributes") or {}).items()]
        mods += [str(m) for m in (o.get("modifiers") or ())]
        counts.append(str(sum(n)) if all(isinstance(x, int) for x in n) else "some")
    rels = []
    for r in record.get("relations") or []:
        family, name, inv, _ = canonical_relation(r.get("family"), r.get("name"), r.get("inverse"))
        rels.append(f"{family}:{min(name, inv) if inv else name}")
    return "bag:" + json.dumps([sorted(x) for x in (names, attrs, mods, counts, rels)], ensure_ascii=False,
                               separators=(",", ":"))


def twin_scene_key(record: dict) -> str | None:
    """The scene of the prompt's swap twin (its ``twin_swap`` slots exchanged), None without one."""
    swap = record.get("twin_swap")
    objects = record.get("objects") or []
    if not swap or not objects:
        return None
    value: dict[str, tuple] = {}  # slot -> what it decides in the picture
    for o in objects:
        value[o["id"]] = ("name", o.get("name"))
        for fam, slot in (o.get("attribute_slots") or {}).items():
            value[slot] = ("attr", (o.get("attributes") or {}).get(fam))
        if o.get("count_slot"):
            value[o["count_slot"]] = ("count", o.get("count"))
    for r in record.get("relations") or []:
        value[r.get("slot")] = ("rel", r.get("name"))
    new = dict(value)
    for a, b in swap:
        if a in value and b in value:
            new[a], new[b] = value[b], value[a]
    objs = []
    for o in objects:
        attrs = {fam: new[slot][1] for fam, slot in (o.get("attribute_slots") or {}).items()}
        objs.append({**o, "name": new[o["id"]][1], "attributes": {**(o.get("attributes") or {}), **attrs},
                     **({"count": new[o["count_slot"]][1]} if o.get("count_slot") else {})})
    inverse_of = {r.get("name"): r.get("inverse") for r in record.get("relations") or []}
    rels = []
    for r in record.get("relations") or []:
        name = new[r.get("slot")][1]
        rels.append({**r, "name": name, "inverse": inverse_of.get(name, KNOWN_INVERSES.get(name))})
    return json.dumps(scene_structure(objs, rels), ensure_ascii=False, separators=(",", ":"))


def linked_scenes(record: dict) -> frozenset[str]:
    """The scenes a prompt is tied to: its own and its swap twin's (or, for a twin recorded without its swap,
    the twin pair's id)."""
    own = scene_key(record)
    twin = twin_scene_key(record)
    if twin is not None:
        return frozenset({own, twin})
    return frozenset({own} | ({f"twin:{record['twin_id']}"} if record.get("twin_id") else set()))


def twin_group(record: dict) -> str:
    """One prompt's group label: its scene together with its swap twin's ("red cube left of blue sphere",
    "blue sphere left of red cube" and "red cube right of blue sphere" share it). A function of the record
    alone, so labels compare across prompt sets; for a set, use ``prompt_groups`` (which also joins labels
    that share a scene through other templates)."""
    return "g" + hashlib.sha1("\x1f".join(sorted(linked_scenes(record))).encode()).hexdigest()[:12]


def prompt_groups(records: Iterable[dict]) -> list[str]:
    """The group of each record: the connected components of "shows the same scene as", "is the swap twin
    of" and "has the same constituent bag as" over ``records``; each labelled by the smallest ``twin_group`` among its members (a component of
    one label keeps it)."""
    records = list(records)
    parent = list(range(len(records)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, r in enumerate(records):
        for s in _identity(r):
            j = owner.setdefault(s, i)
            if j != i:
                parent[find(i)] = find(j)
    labels = [twin_group(r) for r in records]
    best: dict[int, str] = {}
    for i, lab in enumerate(labels):
        root = find(i)
        best[root] = min(best.get(root, lab), lab)
    return [best[find(i)] for i in range(len(records))]


def groups_by_id(records: Iterable[dict]) -> dict[str, str]:
    """prompt id → its group (``prompt_groups`` over ``records``): for code that holds prompt ids."""
    records = list(records)
    return dict(zip((r["id"] for r in records), prompt_groups(records)))


def shares_a_scene(records: Iterable[dict]):
    """A test ``f(record) -> bool``: does ``record`` show a scene (its own or its twin's) of any of ``records``
    — what must stay out of a probe or a choice that ``records`` are scored against, across prompt sets."""
    scenes = set().union(*(_identity(r) for r in records))
    return lambda record: bool(_identity(record) & scenes)


def _identity(record: dict) -> frozenset[str]:
    """Everything that ties a prompt to others: its scenes (``linked_scenes``) and its constituent bag."""
    bag = constituent_bag(record)
    return linked_scenes(record) | ({bag} if bag else set())
