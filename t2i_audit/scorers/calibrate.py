"""Calibration: agreement of scorer records with human (or other ground-truth) labels.

``labels.csv`` columns: ``prompt_id`` and ``sample`` (or ``image``: the path relative to the
run, as in images.jsonl), optional ``question_id`` (empty: the label is for the whole prompt,
compared with the ``prompt`` record) and ``label`` (1/0, yes/no, true/false, or an ordinal
score such as a 1–5 rating; ``positive`` sets the cut for the binary metrics).
:func:`export_sheet` writes such a file with the label column empty.

Every row must name an image of the run (and a question of its prompt): a sheet of another run is
refused with its line, not counted as "unmatched". The unit is one (image, question): several rows
for one (raters, duplicates) become one label — the majority of yes/no labels (a tie is refused
with its lines), the mean of ratings — so a prompt labelled 1 fifty times and 0 fifty times is
one refused conflict, not 100 labels.

Per scorer, level (prompt/question) and category (and ``all``): ``n``, ``n_prompts``, accuracy and
Cohen's κ of the verdict (scikit-learn), Kendall τ and Spearman ρ of the raw value against the label
(scipy), each with a percentile-bootstrap CI resampling whole prompt groups (its images are not
independent). Below the small-sample rule of :func:`t2i_audit.stats.too_few` a metric is stored as
None and its reason under ``too_few``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Iterable, Sequence

from ..csvsafe import to_csv
from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, atomic_write_text
from ..scenes import groups_by_id

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
    if not math.isfinite(v):
        raise AuditError(f"{where}: label {raw!r} is not a finite number")
    return v


def _label_key(row: dict, where: str, images: dict, by_path: dict, questions: dict, run_dir: RunDir):
    """((prompt_id, sample), question_id or None) of one sheet row, refused with its line unless it names an
    image of the run and, where given, one of its prompt's questions."""
    if (row.get("prompt_id") or "").strip():
        try:
            key = (row["prompt_id"].strip(), int(row.get("sample") or ""))
        except ValueError:
            raise AuditError(f"{where}: sample {row.get('sample')!r} is not an integer") from None
        if key not in images:
            raise AuditError(f"{where}: prompt_id {key[0]!r} sample {key[1]} is not an image of {run_dir.images} "
                             "(a sheet of another run?)")
    else:
        rec = by_path.get((row.get("image") or "").strip())
        if rec is None:
            raise AuditError(f"{where}: image {row.get('image')!r} is not in {run_dir.images}")
        key = (rec["prompt_id"], int(rec.get("sample", 0)))
    qid = (row.get("question_id") or "").strip() or None
    if qid is not None and qid not in questions.get(key[0], ()):
        raise AuditError(f"{where}: question_id {qid!r} is not a question of prompt {key[0]} "
                         f"(it has {', '.join(sorted(questions.get(key[0], ()))) or 'none'})")
    return key, qid


def read_labels(path: Path | str, run_dir: RunDir) -> list[dict]:
    """One label per (image, question) of the sheet, each row checked against the run (see :func:`_resolve`)."""
    from ..safeload import csv_dict_rows, read_text

    path = Path(path)
    if not path.exists():
        raise AuditError(f"{path}: labels file not found")
    header, rows = csv_dict_rows(read_text(path), str(path))  # a folder, bytes, a broken CSV: located errors
    cols = {c.strip() for c in header if c}
    if "label" not in cols or not ({"prompt_id", "sample"} <= cols or "image" in cols):
        raise AuditError(f"{path}: needs columns 'label' and 'prompt_id','sample' (or 'image'); "
                         f"found {', '.join(c for c in header if c) or 'none (an empty file?)'}")
    images = {(r["prompt_id"], int(r.get("sample", 0))): r for r in run_dir.read_images()}
    by_path = {r["path"]: r for r in images.values()}
    questions = {p["id"]: {q["id"] for q in p.get("questions") or []} for p in run_dir.read_prompts()}
    parsed = []
    for line, raw in rows:
        row = {(k or "").strip(): v for k, v in raw.items() if isinstance(v, str)}  # surplus cells: key None, a list
        where = f"{path}:{line}"
        if (row.get("label") or "").strip() == "":
            continue  # an unlabelled (or "unsure") row of an exported sheet
        key, qid = _label_key(row, where, images, by_path, questions, run_dir)
        parsed.append({"key": key, "question_id": qid, "label": _parse_label(row["label"], where), "line": line})
    if not parsed:
        raise AuditError(f"{path}: no labelled rows")
    return _resolve(parsed, path)


def _resolve(rows: list[dict], path: Path) -> list[dict]:
    """One label per (image, question): the unit the metrics count. Several rows for one (raters, a pasted
    duplicate) are not several independent labels. Yes/no labels take the majority, and a tie is refused with
    its lines (the sheet does not say which is right); ratings (any other number) take their mean, as
    ratings of several raters are pooled. ``raters`` and ``lines`` record what was merged."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["key"], r["question_id"]), []).append(r)
    out = []
    for (key, qid), rs in groups.items():
        labels = [r["label"] for r in rs]
        lines = [r["line"] for r in rs]
        if set(labels) <= {0.0, 1.0}:
            yes = sum(labels)
            if 2 * yes == len(labels) and len(labels) > 1:
                more = ", ".join(map(str, lines[1:9])) + (", …" if len(lines) > 9 else "")
                raise AuditError(f"{path}:{lines[0]}: prompt_id {key[0]} sample {key[1]} question "
                                 f"{qid or '(whole prompt)'!r} is labelled yes {int(yes)} and no "
                                 f"{len(labels) - int(yes)} times (also lines {more}); one (image, question) is one "
                                 "label — settle it or remove the rows you do not mean")
            label = float(2 * yes > len(labels))
        else:
            label = sum(labels) / len(labels)
        out.append({"key": key, "question_id": qid, "label": label, "line": lines[0], "lines": lines,
                    "raters": len(labels)})
    return out


def _metrics(verdict, value, label, cluster, positive: float, n_boot: int, seed: int, items: str) -> dict:
    """Accuracy and κ of the verdicts, τ and ρ of the values, against the labels; CIs resample whole prompt
    groups (``cluster``). Below the small-sample rule (:func:`t2i_audit.stats.too_few`) a metric is stored as None with
    its reason under ``too_few`` (τ and ρ follow the κ rule: agreement on the same items)."""
    import warnings

    import numpy as np
    from scipy.stats import kendalltau, spearmanr
    from sklearn.metrics import accuracy_score, cohen_kappa_score

    from .. import stats

    def kappa(v, lab):
        # constant labels: κ compares agreement with what chance would give, and with one side constant every
        # scorer scores 0 (or 0/0) whatever it did — undefined, not "chance" (issue 37: 300 labels all "yes"
        # gave κ 0.000 and set a 97 %-accurate judge aside as at chance)
        if len(set(lab.tolist())) < 2:
            return float("nan")
        return float(cohen_kappa_score(v, lab))

    def corr(f):
        def g(x, y):
            if len(set(x.tolist())) < 2 or len(set(y.tolist())) < 2:
                return float("nan")
            return float(f(x, y)[0])
        return g

    def put(name, fn, arrays, groups, rule):
        why = stats.too_few(rule, n=len(groups), n_units=len(set(groups.tolist())), items=items, units="prompts")
        v = fn(*arrays) if len(groups) else float("nan")
        if why:
            out.setdefault("too_few", {})[name] = why
        elif math.isnan(v):  # a constant side: the statistic does not exist on this sample
            out.setdefault("undefined", {})[name] = _constant_side(arrays[-1], arrays[0])
        out[name] = None if why or math.isnan(v) else v
        out[name + "_ci"] = (None, None) if why or math.isnan(v) else stats.cluster_bootstrap_ci(
            fn, *arrays, groups=groups, n_boot=n_boot, seed=seed)

    out: dict = {}
    mask = np.array([v is not None for v in verdict])
    vb = np.array([bool(v) for v, m in zip(verdict, mask) if m], dtype=int)
    lb = np.array([int(lab >= positive) for lab, m in zip(label, mask) if m], dtype=int)
    cb = np.array([c for c, m in zip(cluster, mask) if m], dtype=object)
    out["n"] = int(mask.sum())
    out["n_prompts"] = len(set(cb.tolist()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if out["n"]:
            put("accuracy", lambda v, lab: float(accuracy_score(lab, v)), (vb, lb), cb, "rate")
            put("kappa", kappa, (vb, lb), cb, "kappa")
        vm = np.array([v is not None for v in value])
        x = np.array([v for v, m in zip(value, vm) if m], dtype=float)
        y = np.array([lab for lab, m in zip(label, vm) if m], dtype=float)
        cx = np.array([c for c, m in zip(cluster, vm) if m], dtype=object)
        out["n_values"] = int(vm.sum())
        for name, f in (("kendall_tau", kendalltau), ("spearman_rho", spearmanr)):
            put(name, corr(f), (x, y), cx, "kappa")
    return out


def _constant_side(labels, scores) -> str:
    """Why a κ / τ / ρ is undefined: which side is constant, and at what."""
    for what, a in (("label", labels), ("scorer value", scores)):
        values = sorted(set(a.tolist()))
        if len(values) == 1:
            return f"undefined: every {what} is {values[0]:g}"
    return "undefined on this sample"


def _records_by_key(run_dir: RunDir, scorer: str) -> dict:
    recs = run_dir.read_scores(run_dir.scores(scorer))
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
              folds: int = 5, extra_cards: Iterable[str] = (), write: bool = True, progress: bool = False) -> dict:
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
    report: dict = {"labels": str(labels), "positive": positive, "n_labels": len(rows),
                    "n_label_rows": sum(r["raters"] for r in rows),
                    "merged": sum(1 for r in rows if r["raters"] > 1), "scorers": {}}
    for name in names:
        if not rd.scores(name).exists():
            raise AuditError(f"{rd.scores(name)}: no records for scorer {name!r} "
                             f"(have: {', '.join(available_scorers(rd)) or 'none'})")
        idx = _records_by_key(rd, name)
        group_of = groups_by_id(rd.read_prompts())  # the unit CIs resample: one scene or a swap twin pair
        groups: dict = {}
        matched = []
        for row in rows:
            rec = idx.get((row["key"], row["question_id"]))
            if rec is None:
                continue
            level = "prompt" if row["question_id"] is None else "question"
            matched.append((row, rec))
            for cat in ("all", rec.get("category") or "?"):
                g = groups.setdefault(level, {}).setdefault(cat, ([], [], [], []))
                g[0].append(rec["verdict"])
                g[1].append(rec["value"])
                g[2].append(row["label"])
                g[3].append(group_of.get(row["key"][0], row["key"][0]))  # the prompt's group: what the CIs resample
        if progress and matched:  # the bootstraps take a while on thousands of labels: say what is being computed
            print(f"[calibrate] {name}: agreement on {len(matched)} labels, "
                  f"{sum(len(c) for c in groups.values())} level × category cells, {n_boot} bootstrap resamples each",
                  file=sys.stderr, flush=True)
        res = {level: {cat: _metrics(*g, positive=positive, n_boot=n_boot, seed=seed,
                                     items="labelled images" if level == "prompt" else "labelled questions")
                       for cat, g in sorted(cats.items())} for level, cats in groups.items()}
        entry = {"matched": len(matched), "unmatched": len(rows) - len(matched), "levels": res}
        if fit_threshold:
            from .threshold import fit_and_save

            if progress:
                print(f"[calibrate] {name}: fitting its threshold by {folds}-fold grouped cross-validation",
                      file=sys.stderr, flush=True)

            entry["threshold"] = fit_and_save(rd, name, matched, idx, positive=positive, folds=folds,
                                              seed=seed, extra_cards=extra_cards, write=write)
        report["scorers"][name] = entry
    if not any(e["matched"] for e in report["scorers"].values()):
        raise AuditError(f"{labels}: none of its {len(rows)} labels matches a record of "
                         f"{', '.join(report['scorers'])} (flagged images and questions a scorer does not ask "
                         "have no record); nothing to compare")
    if write:
        atomic_write_json(rd.root / "calibration" / "report.json", report)
    return report


def export_sheet(run_dir: RunDir | str | Path, out: Path | str, *, per: str = "both", force: bool = False,
                 n: int | None = None, seed: int = 0) -> int:
    """A labelling sheet: one row per image (``per=prompt``), per question, or both; returns rows. An existing
    file at ``out`` (perhaps the user's labels) is replaced only with ``force``. ``n``: only the ``n`` images
    ``label --n N --seed SEED`` samples (the same stratified sample), so the sheet and the page hold the same
    images — without it, every image of the run (1,512 questions on the quickstart)."""
    import pandas as pd

    from ..ownership import claim_output_file

    if per not in ("prompt", "question", "both"):
        raise AuditError(f"--per must be prompt, question or both, not {per!r}")
    claim_output_file(out, force=force)
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    if n is not None:
        from ..report.label import stratified_sample

        if n < 1:
            raise AuditError(f"--n {n}: give at least 1 image")
        picked = {(r["prompt_id"], r["sample"]) for r in stratified_sample(images, prompts, n, seed)}
        images = [r for r in images if (r["prompt_id"], r["sample"]) in picked]  # in the run's order
    rows = []
    for img in images:
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
