"""The files a run keeps, read back as strictly as a user's: one schema per record kind, one reader.

A run's own files are inputs of the next command: a score file edited by hand (a verdict ``"false"``, which
Python reads as true), a record written by another version, a number that became NaN. Every command reads
them through here, and so does ``verify`` — so a record is refused with ``file:line``, the key and the
reason (exit 2, before anything is written), never counted, ranked or crashed on.

:data:`RECORD_KINDS` is the registry: every kind of file a run holds that a command reads back, where it
lives in the run folder, and its schema (``"module:Class"``, imported on first use: a stage package that
is not installed keeps its schemas to itself). A kind added here is checked by every reader that names it,
by ``verify``, and by the property tests over every record kind (tests/drills/test_record_kinds.py).

What a schema checks is what a reader relies on: types taken strictly (``"0.5"`` is not a number, ``1`` is
not ``true``), ranges (a sample index is not negative, a probability lies in [0, 1]), finite numbers, known
values (a failure type, a stage status). Keys a newer version may add are let through.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Callable, Iterator, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from .errors import AuditError
from .finished_files import check_whole
from .safeload import jsonl_lines, loads_json, read_bytes

# --- strict field types (shared with probes/probe_files.py) -----------------------------------------

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
Probability = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1)]
Count = Annotated[int, Field(strict=True, ge=0)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
Name = Annotated[str, Field(strict=True, min_length=1)]
Sha256 = Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")]
MAX_LISTED = 5  # problems named in one error; the rest are counted


class Strict(BaseModel):
    """Types taken strictly; extra keys allowed (a newer version may store more: what is read is checked)."""

    model_config = ConfigDict(strict=True, extra="allow")


def _relative(v: str) -> str:
    p = PurePosixPath(v)
    if not v or p.is_absolute() or ".." in p.parts or "\\" in v:
        raise ValueError(f"{v!r} is not a path inside the run folder")
    return v


RunPath = Annotated[str, Field(strict=True, min_length=1)]

# --- the run's records ----------------------------------------------------------------------------


class Question(Strict):
    id: Name
    text: str
    kind: Optional[str] = None
    depends_on: list[str] = []


class PromptRecord(Strict):
    """prompts.jsonl (docs/records.md): the keys every stage reads."""

    id: Name
    text: str
    category: str
    template: str
    objects: list[dict]
    questions: list[Question]
    suite: Optional[str] = None
    slots: dict[str, Any] = {}
    families: dict[str, Any] = {}
    spans: dict[str, Any] = {}
    relations: list[dict] = []
    bindings: list = []
    split: Optional[str] = None
    twin: Optional[str] = None


class OfAnImage(Strict):
    """A record of one image of the run: its prompt and sample index."""

    prompt_id: Name
    sample: Count


class ImageRecord(OfAnImage):
    """images.jsonl and its shards (generate.py ``_write_batch``)."""

    path: RunPath
    sha256: Sha256
    seed: Optional[int] = None
    width: Optional[PositiveInt] = None
    height: Optional[PositiveInt] = None
    pixel_digest: Optional[Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]*$")]] = None
    seconds: Optional[NonNegative] = None
    flags: list[Literal["nan", "black", "nsfw"]] = []
    model: Optional[str] = None
    rank: Optional[Count] = None
    batch: Optional[Count] = None
    batch_members: Optional[list[str]] = None

    @field_validator("path")
    @classmethod
    def _inside(cls, v: str) -> str:
        return _relative(v)


FAILURE_TYPES = ("missing_object", "wrong_attribute", "swapped_binding", "attribute_leakage", "reversed_relation",
                 "wrong_relation", "wrong_count")


class Failure(Strict):
    type: Literal[FAILURE_TYPES]  # type: ignore[valid-type]
    slot: Optional[str] = None
    object: Optional[str] = None


class ScoreRecord(OfAnImage):
    """scores/<scorer>.jsonl and its shards (scorers/base.py ``record``): a verdict is true, false or null —
    never the string "false", which Python would count as a pass."""

    kind: Literal["question", "metric", "prompt"] = "question"
    image_sha256: Optional[str] = None  # compared with the image's: any other value is a stale record
    scorer: Optional[str] = None
    scorer_model: Optional[str] = None
    question_id: Optional[str] = None
    metric: Optional[str] = None
    value: Optional[Finite] = None
    verdict: Optional[StrictBool] = None
    failures: list[Failure] = []
    truncated: Optional[StrictBool] = None
    extra: Optional[dict] = None


class ActivationRow(Strict):
    """activations/<encoder>/index.jsonl: the row of each prompt (or image) in the arrays."""

    row: Count
    prompt_id: Name
    sample: Optional[Count] = None


REFUSAL_REASONS = ("content_filter", "not_an_image")


class Refusal(OfAnImage):
    """refusals.jsonl (t2i_audit/sources/recording.py): an image a hosted model or a lab's sampler did not give —
    the provider refused the prompt (content filter), or what came back is not an image. Never a composition
    failure: it is not scored, and reports count it apart."""

    reason: Literal[REFUSAL_REASONS]  # type: ignore[valid-type]
    detail: str = ""
    seed: Optional[int] = None
    status: Optional[Annotated[int, Field(strict=True, ge=100, le=599)]] = None
    model: Optional[str] = None


class ScanRecord(OfAnImage):
    """selection.jsonl (a ``select`` run): every scanned seed's risk and role."""

    seed: int
    risk: Optional[Probability] = None  # a whole image's row has none
    kept: Optional[StrictBool] = None
    random: Optional[StrictBool] = None
    made_with: Optional[str] = None


class EarlyRisk(OfAnImage):
    """probes/early_risk.jsonl: every image's out-of-fold risk per step (``probe --early``)."""

    step: Count
    risk: Probability
    failed: Union[StrictBool, Annotated[int, Field(strict=True, ge=0, le=1)]]


# "skipped": a stage this run's model cannot have (probes of a run without a pipeline: t2i_audit.sources.needs_pipeline)
STATUS = Literal["running", "done", "failed", "incomplete", "done_with_errors", "unavailable", "skipped"]


class Stage(Strict):
    status: Optional[STATUS] = None
    planned_batch_size: Optional[PositiveInt] = None
    requested: Optional[Count] = None


class GenerateStage(Stage):
    settings: Optional[dict] = None
    selection: Optional[dict] = None


class ScoreStage(Stage):
    scorers: Optional[dict[str, dict]] = None  # scorer → its counts: the scorers this run was scored with
    running: Optional[list[str]] = None


class Stages(Strict):
    prompts: Optional[Stage] = None
    generate: Optional[GenerateStage] = None
    score: Optional[ScoreStage] = None
    probe: Optional[Stage] = None
    report: Optional[Stage] = None


class Manifest(Strict):
    """manifest.json: what readers take from it (stage statuses, the batch plans, the scorers run, the model,
    the command that continues the run, the lines of each file a stage finished)."""

    stages: Stages = Stages()
    finished: dict[str, Count] = {}  # run-relative path → the lines its stage wrote when it finished it
    model: Optional[Union[dict, str]] = None
    fingerprint: Optional[str] = None
    resume_argv: Optional[list[str]] = None


class Summary(Strict):
    """summary.json: one section a stage (``report``, ``probes``), each rewritten by its stage alone."""

    report: Optional[dict] = None
    probes: Optional[dict] = None


class Agreement(Strict):
    n: Count
    accuracy: Optional[Probability] = None
    kappa: Optional[Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-1, le=1)]] = None


class CalibrationScorer(Strict):
    levels: dict[str, dict[str, Agreement]] = {}


class CalibrationReport(Strict):
    """calibration/report.json: the agreement ``report``, ``compare`` and ``probe`` weigh scorers by."""

    scorers: dict[str, CalibrationScorer] = {}


# --- the registry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordKind:
    pattern: str  # where it lives, relative to the run folder (fnmatch; "*" does not cross "/")
    schema: str  # "module:Class"
    lines: bool  # JSONL (one record a line) or one JSON document
    redo: str  # what rewrites it: the advice when it is refused (RUN: the run folder, NAME: the scorer)
    key: tuple[str, ...] = ()  # the fields that name a record: two records of one key in a file are refused
    repeats: str = ""  # where appending legitimately repeats a key: the merge's rule
    unique: bool = True  # a plain read refuses a repeated key (False: every reader of the kind is its merge)

    def advice(self, path: Path) -> str:
        """:attr:`redo` for the file ``path``, with its run folder and scorer filled in: a command to copy."""
        root = Path(path).parents[self.pattern.count("/")]
        return self.redo.replace("RUN", shlex.quote(str(root))).replace("NAME", Path(path).stem.split(".rank")[0])

    def model(self) -> type[BaseModel]:
        return _schema(self.schema)

    def key_of(self, record: dict) -> tuple:
        return tuple(record.get(f) for f in self.key)


@functools.lru_cache(maxsize=None)
def _schema(ref: str) -> type[BaseModel]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_HERE = __name__
IMAGE_KEY = ("prompt_id", "sample")
# one record per image and question (or metric, or the prompt's own): what verify, report and compare count once
SCORE_KEY = (*IMAGE_KEY, "scorer", "kind", "question_id", "metric")
RECORD_KINDS: dict[str, RecordKind] = {
    "prompts": RecordKind("prompts.jsonl", f"{_HERE}:PromptRecord", True, "made by `run`; remake the run",
                          key=("id",)),
    "images": RecordKind("images.jsonl", f"{_HERE}:ImageRecord", True, "rerun the command that made the run",
                         key=IMAGE_KEY,
                         repeats="none is written; the merge that rewrites it (generate._done_items) reads it with the "
                                 "shards and keeps one record an image, so rerunning the command repairs a repeat"),
    "image-shard": RecordKind("shards/images.rank*.jsonl", f"{_HERE}:ImageRecord", True,
                              "rerun the command that made the run", key=IMAGE_KEY, unique=False,
                              repeats="a regeneration appends the image again; the merge into images.jsonl takes "
                                      "the last record whose file has its sha256 (generate._done_items)"),
    "scores": RecordKind("scores/*.jsonl", f"{_HERE}:ScoreRecord", True,
                         "remove the file and rerun `t2i-audit score RUN --scorer NAME`", key=SCORE_KEY,
                         repeats="a score stage in progress appends an image's new records after its stale ones; "
                                 "its merge keeps the first finished, current group of each image "
                                 "(scorers/stage.compact_scores), and every other reader refuses a repeat"),
    "score-shard": RecordKind("scores/shards/*.jsonl", f"{_HERE}:ScoreRecord", True,
                              "remove the file and rerun `t2i-audit score RUN --scorer NAME`", key=SCORE_KEY,
                              unique=False, repeats="the same merge as scores/ (scorers/stage.compact_scores)"),
    "manifest": RecordKind("manifest.json", f"{_HERE}:Manifest", False, "restore it from a copy of the run"),
    "summary": RecordKind("summary.json", f"{_HERE}:Summary", False,
                          "remove it and rerun `t2i-audit probe RUN` and `t2i-audit report RUN`"),
    "calibration": RecordKind("calibration/report.json", f"{_HERE}:CalibrationReport", False,
                              "rerun `t2i-audit calibrate RUN --labels …`"),
    "activation-index": RecordKind("activations/*/index.jsonl", f"{_HERE}:ActivationRow", True,
                                   "remove that activations/ folder and rerun `t2i-audit probe RUN`", key=("row",)),
    "refusals": RecordKind("refusals.jsonl", f"{_HERE}:Refusal", True,
                           "remove the file and rerun the command that made the run (those images are asked again)",
                           key=IMAGE_KEY),
    "selection": RecordKind("selection.jsonl", f"{_HERE}:ScanRecord", True, "rerun the `select` that made the run",
                            key=IMAGE_KEY),
    "early-risk": RecordKind("probes/early_risk.jsonl", f"{_HERE}:EarlyRisk", True,
                             "rerun `t2i-audit probe RUN --early`", key=(*IMAGE_KEY, "step")),
    "failure-probe": RecordKind("probes/failure_probe.json", "t2i_audit.probes.probe_files:FailureProbe", False,
                                "fit it again with `t2i-audit probe RUN`"),
    "early-probes": RecordKind("probes/early_probes.json", "t2i_audit.probes.probe_files:EarlyProbes", False,
                               "fit them again with `t2i-audit probe RUN --early`"),
}

# who reads which kind, as it happens (tests record it to hold each command to what it reads)
_observers: list[Callable[[str, Path], None]] = []


def kind_of(rel: "str | PurePosixPath") -> Optional[str]:
    """The record kind of a file at ``rel`` (relative to its run folder), or None."""
    rel = PurePosixPath(rel).as_posix()
    for name, kind in RECORD_KINDS.items():
        if rel.count("/") == kind.pattern.count("/") and fnmatch.fnmatchcase(rel, kind.pattern):
            return name
    return None


# --- reading --------------------------------------------------------------------------------------


def key_path(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def _finite(value) -> bool:
    """Every number in a JSON value is finite (the quick pass; :func:`_non_finite` finds where, when not)."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(map(_finite, value.values()))
    if kind is list:
        return all(map(_finite, value))
    return True


def _non_finite(value, loc=()) -> Optional[tuple]:
    """The key path of the first NaN or infinity in a JSON value (None: every number is finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return loc
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _non_finite(v, (*loc, k))
        if found is not None:
            return found
    return None


def problems_of(kind: str, value: Any) -> list[str]:
    """What is wrong with one record of ``kind`` (``"key: reason"``; empty: sound)."""
    if not isinstance(value, dict):
        return [f"<root>: expected a JSON object, not {type(value).__name__}"]
    if not _finite(value):
        where = _non_finite(value)
        return [f"{key_path(where)}: number {_get(value, where)} is not finite"]
    try:
        RECORD_KINDS[kind].model().model_validate(value)
    except ValidationError as e:
        return [f"{key_path(err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
                + ("" if err["type"] == "missing" else f" (found {_shown(err.get('input'))})")
                for err in e.errors(include_url=False)]
    return []


def _get(value, loc):
    for k in loc:
        value = value[k]
    return value


def _shown(v) -> str:
    text = json.dumps(v, ensure_ascii=True, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def refusal(kind: str, path: Path, where: str, found: list[str]) -> AuditError:
    """The error for a record of ``kind`` in ``path`` at ``where`` (``file:line`` or file) with ``found`` problems."""
    more = f" (and {len(found) - MAX_LISTED} more)" if len(found) > MAX_LISTED else ""
    return AuditError(f"{where}: not a sound {kind} record: {'; '.join(found[:MAX_LISTED])}{more} — edited or "
                      f"damaged since t2i-audit wrote it; {RECORD_KINDS[kind].advice(path)}")


def _seen(kind: str, path: Path) -> None:
    for observe in _observers:
        observe(kind, path)


def iter_records(path: "Path | str", kind: str, *, strict: bool = False,
                 merging: bool = False) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a JSONL file of ``kind``, each checked; the first unsound one is an
    AuditError at ``file:line``, and so is a record whose key (:attr:`RecordKind.key`) an earlier line holds —
    a prompt id twice moves images to another category, an image twice is counted twice. ``merging``: the
    reader is the merge of a kind whose appends legitimately repeat (:attr:`RecordKind.repeats`: it applies
    its own rule). A file its stage finished holds the lines the stage recorded (:func:`check_whole`), unless the
    reader is the merge that writes it again (:mod:`t2i_audit.finished_files`). A torn last line (a kill's unfinished append) is dropped, as
    always."""
    path = Path(path)
    _seen(kind, path)
    spec = RECORD_KINDS[kind]
    if not merging:
        check_whole(path, spec.pattern.count("/"), spec.advice(path))  # depth: where its run folder is
    if merging and not spec.repeats:
        raise ValueError(f"{kind} records have no merge that allows repeats")
    first: dict[tuple, int] = {}
    for i, value in jsonl_lines(path, strict=strict):
        found = problems_of(kind, value)
        if found:
            raise refusal(kind, path, f"{path}:{i}", found)
        if spec.key and spec.unique and not merging:
            j = first.setdefault(spec.key_of(value), i)
            if j != i:
                raise repeated(kind, path, i, j, value)
        yield i, value


def repeated(kind: str, path: Path, line: int, earlier: int, record: dict) -> AuditError:
    """The error for a record of ``kind`` at ``path:line`` whose key line ``earlier`` holds already."""
    spec = RECORD_KINDS[kind]
    named = ", ".join(f"{f} {record.get(f)!r}" for f in spec.key if record.get(f) is not None)
    return AuditError(f"{path}:{line}: {kind} record {named} repeats line {earlier} (a file holds each "
                      f"{'/'.join(spec.key)} once; two would be read as two, or one would be lost) — edited or "
                      f"damaged since t2i-audit wrote it; {spec.advice(path)}")


def repeats_in(kind: str, numbered: "list[tuple[int, dict]]") -> list[tuple[int, int, dict]]:
    """(line, earlier line, record) of every record whose key an earlier line holds, in a kind whose plain read
    refuses repeats (none for the others): what ``verify`` lists where a reader stops at the first."""
    spec = RECORD_KINDS[kind]
    if not (spec.key and spec.unique):
        return []
    first: dict[tuple, int] = {}
    out = []
    for i, record in numbered:
        j = first.setdefault(spec.key_of(record), i)
        if j != i:
            out.append((i, j, record))
    return out


def read_records(path: "Path | str", kind: str, *, strict: bool = False, merging: bool = False) -> list[dict]:
    """Every record of the JSONL file ``path`` of ``kind``, checked (a missing file has none)."""
    path = Path(path)
    if not path.exists():
        _seen(kind, path)
        return []
    return [r for _, r in iter_records(path, kind, strict=strict, merging=merging)]


def score_records(path: "Path | str", *, merging: bool = False) -> list[dict]:
    """The records of a score file (``scores/<scorer>.jsonl`` or a shard under ``scores/shards/``), checked;
    ``merging``: the score stage's merge reads it (an image's records may repeat: it keeps one group)."""
    path = Path(path)
    return read_records(path, "score-shard" if path.parent.name == "shards" else "scores", merging=merging)


def read_document(path: "Path | str", kind: str) -> dict:
    """The JSON document ``path`` of ``kind``, checked; a missing file is ``{}``."""
    path = Path(path)
    _seen(kind, path)
    if not path.exists():
        return {}
    value = loads_json(read_bytes(path), str(path), finite=False)  # NaN is named by its key below
    found = problems_of(kind, value)
    if found:
        raise refusal(kind, path, str(path), found)
    return value


def check_run(root: "Path | str", kinds: "tuple[str, ...] | list[str]") -> None:
    """Read every file of ``kinds`` in the run folder ``root`` through its schema, now: a command that reads
    them only after work it would lose (an extraction, a replay) refuses a damaged one before it starts."""
    root = Path(root)
    for kind in kinds:
        spec = RECORD_KINDS[kind]
        for path in sorted(root.glob(spec.pattern)):
            if spec.lines:
                read_records(path, kind)
            else:
                read_document(path, kind)
