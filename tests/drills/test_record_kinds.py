"""Every record kind a run keeps is read back as strictly as a user's file (issue 36, class 1): the schema
level of the property. For every kind of :data:`t2i_audit.records.RECORD_KINDS`, a sound record with one
field mutated — a value of another type, out of its range, NaN or infinite, an unknown value of a closed set —
is refused by the one reader every command uses, with ``file:line`` (a JSONL record) or the file (a JSON
document) and the field's name. The mutations are derived from each schema's own field types, so a field or a
kind added later is mutated too. The command level — every command that reads a kind refuses it, exit 2,
nothing rewritten — is tests/spine/test_command_safety.py.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
import typing
from pathlib import Path

import annotated_types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from t2i_audit.errors import AuditError
from t2i_audit.records import RECORD_KINDS, problems_of, read_document, read_records

from .test_hostile_input import PROPERTY
from .test_hostile_probe_and_label_files import EARLY, FAILURE

SHA = "3d4247a70b0049e8e187d87a9346d90bcdbd63dca33a62992906dadb99dbb165"
PROMPT = {"id": "pa32e0fdf24d4", "suite": "mini", "suite_version": "1", "template": "one", "category": "color",
          "text": "a red cross", "slots": {"c1": "red", "o1": "cross"}, "families": {"c1": "color", "o1": "shape"},
          "spans": {"c1": [2, 5], "o1": [6, 11]}, "relations": [], "bindings": [["color", "red", "cross"]],
          "objects": [{"id": "o1", "name": "cross", "count": 1, "attributes": {"color": "red"}}],
          "questions": [{"id": "q0", "kind": "exists", "text": "Is there a cross?", "object": "o1", "depends_on": []}],
          "split": "train", "twin": None}
IMAGE = {"prompt_id": "pa32e0fdf24d4", "sample": 0, "seed": 437373235303649897, "path": "images/pa32e0fdf24d4/0.png",
         "sha256": SHA, "width": 32, "height": 32, "pixel_digest": "ff" * 192, "seconds": 0.79, "flags": [],
         "model": "mini", "rank": 0, "batch": 0, "batch_members": ["pa32e0fdf24d4/0"]}
SCORE = {"prompt_id": "pa32e0fdf24d4", "sample": 0, "image_sha256": SHA, "scorer": "mini-pixel",
         "scorer_model": "mini-pixel-judge", "kind": "question", "question_id": "q0", "metric": None, "value": 1.0,
         "verdict": True, "failures": [{"type": "missing_object", "slot": "o1", "object": "o1"}], "truncated": False,
         "extra": {}}

# one sound record of every kind, as the tool writes it (the real files' shapes: a mini run, docs/records.md)
SAMPLES: dict[str, dict] = {
    "prompts": PROMPT, "images": IMAGE, "image-shard": IMAGE, "scores": SCORE, "score-shard": SCORE,
    "manifest": {"fingerprint": "fdb5e6", "model": {"name": "mini", "source": "mini"}, "resume_argv": ["run"],
                 "finished": {"images.jsonl": 16, "scores/mini-pixel.jsonl": 48},
                 "stages": {"generate": {"status": "done", "planned_batch_size": 4, "requested": 16,
                                         "settings": {"images_per_prompt": 2}},
                            "score": {"status": "done", "scorers": {"mini-pixel": {"scored": 16}}, "running": []}}},
    "summary": {"report": {"images": 16}, "probes": {"fit_key": "k"}},
    "calibration": {"scorers": {"mini-pixel": {"levels": {"prompt": {"color": {"n": 12, "accuracy": 0.9,
                                                                               "kappa": 0.7}}}}}},
    "activation-index": {"row": 0, "prompt_id": "pa32e0fdf24d4"},
    "selection": {"prompt_id": "pa32e0fdf24d4", "sample": 1, "seed": 5, "risk": 0.4, "kept": True, "random": False,
                  "made_with": "0123456789abcdef"},
    "early-risk": {"prompt_id": "pa32e0fdf24d4", "sample": 0, "category": "color", "step": 1, "risk": 0.3,
                   "failed": False},
    "failure-probe": FAILURE, "early-probes": EARLY,
    "refusals": {"prompt_id": "pa32e0fdf24d4", "sample": 0, "reason": "content_filter", "seed": 5, "status": 400,
                 "detail": "the request was rejected by the safety system", "model": "endpoint-127.0.0.1-8000"},
}

# a value of each JSON type, and the tags of the Python types a strict field of that type accepts
VALUES = {"str": "false", "int": 7, "float": 0.5, "bool": True, "list": [], "dict": {}, "none": None}
ACCEPTS = {str: {"str"}, int: {"int"}, float: {"float", "int"}, bool: {"bool"}, list: {"list"}, dict: {"dict"},
           type(None): {"none"}}


def _accepted(ann) -> set[str]:
    """The JSON value types a field annotation takes (strict: "0.5" is no number, 1 no bool)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _accepted(args[0])
    if origin is typing.Union:
        return set().union(*(_accepted(a) for a in args))
    if origin is typing.Literal:
        return {"literal"}
    if origin in (list, dict):
        return ACCEPTS[origin]
    if isinstance(ann, type) and (issubclass(ann, dict) or hasattr(ann, "model_fields")):  # a nested schema
        return {"dict"}
    return set(ACCEPTS.get(ann, {"str", "int", "float", "bool", "list", "dict", "none"}))


def _numeric_limits(ann, metadata=()) -> list:
    """The annotated_types bounds of a numeric field (Ge, Gt, Le, Lt), through Optional/Annotated."""
    out = [m for m in metadata if isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le,
                                                   annotated_types.Lt))]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        out += _numeric_limits(args[0], [m for a in args[1:] for m in (getattr(a, "metadata", None) or [a])])
    elif origin is typing.Union:
        for a in args:
            out += _numeric_limits(a)
    return out


def _mutations(kind: str) -> list[tuple[str, str, object]]:
    """(field, what, value) for every top-level field of the kind's schema present in its sample: a value of
    each JSON type the field does not take, each bound crossed, NaN and infinity where it takes numbers, an
    unknown value where it takes a closed set."""
    model = RECORD_KINDS[kind].model()
    sample = SAMPLES[kind]
    out = []
    for name, info in model.model_fields.items():
        if name not in sample:
            continue
        ann = info.annotation
        accepted = _accepted(ann)
        if "literal" in accepted:
            out.append((name, "unknown value", "no-such-value"))
            accepted = (accepted - {"literal"}) | {"str"}
        out += [(name, f"wrong type ({tag})", value) for tag, value in VALUES.items() if tag not in accepted]
        numeric = accepted & {"int", "float"}
        if numeric:
            out += [(name, "not finite", v) for v in (math.nan, math.inf)]
            for b in _numeric_limits(ann, info.metadata):
                bound = next(getattr(b, k) for k in ("ge", "gt", "le", "lt") if hasattr(b, k))
                past = bound - 1 if isinstance(b, (annotated_types.Ge, annotated_types.Gt)) else bound + 1
                out.append((name, "out of range", past if "float" in numeric or isinstance(past, int) else int(past)))
    return out


MUTATIONS = [(kind, *m) for kind in sorted(RECORD_KINDS) for m in _mutations(kind)]


def test_every_record_kind_has_a_sample_that_its_schema_accepts():
    assert set(SAMPLES) == set(RECORD_KINDS), "a kind added to RECORD_KINDS needs a sound sample here"
    for kind, sample in SAMPLES.items():
        assert problems_of(kind, sample) == [], kind


def test_every_kind_has_mutations_of_each_class():
    """The derived mutations reach every kind; numbers get NaN and range mutations where the schema has them."""
    by_kind = {k: {what.split(" (")[0] for kk, _, what, _ in MUTATIONS if kk == k} for k in RECORD_KINDS}
    assert all("wrong type" in whats for whats in by_kind.values()), by_kind
    assert {"not finite", "out of range"} <= by_kind["scores"] | by_kind["images"]
    assert "unknown value" in by_kind["scores"]  # kind, failure types


def _write(kind: str, records: list) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="records-"))
    path = folder / Path(RECORD_KINDS[kind].pattern.replace("*", "x"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if RECORD_KINDS[kind].lines:
        path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records[-1], allow_nan=True))
    return path


@PROPERTY
@given(m=st.sampled_from(MUTATIONS))
def test_a_mutated_record_of_any_kind_is_refused_with_its_place(m):
    kind, field, what, value = m
    record = copy.deepcopy(SAMPLES[kind])
    record[field] = value
    assert problems_of(kind, record), (kind, field, what, value)
    path = _write(kind, [SAMPLES[kind], record])
    with pytest.raises(AuditError) as e:
        if RECORD_KINDS[kind].lines:
            read_records(path, kind)
        else:
            read_document(path, kind)
    where = f"{path}:2: " if RECORD_KINDS[kind].lines else f"{path}: "
    assert str(e.value).startswith(where), (str(e.value), where)
    assert field in str(e.value) and "edited or damaged" in str(e.value), str(e.value)


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "null"])
def test_a_verdict_is_a_json_boolean_never_a_string_or_number(value):
    """The drill's reproducer: the string "false" is truthy in Python; it counted as a pass."""
    found = problems_of("scores", {**SCORE, "verdict": value})
    assert found and found[0].startswith("verdict: Input should be a valid boolean"), found


def test_a_torn_last_line_is_still_a_kill_not_damage():
    """The validated reader keeps the resume's rule: an append cut short is dropped, the rest read."""
    path = _write("scores", [SCORE])
    with open(path, "a") as f:
        f.write(json.dumps(SCORE)[:30])
    assert read_records(path, "scores") == [SCORE]
    with pytest.raises(AuditError, match=r":2: torn last line"):
        read_records(path, "scores", strict=True)
