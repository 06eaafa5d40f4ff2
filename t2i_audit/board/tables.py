"""The board's long tables, one Parquet schema each, and the per-run rows (written once, when a run is added).

Per run (``data/<table>/<file id>.parquet``, never rewritten when other runs are added):

* ``questions``: one row per run × prompt × sample × question (slot) × judge: the run's
  ``report/results.parquet`` in long form (``judge``, its model, revision and protocol on each row;
  ``deciding`` marks the judge whose verdicts the run's own report used for the row's category);
* ``images``: one row per run × prompt × sample × judge, with the image verdict and failure types;
* ``probes``: the run's fitted probes (failure AUROC with CI and baseline; decodability per slot).

Per snapshot (``data/<table>/<split>.parquet``): ``runs``, ``categories`` and ``comparisons`` (see
:mod:`t2i_audit.board.ranks`). Every table is written with its schema, so that every file of a table has the
same columns and types: ``datasets`` reads a split made of many files only then.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import AuditError
from ..rundir import atomic_write_bytes
from ..scenes import groups_by_id

S, I, F, B = pa.string(), pa.int64(), pa.float64(), pa.bool_()
_IMAGE_KEYS = [("prompt_id", S), ("sample", I), ("seed", I), ("image_sha256", S), ("image_path", S), ("flags", S),
               ("suite", S), ("category", S), ("template", S), ("prompt", S), ("composition", S), ("split", S)]
_JUDGE = [("judge", S), ("judge_model", S), ("judge_revision", S), ("protocol", S)]
SCHEMAS = {
    "questions": pa.schema([("run_id", S), *_IMAGE_KEYS, ("twin_group", S), ("question_id", S), ("slot", S),
                            ("kind", S), ("question", S), ("family", S), ("value", S), ("number", F),
                            ("object", S), ("subject", S), *_JUDGE, ("verdict", B), ("score", F),
                            ("image_verdict", B), ("deciding", B)]),
    "images": pa.schema([("run_id", S), *_IMAGE_KEYS, ("twin_group", S), *_JUDGE, ("image_verdict", B),
                         ("failure_types", pa.list_(S)), ("deciding", B)]),
    "probes": pa.schema([("run_id", S), ("probe", S), ("encoder", S), ("layer", S), ("pooling", S), ("target", S),
                         ("family", S), ("metric", S), ("value", F), ("lo", F), ("hi", F), ("baseline", F),
                         ("baseline_lo", F), ("baseline_hi", F), ("chance", F), ("control", F), ("p", F),
                         ("n", I), ("verdict", S)]),
    # per snapshot (board/snapshot.py)
    "runs": pa.schema([("run_id", S), ("label", S), ("group", S), ("model", S), ("model_revision", S), ("variant", S),
                       ("suites", pa.list_(S)), ("folder", S), ("added_utc", S), ("images", I),
                       ("scorers", pa.list_(S)), ("judges", S), ("conditions", S), ("steps", I), ("guidance", F),
                       ("size", I), ("dtype", S), ("scheduler", S), ("seed", I), ("limit", I),
                       ("images_per_prompt", I), ("set_apart", S), ("settings", S), ("settings_study", S),
                       ("shared_prompts", I), ("rate", F), ("lo", F),
                       ("hi", F), ("rank", I), ("rank_lo", I), ("rank_hi", I), ("changed_files", pa.list_(S))]),
    "categories": pa.schema([("group", S), ("run_id", S), ("label", S), ("category", S), ("n", I), ("k", I),
                             ("rate", F), ("lo", F), ("hi", F), ("rank", I), ("rank_lo", I), ("rank_hi", I),
                             ("failed", I), ("failures", pa.list_(pa.struct([("type", S), ("images", I)]))),
                             *_JUDGE, ("decided_source", S), ("why", S), ("judge_measured_on", S),
                             ("judge_checked", B), ("shared_prompts", I), ("units", I)]),
    "comparisons": pa.schema([("group", S), ("category", S), ("a", S), ("b", S), ("label_a", S), ("label_b", S),
                              ("diff", F), ("lo", F), ("hi", F), ("p", F), ("p_holm", F), ("significant", B),
                              ("pairing", S), ("units", I), ("images", I)]),
}
PER_RUN = ("questions", "images", "probes")
# the embedded image (--images embed): datasets' Image feature is this struct, named in the schema metadata
IMAGE_FIELD = pa.field("image", pa.struct([("bytes", pa.binary()), ("path", S)]))
HF_IMAGE_METADATA = {b"huggingface": json.dumps({"info": {"features": {"image": {"_type": "Image"}}}}).encode()}


def image_schema(embed: bool) -> pa.Schema:
    schema = SCHEMAS["images"]
    return schema.append(IMAGE_FIELD).with_metadata(HF_IMAGE_METADATA) if embed else schema


def _none(v):
    """pandas' missing values (NaN, NA, NaT) as None: one spelling of "missing" for pyarrow."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def arrow_table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """``df`` with exactly ``schema``'s columns and types (an error names a column that does not fit)."""
    arrays = []
    for f in schema:
        col = df[f.name] if f.name in df else pd.Series([None] * len(df), dtype=object)
        try:
            arrays.append(pa.array(col, type=f.type, from_pandas=True))  # NaN / NA / None: null
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            try:  # one value pyarrow will not convert as a column (e.g. a pd.NA in an object column): one by one
                arrays.append(pa.array([_none(v) for v in col.tolist()], type=f.type))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                raise AuditError(f"board table column {f.name}: values do not fit {f.type} ({e})") from None
    return pa.Table.from_arrays(arrays, schema=schema)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    if table.num_rows:
        pq.write_table(table, buf)
    else:  # no row group at all: datasets' Parquet reader takes an empty row group's 0 rows as its batch size
        pq.ParquetWriter(buf, table.schema).close()
    return buf.getvalue()


def write_parquet(path: Path, df: pd.DataFrame, schema: pa.Schema) -> tuple[dict, pa.Table]:
    """Atomically write; returns (``{"sha256", "rows"}`` for the board index, the table as stored)."""
    table = arrow_table(df, schema)
    data = parquet_bytes(table)
    atomic_write_bytes(path, data)
    return {"sha256": hashlib.sha256(data).hexdigest(), "rows": len(df)}, table


# --- per-run rows --------------------------------------------------------------------------------------------


def _slots(prompts: dict) -> dict:
    return {(pid, q.get("id")): q.get("slot") for pid, p in prompts.items() for q in p.get("questions") or []}


def question_rows(run_id: str, run) -> pd.DataFrame:
    """``results.parquet`` in long form: one row per (image, question, judge) — ``run``: readers.RunFiles."""
    res = run.results
    base = res[[c for c, _ in _IMAGE_KEYS] + ["question_id", "kind", "question", "family", "value", "number",
                                              "object", "subject"]].copy()
    base.insert(0, "run_id", run_id)
    # the column keeps its published name; it holds the prompt's group (scenes.prompt_groups over the run's
    # prompts: same-scene paraphrases and swap twins), the unit the board's bootstraps resample
    base["twin_group"] = base["prompt_id"].map(groups_by_id(run.prompts.values()))
    slots = _slots(run.prompts)
    base["slot"] = [slots.get(k) for k in zip(base["prompt_id"].tolist(), base["question_id"].tolist())]
    parts = []
    for name in run.scorers or [None]:
        part = base.copy()
        judge = run.judges.get(name, {}) if name else {}
        part["judge"], part["judge_model"] = name, judge.get("model")
        part["judge_revision"], part["protocol"] = judge.get("revision"), judge.get("protocol")
        part["verdict"] = res[f"{name}.verdict"] if name else None
        part["score"] = pd.to_numeric(res[f"{name}.value"], errors="coerce") if name else None
        part["image_verdict"] = res[f"{name}.image_verdict"] if name else None
        part["deciding"] = (res["decided_by"] == name).fillna(False).astype(bool) if name else False
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def image_rows(questions: pd.DataFrame, run, images: dict | None = None) -> pd.DataFrame:
    """One row per (image, judge) from the run's question rows, with the judge's failure types. ``images``:
    ``{(prompt_id, sample): bytes}`` to embed (``--images embed``)."""
    keys = ["prompt_id", "sample", "judge"]
    cols = ["run_id", *(c for c, _ in _IMAGE_KEYS), "twin_group", "judge", "judge_model", "judge_revision",
            "protocol", "image_verdict", "deciding"]
    im = questions.drop_duplicates(keys)[cols].reset_index(drop=True)
    # a question's `deciding` is the image's: one decider per category
    fails = []
    for pid, s, judge, v in zip(im["prompt_id"].tolist(), im["sample"].tolist(), im["judge"].tolist(),
                                im["image_verdict"].tolist()):
        got = (run.failures.get(judge) or {}).get((pid, int(s)), []) if judge else []
        fails.append(got if _none(v) is not None and not bool(v) else [])
    im["failure_types"] = fails
    if images is not None:
        im["image"] = [{"bytes": images.get((pid, int(s))), "path": path}
                       for pid, s, path in zip(im["prompt_id"], im["sample"], im["image_path"])]
    return im


def _num(v, where: str):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AuditError(f"{where}: expected a finite number, got {v!r}")
    return float(v)


def _ci(d, where: str) -> tuple:
    d = d if isinstance(d, dict) else {}
    ci = d.get("ci") if isinstance(d.get("ci"), list) and len(d.get("ci")) == 2 else [None, None]
    return _num(d.get("auroc"), where), _num(ci[0], where), _num(ci[1], where)


def probe_rows(run_id: str, run) -> pd.DataFrame:
    rows = []
    root = Path(run.root)
    for i, r in enumerate(run.probes.get("failure", []), 1):
        where = f"{root / 'probes/failure.jsonl'}:{i}"
        v, lo, hi = _ci(r.get("auroc"), where)
        b, blo, bhi = _ci(r.get("baseline_auroc"), where)
        diff = r.get("auroc_diff") if isinstance(r.get("auroc_diff"), dict) else {}
        rows.append({"run_id": run_id, "probe": "failure", "encoder": r.get("encoder"), "layer": r.get("layer"),
                     "pooling": r.get("pooling"), "metric": "auroc", "value": v, "lo": lo, "hi": hi, "baseline": b,
                     "baseline_lo": blo, "baseline_hi": bhi, "p": _num(diff.get("p"), where),
                     "n": r.get("n"), "verdict": r.get("verdict")})
    for i, r in enumerate(run.probes.get("decodability", []), 1):
        where = f"{root / 'probes/decodability.jsonl'}:{i}"
        rows.append({"run_id": run_id, "probe": "decodability", "encoder": r.get("encoder"), "layer": r.get("layer"),
                     "pooling": r.get("pooling"), "target": r.get("target"), "family": r.get("family"),
                     "metric": "accuracy", "value": _num(r.get("accuracy"), where),
                     "chance": _num(r.get("chance"), where), "control": _num(r.get("control_accuracy"), where),
                     "n": r.get("n")})
    for r in rows:
        for k in ("encoder", "layer", "pooling", "target", "family", "verdict"):
            r[k] = None if r.get(k) is None else str(r[k])
        if r.get("n") is not None and (isinstance(r["n"], bool) or not isinstance(r["n"], int)):
            raise AuditError(f"{root / 'probes'}: probe row count n={r['n']!r} is not a whole number")
    return pd.DataFrame(rows, columns=[f.name for f in SCHEMAS["probes"]])


def write_gallery(out: Path, rel_dir: str, images_rows: pd.DataFrame, embedded: dict) -> dict:
    """``--images folder``: the run's images and a ``metadata.jsonl`` (ImageFolder layout: ``file_name`` plus
    the image's fields, its own report's verdict) in ``out/rel_dir``; returns the metadata's file record."""
    # one row per image: its own report's verdict (the deciding judge's row), none where no judge decides
    per_image = images_rows.sort_values("deciding", ascending=False, kind="stable").drop_duplicates(["prompt_id", "sample"])
    lines = []
    for r in per_image.to_dict("records"):
        data = embedded.get((r["prompt_id"], int(r["sample"])))
        if data is None:
            continue
        own = bool(r["deciding"])
        name = f"{r['prompt_id']}_{int(r['sample'])}.png"
        atomic_write_bytes(out / rel_dir / name, data)
        lines.append(json.dumps({"file_name": name, "run_id": r["run_id"], "prompt_id": r["prompt_id"],
                                 "sample": int(r["sample"]), "seed": _none(r["seed"]), "prompt": r["prompt"],
                                 "category": r["category"], "judge": r["judge"] if own else None,
                                 "verdict": _none(r["image_verdict"]) if own else None,
                                 "failure_types": list(r["failure_types"]) if own else []}, ensure_ascii=False))
    data = ("\n".join(lines) + "\n").encode()
    rel = f"{rel_dir}/metadata.jsonl"
    atomic_write_bytes(out / rel, data)
    return {"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "rows": len(lines)}
