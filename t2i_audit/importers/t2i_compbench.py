"""T2I-CompBench (Karine-Huang/T2I-CompBench) ``examples/dataset/<category>_val.txt``: plain text,
one prompt a line; the category comes from the file name (or ``--category``). An explicit
grammar (:class:`T2IGrammar`) parses attribute–noun pairs, spatial pairs and counted lists; a
line it does not parse gets one whole-prompt question and ``parsed: false``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Optional

from ..errors import AuditError
from ..suite import ATTRIBUTE_FAMILIES
from .records import INVERSE, NUMBER_WORDS, make_record, nonempty, number_ids, read_text

SHIPPED_SUITES = Path(__file__).resolve().parents[2] / "prompts"
# T2I-CompBench's spatial phrases (UniDet_eval/2D_spatial_eval.py, ``vocab_spatial``) and what
# their ``determine_position`` checks: "on the top of" = subject above object (y up on screen),
# "on the bottom of" = below, "next to" / "near" / "on side of" = close, either side.
T2I_SPATIAL = {"on the left of": "left of", "on the right of": "right of", "on the top of": "above",
               "on top of": "above", "on the bottom of": "below", "next to": "next to",
               "near": "next to", "on side of": "next to"}
T2I_CATEGORIES = ("3d_spatial", "non_spatial", "color", "shape", "texture", "spatial", "complex", "numeracy")
# irregular plurals seen in counted prompts; everything else follows the regular rules
IRREGULAR = {"men": "man", "women": "woman", "people": "person", "mice": "mouse", "knives": "knife",
             "children": "child", "geese": "goose", "teeth": "tooth", "feet": "foot", "leaves": "leaf",
             "shelves": "shelf", "wolves": "wolf", "loaves": "loaf"}
SAME_PLURAL = {"sheep", "fish", "deer", "shrimp", "goldfish", "moose", "bison", "salmon", "aircraft"}

def t2i_category(path: Path) -> str:
    stem = path.stem.lower()
    for c in T2I_CATEGORIES:  # longest names first: non_spatial before spatial
        if stem == c or stem.startswith(c + "_"):
            return c
    raise AuditError(f"{path}: cannot tell the T2I-CompBench category from the file name; pass --category "
                     f"(one of {', '.join(T2I_CATEGORIES)})")


def concept_vocabulary(paths: Iterable[str | Path] = ()) -> dict[str, list[str]]:
    """Attribute values by family, from the shipped suites (prompts/*.yaml) plus ``paths``."""
    from ..suite import load_suite

    files = sorted(SHIPPED_SUITES.glob("*.yaml")) if SHIPPED_SUITES.is_dir() else []
    vocab: dict[str, set] = {}
    for f in [*files, *map(Path, paths)]:
        for c in load_suite(f).model.concepts.values():
            if c.family in ATTRIBUTE_FAMILIES:
                vocab.setdefault(c.family, set()).update(v.name for v in c.values)
    return {fam: sorted(vals, key=lambda s: (-len(s), s)) for fam, vals in vocab.items()}


_WORD = r"(?!(?:and|with|on|of|in|near|next|the|a|an)\b)[a-z][a-z'\-]*"
_NOUN = rf"{_WORD}(?: {_WORD}){{0,2}}"
_ART = r"(?:(?:a|an|the) )?"


def _alt(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=lambda s: (-len(s), s)))


def _singular(word: str) -> str:
    last = word.split(" ")[-1]
    head = word[: len(word) - len(last)]
    if last in IRREGULAR:
        return head + IRREGULAR[last]
    if last in SAME_PLURAL:
        return word
    if last.endswith("ies") and len(last) > 4:
        return head + last[:-3] + "y"
    if re.search(r"(s|x|z|ch|sh)es$", last):
        return head + last[:-2]
    if last.endswith("s") and not last.endswith("ss"):
        return head + last[:-1]
    return word


class T2IGrammar:
    """The explicit grammar for T2I-CompBench lines (case-insensitive, optional final period):

    attribute  NP (" and " NP)?            NP = [a|an|the] ATTR NOUN, ATTR from the vocabulary
    spatial    [a|an|the] NOUN REL [a|an|the] NOUN,   REL from T2I_SPATIAL
    numeracy   NUM NOUN ((", " | " and " | ", and ") NUM NOUN)*,   NUM = one … ten | a | an
    NOUN is one to three lower-case words, none of them a function word (and, with, on, of …).
    """

    def __init__(self, vocab: dict[str, list[str]]):
        self.vocab = vocab
        self.attr = {fam: re.compile(rf"^{_ART}({_alt(vals)}) ({_NOUN})(?: and {_ART}({_alt(vals)}) ({_NOUN}))?$", re.I)
                     for fam, vals in vocab.items() if vals}
        self.spatial = re.compile(rf"^{_ART}({_NOUN}) ({_alt(T2I_SPATIAL)}) {_ART}({_NOUN})$", re.I)
        num = _alt(NUMBER_WORDS)
        self.count_item = re.compile(rf"^({num}) ({_NOUN})$", re.I)

    def parse(self, text: str, category: str) -> Optional[tuple[list[dict], list[dict], str]]:
        body = text.strip().rstrip(".").strip()
        if category in ("color", "shape", "texture"):
            order = [("attribute", category)]
        elif category == "spatial":
            order = [("spatial", None)]
        elif category == "numeracy":
            order = [("count", None)]
        else:  # complex, non_spatial, 3d_spatial, user categories: whichever rule matches
            order = [("spatial", None), ("count", "numeral")] + [("attribute", f) for f in sorted(self.attr)]
        for rule, fam in order:
            got = getattr(self, f"_{rule}")(body, fam)
            if got is not None:
                return (*got, rule)
        return None

    def _attribute(self, body: str, fam: str):
        rx = self.attr.get(fam)
        m = rx.match(body) if rx else None
        if not m:
            return None
        objects = []
        for a, n in ((m.group(1), m.group(2)), (m.group(3), m.group(4))):
            if a:
                objects.append({"name": n.lower(), "surface": n, "count": 1, "attributes": {fam: a.lower()}})
        return objects, []

    def _spatial(self, body: str, _):
        m = self.spatial.match(body)
        if not m:
            return None
        phrase = m.group(2).lower()
        name = T2I_SPATIAL[phrase]
        objects = [{"name": m.group(1).lower(), "count": 1, "attributes": {}},
                   {"name": m.group(3).lower(), "count": 1, "attributes": {}}]
        return objects, [{"subject": 0, "object": 1, "name": name, "text": phrase, "inverse": INVERSE[name]}]

    def _count(self, body: str, need: Optional[str]):
        if need == "numeral" and not re.search(rf"\b({_alt(w for w in NUMBER_WORDS if len(w) > 2)})\b", body, re.I):
            return None  # outside numeracy files, "a cat and a dog" is not a counting prompt
        objects = []
        for part in re.split(r",? and |, ", body):
            m = self.count_item.match(part.strip())
            if not m:
                return None
            word, noun = m.group(1).lower(), m.group(2).lower()
            n = NUMBER_WORDS[word]
            name = _singular(noun) if n != 1 else noun
            objects.append({"name": name, "plural": noun if n != 1 else None, "surface": noun,
                            "count": n, "number_word": m.group(1), "attributes": {}, "ask_count": True})
        return (objects, []) if objects else None


def import_t2i_compbench(path: Path, *, category: Optional[str] = None, vocab_files: Iterable[str] = (), **_) -> list[dict]:
    cat = category or t2i_category(path)
    grammar = T2IGrammar(concept_vocabulary(vocab_files))
    records = []
    for line_no, raw in enumerate(read_text(path).splitlines(), 1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith(("{", "[")) or "\t" in text:
            raise AuditError(f"{path}:{line_no}: expected one prompt per line of plain text, got "
                             f"{'JSON' if text[0] in '{[' else 'tab-separated columns'} (is this another --format?)")
        got = grammar.parse(text, cat)
        objects, relations, rule = got if got else ([], [], None)
        records.append(make_record("t2i-compbench", cat, text, objects, relations, where=(path.name, line_no),
                                   extra={"grammar": rule}))
    return number_ids(nonempty(records, path))
