"""Every file the board reads, in one module (so that another reader can be switched in for all).

Run files go through the validated readers the rest of the tool uses (``t2i_audit.records``' schemas through
``RunDir``, the report's :func:`~t2i_audit.report.tables.read_scorer` and ``records.read_*``; ``safeload``); the report's own table
(``report/results.parquet``, written by ``t2i-audit report``) is read with pyarrow and checked against what
the report recorded. Each file read is hashed as it is read: the board stores the hashes, and names a run
whose files changed since it was added (:func:`changed_files`).

A run the board takes is *finished*: generated, scored and reported (``manifest.json`` stages ``generate``
and ``report`` done, ``results.parquet`` holding the rows and images the report recorded). Anything else is a
half-finished or damaged run: an :class:`AuditError` names the file and what to run.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import AuditError
from ..records import read_document, read_records
from ..rundir import RunDir, file_sha256, read_jsonl
from ..safeload import load_yaml, read_json

RESULTS = "report/results.parquet"
CALIBRATION = "calibration/report.json"
PROBE_FILES = ("probes/failure.jsonl", "probes/decodability.jsonl")
# the columns t2i-audit report writes (report/tables.py _questions_frame), besides one triple per scorer
RESULT_COLUMNS = ("prompt_id", "sample", "seed", "image_sha256", "image_path", "flags", "suite", "category",
                  "template", "prompt", "composition", "split", "question_id", "kind", "question", "family",
                  "value", "number", "object", "subject", "verdict", "decided_by")
SCORER_SUFFIXES = (".verdict", ".value", ".image_verdict")


@dataclass
class RunFiles:
    """What the board reads of one run; ``hashes``: sha256 of every file read, by path in the run."""

    root: Path
    config: dict
    manifest: dict
    prompts: dict                      # id -> PromptRecord
    results: pd.DataFrame              # report/results.parquet as the report wrote it
    scorers: list                      # names, in results.parquet's column order
    judges: dict                       # scorer -> {"model", "revision", "protocol"}
    failures: dict                     # scorer -> {(prompt_id, sample): [failure types]}
    probes: dict                       # "failure" / "decodability" -> rows
    calibration: dict | None
    hashes: dict = field(default_factory=dict)


def _hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise AuditError(f"{path}: cannot be read ({e.strerror})") from None


def run_file_paths(root: Path) -> list[str]:
    """The files of a run the board reads (relative paths), as they are on disk now."""
    rels = ["run.yaml", "manifest.json", "prompts.jsonl", RESULTS, CALIBRATION, *PROBE_FILES]
    scores = root / "scores"
    if scores.is_dir():
        rels += [f"scores/{p.name}" for p in sorted(scores.glob("*.jsonl"))]
    return [r for r in rels if (root / r).is_file()]


def changed_files(root: Path, recorded: dict) -> list[str]:
    """What differs between a run's files now and the hashes recorded when it was added: ``"scores/x.jsonl
    (changed)"``, ``"(removed)"``, ``"(new)"``; a missing run folder is one entry."""
    root = Path(root)
    if not root.is_dir():
        return [f"{root} (folder not found)"]
    now = run_file_paths(root)
    out = []
    for rel in sorted(set(now) | set(recorded)):
        if rel not in now:
            out.append(f"{rel} (removed)")
        elif rel not in recorded:
            out.append(f"{rel} (new)")
        elif file_sha256(root / rel) != recorded[rel]:
            out.append(f"{rel} (changed)")
    return out


def _stage(manifest: dict, name: str) -> dict:
    stages = manifest.get("stages") if isinstance(manifest.get("stages"), dict) else {}
    s = stages.get(name)
    return s if isinstance(s, dict) else {}


def _require_finished(rd: RunDir, manifest: dict) -> None:
    where = rd.manifest
    if not rd.manifest.is_file():
        raise AuditError(f"{rd.root}: not a finished run (no manifest.json); finish it with `t2i-audit run` first")
    gen = _stage(manifest, "generate").get("status")
    if gen != "done":
        raise AuditError(f"{where}: stage generate is {gen or 'not started'!r}, not done: a half-finished run; "
                         f"resume it (the command in its manifest, or `t2i-audit run --config {rd.config}`) first")
    rep = _stage(manifest, "report")
    if rep.get("status") != "done" or not (rd.root / RESULTS).is_file():
        raise AuditError(f"{rd.root / RESULTS}: no finished report (the board reads the report's table); "
                         f"run `t2i-audit report {rd.root}` first")


def read_results(path: Path, recorded: dict) -> tuple[pd.DataFrame, list[str], str]:
    """``report/results.parquet`` checked against the report's manifest entry; (table, scorers, sha256)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = _read_bytes(path)
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise AuditError(f"{path}: not a readable Parquet file ({e}); rerun `t2i-audit report` on the run") from None
    cols = table.column_names
    missing = [c for c in RESULT_COLUMNS if c not in cols]
    if missing:
        raise AuditError(f"{path}: not the table `t2i-audit report` writes (missing column(s) {', '.join(missing)}); "
                         "rerun `t2i-audit report` on the run")
    scorers = []
    for c in cols:
        if c.endswith(".verdict"):
            name = c[: -len(".verdict")]
            lacking = [name + s for s in SCORER_SUFFIXES if name + s not in cols]
            if lacking:
                raise AuditError(f"{path}: column {c} without {', '.join(lacking)}; rerun `t2i-audit report` on the run")
            scorers.append(name)
    rows, images = recorded.get("rows"), recorded.get("images")
    df = table.to_pandas()
    n_images = len(df[["prompt_id", "sample"]].drop_duplicates()) if len(df) else 0
    if rows is not None and rows != len(df):
        raise AuditError(f"{path}: {len(df)} rows, but the report recorded {rows} (manifest.json stage report): "
                         "edited or damaged after the report; rerun `t2i-audit report` on the run")
    if images is not None and images < n_images:
        raise AuditError(f"{path}: {n_images} images, but the report recorded {images}: edited or damaged after "
                         "the report; rerun `t2i-audit report` on the run")
    for c in ("verdict", *(s + ".verdict" for s in scorers), *(s + ".image_verdict" for s in scorers)):
        if not (pa.types.is_boolean(table.schema.field(c).type) or pa.types.is_null(table.schema.field(c).type)):
            raise AuditError(f"{path}: column {c} holds {table.schema.field(c).type}, not verdicts (true/false); "
                             "rerun `t2i-audit report` on the run")
    return df, scorers, _hash_bytes(data)


def _judges(rd: RunDir, names: list[str], shas: dict, hashes: dict) -> tuple[dict, dict]:
    """Per scorer: its identity (model, revision, protocol: one each, or the run is refused) and the failure
    types of each image's prompt-level record (the report's reading: a stale score of a regenerated image is
    ignored, the last line wins)."""
    from ..report.tables import read_scorer

    judges, failures = {}, {}
    for name in names:
        path = rd.scores(name)
        if not path.is_file():
            raise AuditError(f"{path}: missing, but {rd.root / RESULTS} has its verdicts: the scores changed after "
                             f"the report; rerun `t2i-audit report {rd.root}`")
        hashes[f"scores/{path.name}"] = file_sha256(path)
        sd = read_scorer(path, shas)
        ids = sd.identities or {("", "", "")}
        if len(ids) > 1:
            shown = "; ".join(f"model {m or '-'} revision {r or '-'} protocol {p or '-'}" for m, r, p in sorted(ids))
            raise AuditError(f"{path}: scorer {name} mixes judges ({shown}); rescore the run with one judge")
        (model, revision, protocol), = ids
        judges[name] = {"model": model or None, "revision": revision or None, "protocol": protocol or None}
        failures[name] = {k: sorted({f.get("type") for f in fails if isinstance(f, dict) and f.get("type")})
                          for k, (_, fails) in sd.prompts.items()}
    return judges, failures


def _probe_rows(rd: RunDir, hashes: dict) -> dict:
    out = {}
    for rel in PROBE_FILES:
        path = rd.root / rel
        if path.is_file():
            hashes[rel] = file_sha256(path)
            rows = read_jsonl(path)
            for i, r in enumerate(rows, 1):
                if not isinstance(r, dict):
                    raise AuditError(f"{path}:{i}: a probe line is not an object")
            out[Path(rel).stem] = rows
    return out


def run_config(rd: RunDir, manifest: dict) -> dict:
    """The settings a run was made with: its run.yaml, or (a run made before run.yaml existed) those its generate
    stage recorded in the manifest; neither is refused, named (what the run was made with is unknown)."""
    if rd.config.is_file():
        config = load_yaml(rd.config)
        if not isinstance(config, dict):
            raise AuditError(f"{rd.config}: expected a mapping of run settings")
        return config
    config = _stage(manifest, "generate").get("settings")
    if not isinstance(config, dict):
        raise AuditError(f"{rd.config}: missing, and {rd.manifest} records no generate settings: nothing tells "
                         "what this run was made with")
    return dict(config)


def read_run(run_dir) -> RunFiles:
    """Read a finished run for the board, or raise an AuditError naming what is missing or damaged."""
    rd = RunDir(Path(run_dir))
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run folder not found")
    if not rd.prompts.is_file():
        raise AuditError(f"{rd.root}: not a run folder (no prompts.jsonl)")
    hashes: dict = {}
    manifest = rd.read_manifest()
    _require_finished(rd, manifest)
    hashes["manifest.json"] = file_sha256(rd.manifest)
    config = run_config(rd, manifest)
    if rd.config.is_file():
        hashes["run.yaml"] = file_sha256(rd.config)
    prompts = {}
    for i, p in enumerate(rd.read_prompts(), 1):
        if not isinstance(p, dict) or not isinstance(p.get("id"), str):
            raise AuditError(f"{rd.prompts}:{i}: a prompt record without an id")
        prompts[p["id"]] = p
    hashes["prompts.jsonl"] = file_sha256(rd.prompts)
    results, scorers, hashes[RESULTS] = read_results(rd.root / RESULTS, _stage(manifest, "report"))
    unknown = sorted(set(results["prompt_id"]) - set(prompts))
    if unknown:
        raise AuditError(f"{rd.root / RESULTS}: prompt {unknown[0]} is not in {rd.prompts} "
                         f"({len(unknown)} such): the prompts changed after the report; rerun `t2i-audit report {rd.root}`")
    shas = dict(zip(zip(results["prompt_id"], results["sample"].astype(int)), results["image_sha256"]))
    judges, failures = _judges(rd, scorers, shas, hashes)
    for path in sorted(rd.scores_dir.glob("*.jsonl")):  # a scorer the report did not show is still the run's file
        if path.stem not in scorers:
            read_records(path, "scores")
    calibration = None
    if (rd.root / CALIBRATION).is_file():  # evidence for the deciding rule: damaged is refused, as deciding reads it
        calibration = read_document(rd.root / CALIBRATION, "calibration")
        hashes[CALIBRATION] = file_sha256(rd.root / CALIBRATION)
    probes = _probe_rows(rd, hashes)
    return RunFiles(rd.root.resolve(), config, manifest, prompts, results, scorers, judges, failures, probes,
                    calibration if isinstance(calibration, dict) else None, hashes)


# --- the board's own files -------------------------------------------------------------------------------


def read_index(path: Path) -> dict:
    """``board.json`` (a JSON object), or an AuditError naming it."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise AuditError(f"{path}: not a board index (expected a JSON object); restore it from a copy")
    return data


def read_table(path: Path, sha256: str) -> pd.DataFrame:
    """A Parquet file the board wrote, refused when its bytes are not the ones written (``sha256``)."""
    import pyarrow.parquet as pq

    data = _checked_bytes(path, sha256)
    return pq.read_table(io.BytesIO(data)).to_pandas()


def check_file(path: Path, sha256: str) -> None:
    """Refuse a board file whose bytes are not the ones written (see :func:`read_table`), without parsing it."""
    _checked_bytes(path, sha256)


def _checked_bytes(path: Path, sha256: str) -> bytes:
    if not path.is_file():
        raise AuditError(f"{path}: missing from the board (the board wrote it and lists it in board.json); restore "
                         "it, or rebuild its run's files with `t2i-audit board RUN --out BOARD --refresh`")
    data = _read_bytes(path)
    if _hash_bytes(data) != sha256:
        raise AuditError(f"{path}: changed since the board wrote it (sha256 differs): edited by hand or damaged. The "
                         "board neither reads nor overwrites it; restore it, or move it out of the board and rebuild "
                         "it from its run with `t2i-audit board RUN --out BOARD --refresh`")
    return data


def image_bytes(root: Path, questions: pd.DataFrame) -> dict:
    """``{(prompt_id, sample): PNG bytes}`` of a run's images (``--images``), each checked against the sha256 its
    report recorded: an image replaced after scoring is refused, never published beside another's verdicts."""
    out = {}
    im = questions.drop_duplicates(["prompt_id", "sample"])
    for pid, s, rel, sha in zip(im["prompt_id"], im["sample"], im["image_path"], im["image_sha256"]):
        path = Path(root) / str(rel)
        if ".." in Path(str(rel)).parts or Path(str(rel)).is_absolute():
            raise AuditError(f"{root / RESULTS}: image path {rel!r} leaves the run folder")
        data = _read_bytes(path)
        if sha and _hash_bytes(data) != sha:
            raise AuditError(f"{path}: not the image that was scored (sha256 differs from {root / RESULTS}); "
                             "rerun the run's report, or leave out --images")
        out[(pid, int(s))] = data
    return out
