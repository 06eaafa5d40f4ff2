"""Fit a scorer's decision threshold to labels by grouped cross-validation; save a card copy.

The card says what to fit: ``calibrate: {threshold: <key of thresholds>, applies_to:
question|metric}``. ``question``: the question records' value (verdict ``value >= t``).
``metric``: per image, the smallest value of the metric records that carry
``extra.threshold`` (e.g. CLIP foil margins: the image passes when every margin ``> t``),
against the prompt-level label. Folds group by prompt id (samples of one prompt never sit on
both sides). The calibrated copy goes to ``<run>/calibration/<scorer>.yaml``; use it with
``--card`` (it keeps the scorer's name, so it replaces the shipped card).
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable

import yaml

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_text
from .registry import get_card, load_cards


def best_threshold(values, labels, *, strict: bool, prefer: float) -> tuple[float, float]:
    """The cut maximising accuracy (ties: closest to ``prefer``); returns (threshold, accuracy)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    y = np.asarray(labels, dtype=bool)
    u = np.unique(v)
    cands = np.concatenate([[u[0] - 1e-6], (u[:-1] + u[1:]) / 2, [u[-1] + 1e-6]]) if len(u) else np.array([prefer])
    if strict:  # verdict value > t: a cut equal to a value must sit just below the next one
        cands = np.concatenate([cands, u - 1e-9])
    best, best_acc = prefer, -1.0
    for t in cands:
        pred = v > t if strict else v >= t
        acc = float((pred == y).mean())
        if acc > best_acc + 1e-12 or (abs(acc - best_acc) <= 1e-12 and abs(t - prefer) < abs(best - prefer)):
            best, best_acc = float(t), acc
    return best, best_acc


def _data(matched, idx, applies_to: str, positive: float):
    vals, labs, groups = [], [], []
    for row, rec in matched:
        if applies_to == "question":
            if row["question_id"] is None or rec["value"] is None or rec["verdict"] is None:
                continue
            v = rec["value"]
        else:
            if row["question_id"] is not None:
                continue
            mets = [m["value"] for m in idx.get((row["key"], "metrics"), [])
                    if "threshold" in (m.get("extra") or {}) and m["value"] is not None]
            if not mets:
                continue
            v = min(mets)
        vals.append(float(v))
        labs.append(row["label"] >= positive)
        groups.append(row["key"][0])
    return vals, labs, groups


def fit_and_save(rd: RunDir, name: str, matched, idx, *, positive: float = 0.5, folds: int = 5,
                 seed: int = 0, extra_cards: Iterable[str] = (), write: bool = True) -> dict:
    import numpy as np
    from sklearn.model_selection import GroupKFold

    card = get_card(name, cards=load_cards(extra_cards))
    spec = card.get("calibrate")
    if not spec or "threshold" not in spec:
        raise AuditError(f"{card.get('_file')}: scorer {name!r} has no 'calibrate: {{threshold: ...}}' "
                         "entry, so there is no threshold to fit")
    key, applies_to = spec["threshold"], spec.get("applies_to", "question")
    strict = spec.get("rule", "gt" if applies_to == "metric" else "ge") == "gt"
    prev = float((card.get("thresholds") or {}).get(key, 0.5))
    from ..scenes import groups_by_id

    vals, labs, prompt_of = _data(matched, idx, applies_to, positive)
    group_of = groups_by_id(rd.read_prompts())
    groups = [group_of.get(p, p) for p in prompt_of]  # folds keep a prompt group (scenes.prompt_groups) together
    if len(vals) < 4 or len(set(labs)) < 2:
        raise AuditError(f"scorer {name}: need at least 4 labelled {applies_to} records with both "
                         f"classes to fit thresholds.{key} (have {len(vals)})")
    v, y, g = np.array(vals), np.array(labs), np.array(groups)
    n_splits = min(folds, len(set(groups)))
    cv_acc, cv_prev, fold_t = [], [], []
    if n_splits >= 2:
        for tr, te in GroupKFold(n_splits=n_splits).split(v, y, g):
            t, _ = best_threshold(v[tr], y[tr], strict=strict, prefer=prev)
            fold_t.append(t)
            pred = v[te] > t if strict else v[te] >= t
            cv_acc.append(float((pred == y[te]).mean()))
            pp = v[te] > prev if strict else v[te] >= prev
            cv_prev.append(float((pp == y[te]).mean()))
    t, acc = best_threshold(v, y, strict=strict, prefer=prev)
    out = {"key": key, "applies_to": applies_to, "previous": prev, "threshold": t, "n": len(vals),
           "n_prompts": len(set(groups)),
           "train_accuracy": acc, "folds": n_splits if n_splits >= 2 else 0,
           "cv_accuracy": float(np.mean(cv_acc)) if cv_acc else None,
           "cv_accuracy_previous": float(np.mean(cv_prev)) if cv_prev else None,
           "fold_thresholds": fold_t}
    if write:
        copy = {k: v_ for k, v_ in card.items() if k != "_file"}
        copy["thresholds"] = {**(copy.get("thresholds") or {}), key: t}
        copy["calibration"] = {"labels_n": len(vals), "from_card": card.get("_file"),
                               "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                               **{k: out[k] for k in ("previous", "cv_accuracy", "cv_accuracy_previous", "folds")}}
        path = rd.root / "calibration" / f"{name}.yaml"
        atomic_write_text(path, "# calibrated copy written by `t2i-audit calibrate --fit-threshold`\n"
                          + yaml.safe_dump(copy, sort_keys=False))
        out["card"] = str(path)
    return out
