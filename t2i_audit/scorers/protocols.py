"""Judge protocols as data (``t2i_audit/cards/protocols.yaml``): the question wording, the answer words and how
they are read, count handling, the atoms and the aggregation a VLM judge applies. Pure Python, no torch.

A scorer card names its protocol (``protocol:``, default :data:`DEFAULT`); the judge stamps every record with
``extra.protocol`` and ``extra.protocol_hash`` so that a run says how it was judged, and ``compare`` refuses to
set side by side runs judged differently (:func:`run_protocols`). Also here: what the score records say a
scorer declined (:func:`declined`), for the report and the post-scoring warning.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import yaml

from ..errors import AuditError, did_you_mean

FILE = Path(__file__).resolve().parents[1] / "cards" / "protocols.yaml"
DEFAULT = "t2i-audit"
# GenEval 2's number words (evaluation.py return_numeric_string): one..ten, anything else 'other'
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@lru_cache(maxsize=None)
def _load() -> dict:
    data = yaml.safe_load(FILE.read_text()) or {}
    return dict(data.get("protocols") or {})


def names() -> list[str]:
    return sorted(_load())


def protocol_hash(card: Mapping) -> str:
    return hashlib.sha1(json.dumps(dict(card), sort_keys=True, default=str).encode()).hexdigest()[:12]


def get_protocol(name: str | None, *, scorer: str = "") -> dict:
    """The protocol entry (plus ``name`` and ``hash``); unknown or described-only names raise."""
    name = name or DEFAULT
    table = _load()
    if name not in table:
        raise AuditError(f"scorer {scorer!r}: unknown judge protocol {name!r} (protocols.yaml)."
                         + did_you_mean(name, list(table)))
    p = dict(table[name])
    if not p.get("implemented"):
        raise AuditError(f"scorer {scorer!r}: judge protocol {name!r} is described, not implemented by "
                         f"VlmJudge ({p.get('why', 'no next-token reading')}); source: {p.get('source')}")
    return {**p, "name": name, "hash": protocol_hash(table[name])}


# --- GenEval 2 ---------------------------------------------------------------------------------------------
def number_word(n: int) -> str:
    return NUMBER_WORDS[n - 1] if 1 <= n <= len(NUMBER_WORDS) else str(n)


def count_answers(word: str) -> list[str]:
    """GenEval 2's answer variants of a "How many" question (evaluation.py soft_tifa), in its order."""
    digit = str(NUMBER_WORDS.index(word) + 1) if word in NUMBER_WORDS else "other"
    return [word, word.capitalize(), " " + word, " " + word.capitalize(), digit, " " + digit]


def geneval2_atoms(prompt: Mapping) -> list[dict]:
    """GenEval 2's atoms of a prompt: ``{"text", "answers"}`` each (answers None = the protocol's yes words).

    A record carrying GenEval 2's own ``vqa_list`` ([question, answer] pairs of geneval2_data.jsonl) uses it
    verbatim; otherwise its question forms over our objects: per object "How many X are in the image?" (every
    object, its number word), our attribute questions, "Are there any X in the image?"; then our relation
    questions — the forms of geneval2_data.jsonl."""
    own = prompt.get("vqa_list")
    if own:
        return [{"text": q, "answers": count_answers(a) if q.startswith("How many") else None} for q, a in own]
    qs = list(prompt.get("questions") or [])
    out = []
    for o in prompt.get("objects") or []:
        out.append({"text": f"How many {o['plural']} are in the image?",
                    "answers": count_answers(number_word(int(o.get("count") or 1)))})
        out += [{"text": q["text"], "answers": None} for q in qs
                if q.get("kind") == "attribute" and q.get("object") == o["id"]]
        out.append({"text": f"Are there any {o['plural']} in the image?", "answers": None})
    out += [{"text": q["text"], "answers": None} for q in qs if q.get("kind") == "relation"]
    return out


def soft_tifa(p_correct: Sequence[float], floor: float | None = 1e-12) -> tuple[float | None, float | None]:
    """(arithmetic, geometric mean) of the atoms' P(correct). ``floor``: each atom's GM floor (ours 1e-12);
    None is scipy.stats.gmean's value (GenEval 2): 0 when an atom is 0."""
    if not p_correct:
        return None, None
    am = sum(p_correct) / len(p_correct)
    if floor is None and min(p_correct) <= 0:
        return am, 0.0
    gm = math.exp(sum(math.log(max(float(p), floor or 0.0)) for p in p_correct) / len(p_correct))
    return am, gm


# --- what a run's records say --------------------------------------------------------------------------------
def _records(scores_dir: Path) -> Iterable[tuple[str, dict]]:
    for path in sorted(Path(scores_dir).glob("*.jsonl")):
        with path.open() as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        yield path.stem, json.loads(line)
                    except json.JSONDecodeError:
                        continue  # verify reports damaged lines; here they just do not count


def run_protocols(scores_dir: Path) -> dict[str, set[str]]:
    """{scorer: protocol names its records carry}; judges without protocols (detectors, CLIP) are absent."""
    out: dict[str, set[str]] = {}
    for name, r in _records(scores_dir):
        p = (r.get("extra") or {}).get("protocol")
        if p:
            out.setdefault(name, set()).add(p)
    return out


def declined(scores_dir: Path) -> dict[str, dict]:
    """Per scorer: questions it was asked (flagged images and DSG-skipped questions left out), how many it
    declined (``extra.unsupported``: it gives no answer to such a question), by question kind, and the
    reasons given (``extra.reason`` of a declined answer, else the prompt record's ``unsupported_reason``)."""
    out: dict[str, dict] = {}
    for name, r in _records(scores_dir):
        ex = r.get("extra") or {}
        if r.get("kind") != "question" or ex.get("excluded") or ex.get("skipped_by"):
            continue
        s = out.setdefault(name, {"asked": 0, "declined": 0, "kinds": {}, "reasons": {}})
        s["asked"] += 1
        if ex.get("unsupported"):
            s["declined"] += 1
            kind = str(ex.get("kind") or "other")
            s["kinds"][kind] = s["kinds"].get(kind, 0) + 1
            why = ex.get("reason") or (ex["unsupported"] if isinstance(ex["unsupported"], str) else None)
            if why:
                s["reasons"][why] = s["reasons"].get(why, 0) + 1
    return out


def declined_text(name: str, s: Mapping) -> str:
    """One line: "mini-pixel declined 40 of 40 questions (exists 20, attribute 20)"."""
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["kinds"].items(), key=lambda kv: (-kv[1], kv[0])))
    why = "; ".join(f"{w} ({n})" for w, n in sorted(s["reasons"].items(), key=lambda kv: -kv[1])[:3])
    return (f"{name} declined {s['declined']} of {s['asked']} questions"
            + (f" ({kinds})" if kinds else "") + (f": {why}" if why else ""))


def unsupported_warning(scores_dir: Path, share: float = 0.5) -> str | None:
    """A warning when a scorer declined (``unsupported``) most of the questions it was asked: who declined what,
    and which scorers answer such questions (scorers of this run that declined none; the VLM judges, which
    answer every kind). None when every scorer answered most of its questions."""
    from ..deciding import scorer_kind
    from .registry import load_cards

    dec = declined(scores_dir) if Path(scores_dir).is_dir() else {}
    most = {n: s for n, s in sorted(dec.items()) if s["asked"] and s["declined"] > share * s["asked"]}
    if not most:
        return None
    answered = [f"{n} (answered {s['asked']} of {s['asked']} here)" for n, s in sorted(dec.items())
                if s["asked"] and not s["declined"]]
    judges = [n for n, c in sorted(load_cards().items()) if scorer_kind(c) == "vlm" and not n.startswith("tiny-")]
    example = ([n for n, s in sorted(dec.items()) if s["asked"] and not s["declined"]] + judges + ["NAME"])[0]
    return ("warning: scoring ran, but most questions went unanswered (unsupported, not failed): "
            + "; ".join(declined_text(n, s) for n, s in most.items()) + ". Scorers that answer them: "
            + "".join(f"{a}; " for a in answered) + f"the VLM judges {', '.join(judges)} (every question kind)"
            + f" - e.g. `t2i-audit score RUN --scorer {example}`.")
