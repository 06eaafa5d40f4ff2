"""Open word classes from dictionaries, never from letter patterns.

``lemminflect`` (a lexicon of English lemmas and their inflections) says which words can be a noun,
a verb or an adjective, and which tag a verb form has; ``inflect`` gives singular, plural and the
article. A word neither knows is unknown: the grammar then declines the prompt instead of guessing
a part of speech (an unknown word read as a noun is how "red hat was" became an object name).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional


@lru_cache(maxsize=1)
def _inflect():
    import inflect

    return inflect.engine()


def plural(name: str) -> str:
    """The plural of a (possibly compound) noun: "person" → "people", "piece of toast" → "pieces of toast"."""
    return _inflect().plural_noun(name)


def article(phrase: str) -> str:
    return _inflect().a(phrase).split(" ", 1)[0]


@dataclass(frozen=True)
class Noun:
    singular: str       # the name an object gets
    plural_form: bool   # this reading of the word is plural


@dataclass(frozen=True)
class Verb:
    lemma: str
    tags: frozenset     # Penn tags of this surface form: VB, VBD, VBG, VBN, VBP, VBZ


def _lemmas(word: str) -> dict:
    from lemminflect import getAllLemmas

    return getAllLemmas(word) or (getAllLemmas(word.lower()) if word != word.lower() else {})


@lru_cache(maxsize=None)
def nouns(word: str) -> tuple[Noun, ...]:
    """Noun readings of ``word``: singular and/or plural. "sheep" is both with one name; "people" is
    plural of "person"; "bus" is singular only (inflect's "bu" is no noun of the lexicon)."""
    low = word.lower()
    out = []
    if _is_noun(low) or word != low and _is_noun(word):
        out.append(Noun(low, False))
    sing = _inflect().singular_noun(low)
    if sing and sing != low and _is_noun(sing):
        out.append(Noun(sing, True))
    elif out and (sing == low or sing and _noun_forms(low).get("NNS") == (low,)):
        # invariant plural (sheep, fish), or a word that is its own and only plural in the lexicon
        # ("jeans": inflect's "jean" is no noun; "dog" lists "dogs" too): one name, either number
        out.append(Noun(low, True))
    return tuple(dict.fromkeys(out))


def _noun_forms(word: str) -> dict:
    from lemminflect import getAllInflections

    return getAllInflections(word, upos="NOUN")


def _is_noun(word: str) -> bool:
    from .vocab import EXTRA_NOUNS

    lem = _lemmas(word)
    return word.lower() in EXTRA_NOUNS or word in lem.get("NOUN", ()) + lem.get("PROPN", ())


@lru_cache(maxsize=None)
def verbs(word: str) -> tuple[Verb, ...]:
    from lemminflect import getAllInflections, getAllInflectionsOOV

    out = []
    for lemma in _lemmas(word).get("VERB", ()):
        # the lexicon's forms; its regular forms where it lists another ("leapt" for "leaped")
        known_forms, regular = getAllInflections(lemma, upos="VERB"), getAllInflectionsOOV(lemma, upos="VERB")
        forms = {t: set(known_forms.get(t, ())) | set(regular.get(t, ())) for t in {*known_forms, *regular}}
        tags = frozenset(t for t, fs in forms.items() if word.lower() in fs)
        if tags:
            out.append(Verb(lemma, tags))
    return tuple(out)


def is_adjective(word: str) -> bool:
    return "ADJ" in _lemmas(word)


def countable(word: str) -> bool:
    """The lexicon lists a plural distinct from the word ("counters"; not "warm")."""
    from lemminflect import getAllInflections

    return any(f != word.lower() for f in getAllInflections(word.lower(), upos="NOUN").get("NNS", ()))


def progressive(lemma: str) -> Optional[str]:
    """"-ing" form of a verb lemma from the lexicon ("sit" → "sitting")."""
    from lemminflect import getInflection

    forms = getInflection(lemma, tag="VBG")
    return forms[0] if forms else None


def known(word: str) -> bool:
    return bool(_lemmas(word))


@lru_cache(maxsize=None)
def action_lemma(name: str) -> str:
    """One name per action whatever wrote it: the suites' "-ing" form ("chasing", "jumping over") and the
    importers' lemma ("chase", "jump over") both become the lemma of the first word, the rest kept."""
    head, _, rest = str(name).strip().lower().partition(" ")
    readings = verbs(head)
    lemma = next((v.lemma for v in readings if "VBG" in v.tags), readings[0].lemma if readings else head)
    return f"{lemma} {rest}".strip()
