"""``t2i-audit mini ...``: train the mini judge / generator, measure them, render scenes.

No torch at import: every command imports its worker inside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import AuditError
from ..suite import SHIPPED_SUITES

PKG = Path(__file__).resolve().parent
WEIGHTS = PKG / "weights"
SUITE = SHIPPED_SUITES / "mini.yaml"

mini_app = typer.Typer(help="The mini world: embedded generator and judges with ground truth.",
                       no_args_is_help=True)


def _log(quiet: bool):
    """Where a long command's progress lines go: the terminal, or nowhere with -q."""
    return (lambda *a, **k: None) if quiet else typer.echo


QUIET = typer.Option(False, "--quiet", "-q", help="No progress lines.")


def _budget(steps: Optional[int], minutes: Optional[float], smoke: bool) -> None:
    if not smoke and steps is None and minutes is None:
        raise AuditError("give --steps N or --minutes M (or --smoke for a few-step check)")


@mini_app.command("train-judge")
def train_judge_cmd(
    out: Path = typer.Option(Path("mini-judge"), help="Output folder (config.json, model.safetensors, card.json). "
                             "Outside the package: to ship a new judge, copy the folder over "
                             "t2i_audit/mini/weights/judge in a checkout and commit it."),
    steps: Optional[int] = typer.Option(None, help="Stop after N steps."),
    minutes: Optional[float] = typer.Option(None, help="Stop after M minutes of wall time."),
    seed: int = typer.Option(0, help="Training seed (data, initialisation)."),
    threads: int = typer.Option(1, help="torch threads."),
    smoke: bool = typer.Option(False, help="3 steps of a tiny model (CI)."),
    quiet: bool = QUIET,
) -> None:
    """Train the open_clip mini judge on every composition (hard negatives incl. relations)."""
    from .train_judge import JudgeConfig, smoke_config, train_judge

    _budget(steps, minutes, smoke)
    cfg = smoke_config(seed) if smoke else JudgeConfig(seed=seed, steps=steps, minutes=minutes, threads=threads)
    card = train_judge(out, cfg, log=_log(quiet))
    typer.echo(f"judge: {card['steps']} steps, {card['cpu_seconds']} CPU s -> {out}")


@mini_app.command("train-generator")
def train_generator_cmd(
    out: Path = typer.Option(Path("mini-generator"), help="Output pipeline folder, outside the package: to ship a "
                             "new generator, copy it over t2i_audit/mini/weights/generator in a checkout and commit it."),
    steps: Optional[int] = typer.Option(None, help="Stop after N steps."),
    minutes: Optional[float] = typer.Option(None, help="Stop after M minutes of wall time."),
    seed: int = typer.Option(0, help="Training seed (data, initialisation)."),
    batch: int = typer.Option(32, help="Rendered images per optimisation step."),
    threads: int = typer.Option(1, help="torch threads."),
    smoke: bool = typer.Option(False, help="3 steps of a tiny model (CI)."),
    checkpoint_every: Optional[int] = typer.Option(None, "--checkpoint-every", help="Also write OUT/checkpoint-<step>/ every N steps, in the layout of diffusers' training examples (for `t2i-audit track`); OUT_initial/ holds the untrained pipeline (the track's base)."),
    track: Optional[Path] = typer.Option(None, "--track", help="Audit the EMA weights in-process into this track folder (TrackCallback: the mini suite, the pixel judge)."),
    track_every: int = typer.Option(250, "--track-every", help="Steps between in-process audits (--track)."),
    track_limit: int = typer.Option(40, "--track-limit", help="Prompts of the mini suite each audit uses (--track)."),
    quiet: bool = QUIET,
) -> None:
    """Train the mini text-to-image model on renders, held-out colour-shape pairs excluded."""
    from .train_generator import GeneratorConfig, smoke_config, train_generator

    _budget(steps, minutes, smoke)
    cfg = smoke_config(seed) if smoke else GeneratorConfig(seed=seed, steps=steps, minutes=minutes,
                                                           batch=batch, threads=threads)
    callback = None
    if track is not None:
        from ..track import TrackCallback
        from .components import DEFAULT_GUIDANCE, DEFAULT_STEPS

        callback = TrackCallback(track, prompts=[str(SUITE)], limit=track_limit, every=track_every,
                                 steps=DEFAULT_STEPS, guidance=DEFAULT_GUIDANCE, size=cfg.size, scorers=["mini-pixel"],
                                 progress=not quiet)
    card = train_generator(out, cfg, log=_log(quiet), checkpoint_every=checkpoint_every,
                           save_initial=checkpoint_every is not None, callback=callback)
    typer.echo(f"generator: {card['steps']} steps, {card['cpu_seconds']} CPU s -> {out}")


@mini_app.command("eval-judges")
def eval_judges_cmd(
    judge: Path = typer.Option(WEIGHTS / "judge", help="open_clip judge folder."),
    n: int = typer.Option(300, help="Triples per category."),
    seed: int = typer.Option(90210, help="Seed of the rendered test triples (the cards' figures use 90210)."),
    write: bool = typer.Option(False, help="Write the open_clip judge's accuracy into --judge/card.json (a judge "
                                           "you trained or copied: the shipped one, inside the package, is never "
                                           "rewritten). The pixel judge's figures are printed only."),
    agreement: bool = typer.Option(False, help="Also run the registered scorers (mini-pixel, mini-judge) on "
                                               "renders of the mini suite and print agreement with the truth."),
) -> None:
    """Accuracy per category (shape, colour, colour/shape binding, relation) on fresh renders. Prints; writes
    nothing unless --write names a judge of your own."""
    from ..cli_checks import require_input
    from ..ownership import refuse_package_path
    from .evaluate import _update_card, eval_judges, eval_scorer_on_renders

    require_input(judge, "--judge", "folder")
    if write:  # before the work: the card written must not be the package's
        refuse_package_path(judge / "card.json", "--write: --judge card")

    res = eval_judges(judge if write else None, None, n, seed)
    if agreement:
        for name in ("mini-pixel", "mini-judge"):
            ag = eval_scorer_on_renders(name, SUITE, seed)
            typer.echo(f"{name} scorer agreement with truth on suite renders: {ag['agreement']}")
            if write and name == "mini-judge":
                _update_card(judge / "card.json", "scorer_agreement", ag)
    if not write and (judge / "model.safetensors").exists():
        from .evaluate import eval_clip_judge

        res["clip"] = eval_clip_judge(judge, n, seed)
    for name, r in res.items():
        typer.echo(f"{name:6s} " + "  ".join(f"{k}={v:.3f}" for k, v in r["per_category"].items()))


@mini_app.command("eval-generator")
def eval_generator_cmd(
    model: Path = typer.Option(WEIGHTS / "generator", help="Generator pipeline folder."),
    suite: Path = typer.Option(SUITE, help="Prompt suite."),
    samples: int = typer.Option(4, help="Images per prompt."),
    steps: Optional[int] = typer.Option(None, help="Denoising steps (default: the mini card's 20)."),
    guidance: Optional[float] = typer.Option(None, help="Guidance scale (default: the mini card's 7.0)."),
    limit: Optional[int] = typer.Option(None, help="First N prompts only."),
    every: int = typer.Option(1, help="Every k-th prompt of the suite only."),
    write: bool = typer.Option(False, help="Write the result into --model/card.json (a generator you trained or "
                                           "copied: the shipped one, inside the package, is never rewritten)."),
    grid: Optional[Path] = typer.Option(None, help="Also save a PNG grid of samples."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at --grid (never done otherwise)."),
) -> None:
    """Seen vs held-out success of the generator, judged by the pixel judge. Prints; writes nothing unless --write
    names a generator of your own. The full suite at 4 images per prompt takes about 13 minutes on 2 CPU cores
    (--limit / --every / --samples make it shorter)."""
    from ..cli_checks import require_input
    from ..ownership import claim_output_file, refuse_package_path
    from .evaluate import eval_generator

    require_input(model, "--model", "folder")
    if write:  # before the work
        refuse_package_path(model / "card.json", "--write: --model card")
    require_input(model / "model_index.json", "--model")  # a diffusers pipeline folder
    require_input(suite, "--suite")
    if grid is not None:
        claim_output_file(grid, force=force)  # before the evaluation's work

    res = eval_generator(model, suite, samples, steps, guidance, limit=limit, write_card=write, grid=grid,
                         every=every)
    typer.echo(json.dumps(res["success"], indent=1))


def _floats(text: str, what: str) -> tuple:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise AuditError(f"--{what} {text!r}: give comma-separated numbers, e.g. 0.33,0.5,0.75,1") from None


@mini_app.command("sweep")
def sweep_cmd(
    out: Path = typer.Option(Path("reports/sweep"), help="Output folder (models/, sweep.json, index.html)."),
    coverages: Optional[str] = typer.Option(None, help="Fractions of the 18 trainable colour-shape pairs "
                                                       "(default 0.333,0.5,0.75,1)."),
    widths: Optional[str] = typer.Option(None, help="UNet widths w (blocks w, 2w, 2w): the scale axis (default 16,32)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds (default 0,1,2)."),
    steps: Optional[int] = typer.Option(None, help="Optimisation steps per model (same for all)."),
    samples: Optional[int] = typer.Option(None, help="Images per prompt at evaluation."),
    fit_threshold: Optional[float] = typer.Option(None, help="Seen-pair success a model needs before a claim is "
                                                             "read from it (default 0.8, pre-registered)."),
    workers: int = typer.Option(1, min=1, help="Worker processes, one thread each (one per CPU core); sweeps "
                                               "started separately on the same --out also share the models."),
    device: str = typer.Option("cpu", help="cpu or cuda: training, generation and hooks (data and noise are "
                                           "drawn on the CPU, so a GPU run trains on the same draws)."),
    smoke: bool = typer.Option(False, help="A tiny model, a few steps, 2 coverages × 1 width × 1 seed (CI)."),
    eval_only: bool = typer.Option(False, help="Evaluate/aggregate the models already trained; train none."),
    train_only: bool = typer.Option(False, help="Train the missing models; evaluate none."),
    quiet: bool = QUIET,
) -> None:
    """Coverage × scale sweep: train mini generators at several coverages of the colour × shape space and
    several widths, check each fits its own training pairs, measure held-out success and the denoiser's
    decodability, and relate them (sweep.json + index.html). Resumable per model."""
    from .sweep import SweepConfig, run_sweep, smoke_sweep_config

    kw: dict = {"device": device, "workers": workers}
    if coverages:
        kw["coverages"] = _floats(coverages, "coverages")
        if any(not 0 < c <= 1 for c in kw["coverages"]):
            raise AuditError(f"--coverages {coverages!r}: each must be in (0, 1]")
    if widths:
        kw["widths"] = tuple(int(x) for x in _floats(widths, "widths"))
        if any(w < 1 or (w > 32 and w % 32) for w in kw["widths"]):
            raise AuditError(f"--widths {widths!r}: each must be 1–32 or a multiple of 32 (the UNet's GroupNorm "
                             "splits w and 2w channels into min(32, w) groups)")
    if seeds:
        kw["seeds"] = tuple(int(x) for x in _floats(seeds, "seeds"))
    if steps is not None:
        kw["steps"] = steps
    if samples is not None:
        kw["samples"] = samples
    if fit_threshold is not None:
        kw["fit_threshold"] = fit_threshold
    cfg = smoke_sweep_config(**kw) if smoke else SweepConfig(**kw)
    res = run_sweep(out, cfg, eval_only=eval_only, train_only=train_only, log=_log(quiet))
    agg = res.get("aggregate", {}) if res else {}
    for axis, strata in (("coverage", "width"), ("scale", "coverage")):
        c = agg.get(f"heldout_success_vs_{axis}", {})
        typer.echo(f"held-out success vs {axis} within {strata} ({agg.get('n_models', 0)} models that fit): "
                   f"{_within_text(c.get('within'))}; pooled rho "
                   f"{json.dumps((c.get('spearman_over_models') or {}).get('spearman', {}).get('r'))}")
    d = (agg.get("decodability_success_link") or {}).get("readings", {})
    for name in ("denoiser", "text_encoder"):
        if name in d:
            typer.echo(f"decodability ({name}) vs held-out success within coverage: {_within_text(d[name])}; pooled "
                       f"rho {d[name]['pooled']['rho']}")


def _within_text(res: dict | None) -> str:
    w = (res or {}).get("within") or {}
    if w.get("rho") is None:
        return "undefined"
    ci = w.get("ci") or [None, None]
    return (f"rho {w['rho']} CI {ci}, p {w.get('p_perm')} ({w.get('n_perm')} shuffles within "
            f"{res.get('strata', 'strata')})")


@mini_app.command("render")
def render_cmd(
    text: str = typer.Argument(..., help='A mini caption, e.g. "a red circle to the left of a blue square".'),
    out: Path = typer.Option(Path("mini.png"), help="PNG to write."),
    size: int = typer.Option(32, help="Image side in pixels."),
    seed: int = typer.Option(0, help="Seed of the scene's layout (positions, sizes)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at --out (never done otherwise)."),
) -> None:
    """Render the ground-truth image of a mini caption."""
    import io
    import random

    from ..ownership import claim_output_file
    from ..rundir import atomic_write_bytes
    from .world import parse_caption, render

    claim_output_file(out, force=force)
    scene = parse_caption(text, random.Random(seed))
    buf = io.BytesIO()
    render(scene, size).save(buf, format="PNG")  # --out names a PNG whatever its extension
    atomic_write_bytes(out, buf.getvalue())  # whole or not at all (a full disk leaves no torn PNG)
    typer.echo(f"{out}: {text}")


def register(app: typer.Typer) -> None:
    app.add_typer(mini_app, name="mini")
