"""Reading a run directory into tables (pandas), and writing the per image × question table.

Only files are read: prompts.jsonl, images.jsonl, scores/*.jsonl, manifest.json,
summary.json. A score line counts only when its ``image_sha256`` matches the image on record
(a stale score of a regenerated image is ignored). When a (image, question) was scored twice
by one scorer, the last line wins (appends are the resume mechanism).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..csvsafe import to_csv
from ..errors import AuditError, did_you_mean
from ..records import iter_records
from ..rundir import RunDir, atomic_write_bytes


@dataclass
class ScorerData:
    name: str
    questions: dict = field(default_factory=dict)   # (pid, sample, qid) -> (verdict, value)
    prompts: dict = field(default_factory=dict)     # (pid, sample) -> (verdict, failures)
    model: str = ""
    identities: set = field(default_factory=set)    # {(scorer_model, scorer_revision, judge protocol)} seen
    skipped: dict = field(default_factory=dict)     # (pid, sample, qid) -> the failed questions it depends on

    def question(self, pid: str, sample: int, qid) -> dict:
        """One question's verdict and value as a page shows them; a question skipped because one it depends on
        failed (DSG, scorers/verdicts.py) says so — never a "–" beside the answer's value, which reads as a pass."""
        verdict, value = self.questions.get((pid, sample, qid), (None, None))
        skipped = self.skipped.get((pid, sample, qid)) or []
        return {"verdict": verdict, "skipped_by": skipped,
                "value": value if isinstance(value, (int, float)) and not skipped else None}


@dataclass
class RunData:
    rd: RunDir
    manifest: dict
    summary: dict
    prompts: dict                 # id -> PromptRecord (in file order)
    images: list                  # ImageRecords
    scorers: dict                 # name -> ScorerData
    scorer: str | None            # the scorer deciding the most images (one name for summaries)
    images_df: pd.DataFrame       # one row per image
    questions_df: pd.DataFrame    # one row per image × question
    deciding: dict = field(default_factory=dict)  # category -> t2i_audit.deciding entry

    def scorer_of(self, category) -> str | None:
        """The scorer whose verdicts decide images of ``category``."""
        return (self.deciding.get(category) or {}).get("scorer")

    @property
    def model(self) -> str:
        m = self.manifest.get("model")
        if isinstance(m, dict):
            m = m.get("name") or m.get("id") or m.get("repo")
        if not m and self.images:
            m = self.images[0].get("model")
        return str(m or self.rd.root.name)

    @property
    def adapted(self) -> dict:
        """The run's LoRAs / replaced components as its manifest records them (``model.adapted``); {} for a base run."""
        m = self.manifest.get("model")
        a = m.get("adapted") if isinstance(m, dict) else None
        return a if isinstance(a, dict) else {}

    @property
    def label(self) -> str:
        """The model with its variant (``mini + my_lora@0.8 (sha256 1a2b3c)``), as every page names the run."""
        from ..variants.labels import model_label

        return model_label(self.model, self.adapted)

    @property
    def suites(self) -> list[str]:
        return sorted({f"{p.get('suite')}@{p.get('suite_version')}" for p in self.prompts.values()})


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise AuditError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return data if isinstance(data, dict) else {}


def read_scorer(path: Path, shas: dict) -> ScorerData:
    sd = ScorerData(path.stem)
    for i, r in iter_records(path, "scores"):
        try:
            key = (r["prompt_id"], int(r["sample"]))
            kind = r.get("kind", "question")
        except (KeyError, TypeError, ValueError):
            raise AuditError(f"{path}:{i}: score line lacks prompt_id/sample") from None
        sha = r.get("image_sha256")
        if sha and shas.get(key) and sha != shas[key]:
            continue  # scored an older version of this image
        sd.model = sd.model or str(r.get("scorer_model") or "")
        extra = r.get("extra") if isinstance(r.get("extra"), dict) else {}
        sd.identities.add((str(r.get("scorer_model") or ""), str(r.get("scorer_revision") or ""),
                           str(extra.get("protocol") or "")))
        if kind == "prompt":
            sd.prompts[key] = (r.get("verdict"), r.get("failures") or [])
        elif kind == "question" and r.get("question_id") is not None:
            sd.questions[key + (r["question_id"],)] = (r.get("verdict"), r.get("value"))
            skipped_by = (r.get("extra") or {}).get("skipped_by") if isinstance(r.get("extra"), dict) else None
            if skipped_by and r.get("verdict") is None:
                sd.skipped[key + (r["question_id"],)] = [str(q) for q in skipped_by]
    return sd


def choose_scorer(scorers: dict, wanted: str | None, where: Path) -> str | None:
    if wanted is not None:
        if wanted not in scorers:
            raise AuditError(f"{where}: no scores from scorer {wanted!r}."
                             + did_you_mean(wanted, scorers or ["(none)"]))
        return wanted
    if not scorers:
        return None
    decided = {n: sum(v[0] is not None for v in s.prompts.values()) for n, s in scorers.items()}
    return sorted(scorers, key=lambda n: (-decided[n], n))[0]


def decided_by_category(prompts: dict, scorers: dict) -> dict:
    """{scorer: {category: prompt verdicts given}}, the counts t2i_audit.deciding weighs."""
    out: dict = {}
    for name, sd in scorers.items():
        counts = out.setdefault(name, {})
        for (pid, _), (v, _) in sd.prompts.items():
            p = prompts.get(pid)
            if p is not None and v is not None:
                counts[p.get("category")] = counts.get(p.get("category"), 0) + 1
    return out


def load_run(run_dir, scorer: str | None = None, deciding: dict | None = None) -> RunData:
    """Read a run. The verdict of an image comes from the scorer deciding its category
    (:func:`t2i_audit.deciding.deciding_scorers` on this run's evidence, or ``deciding`` as
    given, e.g. by ``compare`` over several runs); ``scorer`` forces one for every category."""
    from .. import deciding as rule

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory does not exist")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    shas = {(im["prompt_id"], int(im["sample"])): im.get("sha256") for im in images}
    scorers = {}
    if rd.scores_dir.is_dir():
        for path in sorted(rd.scores_dir.glob("*.jsonl")):
            scorers[path.stem] = read_scorer(path, shas)
    categories = {p.get("category") for p in prompts.values()}
    if scorer is not None:
        choose_scorer(scorers, scorer, rd.scores_dir)  # raises with a did-you-mean
        deciding = rule.forced(sorted(categories, key=str), scorer)
    elif deciding is None:
        deciding = rule.deciding_scorers([rd], categories, decided=[decided_by_category(prompts, scorers)])
    by_cat = {c: (deciding.get(c) or {}).get("scorer") for c in categories}
    by_cat = {c: n if n in scorers else None for c, n in by_cat.items()}
    weights: dict = {}
    for im in images:
        c = (prompts.get(im["prompt_id"]) or {}).get("category")
        weights[c] = weights.get(c, 0) + 1
    primary = scorer or rule.primary({c: {"scorer": n} for c, n in by_cat.items()}, weights)
    images_df = _images_frame(prompts, images, scorers, by_cat)
    questions_df = _questions_frame(prompts, images, scorers, by_cat)
    return RunData(rd, rd.read_manifest(), rd.read_summary(), prompts, images, scorers,
                   primary, images_df, questions_df, deciding)


def _images_frame(prompts, images, scorers, by_cat: dict) -> pd.DataFrame:
    rows = []
    for im in images:
        p = prompts.get(im["prompt_id"])
        if p is None:
            continue  # image of a prompt no longer in the suite
        key = (im["prompt_id"], int(im["sample"]))
        flagged = bool(im.get("flags"))
        row = {"prompt_id": key[0], "sample": key[1], "seed": im.get("seed"),
               "sha256": im.get("sha256") or "", "path": im.get("path"),
               "flags": list(im.get("flags") or []), "category": p.get("category"),
               "template": p.get("template"), "text": p.get("text"),
               "composition": p.get("composition"), "split": p.get("split"),
               "twin": p.get("twin")}
        primary = by_cat.get(p.get("category"))
        for name, sd in scorers.items():
            v, fails = sd.prompts.get(key, (None, []))
            if flagged:
                v, fails = None, []
            row[f"verdict:{name}"] = v
            if name == primary:
                row["verdict"] = v
                row["failures"] = fails
                row["failure_types"] = sorted({f.get("type") for f in fails if f.get("type")})
        if primary is None:  # no scorer decides this category
            row.update(verdict=None, failures=[], failure_types=[])
        row["decided_by"] = primary
        rows.append(row)
    cols = ["prompt_id", "sample", "seed", "sha256", "path", "flags", "category", "template",
            "text", "composition", "split", "twin", "verdict", "failures", "failure_types", "decided_by"]
    df = pd.DataFrame(rows, columns=cols + [f"verdict:{n}" for n in scorers])
    return df.astype({"verdict": object})


def _questions_frame(prompts, images, scorers, by_cat: dict) -> pd.DataFrame:
    rows = []
    for im in images:
        p = prompts.get(im["prompt_id"])
        if p is None:
            continue
        key = (im["prompt_id"], int(im["sample"]))
        names = {o["id"]: o.get("name") for o in p.get("objects", [])}
        flags = ",".join(im.get("flags") or [])
        img_v = {n: (None if flags else sd.prompts.get(key, (None, []))[0]) for n, sd in scorers.items()}
        primary = by_cat.get(p.get("category"))
        for q in p.get("questions", []):
            row = {"prompt_id": key[0], "sample": key[1], "seed": im.get("seed"),
                   "image_sha256": im.get("sha256"), "image_path": im.get("path"), "flags": flags,
                   "suite": p.get("suite"), "category": p.get("category"),
                   "template": p.get("template"), "prompt": p.get("text"),
                   "composition": p.get("composition"), "split": p.get("split"),
                   "question_id": q.get("id"), "kind": q.get("kind"), "question": q.get("text"),
                   "family": q.get("family") or ("object" if q.get("kind") == "exists" else
                                                 "count" if q.get("kind") == "count" else None),
                   "value": None if q.get("value") is None else str(q.get("value")),
                   "number": q.get("number"),
                   "object": names.get(q.get("object"), q.get("object")),
                   "subject": names.get(q.get("subject"), q.get("subject"))}
            for name, sd in scorers.items():
                v, val = sd.questions.get(key + (q.get("id"),), (None, None))
                if flags:
                    v = None
                row[f"{name}.verdict"] = v
                row[f"{name}.value"] = val
                row[f"{name}.image_verdict"] = img_v[name]
            row["verdict"] = row.get(f"{primary}.verdict") if primary else None
            row["decided_by"] = primary
            rows.append(row)
    return pd.DataFrame(rows)


def write_tables(df: pd.DataFrame, out_dir: Path, stem: str) -> dict:
    """``<stem>.parquet`` and ``<stem>.csv`` (verdicts as nullable booleans), atomically."""
    import io

    out = df.copy()
    for c in out.columns:
        if c == "verdict" or c.endswith("verdict"):
            out[c] = out[c].astype("boolean")
        elif out[c].dtype == object and out[c].map(lambda x: isinstance(x, (list, dict))).any():
            out[c] = out[c].map(lambda x: json.dumps(x) if isinstance(x, (list, dict)) else x)
    buf = io.BytesIO()
    out.to_parquet(buf, index=False)
    atomic_write_bytes(Path(out_dir) / f"{stem}.parquet", buf.getvalue())
    # texts from users' files: a cell never starts a spreadsheet formula (t2i_audit.csvsafe)
    atomic_write_bytes(Path(out_dir) / f"{stem}.csv", to_csv(out).encode())
    return {"parquet": f"{stem}.parquet", "csv": f"{stem}.csv", "rows": len(out)}
