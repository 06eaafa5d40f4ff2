"""Validated loading of the fitted probe files a later command reads back.

``probes/failure_probe.json`` (``predict --from``) and ``probes/early_probes.json`` (``select``,
``predict --early``) are inputs like any other: a file damaged on disk, edited by hand or written by
another version must give an :class:`AuditError` naming the file and the key path, never a
traceback and never a NaN risk ranked and printed as ``nan``. Each kind has ONE loader here; every
reader goes through it. What is checked:

* the keys the readers use are there, with the right types (``strict``: ``"0.5"`` is not a number,
  ``true`` is not 1);
* every number is finite (``NaN``, ``Infinity``, ``1e999``), probabilities lie in [0, 1];
* a standardisation scale is never 0 or negative: scikit-learn's ``StandardScaler`` stores 1.0 for a
  constant feature (``_handle_zeros_in_scale``), so a 0 can only be damage, and it would divide into
  inf / NaN risks;
* the arrays of one probe have one length (mean, scale, coef and, for per-image probes, median);
* poolings are ones the text encoder produces (``pipeline_text.PipelineTextEncoder._pool``: ``eos``,
  ``mean``, ``slot-<name>``, and ``prompt`` for the pooled output); step tags are the file's steps.

JSON is read by :mod:`t2i_audit.safeload` with non-finite numbers let through, so that pydantic can
name the key that holds one (``categories.color.t001.scale[3]``), not only the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from ..errors import AuditError
from ..records import MAX_LISTED, Finite, Name, Positive, Probability, key_path
from ..records import Strict as _Strict
from ..safeload import read_json

SLOT_POOLING = re.compile(r"slot-[A-Za-z0-9_]+")
LAYER = re.compile(r"h\d{2,}|final|pooled|cond")  # pipeline_text.layer_tensors' names
STEP_TAG = re.compile(r"t(\d{3})")


def _same_lengths(model: BaseModel, names: tuple[str, ...]) -> None:
    lengths = {n: len(getattr(model, n)) for n in names}
    if not lengths[names[0]]:
        raise ValueError(f"{names[0]} is empty")
    if len(set(lengths.values())) > 1:
        raise ValueError("arrays of one probe differ in length: "
                         + ", ".join(f"{n} {k}" for n, k in lengths.items()))


class FailureProbe(_Strict):
    """``probes/failure_probe.json``: ``risk = σ(coef · (x − mean) / scale + intercept)`` on one text-encoder
    layer × pooling (``stage._save_failure_probe``)."""

    encoder: Name
    layer: Name
    pooling: Name
    fingerprint: Name
    model: Optional[str] = None
    oof_auroc: Probability
    n: Optional[Annotated[int, Field(ge=1)]] = None
    failure_rate: Optional[Probability] = None
    mean: list[Finite]
    scale: list[Positive]
    coef: list[Finite]
    intercept: Finite
    compositions: list[str] = []
    labels_from: dict[str, Optional[dict]] = {}

    @field_validator("pooling")
    @classmethod
    def _known_pooling(cls, v: str) -> str:
        if v not in ("eos", "mean", "prompt") and not SLOT_POOLING.fullmatch(v):
            raise ValueError(f"unknown pooling {v!r} (the text encoder pools eos, mean, prompt or slot-<name>)")
        return v

    @field_validator("layer")
    @classmethod
    def _known_layer(cls, v: str) -> str:
        if not LAYER.fullmatch(v):
            raise ValueError(f"unknown layer {v!r} (stored layers are h00…, final, pooled, cond)")
        return v

    @model_validator(mode="after")
    def _shapes(self):
        if (self.layer == "pooled") != (self.pooling == "prompt"):
            raise ValueError(f"layer {self.layer!r} with pooling {self.pooling!r}: the pooled output is pooled 'prompt' "
                             "and only it")
        _same_lengths(self, ("mean", "scale", "coef"))
        return self


class EarlyProbe(_Strict):
    """One per-image probe (``per_image.export_probe``): median imputation, standardisation, logistic."""

    C: Positive
    median: list[Finite]
    mean: list[Finite]
    scale: list[Positive]
    coef: list[Finite]
    intercept: Finite

    @model_validator(mode="after")
    def _shapes(self):
        _same_lengths(self, ("median", "mean", "scale", "coef"))
        return self


class EarlySettings(_Strict):
    """The sampler settings the probes were fitted under (``select.scan_settings`` reads these)."""

    steps: Annotated[int, Field(ge=1)]
    guidance: Finite
    size: Annotated[int, Field(ge=1)]
    dtype: Literal["float32", "float16", "bfloat16"]


class EarlyProbes(_Strict):
    """``probes/early_probes.json`` (``early_stage.run_early_stage``)."""

    onehot: list[str]
    steps: list[Annotated[int, Field(ge=0)]]
    settings: EarlySettings
    categories: dict[str, dict[str, EarlyProbe]]
    model: Optional[str] = None
    key: Optional[str] = None

    @model_validator(mode="after")
    def _tags_and_widths(self):
        for cat, by_step in self.categories.items():
            for tag, probe in by_step.items():
                m = STEP_TAG.fullmatch(tag)
                if m is None or int(m.group(1)) not in self.steps:
                    raise ValueError(f"categories.{cat}: step {tag!r} is not one of the file's steps "
                                     f"{['t%03d' % s for s in self.steps]}")
                if len(probe.coef) <= len(self.onehot):  # design(): early features, then the one-hot columns
                    raise ValueError(f"categories.{cat}.{tag}: {len(probe.coef)} coefficients for "
                                     f"{len(self.onehot)} one-hot columns and at least one early feature")
        return self


def _load(path: Path, schema: type[BaseModel], refit: str) -> dict:
    data = read_json(path, finite=False)  # unreadable JSON: located by safeload; NaN/inf: named by key below
    if not isinstance(data, dict):
        raise AuditError(f"{path}: expected a JSON object; {refit}")
    try:
        schema.model_validate(data)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        lines = [f"{key_path(err['loc'])}: {err['msg'].removeprefix('Value error, ')}" for err in errs[:MAX_LISTED]]
        more = f" (and {len(errs) - MAX_LISTED} more)" if len(errs) > MAX_LISTED else ""
        raise AuditError(f"{path}: damaged fitted probe: {'; '.join(lines)}{more}; {refit}") from None
    return data  # the plain dict (its readers index it), now known to be sound


def load_failure_probe(run_dir) -> dict:
    """``RUN/probes/failure_probe.json``, validated; the plain dict ``predict`` reads."""
    path = Path(run_dir) / "probes" / "failure_probe.json"
    if not path.exists():
        raise AuditError(f"{path}: no fitted failure probe; run `t2i-audit probe {run_dir}` on a scored run first")
    return _load(path, FailureProbe, f"fit it again with `t2i-audit probe {run_dir}`")


def load_early_probes(run_dir) -> dict:
    """``RUN/probes/early_probes.json``, validated; the plain dict ``select`` / ``predict --early`` read."""
    path = Path(run_dir) / "probes" / "early_probes.json"
    if not path.exists():
        raise AuditError(f"{path}: no per-image probes; run `t2i-audit probe {run_dir} --early` first")
    return _load(path, EarlyProbes, f"fit them again with `t2i-audit probe {run_dir} --early`")
