"""The Scorer base classes and the ScoreRecord schema. No torch at import.

Writing a scorer (a user plug-in, the mini-world pixel judge, …):

* Subclass :class:`QuestionScorer` when your model answers yes/no questions about an image:
  implement :meth:`QuestionScorer.load_model` (optional) and
  :meth:`QuestionScorer.answer` — for each item, a dict ``query id -> Answer``. The base class
  builds the queries (the prompt's questions plus probe queries used to type failures, see
  :mod:`t2i_audit.scorers.verdicts`), resolves the DSG dependencies, types failures, and
  emits one ``question`` record per prompt question plus one ``prompt`` record per image.
  Add ``metric`` records by overriding :meth:`QuestionScorer.metrics`.
* Subclass :class:`Scorer` directly for anything else: implement :meth:`Scorer.score`,
  returning for each item the list of its records (build them with :meth:`Scorer.record`;
  the last one should be the ``prompt`` record from :meth:`Scorer.prompt_record`).

A scorer is built from a *card* (a dict, usually one YAML file in ``t2i_audit/cards/scorers``;
see the comment at the top of ``default.yaml`` there for the schema) and a device. It must be
stateless between batches: the stage loop (:mod:`t2i_audit.scorers.stage`) decides what to
score, decodes each image once, skips flagged images (:meth:`Scorer.excluded_records`) and
appends the records to ``scores/<name>.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import AuditError
from . import verdicts

RECORD_KEYS = ("prompt_id", "sample", "image_sha256", "category", "scorer", "scorer_model",
               "scorer_revision", "kind", "question_id", "metric", "value", "verdict",
               "failures", "truncated", "extra")


@dataclass
class ScoreItem:
    """One image to score: its PromptRecord, its ImageRecord, and the decoded image.

    ``image`` is a ``PIL.Image.Image`` in RGB, or ``None`` for a flagged (excluded) image.
    """

    prompt: dict
    image_record: dict
    image: Any = None
    path: Path | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.image_record["prompt_id"], int(self.image_record.get("sample", 0)))

    @property
    def flags(self) -> list[str]:
        return list(self.image_record.get("flags") or [])


@dataclass
class Answer:
    """A scorer's answer to one query.

    ``value``: the raw number (P(yes), probability of the true class, a count …);
    ``passed``: the decision (``None`` = this scorer cannot answer this kind of query);
    ``extra``: anything worth keeping (boxes, the predicted class …).
    """

    value: float | None
    passed: bool | None
    extra: dict = field(default_factory=dict)
    truncated: bool = False


def card_hash(card: Mapping) -> str:
    """Fingerprint of everything in a card that can change a record (not the description)."""
    keep = {k: v for k, v in card.items()
            if k not in ("description", "measures", "_file", "known_agreement", "download_gb")}
    return hashlib.sha1(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:12]


class Scorer:
    """Base class of every scorer. See the module docstring for how to write one."""

    #: class-level defaults; the card overrides them
    family: str = "custom"

    def __init__(self, card: Mapping, *, device: str = "cpu"):
        self.card = dict(card)
        self.name: str = self.card["name"]
        self.family = self.card.get("family", self.family)
        self.device = device
        self._loaded = False

    # --- metadata ---------------------------------------------------------------------------
    @property
    def model_cfg(self) -> dict:
        return dict(self.card.get("model") or {})

    @property
    def model_id(self) -> str:
        """What goes into ``scorer_model``: e.g. ``ViT-L-14/openai`` or a repo id / folder."""
        m = self.model_cfg
        mid = str(m.get("id", "none"))
        if m.get("pretrained"):
            mid += f"/{Path(str(m['pretrained'])).name if m.get('local') else m['pretrained']}"
        return mid

    def resolved_model(self, cfg: Mapping | None = None) -> dict:
        """The model section to load from (``self.model_cfg`` unless given). An id
        ``tiny:<kind>`` is a tiny random model built once on this machine (tests, quickstart)."""
        cfg = dict(self.model_cfg if cfg is None else cfg)
        mid = str(cfg.get("id", ""))
        if mid.startswith("tiny:"):
            from ..tiny.scorers import materialize

            cfg = {**cfg, **materialize(mid[5:])}
        return cfg

    @property
    def revision(self) -> str:
        return str(self.model_cfg.get("revision") or "main")

    @property
    def thresholds(self) -> dict:
        return dict(self.card.get("thresholds") or {})

    @property
    def fingerprint(self) -> str:
        return card_hash(self.card)

    def metadata(self) -> dict:
        c = self.card
        return {"name": self.name, "description": c.get("description", ""), "family": self.family,
                "model": self.model_id, "revision": self.revision, "measures": c.get("measures", ""),
                "range": c.get("range"), "higher_is_better": c.get("higher_is_better", True),
                "applied": self.model_details()}

    def model_details(self) -> dict:
        """What loading applied beyond the card (e.g. the activation and preprocessing that a
        CLIP checkpoint tag prescribes): ``{attribute: model.applied}`` for each loaded model
        that carries an ``applied`` dict (:class:`~t2i_audit.scorers.clip_models.ClipModel`)."""
        return {k: dict(v.applied) for k, v in vars(self).items()
                if isinstance(getattr(v, "applied", None), dict)}

    # --- lifecycle --------------------------------------------------------------------------
    def load(self) -> "Scorer":
        """Load weights once (idempotent). Subclasses implement :meth:`load_model`."""
        if not self._loaded:
            try:
                self.load_model()
            except AuditError:
                raise
            except (OSError, ValueError, RuntimeError, KeyError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise AuditError(
                    f"scorer {self.name!r} ({self.card.get('_file', 'card')}): cannot load model "
                    f"{self.model_id!r} on {self.device}: {type(e).__name__}: {first[:300]}. "
                    f"Offline or a private model? Point it at a local folder: "
                    f"--model {self.name}=PATH (or a card with model.id: PATH)") from e
            self._loaded = True
        return self

    def load_model(self) -> None:
        """Load the model(s) onto ``self.device``. Import torch & co. here, not at module top."""

    def score(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        """For each item (never flagged), the list of its records; the prompt record last."""
        raise NotImplementedError(f"{type(self).__name__}.score")

    # --- records ----------------------------------------------------------------------------
    def record(self, item: ScoreItem, kind: str, *, question_id: str | None = None,
               metric: str | None = None, value: float | None = None,
               verdict: bool | None = None, failures: list | None = None,
               truncated: bool = False, extra: dict | None = None) -> dict:
        if kind not in ("question", "metric", "prompt"):
            raise ValueError(f"record kind must be question|metric|prompt, not {kind!r}")
        ir = item.image_record
        return {
            "prompt_id": ir["prompt_id"], "sample": int(ir.get("sample", 0)),
            "image_sha256": ir.get("sha256"), "category": item.prompt.get("category"),
            "scorer": self.name, "scorer_model": self.model_id,
            "scorer_revision": self.revision, "kind": kind, "question_id": question_id,
            "metric": metric, "value": None if value is None else float(value),
            "verdict": verdict, "failures": list(failures or []), "truncated": bool(truncated),
            "extra": dict(extra or {}),
        }

    def prompt_record(self, item: ScoreItem, verdict: bool | None, failures: list,
                      *, value: float | None = None, truncated: bool = False,
                      extra: dict | None = None) -> dict:
        """The per-image summary line. ``extra.card_hash`` marks it finished for resume."""
        ex = {"card_hash": self.fingerprint, **(extra or {})}
        return self.record(item, "prompt", value=value, verdict=verdict, failures=failures,
                           truncated=truncated, extra=ex)

    def excluded_records(self, item: ScoreItem) -> list[dict]:
        """Records for a flagged image: verdict null, ``extra.excluded: "flag"``."""
        ex = {"excluded": "flag", "flags": item.flags}
        recs = [self.record(item, "question", question_id=q["id"], extra=ex)
                for q in item.prompt.get("questions", [])]
        recs.append(self.prompt_record(item, None, [], extra=ex))
        return recs


class QuestionScorer(Scorer):
    """A scorer that answers yes/no queries; the base class does dependencies and failure typing.

    Subclasses implement :meth:`answer`. Card keys used here: ``templates.attribute`` and
    ``templates.relation`` (probe question texts, see ``verdicts.DEFAULT_TEMPLATES``).
    """

    def queries(self, prompt: Mapping) -> list[dict]:
        return verdicts.build_queries(prompt, (self.card.get("templates") or {}))

    def answer(self, items: Sequence[ScoreItem],
               queries: Sequence[Sequence[dict]]) -> list[dict[str, Answer]]:
        """For each item, ``{query id: Answer}`` for its queries (missing id = cannot answer).

        ``queries[i]`` holds item i's query dicts (keys as PromptRecord questions: ``id``,
        ``kind``, ``text``, ``object``/``subject``, ``family``, ``value``, ``number``, and
        ``probe`` — ``None`` for the prompt's own questions).
        """
        raise NotImplementedError(f"{type(self).__name__}.answer")

    def metrics(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        """Extra ``metric`` records per item (default none)."""
        return [[] for _ in items]

    def score(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        qs = [self.queries(it.prompt) for it in items]
        answers = self.answer(items, qs)
        if len(answers) != len(items):
            raise AuditError(f"scorer {self.name}: answer() returned {len(answers)} results "
                             f"for {len(items)} images")
        metrics = self.metrics(items)
        out = []
        for it, q_list, ans, mets in zip(items, qs, answers, metrics):
            recs = self.records_from_answers(it, q_list, ans)
            out.append(recs[:-1] + list(mets) + recs[-1:])
        return out

    def records_from_answers(self, item: ScoreItem, queries: Sequence[dict],
                             answers: Mapping[str, Answer]) -> list[dict]:
        """Question records (with their probes in ``extra.probes``) and the prompt record."""
        j = verdicts.judge(item.prompt, {k: a.passed for k, a in answers.items()})
        recs = []
        probes: dict[str, dict] = {}
        for q in queries:
            if q.get("probe"):
                a = answers.get(q["id"])
                probes.setdefault(q["probe"]["for"], {})[q["id"]] = {
                    "text": q["text"], "value": None if a is None else a.value,
                    "answer": None if a is None else a.passed}
        for q in queries:
            if q.get("probe"):
                continue
            a = answers.get(q["id"])
            st = j["questions"][q["id"]]
            extra = {"kind": q.get("kind"), "text": q.get("text"), "answer": st["answer"]}
            if st["skipped_by"]:
                extra["skipped_by"] = st["skipped_by"]
            if a is None:
                extra["unsupported"] = True
            else:
                extra.update(a.extra)
            if q["id"] in probes:
                extra["probes"] = probes[q["id"]]
            fails = [f for f in j["failures"] if f.get("question_id") == q["id"]]
            recs.append(self.record(item, "question", question_id=q["id"],
                                    value=None if a is None else a.value, verdict=st["verdict"],
                                    failures=fails, truncated=bool(a and a.truncated),
                                    extra=extra))
        n_true = sum(1 for r in recs if r["verdict"] is True)
        n_judged = sum(1 for r in recs if r["verdict"] is not None or r["extra"].get("skipped_by"))
        recs.append(self.prompt_record(
            item, j["verdict"], j["failures"],
            value=(n_true / n_judged) if n_judged else None,
            truncated=any(r["truncated"] for r in recs),
            extra={"questions_passed": n_true, "questions_judged": n_judged}))
        return recs
