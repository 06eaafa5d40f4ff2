"""T2I-CompBench (Karine-Huang/T2I-CompBench) ``examples/dataset/<category>_val.txt``: plain text,
one prompt a line; the category comes from the file name (or ``--category``). The grammar of
:mod:`.grammar` accounts for every word of a line or declines it: a declined line gets one
whole-prompt question, ``parsed: false`` and ``parse_reason``. ``grammar`` names the rule that
derived a parsed line (``list``, ``rel``, ``vp``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from ..errors import AuditError
from ..safeload import split_lines
from ..suite import ATTRIBUTE_FAMILIES, SHIPPED_SUITES
from .grammar import Declined, Grammar
from .records import make_record, nonempty, number_ids, read_text
from .vocab import ATTRIBUTES, NUMBERS

T2I_CATEGORIES = ("3d_spatial", "non_spatial", "color", "shape", "texture", "spatial", "complex", "numeracy")


def t2i_category(path: Path) -> str:
    stem = path.stem.lower()
    for c in T2I_CATEGORIES:  # longest names first: non_spatial before spatial
        if stem == c or stem.startswith(c + "_"):
            return c
    raise AuditError(f"{path}: cannot tell the T2I-CompBench category from the file name; pass --category "
                     f"(one of {', '.join(T2I_CATEGORIES)})")


def concept_vocabulary(paths: Iterable[str | Path] = ()) -> dict[str, list[str]]:
    """Attribute values by family: :data:`.vocab.ATTRIBUTES`, the shipped suites (prompts/*.yaml)
    and ``paths``."""
    from ..suite import load_suite

    files = sorted(SHIPPED_SUITES.glob("*.yaml")) if SHIPPED_SUITES.is_dir() else []
    vocab: dict[str, set] = {fam: set(words) for fam, words in ATTRIBUTES.items()}
    for f in [*files, *map(Path, paths)]:
        for c in load_suite(f).model.concepts.values():
            if c.family in ATTRIBUTE_FAMILIES:
                vocab.setdefault(c.family, set()).update(v.name for v in c.values)
    return {fam: sorted(vals, key=lambda s: (-len(s), s)) for fam, vals in vocab.items()}


class T2IGrammar:
    """:class:`.grammar.Grammar` with the file's category: its attribute family wins where a word
    is in two lists, and in numeracy files "a"/"an" are counts that get asked."""

    def __init__(self, vocab: dict[str, list[str]], category: Optional[str] = None):
        fam = {"color": "color", "shape": "shape", "texture": "texture"}.get(category or "")
        self.grammar, self.category = Grammar(vocab, prefer_family=fam), category

    def parse(self, text: str) -> tuple[list[dict], list[dict], bool, str]:
        """(objects, relations, whole-prompt question needed, rule) for :func:`.records.make_record`;
        raises :class:`.grammar.Declined`."""
        got = self.grammar.analyse(text)
        objects = []
        for np_ in got["objects"]:
            asked = np_.count is not None and (np_.number_word.lower() in NUMBERS or self.category == "numeracy")
            spans = {"object": list(np_.head_span), **{f: list(sp) for f, sp in np_.attr_spans}}
            o = {"name": np_.name, "count": np_.count or 1, "attributes": dict(np_.attributes),
                 "modifiers": list(np_.modifiers), "plural_np": np_.plural_np, "spans": spans,
                 "surface": text[np_.head_span[0]:np_.head_span[1]]}
            if asked:
                o.update(number_word=np_.number_word, ask_count=True, spans=dict(spans, count=list(np_.count_span)))
            objects.append(o)
        return objects, got["relations"], got["whole"], got["form"]


def import_t2i_compbench(path: Path, *, category: Optional[str] = None, vocab_files: Iterable[str] = (), **_) -> list[dict]:
    cat = category or t2i_category(path)
    grammar = T2IGrammar(concept_vocabulary(vocab_files), cat)
    records = []
    for line_no, raw in split_lines(read_text(path)):  # "\n" only: U+2028 is not a line break here
        text = raw.strip()
        if not text:
            continue
        if text.startswith(("{", "[")) or "\t" in text:
            raise AuditError(f"{path}:{line_no}: expected one prompt per line of plain text, got "
                             f"{'JSON' if text[0] in '{[' else 'tab-separated columns'} (is this another --format?)")
        try:
            objects, relations, whole, rule = grammar.parse(text)
            reason = None
        except Declined as e:
            objects, relations, whole, rule, reason = [], [], False, None, str(e)
        records.append(make_record("t2i-compbench", cat, text, objects, relations, where=(path.name, line_no),
                                   whole_prompt=whole, reason=reason, extra={"grammar": rule}))
    return number_ids(nonempty(records, path))
