"""``t2i-audit probe RUN --early``: per-image features, the per-image failure study, fitted probes.

Writes ``probes/early.json`` (AUROC per category × step × feature family, both evaluations, the
references with paired CIs, per failure type, and the simulated seed selection),
``probes/early_probes.json`` (one fitted probe per category and step, plain arrays, for ``select``)
and ``probes/early_risk.jsonl`` (every image's out-of-fold risk per step, for the report).
"""

from __future__ import annotations

import sys
import time
from typing import Mapping, Sequence

import numpy as np

from .. import stats
from ..errors import AuditError
from ..records import check_run
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl
from ..scenes import prompt_groups
from .fit import per_image
from .stage import PROBE_READS
from .capture.early import DEFAULT_FRACTIONS, extract_early_features, load_early, step_label
from .fit.linear import grouped_folds, onehot_constituents


def image_verdicts(rd: RunDir, prompts: Sequence[dict], scorer: str | None = None) -> tuple[dict, dict, dict]:
    """(prompt_id, sample) → the deciding scorer's prompt record; category → scorer; other scorers'
    values per image (``{scorer: {key: value}}``, the final-image ceiling)."""
    from .stage import label_scorers

    deciding = {c: d.get("scorer") for c, d in label_scorers(rd, prompts, scorer).items() if d.get("scorer")}
    cat_of = {p["id"]: p.get("category") for p in prompts}
    verdicts, others = {}, {}
    for path in sorted(rd.scores_dir.glob("*.jsonl")) if rd.scores_dir.exists() else []:
        for r in rd.read_scores(path):
            if r.get("kind") != "prompt" or r.get("verdict") is None:
                continue
            key = (r["prompt_id"], int(r.get("sample", 0)))
            if deciding.get(cat_of.get(r["prompt_id"])) == r.get("scorer"):
                verdicts[key] = r
            elif r.get("value") is not None:
                others.setdefault(r["scorer"], {})[key] = float(r["value"])
    return verdicts, deciding, others


def _text_reference(rd: RunDir, prompt_ids: Sequence[str]) -> np.ndarray | None:
    """The run's text-encoder states per image (its prompt's): the layer the denoiser is conditioned on,
    eos, mean and each slot's own tokens, of the first stored encoder; None when the run has none
    (``t2i-audit probe`` stores them)."""
    from .capture.activations import load_activations, load_array

    for enc_dir in sorted(p for p in rd.activations_dir.glob("text_encoder*") if (p / "meta.json").exists()):
        meta, ids = load_activations(enc_dir)
        hidden = [n for n in meta["layers"] if n.startswith("h") or n == "final"]
        layer = meta.get("conditioning_layer") or (hidden[-1] if hidden else None)
        names = [a for a in meta["arrays"] if a.startswith(f"{layer}__") and a.split("__")[1] != "prompt"]
        if not names:
            continue
        row = {pid: i for i, pid in enumerate(ids)}
        if any(pid not in row for pid in prompt_ids):
            return None
        X = np.hstack([np.asarray(load_array(enc_dir, n), np.float32) for n in names])
        return X[[row[pid] for pid in prompt_ids]]
    return None


MIN_GROUPS = 3  # prompt groups a category needs: grouped folds with a composition on each side, and a held-out one
SEEDS_ABSENT = ("one image per prompt: the held-out-seeds evaluation trains on the first half of each prompt's "
                "samples and tests on the second half; make 2 or more per prompt (-n 2)")


def _seed_split(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = (int(samples.max()) + 1) // 2
    return np.flatnonzero(samples < half), np.flatnonzero(samples >= half)


def study(rd: RunDir, *, scorer: str | None = None, n_splits: int = 5, seed: int = 0, n_boot: int = 1000,
          n_of: int = 4, keep: int = 1, progress: bool = True) -> dict:
    arrays, rows, meta = load_early(rd)
    prompts = rd.read_prompts()
    by_id = {p["id"]: p for p in prompts}
    verdicts, deciding, others = image_verdicts(rd, prompts, scorer)
    labelled = np.array([k in verdicts for k in rows])
    pids = np.array([pid for pid, _ in rows])
    samples = np.array([k for _, k in rows])
    recs = [by_id[pid] for pid in pids]
    failed = np.array([not verdicts[k]["verdict"] if k in verdicts else False for k in rows], dtype=int)
    ftypes = [sorted({f.get("type") for f in verdicts[k].get("failures") or []}) if k in verdicts else []
              for k in rows]
    onehot, onehot_names = onehot_constituents(recs)
    text = _text_reference(rd, list(pids))
    out: dict = {"steps": meta["steps"], "loop_steps": meta["loop_steps"], "labels_from": deciding,
                 "n_images": int(labelled.sum()), "families": list(per_image.FAMILIES), "categories": {},
                 "selection": {}, "onehot": onehot_names}
    exported: dict = {"onehot": onehot_names, "steps": meta["steps"], "categories": {}}
    risks: list[dict] = []  # out-of-fold (composition folds) risk of every image, per step: the report ranks them
    t0 = time.perf_counter()
    for cat in sorted({str(p.get("category")) for p in recs}):
        idx = np.flatnonzero(labelled & np.array([str(p.get("category")) == cat for p in recs]))
        # folds and bootstrap clusters: prompts showing one scene, and swap twins, never split (scenes.prompt_groups)
        group_of = np.array(prompt_groups([recs[i] for i in idx]))
        n_groups = len(set(group_of.tolist()))
        if n_groups < MIN_GROUPS or len(np.unique(failed[idx])) < 2:
            rate = f"failure rate {failed[idx].mean():.2f}" if len(idx) else "none judged"
            out["categories"][cat] = {"skipped": f"{len(idx)} labelled images of {n_groups} prompt groups, {rate}; a "
                                                 f"category needs ≥ {MIN_GROUPS} prompt groups with both a passing and "
                                                 "a failing image"}
            continue
        y, groups, clusters = failed[idx], group_of, group_of
        folds = grouped_folds(groups, n_splits, seed)
        tr_s, te_s = _seed_split(samples[idx])
        seeds_absent = None if len(tr_s) and len(te_s) else SEEDS_ABSENT
        base = {"prompt-only": onehot[idx]}
        if text is not None:
            base["text-encoder"] = text[idx]
        base_risk = {name: (per_image.oof(X, y, groups, folds, seed),
                            None if seeds_absent else _split_risk(X, y, groups, tr_s, te_s, seed))
                     for name, X in base.items()}
        ceiling = {f"final image ({name})": 1.0 - np.array([vals.get(rows[i], np.nan) for i in idx])
                   for name, vals in others.items()}
        res_cat: dict = {"n": int(len(idx)), "failure_rate": float(y.mean()), "steps": {}}
        exported["categories"][cat] = {}
        for step in meta["steps"]:
            x0 = f"x0__t{step:03d}"
            refs_c = {k: v[0] for k, v in base_risk.items()}
            refs_s = {} if seeds_absent else {k: v[1] for k, v in base_risk.items()}
            if x0 in arrays:
                preview = 1.0 - np.asarray(arrays[x0][idx, 0], float)
                refs_c["x0 preview"], refs_s["x0 preview"] = preview, preview[te_s]
            refs_c.update(ceiling)
            refs_s.update({k: v[te_s] for k, v in ceiling.items()})
            per_step: dict = {}
            for fam in per_image.FAMILIES:
                if fam == "probe+x0" and x0 not in arrays:
                    continue
                headline = fam.startswith("probe")
                X = per_image.design(arrays, step, fam, idx, onehot[idx] if headline else None)
                risk = per_image.oof(X, y, groups, folds, seed)
                per_step[fam] = {
                    "compositions": per_image.compare(y, risk, refs_c if headline else {}, clusters, groups,
                                                      n_boot=n_boot, seed=seed),
                    "seeds": {"skipped": seeds_absent} if seeds_absent else per_image.compare(
                        y[te_s], _split_risk(X, y, groups, tr_s, te_s, seed), refs_s if headline else {},
                        clusters[te_s], groups[te_s], n_boot=n_boot, seed=seed)}
                if fam == "probe":
                    risks += [{"prompt_id": rows[i][0], "sample": rows[i][1], "category": cat, "step": step,
                               "risk": float(r), "failed": bool(f)} for i, r, f in zip(idx, risk, y)]
                    per_step[fam]["by_failure_type"] = _by_type(idx, ftypes, y, risk, clusters, n_boot, seed)
                    per_step[fam]["selection"] = per_image.selection_lift(
                        [rows[i][0] for i in idx], 1 - y, risk, groups=clusters, n_of=n_of, keep=keep,
                        n_boot=n_boot, seed=seed)
                    exported["categories"][cat][f"t{step:03d}"] = per_image.export_probe(X, y, groups, seed)
            res_cat["steps"][f"t{step:03d}"] = {"iterations": step + 1, "fraction": (step + 1) / meta["loop_steps"],
                                                "families": per_step}
            if progress:
                a = per_step["probe"]["compositions"]["auroc"]
                print(f"[early] {cat} {step_label(step, meta['loop_steps'])}: probe AUROC "
                      f"{stats.shown(a['auroc'], a.get('too_few'))} ({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
        out["categories"][cat] = res_cat
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["selection_setting"] = {"n_of": n_of, "keep": keep, "how": (
        "per prompt, the best `keep` of its first `n_of` samples by out-of-fold risk (the probe never saw the "
        "prompt's composition) against `keep` random ones; success from the deciding scorer on the final images")}
    out["risk_file"] = "early_risk.jsonl"
    return out, exported, risks


def _split_risk(X, y, groups, train, test, seed) -> np.ndarray:
    risk, _ = per_image.fit_predict(X, y, groups, train, test, seed)
    return risk


def _by_type(idx, ftypes, y, risk, clusters, n_boot, seed) -> dict:
    """AUROC of the same risk against each failure type (that type vs success); "too few" by the one rule."""
    out = {}
    for t in sorted({t for i in idx for t in ftypes[i]}):
        has = np.array([t in ftypes[i] for i in idx])
        keep = has | (y == 0)
        out[t] = stats.auroc_or_too_few(has[keep].astype(int), risk[keep], n_boot=n_boot, seed=seed,
                                        groups=clusters[keep], units="prompts")
    return out


def run_early_stage(run_dir, *, model: str, device: str = "cpu", fractions: Sequence[float] = DEFAULT_FRACTIONS,
                    scorer: str | None = None, previews: bool = True, n_boot: int = 1000, seed: int = 0,
                    n_splits: int = 5, progress: bool = True, state=None, variant=None) -> dict:
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    kept = f"{rd.probes_dir / 'early_probes.json'} is left as it was"
    if not (rd.scores_dir.is_dir() and any(rd.scores_dir.glob("*.jsonl"))):  # before the replay's work
        raise AuditError(f"{rd.scores_dir}: no scores; the per-image probes learn from each image's verdict — run "
                         f"`t2i-audit score {rd.root}` first ({kept})")
    check_run(rd.root, PROBE_READS)  # before the replay: a damaged record is refused, nothing written
    meta = extract_early_features(rd, model, device=device, fractions=fractions, previews=previews,
                                  progress=progress, state=state, variant=variant)
    if not meta:  # a non-main process
        return {}
    result, exported, risks = study(rd, scorer=scorer, n_splits=n_splits, n_boot=n_boot, seed=seed,
                                    progress=progress)
    if not result["n_images"]:  # nothing to learn from: never replace fitted probes with none
        raise AuditError(f"{rd.scores_dir}: no image has a verdict from the scorer deciding its category "
                         f"({', '.join(f'{c}: {n}' for c, n in sorted(result['labels_from'].items())) or 'none'}); "
                         f"score the run with it (`t2i-audit score {rd.root}`) or pass --scorer ({kept})")
    if all("skipped" in r for r in result["categories"].values()):  # an empty study never replaces fitted probes
        raise AuditError(f"{rd.root}: no category can be studied per image — " + "; ".join(
            f"{c}: {r['skipped']}" for c, r in sorted(result["categories"].items())) + ". Make more prompts (a larger "
            "--limit, or none) or more seeds (-n 4) with the command that made the run (it extends the run), then "
            f"rerun this command; the early features made are kept ({kept})")
    result["features"] = {"key": meta["key"], "denoiser_iterations": meta["denoiser_iterations"],
                          "x0_judges": meta.get("x0_judges")}
    exported.update(model=model, key=meta["key"], settings=meta["settings"])
    rd.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(rd.probes_dir / "early.json", _clean(result))
    atomic_write_json(rd.probes_dir / "early_probes.json", exported)
    atomic_write_jsonl(rd.probes_dir / "early_risk.jsonl", risks)
    return result


def _clean(obj):
    """NaN → None, numpy scalars → Python: strict JSON."""
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return None if not np.isfinite(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
