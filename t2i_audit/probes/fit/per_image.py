"""Per-image failure probes on early-step features, beside the references they must beat.

For each category (and failure type) and each stored step, a logistic probe (median imputation,
standardisation, L2 logistic regression — the probes' one pipeline, ``fit/pipeline.py``; C chosen by
an *inner* grouped CV on the training folds only, never on a test fold) predicts from probes/capture/early.py
features whether the image will fail its deciding scorer's verdict. Two evaluations:

* ``compositions`` — outer folds grouped by composition: the probe never saw the test prompts'
  composition (the paper's question: does it generalise?);
* ``seeds`` — trained on the first half of each prompt's samples, tested on the second half: the
  seed-selection setting (the prompts are known, their new seeds are not).

References on the same rows, each with a paired bootstrap CI of the AUROC difference: the
prompt-only baseline (one-hot constituents, same fitter), the text-encoder probe (the run's stored
conditioning-layer states, same fitter), the x0 preview at the same step judged by the deciding
scorer (no fitting: risk = 1 − fraction of questions passed) and, where the run has a second
scorer, the final image judged by it (a ceiling no early probe should be expected to reach).

Feature families: ``attention`` (cross-attention composition statistics, every grid), ``pooled``
(every block's pooled image stream), ``probe`` = attention + pooled + prompt one-hot — the
headline, fixed before any number was seen — and ``probe+x0``, which adds the deciding scorer's
answers on the x0 preview (what the preview shows, where the attention says where and which token). Fitted probes are stored as plain arrays (no pickle:
a run folder is data, never code) for ``select`` and ``predict``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ... import stats
from ...errors import AuditError
from . import pipeline

CS = (0.01, 0.1, 1.0)
FAMILIES = ("attention", "pooled", "probe", "probe+x0")


def design(arrays: Mapping[str, np.ndarray], step: int, family: str, rows: np.ndarray | slice,
           onehot: np.ndarray | None = None) -> np.ndarray:
    """The feature matrix of ``family`` at ``step`` for ``rows`` (``onehot``: the prompt features of those rows)."""
    tag = f"__t{step:03d}"
    pick = {"attention": ("attn-",), "pooled": ("pooled-",), "probe": ("attn-", "pooled-"),
            "probe+x0": ("attn-", "pooled-", "x0__")}[family]
    names = sorted(n for n in arrays if n.endswith(tag) and n.startswith(pick))
    parts = [np.asarray(arrays[n][rows], dtype=np.float32) for n in names]
    if family.startswith("probe") and onehot is not None:
        parts.append(np.asarray(onehot, dtype=np.float32))
    if not parts:
        raise AuditError(f"no {family} features at step {step} (have {sorted(arrays)[:6]}…)")
    return np.hstack(parts)


def _nested(X, y, groups, splits, seed: int):
    """The probes' one logistic pipeline (``fit/pipeline.py``), C by an inner grouped CV per split."""
    return pipeline.nested(X, y, groups, splits, Cs=CS, seed=seed)


def fit_predict(X, y, groups, train, test, seed: int = 0) -> tuple[np.ndarray, float]:
    """P(failed) on ``test`` from a probe fitted on ``train`` (C by inner CV on ``train``)."""
    f = _nested(X, y, groups, [(train, test)], seed)[0]
    return f.risk, f.C


def oof(X, y, groups, folds, seed: int = 0) -> np.ndarray:
    risk = np.full(len(y), np.nan)
    for (_tr, te), f in zip(folds, _nested(X, y, groups, folds, seed)):
        risk[te] = f.risk
    return risk


def export_probe(X, y, groups, seed: int = 0) -> dict:
    """The probe fitted on all rows, as plain arrays: ``risk = σ(w · (impute(x) − μ) / s + b)``."""
    every = np.arange(len(y))
    f = _nested(X, y, groups, [(every, every[:0])], seed)[0]
    p = f.params
    median = p["median"] if p["median"] is not None else pipeline.train_medians(X, every)
    return {"C": f.C, "median": median.tolist(), "mean": p["mean"].tolist(), "scale": p["scale"].tolist(),
            "coef": p["coef"][1].tolist(), "intercept": float(p["intercept"][1])}


def apply_probe(probe: Mapping, X: np.ndarray) -> np.ndarray:
    """Risk from an exported probe (numpy only; pinned to the scikit-learn pipeline by a test)."""
    X = np.asarray(X, dtype=np.float64).copy()
    med = np.asarray(probe["median"])
    if X.shape[1] != len(med):
        raise AuditError(f"the probe expects {len(med)} features, got {X.shape[1]}")
    bad = ~np.isfinite(X)
    X[bad] = np.broadcast_to(med, X.shape)[bad]
    z = (X - np.asarray(probe["mean"])) / np.asarray(probe["scale"])
    return 1.0 / (1.0 + np.exp(-(z @ np.asarray(probe["coef"]) + probe["intercept"])))


def compare(y: np.ndarray, risk: np.ndarray, refs: Mapping[str, np.ndarray], clusters: np.ndarray,
            compositions: np.ndarray, *, n_boot: int, seed: int) -> dict:
    """AUROC (CI) of ``risk`` and of each reference, and the paired difference against each. CIs resample
    whole ``clusters`` (a composition with its swap twin, :func:`t2i_audit.prompts.twin_group`): the images of
    one prompt, and a prompt and its twin, are not independent. Below the small-sample rule
    (:func:`t2i_audit.stats.too_few`, counting ``compositions``) an AUROC is stored as "too few", not a number,
    and no difference is computed from it."""
    ok = np.isfinite(risk)

    def auroc(rows, score):
        return stats.auroc_or_too_few(y[rows], score[rows], n_units=len(set(compositions[rows].tolist())),
                                      units="compositions", groups=clusters[rows], n_boot=n_boot, seed=seed)

    out = {"n": int(ok.sum()), "failure_rate": float(y[ok].mean()) if ok.any() else None,
           "auroc": auroc(ok, risk), "references": {}}
    for name, ref in refs.items():
        both = ok & np.isfinite(ref)
        if both.sum() < 2 or len(np.unique(y[both])) < 2:
            continue
        out["references"][name] = {"auroc": auroc(both, ref)}
        if "too_few" not in out["references"][name]["auroc"]:
            out["references"][name]["probe_minus_reference"] = stats.auroc_diff_ci(
                y[both], risk[both], ref[both], n_boot=n_boot, seed=seed, groups=clusters[both])
    return out


def selection_lift(prompt_ids: Sequence[str], success: np.ndarray, risk: np.ndarray, *, groups: Sequence[str],
                   n_of: int, keep: int, n_boot: int = 1000, seed: int = 0) -> dict:
    """Best ``keep`` of the first ``n_of`` samples of each prompt by predicted risk, against ``keep`` random ones
    (their expectation: the mean success of the ``n_of``). Bootstrap over the prompts' ``groups`` (one per row,
    ``scenes.prompt_groups``): a prompt and its twin or paraphrase are resampled together."""
    by: dict[str, list[int]] = {}
    for i, pid in enumerate(prompt_ids):
        by.setdefault(pid, []).append(i)
    picked, rand, cluster = [], [], []
    for rows in by.values():
        rows = rows[:n_of]
        if len(rows) < n_of or not np.all(np.isfinite(risk[rows])):
            continue
        best = np.asarray(rows)[np.argsort(risk[rows], kind="stable")[:keep]]
        picked.append(success[best].mean())
        rand.append(success[rows].mean())
        cluster.append(groups[rows[0]])
    picked, rand = np.asarray(picked), np.asarray(rand)
    if not len(picked):
        return {"n_prompts": 0}
    lo, hi = stats.cluster_bootstrap_ci(lambda a, b: float(np.mean(a - b)), picked, rand, groups=np.asarray(cluster),
                                        n_boot=n_boot, seed=seed)
    return {"n_prompts": int(len(picked)), "selected_success": float(picked.mean()),
            "random_success": float(rand.mean()), "lift": float((picked - rand).mean()), "ci": [lo, hi]}
