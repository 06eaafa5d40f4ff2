"""Calibration: agreement of scorer records with human (or other ground-truth) labels.

``labels.csv`` columns: ``prompt_id`` and ``sample`` (or ``image``: the path relative to the
run, as in images.jsonl), optional ``question_id`` (empty: the label is for the whole prompt,
compared with the ``prompt`` record) and ``label`` (1/0, yes/no, true/false, or an ordinal
score such as a 1–5 rating; ``positive`` sets the cut for the binary metrics).
:func:`export_sheet` writes such a file with the label column empty.

Per scorer, level (prompt/question) and category (and ``all``): ``n``, accuracy and Cohen's κ
of the verdict (scikit-learn), Kendall τ and Spearman ρ of the raw value against the label
(scipy), each with a percentile-bootstrap CI (resampling images/questions).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

from ..csvsafe import to_csv
from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, atomic_write_text, read_jsonl

TRUE = {"1", "yes", "y", "true", "t"}
FALSE = {"0", "no", "n", "false", "f"}


def _parse_label(raw, where: str) -> float:
    s = str(raw).strip().lower()
    if s in TRUE:
        return 1.0
    if s in FALSE:
        return 0.0
    try:
        v = float(s)
    except ValueError:
        raise AuditError(f"{where}: label {raw!r} is not 1/0, yes/no, true/false or a number") from None
    if math.isnan(v):
        raise AuditError(f"{where}: empty label")
    return v


def read_labels(path: Path | str, run_dir: RunDir) -> list[dict]:
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise AuditError(f"{path}: labels file not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise AuditError(f"{path}: not a readable CSV ({e})") from None
    cols = set(df.columns)
    if "label" not in cols or not ({"prompt_id", "sample"} <= cols or "image" in cols):
        raise AuditError(f"{path}: needs columns 'label' and 'prompt_id','sample' (or 'image'); "
                         f"found {', '.join(df.columns) or 'none'}")
    by_path = {r["path"]: r for r in run_dir.read_images()}
    out = []
    for i, row in enumerate(df.to_dict("records"), start=2):
        where = f"{path}:{i}"
        if str(row["label"]).strip() == "":
            continue  # an unlabelled row of an exported sheet
        if row.get("prompt_id"):
            try:
                key = (row["prompt_id"], int(row["sample"]))
            except ValueError:
                raise AuditError(f"{where}: sample {row['sample']!r} is not an integer") from None
        else:
            rec = by_path.get(row.get("image", ""))
            if rec is None:
                raise AuditError(f"{where}: image {row.get('image')!r} is not in {run_dir.images}")
            key = (rec["prompt_id"], int(rec.get("sample", 0)))
        out.append({"key": key, "question_id": (row.get("question_id") or None),
                    "label": _parse_label(row["label"], where), "line": i})
    if not out:
        raise AuditError(f"{path}: no labelled rows")
    return out


def _bootstrap(fn, arrays: Sequence, n_boot: int, seed: int) -> tuple[float | None, float | None]:
    import numpy as np

    n = len(arrays[0])
    if n < 2 or n_boot <= 0:
        return None, None
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        v = fn(*(a[idx] for a in arrays))
        if v is not None and not math.isnan(v):
            vals.append(v)
    if len(vals) < max(10, n_boot // 10):
        return None, None
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def _metrics(verdict, value, label, positive: float, n_boot: int, seed: int) -> dict:
    import warnings

    import numpy as np
    from scipy.stats import kendalltau, spearmanr
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    def kappa(v, lab):
        if len(set(v.tolist()) | set(lab.tolist())) < 2:
            return float("nan")
        return float(cohen_kappa_score(v, lab))

    def corr(f):
        def g(x, y):
            if len(set(x.tolist())) < 2 or len(set(y.tolist())) < 2:
                return float("nan")
            return float(f(x, y)[0])
        return g

    out: dict = {}
    mask = np.array([v is not None for v in verdict])
    vb = np.array([bool(v) for v, m in zip(verdict, mask) if m], dtype=int)
    lb = np.array([int(lab >= positive) for lab, m in zip(label, mask) if m], dtype=int)
    out["n"] = int(mask.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if out["n"]:
            acc = lambda v, lab: float(accuracy_score(lab, v))  # noqa: E731
            out["accuracy"] = acc(vb, lb)
            out["accuracy_ci"] = _bootstrap(acc, (vb, lb), n_boot, seed)
            k = kappa(vb, lb)
            out["kappa"] = None if math.isnan(k) else k
            out["kappa_ci"] = _bootstrap(kappa, (vb, lb), n_boot, seed)
        vm = np.array([v is not None for v in value])
        x = np.array([v for v, m in zip(value, vm) if m], dtype=float)
        y = np.array([lab for lab, m in zip(label, vm) if m], dtype=float)
        out["n_values"] = int(vm.sum())
        for name, f in (("kendall_tau", kendalltau), ("spearman_rho", spearmanr)):
            g = corr(f)
            v = g(x, y) if len(x) else float("nan")
            out[name] = None if math.isnan(v) else v
            out[name + "_ci"] = _bootstrap(g, (x, y), n_boot, seed)
    return out


def _records_by_key(run_dir: RunDir, scorer: str) -> dict:
    recs = read_jsonl(run_dir.scores(scorer))
    idx = {}
    for r in recs:
        if (r.get("extra") or {}).get("excluded"):
            continue
        key = (r["prompt_id"], int(r["sample"]))
        if r["kind"] == "prompt":
            idx[(key, None)] = r
        elif r["kind"] == "question":
            idx[(key, r["question_id"])] = r
        else:
            idx.setdefault((key, "metrics"), []).append(r)
    return idx


def available_scorers(run_dir: RunDir) -> list[str]:
    return sorted(p.stem for p in run_dir.scores_dir.glob("*.jsonl")) if run_dir.scores_dir.exists() else []


def calibrate(run_dir: RunDir | str | Path, labels: Path | str, *, scorers: Iterable[str] | None = None,
              positive: float = 0.5, n_boot: int = 1000, seed: int = 0, fit_threshold: bool = False,
              folds: int = 5, extra_cards: Iterable[str] = (), write: bool = True) -> dict:
    """Agreement per scorer / level / category; optionally fit thresholds (see :mod:`.threshold`).

    Writes ``<run>/calibration/report.json`` (and, with ``fit_threshold``, calibrated card
    copies ``<run>/calibration/<scorer>.yaml``) unless ``write`` is false.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    rows = read_labels(labels, rd)
    names = list(scorers or available_scorers(rd))
    if not names:
        raise AuditError(f"{rd.scores_dir}: no score files; run `t2i-audit score` first")
    report: dict = {"labels": str(labels), "positive": positive, "n_labels": len(rows), "scorers": {}}
    for name in names:
        if not rd.scores(name).exists():
            raise AuditError(f"{rd.scores(name)}: no records for scorer {name!r} "
                             f"(have: {', '.join(available_scorers(rd)) or 'none'})")
        idx = _records_by_key(rd, name)
        groups: dict = {}
        matched = []
        for row in rows:
            rec = idx.get((row["key"], row["question_id"]))
            if rec is None:
                continue
            level = "prompt" if row["question_id"] is None else "question"
            matched.append((row, rec))
            for cat in ("all", rec.get("category") or "?"):
                g = groups.setdefault(level, {}).setdefault(cat, ([], [], []))
                g[0].append(rec["verdict"])
                g[1].append(rec["value"])
                g[2].append(row["label"])
        res = {level: {cat: _metrics(*g, positive=positive, n_boot=n_boot, seed=seed)
                       for cat, g in sorted(cats.items())} for level, cats in groups.items()}
        entry = {"matched": len(matched), "unmatched": len(rows) - len(matched), "levels": res}
        if fit_threshold:
            from .threshold import fit_and_save

            entry["threshold"] = fit_and_save(rd, name, matched, idx, positive=positive, folds=folds,
                                              seed=seed, extra_cards=extra_cards, write=write)
        report["scorers"][name] = entry
    if write:
        atomic_write_json(rd.root / "calibration" / "report.json", report)
    return report


def export_sheet(run_dir: RunDir | str | Path, out: Path | str, *, per: str = "both") -> int:
    """A labelling sheet: one row per image (``per=prompt``), per question, or both; returns rows."""
    import pandas as pd

    if per not in ("prompt", "question", "both"):
        raise AuditError(f"--per must be prompt, question or both, not {per!r}")
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    rows = []
    for img in rd.read_images():
        if img.get("flags"):
            continue
        p = prompts.get(img["prompt_id"])
        if p is None:
            continue
        base = {"prompt_id": img["prompt_id"], "sample": img.get("sample", 0), "image": img["path"],
                "image_path": str((rd.root / img["path"]).resolve()), "category": p.get("category"),
                "prompt": p["text"]}
        if per in ("prompt", "both"):
            rows.append({**base, "question_id": "", "kind": "prompt",
                         "question": f'Does the image show "{p["text"]}"?', "label": ""})
        if per in ("question", "both"):
            for q in p.get("questions", []):
                rows.append({**base, "question_id": q["id"], "kind": q.get("kind"),
                             "question": q["text"], "label": ""})
    df = pd.DataFrame(rows, columns=["prompt_id", "sample", "image", "image_path", "category", "prompt",
                                     "question_id", "kind", "question", "label"])
    atomic_write_text(Path(out), to_csv(df))  # prompt texts: never a formula in a spreadsheet
    return len(df)
