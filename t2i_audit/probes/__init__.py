"""Linear probes on a model's own activations (Redhardt, Akram & Schug 2025, as a tool).

Importing this package does not import torch. Layout, in the order data flows:

* ``capture/`` — run the model, keep its tensors: ``pipeline_text`` + ``activations`` (text
  encoders), ``denoiser`` (UNet / transformer block hooks), ``attention``, ``preview`` (x0),
  ``early`` (per-image replay of the first steps);
* ``features/`` — captured tensors to per-image features (``map_features``: attention maps);
* ``fit/`` — arrays in, numbers out: ``linear`` (prompt-level probes, grouped CV), ``per_image``
  (per-image failure probes), both through ``pipeline`` (the one logistic pipeline, ``logistic``);
* ``studies/`` — the selection studies asked of a run's per-image arrays;
* top level, the commands and their files: ``stage`` (``probe``), ``early_stage`` (``probe
  --early``), ``predict``, ``select``, ``probe_files`` (reading fitted probes), ``cli``.

Files written in a run directory
--------------------------------
``activations/<encoder>/<layer>__<pooling>.npy`` + ``index.jsonl`` + ``meta.json`` (see
``capture/activations.py``; ``activations/denoiser/`` has the same layout, layers = block names,
poolings = ``t<step>-cond`` / ``t<step>-uncond``).

``probes/decodability.jsonl`` — one line per encoder × layer × pooling × target slot:
``{"encoder", "layer", "pooling", "target" (slot, e.g. "c1"), "family" ("color"),
"accuracy", "accuracy_folds", "chance" (majority class, same folds), "chance_uniform",
"control_accuracy", "control_chance", "selectivity" (accuracy − control), "n", "n_classes",
"n_compositions", "n_folds"}``. CV is grouped by ``scenes.prompt_groups`` (one scene or a swap twin pair): test compositions are unseen.

``probes/failure.jsonl`` — one line per encoder × layer × prompt-level pooling (eos, mean,
denoiser): ``{"encoder", "layer", "pooling", "auroc": {"auroc", "ci", "n"},
"baseline_auroc": {…} (one-hot slot=value + template), "auroc_diff": {"diff", "ci", "p"},
"verdict" (plain words), "n", "failure_rate", "n_folds"}``. failed = success rate < 0.5, the
success rate being the mean verdict of a prompt's samples in ``scores/<scorer>.jsonl``.

``probes/correlation.jsonl`` — per encoder × layer × prompt-level pooling × unit
(``composition`` or ``binding``): ``{"mean_decodability", "unit", "n_units", "n",
"spearman": {"r", "ci", "p_perm"}, "pearson": {…}}``; decodability of a prompt = mean
out-of-fold probability of its true slot values.

``probes/failure_probe.json`` — the text-encoder failure probe with the best out-of-fold
AUROC, refit on every labelled prompt (scaler mean/scale, coef, intercept, encoder, layer,
pooling, fingerprint, compositions seen) — used by ``t2i-audit predict``.

``summary.json["probes"]``: ``{"scorers", "n_labelled_prompts", "files",
"decodability_best_layer": {"<encoder>/<pooling>/<target>": {"layer", "accuracy", "chance",
"control"}}, "failure_prediction": {"encoder", "layer", "pooling", "auroc", "auroc_ci",
"baseline_auroc", "baseline_auroc_ci", "diff_ci", "verdict", "n", "note"} | {"skipped"},
"correlation": {"encoder", "layer", "pooling", "unit", "n_units", "spearman", "pearson",
"note"} | {"skipped"}, "model", "seed", "layers", "poolings", "encoders": {name: {"arrays",
"dim", "bytes", "truncated"}}, "extract_seconds", "fit_seconds"}``.
"""

from __future__ import annotations


def run_probe_stage(run_dir, *, model: str, scorer: str | None = None, layers: str = "all",
                    poolings=("eos", "mean", "slot"), seed: int = 0, device: str = "cpu",
                    denoiser: bool = False, progress: bool = True, **kw) -> dict:
    """Extract activations (resumable, idempotent), fit the probes, write probes/ + summary."""
    from .stage import run_probe_stage as _run

    return _run(run_dir, model=model, scorer=scorer, layers=layers, poolings=poolings, seed=seed,
                device=device, denoiser=denoiser, progress=progress, **kw)


def predict_failures(model: str, suite_path, from_run, out_path, *, device="cpu", force: bool = False,
                     limit: int | None = None, variant=None) -> list[dict]:
    """Rank never-generated prompts by the failure risk the probe fitted on ``from_run`` predicts
    (an existing ``out_path`` is replaced only with ``force``; ``limit``: a balanced subset of N prompts)."""
    from .predict import predict_failures as _predict

    return _predict(model, suite_path, from_run, out_path, device=device, force=force, limit=limit, variant=variant)


__all__ = ["run_probe_stage", "predict_failures"]
