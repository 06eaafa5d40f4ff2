"""A small English grammar for benchmark prompts that accounts for every token or declines.

Grammar (case-insensitive; an optional final period)::

    S    = C ("while" C)*
    C    = NPL | NPL [AUX] REL NPL | NPL [PP*] [AUX] VP (("and" | "," ["and"]) VP)*
    NPL  = NP (("," | "and" | ", and") NP)*
    NP   = [DET | POSS | NUM | "many" | "several"] (MOD [","])* NOUN+ ["of" [DET | POSS | NUM] MOD* NOUN+]
    MOD  = ATTR | SHADE COLOR | COLOR ([","] COLOR)* "and" COLOR | ADJ
    VP   = VERB [PART] [NPL | ADJ | NUMBER] PP* ["which" [AUX] VP]
    PP   = (REL | PREP) NPL

A bare singular noun needs a modifier, except first in a clause (a caption's "Bathroom scene");
a present-tense verb agrees with its subject; without a copula the verb may be a participle.

Word classes: closed ones and attribute words from :mod:`.vocab`; NOUN / VERB / ADJ from the
lexicon (:mod:`.lexicon`). A word in no class, or a sentence the rules do not derive, is declined
with the reason. Every derivation is enumerated: when two derivations disagree on the objects
(names, attributes, counts) the prompt is declined as ambiguous; when they agree on the objects
but not on how the verb phrase relates them, the objects are kept and the relational rest is asked
as the whole prompt (never a guessed relation). A determiner or number agrees with the head noun,
and a verb needs a verb form of the lexicon, so "The red hat was on top of …" cannot make an
object "red hat was" — "was" is no noun.

A frame ("a photo of", "a close-up picture of", "an image of": :data:`.vocab.FRAMES` after at most an
article and three words) that opens a prompt is no part of the scene: the grammar reads what follows, so
"a photo of a dog to the left of a cat" asks "Is the dog to the left of the cat?", never about a photo.

Meaning: each NP is an object (its attributes, other adjectives, count); ``NP REL NP`` (with or
without a copula) is a spatial or depth relation; ``NP VERB NP`` and ``NP VERB PREP NP`` are
agent–action–patient relations (family ``action``, asked with the "-ing" form of the verb, or the
participle after a copula); a passive with its agent ("a dog chased by a cat", "a dog is chased by a cat")
is read as its active ("a cat chasing a dog": name the lemma, asked "Is the cat chasing the dog?"), except
with a verb whose "by" says where (:data:`.vocab.LOCATIVE_BY_VERBS`: "a man sat by a tree"), asked as the
whole prompt; any other verb phrase leaves its relational content to one whole-prompt
question.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

from . import lexicon
from .vocab import (ARTICLES, COPULAS, FAMILY_ORDER, FRAMES, LOCATIVE_BY_VERBS, NUMBERS, PARTICLES, POSSESSIVES, PREPOSITIONS, PRONOUNS,
                    RELATIONS, SHADES, SMALL_CLAUSE_VERBS, CLAUSE_CONJUNCTIONS, QUANTIFIERS, RELATIVE_PRONOUNS, COMPOUND_NOUNS)

_TOKEN = re.compile(r"[A-Za-z][A-Za-z'’\-]*|\d+(?::\d\d)?(?![\d:])|\S")
_REL_WORDS = sorted((p.split() for p in RELATIONS), key=len, reverse=True)
# up to three style words ("close-up", "black and white" is four: not a frame) that are no article, "and" or "of":
# "a dog and a photo of a cat" opens with no frame
_FRAME = re.compile(r"\s*(?:(?:a|an|the)\s+)?(?:(?!(?:a|an|the|and|of|with)\b)[\w'’-]+\s+){0,3}?(?:%s)\s+of\s+(?=\S)"
                    % "|".join(FRAMES), re.IGNORECASE)


def frame_end(text: str) -> int:
    """Where the scene starts after an opening frame ("a photo of "): 0 without one."""
    m = _FRAME.match(text)
    return m.end() if m else 0


MAX_TOKENS = 80         # longer lines are no benchmark prompt the grammar covers
MAX_STEPS = 20000       # noun-phrase attempts per prompt: hostile input cannot blow up the search
MAX_COMPOUND = 5        # nouns in one compound ("toy construction set", "paper towel roll")


class Declined(Exception):
    """The grammar does not cover the prompt; ``str(e)`` says why (recorded as ``parse_reason``)."""


@dataclass
class Token:
    text: str
    start: int
    end: int
    cats: list = field(default_factory=list)   # (class, info) pairs

    @property
    def low(self) -> str:
        return self.text.lower()

    def has(self, cat: str) -> list:
        return [info for c, info in self.cats if c == cat]


@dataclass(frozen=True)
class NP:
    start: int                    # token indices [start, end)
    end: int
    name: str                     # singular name ("cell phone", "piece of toast")
    plural_np: bool               # the head is plural in the text
    count: Optional[int]          # from a number word or "a"/"an"/"one"
    number_word: Optional[str]
    attributes: tuple             # ((family, value), …)
    modifiers: tuple              # other adjectives, asked as free questions
    head_span: tuple              # char span of the noun words
    attr_spans: tuple             # ((family, (start, end)), …)
    count_span: Optional[tuple]
    inner: Optional["NP"] = None  # "of" complement with its own modifiers: an object of its own
    withs: tuple = ()             # "with" complements: objects of their own


class Grammar:
    def __init__(self, vocab: dict[str, list[str]], *, prefer_family: Optional[str] = None):
        self.attr: dict[str, str] = {}
        order = ([prefer_family] if prefer_family else []) + [f for f in FAMILY_ORDER if f != prefer_family]
        for fam in reversed(order + sorted(set(vocab) - set(order))):   # earlier families win
            for w in vocab.get(fam, ()):
                self.attr[w.lower()] = fam

    # --- words ----------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[Token]:
        raw = [Token(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text, frame_end(text))]
        if raw and raw[-1].text == ".":
            raw = raw[:-1]
        toks, i = [], 0
        while i < len(raw):
            low = [t.low for t in raw[i:i + 4]]
            phrase = next((p for p in _REL_WORDS if low[:len(p)] == p), None)
            if phrase:
                t = Token(text[raw[i].start:raw[i + len(phrase) - 1].end], raw[i].start, raw[i + len(phrase) - 1].end)
                t.cats.append(("REL", " ".join(phrase)))
                if len(phrase) == 1:
                    self._closed(t)
                toks.append(t)
                i += len(phrase)
                continue
            compound = _compound(raw, i)
            if compound:  # "hot dogs": one noun, not dogs that are hot
                toks.append(compound)
                i += 2
                continue
            t = raw[i]
            if t.text[0].isdigit():  # a number or a time a thing shows ("reads 11:44"): no object, no count
                t.cats.append(("LIT", t.text))
                toks.append(t)
                i += 1
                continue
            if not (t.text[0].isalpha() or t.text == ","):
                raise Declined(f"unsupported character {t.text!r}")
            self._classify(t)
            if not t.cats:  # an adverb, say, or a word no lexicon lists
                raise Declined(f"{'no rule for the word' if lexicon.known(t.text) else 'unknown word'} {t.text!r}")
            toks.append(t)
            i += 1
        if not toks:
            raise Declined("empty prompt")
        if len(toks) > MAX_TOKENS:
            raise Declined(f"too long for the grammar ({len(toks)} words, at most {MAX_TOKENS})")
        return toks

    def _closed(self, t: Token) -> bool:
        w = t.low
        for cat, words in (("PREP", PREPOSITIONS), ("PART", PARTICLES)):
            if w in words:
                t.cats.append((cat, w))
        return bool(t.cats)

    def _classify(self, t: Token) -> None:
        w = t.low
        if w == ",":
            t.cats.append(("COMMA", w))
        elif w == "and":
            t.cats.append(("AND", w))
        elif w == "of":
            t.cats.append(("OF", w))
        elif w in ARTICLES:
            t.cats.append(("DET", w))
        elif w in POSSESSIVES or w in QUANTIFIERS:
            t.cats.append(("DET", w))
        elif w in NUMBERS:
            t.cats.append(("NUM", NUMBERS[w]))
        elif w in CLAUSE_CONJUNCTIONS:
            t.cats.append(("CONJ", w))
        elif w in COPULAS:
            t.cats.append(("AUX", w))
        elif w in PRONOUNS:
            t.cats.append(("PRON", w))  # in no rule: a prompt that needs one is declined
        elif self._closed(t):
            pass
        elif w in self.attr:
            t.cats.append(("ATTR", (self.attr[w], w)))
            # after a modifier or inside a compound an attribute word may head a noun phrase ("a red
            # orange", "the silky fabric", "a wine glass"); alone it never does, so "a black and white
            # cat" has one reading
            t.cats += [("HEAD", n) for n in lexicon.nouns(w)]
        else:
            if w in SHADES:
                t.cats.append(("SHADE", w))
            base = w[:-2] if w.endswith(("'s", "’s")) else None
            if base is not None:  # "farmer's market": a possessive noun inside a compound
                t.cats += [("POSSN", n) for n in lexicon.nouns(base) if not n.plural_form]
                return
            ns = lexicon.nouns(t.text)
            t.cats += [("NOUN", n) for n in ns]
            t.cats += [("VERB", v) for v in lexicon.verbs(w)]
            if lexicon.is_adjective(w):
                t.cats.append(("ADJ", w))

    # --- noun phrases --------------------------------------------------------------------
    def np(self, toks: list[Token], i: int, allow_of: bool = True, in_of: bool = False) -> Iterator[tuple[NP, int]]:
        if i >= len(toks):
            return
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise Declined("too many readings to enumerate")
        det, num, count_span = None, None, None
        t = toks[i]
        j = i
        if t.has("DET"):
            det = t.low
            j += 1
        elif t.has("NUM"):
            num = t.has("NUM")[0]
            count_span = (t.start, t.end)
            j += 1
        if det in ("a", "an"):
            count_span = (t.start, t.end)
        for mods, k in self._mods(toks, j):
            for head_len in range(1, min(MAX_COMPOUND, len(toks) - k) + 1):
                got = self._nom(toks, k, head_len, bool(mods))
                if got is None:
                    continue
                for noun, head_span in got:
                    if det in QUANTIFIERS and not noun.plural_form:
                        continue  # "many stoplights": a plural, no count asked
                    if (num == 1 and noun.plural_form) or (num is not None and num > 1 and not noun.plural_form):
                        continue
                    if det in ("a", "an") and noun.plural_form and any(not x.plural_form for x in toks[k + head_len - 1].has("NOUN")):
                        continue  # "a" takes the singular reading; the files' "a leather shoes" keeps its plural
                    if not in_of and det is None and num is None and not mods and not noun.plural_form and i:
                        continue  # a bare singular needs a modifier ("rubber mat"): "sat side by side",
                        # "holding a book and reading" name no objects; first in a clause it is a
                        # caption's subject ("Bathroom scene with …", "… while sun shines …")
                    base = self._make_np(toks, i, k + head_len, mods, noun, head_span, det, num, count_span)
                    if base is None:
                        continue
                    heads = [(base, k + head_len)]
                    if allow_of and k + head_len < len(toks) and toks[k + head_len].has("OF"):
                        heads += [(self._with_of(base, inner, toks, m), m)
                                  for inner, m in self.np(toks, k + head_len + 1, allow_of=False, in_of=True)]
                    for np_, m in heads:
                        yield np_, m
                        if allow_of and m < len(toks) and toks[m].low == "with":
                            # "a bathroom with white tile and a beige toilet": objects of their own,
                            # the link asked as the whole prompt
                            for withs, m2 in self.npl(toks, m + 1, nested=True):
                                yield replace(np_, end=m2, withs=tuple(withs)), m2

    def _mods(self, toks: list[Token], j: int) -> Iterator[tuple[list, int]]:
        """Every way to read a run of modifiers from ``j``: [(kind, family, value, span)], end."""
        yield [], j
        if j >= len(toks):
            return
        t = toks[j]
        starts = []
        for fam, val in t.has("ATTR"):
            starts.append(((fam, val, (t.start, t.end)), j + 1))
            if fam == "color":
                starts += [((fam, v, (t.start, toks[k - 1].end)), k) for v, k in _colour_list(toks, j)]
        shade = t.has("SHADE") and j + 1 < len(toks) and _colour(toks[j + 1])
        if shade:
            starts.append((("color", f"{t.low} {_colour(toks[j + 1])}", (t.start, toks[j + 1].end)), j + 2))
        nxt = toks[j + 1] if j + 1 < len(toks) else None
        compounds = _noun_modifier(t) and nxt is not None and (nxt.has("NOUN") or _gerund(nxt))
        # a shade word before a colour is that colour's shade ("light brown cabinets"), never an
        # adjective of its own: otherwise "light" + "brown" is a second reading of the same words
        # an -ing adjective before a non-noun cannot compound: "matching white sink"
        gerund = _gerund(t) and not (nxt is not None and not nxt.has("NOUN") and nxt.has("ATTR"))
        if (t.has("ADJ") or any("VBN" in v.tags for v in t.has("VERB"))) and not gerund and not compounds \
                and not shade:
            # adjectives and past participles ("sloped ceiling"); an -ing word, or a countable noun
            # right before a noun ("party hat"), compounds instead
            starts.append((("other", t.low, (t.start, t.end)), j + 1))
        for mod, k in starts:
            ks = [k] + ([k + 1] if k < len(toks) and toks[k].has("COMMA") else [])
            for k2 in ks:
                for rest, m in self._mods(toks, k2):
                    if k2 != k and not rest:
                        continue  # a comma only between two modifiers
                    yield [mod] + rest, m

    def _nom(self, toks: list[Token], k: int, n: int, may_head_attr: bool):
        """Readings of tokens [k, k+n) as a compound noun: all but the head singular nouns."""
        words = toks[k:k + n]
        for pos, w in enumerate(words[:-1]):
            # "the cozy blanket": a word that can be an adjective modifies; "dining table", "living
            # room": an -ing word compounds, first in it ("park bench feeding pigeons" is no noun)
            if _gerund(w):
                if pos:
                    return None
                continue
            if w.has("ADJ") and not _noun_modifier(w) or not (
                    any(not x.plural_form or x.singular == w.low for x in w.has("NOUN")) or w.has("POSSN")):
                return None
        head = words[-1]
        if n > 1 and (any("VBG" in v.tags for v in head.has("VERB"))
                      or head.has("ADJ") and not lexicon.countable(head.low)):
            # "a white vase sitting on …", "keep the wearer warm": an -ing form, or an adjective that
            # is no countable noun, ends no compound ("kitchen counter" and "traffic light" do)
            return None
        colour = any(fam == "color" for fam, _ in head.has("ATTR"))
        readings = head.has("NOUN") + (head.has("HEAD") if may_head_attr or n > 1 and not colour else [])
        if not readings:
            return None
        span = (words[0].start, head.end)
        out = []
        for r in readings:
            name = " ".join([w.low for w in words[:-1]] + [r.singular])
            out.append((lexicon.Noun(name, r.plural_form), span))
        return out

    def _make_np(self, toks, i, end, mods, noun, head_span, det, num, count_span) -> Optional[NP]:
        attrs, spans, others = {}, [], []
        for fam, val, sp in mods:
            if fam == "other":
                others.append(val)
                continue
            if fam in attrs:
                return None  # "red white line": two values of one family on one object
            attrs[fam] = val
            spans.append((fam, sp))
        article_count = det in ("a", "an") and not noun.plural_form
        count = num if num is not None else (1 if article_count else None)
        word = toks[i].text if (num is not None or article_count) else None
        return NP(i, end, noun.singular, noun.plural_form, count, word, tuple(attrs.items()), tuple(others),
                  head_span, tuple(spans), count_span)

    def _with_of(self, base: NP, inner: NP, toks, m) -> NP:
        if inner.attributes or inner.modifiers or inner.count is not None and inner.number_word:
            return NP(base.start, m, base.name, base.plural_np, base.count, base.number_word, base.attributes,
                      base.modifiers, base.head_span, base.attr_spans, base.count_span, inner=inner)
        tail = " ".join(t.low for t in toks[inner.start:m])   # "piece of toast", "center of the room"
        return NP(base.start, m, f"{base.name} of {tail}", base.plural_np, base.count, base.number_word,
                  base.attributes, base.modifiers, (base.head_span[0], toks[m - 1].end), base.attr_spans,
                  base.count_span)

    def npl(self, toks, i, nested: bool = False) -> Iterator[tuple[list[NP], int]]:
        for first, j in self.np(toks, i, allow_of=not nested):
            yield [first], j
            for s, last in _separators(toks, j):
                for rest, m in self.npl(toks, s, nested):
                    if last or len(rest) > 1:  # "A, B and C": a comma-only list is an apposition
                        yield [first] + rest, m

    # --- clauses -------------------------------------------------------------------------
    def parses(self, toks: list[Token]) -> Iterator[dict]:
        n = len(toks)
        for subj, j in self.npl(toks, 0):
            if j == n:
                yield {"subj": subj, "form": "list"}
                continue
            aux = toks[j].low if toks[j].has("AUX") else None
            k = j + 1 if aux else j
            if k < n and toks[k].has("REL"):
                for obj, m in self.npl(toks, k + 1):
                    if m == n:
                        yield {"subj": subj, "form": "rel", "rel": toks[k].has("REL")[0], "rel_tok": toks[k], "obj": obj}
            for vps, m in self.vpl(toks, k, aux):
                if m == n and not any(_bare_noun_verb(vp) for vp in vps) and _agrees(subj, vps):
                    yield {"subj": subj, "form": "vp", "aux": aux, "vps": vps}
            # "A woman in a white shirt holds …", "The man on the motorcycle has …": the subject's
            # prepositional phrase names objects; its link is asked as the whole prompt. Only before a
            # verb phrase: "a cup on a plate" alone stays a relation.
            for pps, j2 in self._pps(toks, j):
                if not pps or pps[0][0] == "with":  # "with" complements are the noun phrase's own
                    continue
                aux2 = toks[j2].low if j2 < n and toks[j2].has("AUX") else None
                for vps, m in self.vpl(toks, j2 + 1 if aux2 else j2, aux2):
                    if m == n and not any(_bare_noun_verb(vp) for vp in vps) and _agrees(subj, vps):
                        yield {"subj": subj, "form": "vp", "aux": aux2, "vps": vps, "subj_pps": pps}

    def vpl(self, toks, i, aux) -> Iterator[tuple[list, int]]:
        for vp, j in self.vp(toks, i, aux):
            yield [vp], j
            for s, last in _separators(toks, j):
                for rest, m in self.vpl(toks, s, aux):
                    if last or len(rest) > 1:
                        yield [vp] + rest, m

    def vp(self, toks, i, aux) -> Iterator[tuple[dict, int]]:
        if i >= len(toks):
            return
        t = toks[i]
        for v in t.has("VERB"):
            # without a copula a caption's predicate may be a participle: "a vase sitting on a counter"
            # and a participle before "by" is a reduced passive ("a horse ridden by a man")
            reduced = i + 1 < len(toks) and toks[i + 1].low == "by"
            form = ({"VBG", "VBN"} if aux else {"VBD", "VBZ", "VBP", "VBG"} | ({"VBN"} if reduced else set())) & v.tags
            if not form:
                continue
            parts = [(None, i + 1)]
            if i + 1 < len(toks) and toks[i + 1].has("PART"):
                parts.append((toks[i + 1].low, i + 2))
            for part, j in parts:
                objs = [([], j)] + list(self.npl(toks, j))
                if j < len(toks) and (toks[j].has("ADJ") or toks[j].has("ATTR") or toks[j].has("LIT")) \
                        and not any({"VBN", "VBD", "VBG"} & x.tags for x in toks[j].has("VERB")):
                    # "sits empty in …", "reads 11:44": a predicate of the subject, asked as the whole prompt
                    for pps, m in self._pps(toks, j + 1):
                        yield {"verb": v, "tok": t, "form": form, "part": part, "obj": [], "pps": pps,
                               "complement": toks[j].low}, m
                for obj, k in objs:
                    for pps, m in self._pps(toks, k):
                        yield {"verb": v, "tok": t, "form": form, "part": part, "obj": obj, "pps": pps}, m
                        if (obj or pps) and m < len(toks) and toks[m].low in RELATIVE_PRONOUNS:
                            # "… near a soda cup which are sitting on a table": which noun the clause is
                            # about is not decided here; its objects are objects, the rest the whole prompt
                            aux2 = toks[m + 1].low if m + 1 < len(toks) and toks[m + 1].has("AUX") else None
                            for rel, m2 in self.vpl(toks, m + 2 if aux2 else m + 1, aux2):
                                yield {"verb": v, "tok": t, "form": form, "part": part, "obj": obj, "pps": pps,
                                       "relative": rel}, m2
                    if obj and v.lemma in SMALL_CLAUSE_VERBS and k < len(toks):
                        # "watching her child play at the playground": a bare verb after the object
                        for inner in toks[k].has("VERB"):
                            if "VB" in inner.tags:
                                for pps, m in self._pps(toks, k + 1):
                                    if pps:
                                        yield {"verb": v, "tok": t, "form": form, "part": part, "obj": obj,
                                               "pps": pps, "small_clause": True}, m

    def _pps(self, toks, i) -> Iterator[tuple[list, int]]:
        yield [], i
        if i < len(toks) and (toks[i].has("REL") or toks[i].has("PREP")):
            for obj, j in self.npl(toks, i + 1):
                for rest, m in self._pps(toks, j):
                    yield [(toks[i].low, obj)] + rest, m

    # --- meaning -------------------------------------------------------------------------
    def analyse(self, text: str) -> dict:
        """``{"objects": [NP …], "relations": [...], "whole": bool, "form": str}`` or raise Declined."""
        toks = self.tokenize(text)
        self._steps = 0
        readings = {}
        for r in self._readings(toks):
            readings.setdefault(_sig(r), r)
        if not readings:
            raise Declined("no derivation: the grammar does not cover this sentence")
        if len(readings) == 1:
            return next(iter(readings.values()))
        objs = {_sig({"objects": r["objects"]}) for r in readings.values()}
        if len(objs) > 1:
            raise Declined(f"ambiguous: {len(objs)} readings of the objects")
        first = next(iter(readings.values()))
        return {"objects": first["objects"], "relations": [], "whole": True, "form": "vp"}

    def _readings(self, toks: list[Token]) -> Iterator[dict]:
        """Meanings of the sentence; "S while S" (CLAUSE_CONJUNCTIONS): each clause parsed on its own,
        their objects and relations side by side."""
        cut = next((k for k, t in enumerate(toks) if t.has("CONJ")), None)
        if cut is None:
            yield from (self._meaning(p) for p in self.parses(toks))
            return
        lefts = [self._meaning(p) for p in self.parses(toks[:cut])]
        rights = list(self._readings(toks[cut + 1:])) if lefts else []
        for a in lefts:
            for b in rights:
                yield _join(a, b, cut + 1)

    def _meaning(self, p: dict) -> dict:
        nps = list(p["subj"])
        rels, whole = [], False

        def idx(np_: NP) -> int:
            return nps.index(np_)

        if p["form"] == "rel":
            nps += p["obj"]
            name, fam, inv = RELATIONS[p["rel"]]
            for s in p["subj"]:
                for o in p["obj"]:
                    rels.append({"subject": idx(s), "object": idx(o), "name": name, "family": fam,
                                 "text": p["rel_tok"].text.lower(), "inverse": inv,
                                 "span": (p["rel_tok"].start, p["rel_tok"].end)})
        elif p["form"] == "vp":
            for vp in p["vps"]:
                nps += vp["obj"] + [o for _, obj in vp["pps"] for o in obj]
                nps += [o for r in vp.get("relative", ()) for o in r["obj"] + [x for _, ob in r["pps"] for x in ob]]
                text = None if vp.get("small_clause") or vp.get("complement") or vp.get("relative") \
                    else self._verb_text(vp, p["aux"])
                if text is not None and vp["obj"] and not vp["pps"]:
                    targets, extra = vp["obj"], ""
                elif text is not None and not vp["obj"] and len(vp["pps"]) == 1 \
                        and vp["pps"][0][0] not in ("between", "among"):  # holds of the group, not of each
                    targets, extra = vp["pps"][0][1], " " + vp["pps"][0][0]
                else:
                    whole = True
                    continue
                lemma = vp["verb"].lemma
                passive = extra == " by" and not vp["part"] and "VBN" in vp["verb"].tags
                if passive and lemma in LOCATIVE_BY_VERBS:
                    whole = True  # "sat by a tree": where, not who; no relation guessed
                    continue
                name = " ".join(x for x in (lemma, vp["part"]) if x) + ("" if passive else extra)
                full = lexicon.progressive(lemma) if passive else " ".join(x for x in (text, vp["part"]) if x) + extra
                for s in p["subj"]:
                    for o in targets:
                        a, b = (o, s) if passive else (s, o)  # the passive's agent is the active's subject
                        rels.append({"subject": idx(a), "object": idx(b), "name": name, "family": "action",
                                     "text": full, "inverse": None, "span": (vp["tok"].start, vp["tok"].end)})
        for _, obj in p.get("subj_pps", ()):
            nps += obj
            whole = True
        # "of" complements with their own modifiers are objects too (their link asked as the whole prompt)
        for np_ in list(nps):
            for extra in ([np_.inner] if np_.inner is not None else []) + list(np_.withs):
                nps.append(extra)
                whole = True
        # adjectives of no family ("a crisp apple", "a hot air balloon") are kept on the object and
        # asked only through the whole prompt: read alone they ask "Is the hat party?"
        whole = whole or any(np_.modifiers for np_ in nps)
        order = sorted(range(len(nps)), key=lambda k: nps[k].start)
        remap = {old: new for new, old in enumerate(order)}
        for r in rels:
            r["subject"], r["object"] = remap[r["subject"]], remap[r["object"]]
        return {"objects": [nps[k] for k in order], "relations": rels, "whole": whole, "form": p["form"]}

    @staticmethod
    def _verb_text(vp: dict, aux: Optional[str]) -> Optional[str]:
        word = vp["tok"].low
        if aux:  # "is holding", "were attached"
            return word
        if lexicon.is_adjective(word):
            return None  # "two cars stuck on the road": a verb or an adjective; no relation guessed
        return lexicon.progressive(vp["verb"].lemma)


def _noun_modifier(t: Token) -> bool:
    """An adjective that is also a countable noun ("party", "sole", "chocolate") compounds when a noun
    follows; one that is no countable noun ("crisp", "warm") only modifies."""
    return bool(t.has("NOUN")) and lexicon.countable(t.low)


def _compound(raw: list[Token], i: int) -> Optional[Token]:
    """A COMPOUND_NOUNS entry at ``i`` as one NOUN token, in either number."""
    if i + 1 >= len(raw):
        return None
    first, last = raw[i], raw[i + 1]
    for c in COMPOUND_NOUNS:
        a, b = c.split()
        if first.low == a:
            readings = [lexicon.Noun(c, n.plural_form) for n in lexicon.nouns(last.text) if n.singular == b]
            if readings:
                t = Token(f"{first.text} {last.text}", first.start, last.end)
                t.cats += [("NOUN", n) for n in readings]
                return t
    return None


def _colour(t: Token) -> Optional[str]:
    return next((val for fam, val in t.has("ATTR") if fam == "color"), None)


def _colour_list(toks: list[Token], j: int) -> list[tuple[str, int]]:
    """Colours joined into one value: "black and white", "red, white and blue", the captions' "black
    gold and white" — a run of colours that ends in "and" + colour; (value, end) for each such run."""
    words, k, out = [_colour(toks[j])], j + 1, []
    while k < len(toks):
        if toks[k].has("AND") and k + 1 < len(toks) and _colour(toks[k + 1]):
            out.append((", ".join(words) + f" and {_colour(toks[k + 1])}", k + 2))
            break
        k += 1 if toks[k].has("COMMA") else 0
        if k >= len(toks) or not _colour(toks[k]):
            break
        words.append(_colour(toks[k]))
        k += 1
    return out


def _gerund(t: Token) -> bool:
    return any("VBG" in v.tags for v in t.has("VERB"))


def _separators(toks: list[Token], j: int) -> list[tuple[int, bool]]:
    """Where the next conjunct starts after a ",", "and" or ", and" at ``j``; True where it is the last."""
    if j < len(toks) and toks[j].has("AND"):
        return [(j + 1, True)]
    if j < len(toks) and toks[j].has("COMMA"):
        return [(j + 1, False)] + ([(j + 2, True)] if j + 1 < len(toks) and toks[j + 1].has("AND") else [])
    return []


def _agrees(subj: list[NP], vps: list[dict]) -> bool:
    """A present-tense verb agrees with its subject: "cat" (VBP) after "the sharp black" is no verb,
    "slice" after "the board and the grater" is."""
    plural = len(subj) > 1 or subj[0].plural_np
    return all(not (vp["form"] == {"VBZ"} and plural or vp["form"] == {"VBP"} and not plural) for vp in vps)


def _bare_noun_verb(vp: dict) -> bool:
    """A verb with nothing after it that is also a noun is read as the noun: "a blue cell phone" is
    no cell that phones. (A verb with an object or a complement keeps its verb reading.)"""
    return not (vp["obj"] or vp["pps"] or vp["part"] or vp.get("complement")) and bool(vp["tok"].has("NOUN"))


def _join(a: dict, b: dict, offset: int) -> dict:
    """Two clauses' meanings as one; ``b``'s token positions shifted by ``offset``."""
    n = len(a["objects"])
    objs = a["objects"] + [replace(o, start=o.start + offset, end=o.end + offset) for o in b["objects"]]
    rels = a["relations"] + [dict(x, subject=x["subject"] + n, object=x["object"] + n) for x in b["relations"]]
    return {"objects": objs, "relations": rels, "whole": a["whole"] or b["whole"], "form": "clauses"}


def _sig(r: dict) -> str:
    objs = [(o.name, o.plural_np, o.count, o.attributes, o.modifiers, o.start) for o in r["objects"]]
    rels = [(x["subject"], x["object"], x["name"], x["family"], x["text"]) for x in r.get("relations", [])]
    return json.dumps([objs, rels, r.get("whole")], default=str)
