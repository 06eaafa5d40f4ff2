"""Import other benchmarks' prompt files into PromptRecords (docs/records.md), so their prompts
run through every stage: generate, score, probe, report. We ship no copy of their prompt lists;
the user points us at their own copy.

One module and one function per format, registered in :data:`IMPORTERS` (each module's
docstring cites the benchmark's own files that define the format):

* ``geneval`` — :mod:`.geneval`, ``evaluation_metadata.jsonl``;
* ``t2i-compbench`` — :mod:`.t2i_compbench`, ``<category>_val.txt`` read by :mod:`.grammar`, which
  accounts for every word of a line or declines it (word classes: :mod:`.vocab`, :mod:`.lexicon`);
* ``dpg`` — :mod:`.dpg`, ``dpg_bench.csv`` grouped by item_id with DSG dependencies.

Prompts the grammar declines can get DSG questions from an LLM at import time
(``prompts import --questions-by CARD``): :mod:`.llm_questions` (model, cards/questioners.yaml),
:mod:`.dsg` (the method's prompts and parsing); records are built by :func:`.dpg.dsg_record`.

:mod:`.records` builds the records (slots, spans, objects, relations, questions with
dependencies) the way :func:`t2i_audit.prompts.build_structure` does for suites. Every record
carries ``source`` (the format), ``source_file``, ``source_line`` and ``parsed``. Ids are
``"p" + sha1(source, template, text, occurrence)[:12]``: the same on every machine and for every
copy of the file; a repeated prompt keeps its own id (occurrence 1, 2 …).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import AuditError, did_you_mean
from ..safeload import loads_json, split_lines
from .dpg import import_dpg
from .geneval import import_geneval
from .records import make_record, nonempty, read_text, stable_id  # noqa: F401  (the builder, for custom importers)
from .t2i_compbench import T2IGrammar, concept_vocabulary, import_t2i_compbench, t2i_category  # noqa: F401

IMPORTERS: dict[str, Callable[..., list[dict]]] = {
    "geneval": import_geneval,
    "t2i-compbench": import_t2i_compbench,
    "dpg": import_dpg,
}


def import_prompts(path: str | Path, fmt: str, *, category: Optional[str] = None,
                   vocab_files: Iterable[str] = ()) -> list[dict]:
    """Read a benchmark's prompt file (format ``fmt``, see :data:`IMPORTERS`) into PromptRecords."""
    fn = IMPORTERS.get(fmt)
    if fn is None:
        raise AuditError(f"unknown import format {fmt!r}.{did_you_mean(fmt, IMPORTERS)}")
    if not Path(path).is_file():
        raise AuditError(f"{path}: file not found")
    return fn(Path(path), category=category, vocab_files=list(vocab_files))


REQUIRED_KEYS = ("id", "text", "category", "template", "objects", "questions")


def read_prompt_records(path: str | Path) -> list[dict]:
    """PromptRecords from a ``.jsonl`` (``prompts import`` / ``prompts export``), checked for the
    keys every stage reads; problems name file:line."""
    path = Path(path)
    records, seen = [], {}
    for i, line in split_lines(read_text(path)):  # "\n" only: U+2028 may sit inside a JSON string
        if not line.strip():
            continue
        r = loads_json(line, f"{path}:{i}", what="not a JSON object")
        if not isinstance(r, dict):
            raise AuditError(f"{path}:{i}: expected a PromptRecord object")
        missing = [k for k in REQUIRED_KEYS if k not in r]
        if missing:
            raise AuditError(f"{path}:{i}: not a PromptRecord: missing {', '.join(missing)}")
        _check_shape(r, f"{path}:{i}")
        if r["id"] in seen:
            raise AuditError(f"{path}:{i}: id {r['id']} repeats line {seen[r['id']]}")
        seen[r["id"]] = i
        r.setdefault("suite", r.get("source") or path.stem)
        for k, v in (("slots", {}), ("families", {}), ("spans", {}), ("relations", []), ("bindings", []),
                     ("split", "train"), ("twin", None), ("twin_id", None), ("twin_swap", None)):
            r.setdefault(k, v)
        r.setdefault("composition", "|".join(f"{k}={v}" for k, v in sorted(r["slots"].items())) or r["text"])
        records.append(r)
    return nonempty(records, path)


# the type of each key a stage reads; a record of another shape would crash a stage later
RECORD_TYPES = {"id": str, "text": str, "category": str, "template": str, "objects": list, "questions": list,
                "suite": str, "slots": dict, "families": dict, "spans": dict, "relations": list, "bindings": list,
                "split": str}


def _check_shape(r: dict, where: str) -> None:
    for key, typ in RECORD_TYPES.items():
        if key in r and not isinstance(r[key], typ):
            raise AuditError(f"{where}: not a PromptRecord: {key} must be a {typ.__name__}, "
                             f"not {type(r[key]).__name__}")
    if not r["id"]:
        raise AuditError(f"{where}: not a PromptRecord: empty id")
    if not all(isinstance(part, dict) for part in r["objects"] + r.get("relations", [])):
        raise AuditError(f"{where}: not a PromptRecord: objects and relations must be mappings")
    for q in r["questions"]:
        deps = q.get("depends_on") or [] if isinstance(q, dict) else None
        if not (isinstance(q, dict) and isinstance(q.get("id"), str) and isinstance(q.get("text"), str)
                and isinstance(deps, list) and all(isinstance(d, str) for d in deps)):
            raise AuditError(f"{where}: not a PromptRecord: each question needs a string id and text "
                             "(and depends_on, a list of question ids)")


def parse_summary(records: list[dict]) -> dict:
    """Counts for the CLI: prompts, parsed, not parsed, per category."""
    out: dict = {"prompts": len(records), "parsed": 0, "unparsed": 0, "categories": {}}
    for r in records:
        c = out["categories"].setdefault(r["category"], {"prompts": 0, "parsed": 0})
        c["prompts"] += 1
        ok = bool(r.get("parsed"))
        c["parsed"] += ok
        out["parsed" if ok else "unparsed"] += 1
    return out
