"""CLI commands ``probe`` and ``predict`` (registered on the main Typer app). No torch here."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import AuditError


def _run_model(run: Path) -> str | None:
    """The model a run was made with, from manifest.json or run.yaml, if recorded."""
    from ..rundir import RunDir

    rd = RunDir(run)
    model = None
    if rd.config.exists():  # run.yaml keeps the reference as the user gave it (card, hf:…, folder)
        from ..safeload import load_yaml

        cfg = load_yaml(rd.config) or {}
        model = cfg.get("model") if isinstance(cfg, dict) else None
    if not model:
        m = rd.read_manifest().get("model")
        model = m.get("name") if isinstance(m, dict) else m
    return model


def _int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise AuditError(f"{option} {text!r}: expected comma-separated integers") from None


def probe(
    run: Path = typer.Argument(..., help="Run directory (with prompts.jsonl; scores/ for failure analyses)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model card or folder; default: the run's model."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="Scorer whose verdicts define success; default: all in scores/."),
    layers: str = typer.Option("all", "--layers", help="all | last | conditioning (the layer the pipeline feeds its denoiser) | comma list of indices (negative ok) or names (h03, final, pooled)."),
    poolings: str = typer.Option("eos,mean,slot", "--poolings", help="Comma list of eos, mean, slot."),
    seed: int = typer.Option(0, "--seed"),
    device: str = typer.Option("cpu", "--device"),
    denoiser: bool = typer.Option(False, "--denoiser/--no-denoiser", help="Also hook the UNet/transformer blocks (runs the pipeline)."),
    timesteps: Optional[str] = typer.Option(None, "--timesteps", help="Denoiser steps to hook, e.g. 0,10,-1 (default: first, middle, last)."),
    folds: int = typer.Option(5, "--folds", help="Grouped cross-validation folds."),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples (and permutations) for CIs and p-values."),
    probe_backend: str = typer.Option("torch", "--probe-backend",
                                      help="torch (batched on --device; matches scikit-learn) | sklearn (the reference)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines."),
) -> None:
    """Linear probes: constituent decodability, failure prediction vs baseline, decodability ↔ success."""
    from . import run_probe_stage

    model = model or _run_model(run)
    if not model:
        raise AuditError(f"{run}: the run does not record its model; pass --model")
    res = run_probe_stage(run, model=model, scorer=scorer, layers=layers,
                          poolings=tuple(p.strip() for p in poolings.split(",") if p.strip()),
                          seed=seed, device=device, denoiser=denoiser, progress=not quiet, n_splits=folds,
                          n_boot=bootstrap, timesteps=_int_list(timesteps, "--timesteps"),
                          probe_backend=probe_backend)
    if not res:  # another accelerate process: it extracted its share, the main one reports
        return
    fp = res.get("failure_prediction", {})
    typer.echo(f"probes written to {Path(run) / 'probes'}")
    if "auroc" in fp:
        typer.echo(f"failure prediction ({fp['encoder']}/{fp['layer']}/{fp['pooling']}): AUROC "
                   f"{fp['auroc']:.3f} vs prompt-only baseline {fp['baseline_auroc']:.3f} — {fp['verdict']}")
    else:
        typer.echo(f"failure prediction skipped: {fp.get('skipped')}")
    cr = res.get("correlation", {})
    if "spearman" in cr:
        s = cr["spearman"]
        typer.echo(f"decodability vs success ({cr['n_units']} {cr['unit']}s): Spearman {s['r']} "
                   f"CI {s['ci']} p_perm {s['p_perm']}")


def predict(
    model: str = typer.Option(..., "--model", help="Model card or folder (the one the run was probed with)."),
    prompts: Path = typer.Option(..., "--prompts", help="Suite YAML (expanded) or prompts.jsonl."),
    from_run: Path = typer.Option(..., "--from", help="Probed run directory (probes/failure_probe.json)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Ranking JSONL; default <prompts stem>.risk.jsonl."),
    device: str = typer.Option("cpu", "--device"),
    top: int = typer.Option(10, "--top", help="How many of the riskiest to print."),
) -> None:
    """Rank never-generated prompts by predicted failure risk, using a run's fitted probe."""
    from . import predict_failures

    out = out or prompts.with_name(prompts.stem + ".risk.jsonl")
    ranked = predict_failures(model, prompts, from_run, out, device=device)
    for r in ranked[:top]:
        typer.echo(f"{r['rank']:>4}  {r['risk']:.3f}  {r['text']}")
    typer.echo(f"{len(ranked)} prompts ranked -> {out}")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("predict")(predict)
