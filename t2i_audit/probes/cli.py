"""CLI commands ``probe`` and ``predict`` (registered on the main Typer app). No torch here."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import AuditError
from ..variants import COMPONENT_HELP, LORA_HELP, RUN_VARIANT_NOTE


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


def _from_folder(path: Path, *, run: bool) -> Path:
    """``--from``: a folder that exists (and, with ``run``, a t2i-audit run) — said as such, before anything
    asks for a --model the folder would have named."""
    if not path.is_dir():
        raise AuditError(f"--from {path}: {'not a folder' if path.exists() else 'folder does not exist'}; give the "
                         "run folder that `t2i-audit probe` was run on")
    if run:
        from ..ownership import folder_kind

        kind = folder_kind(path)
        if kind != "run":
            what = f"a t2i-audit {kind}" if kind else "no run.yaml, manifest.json or .t2i-audit.json"
            raise AuditError(f"--from {path}: not a t2i-audit run ({what}); give the run that "
                             "`t2i-audit probe RUN --early` was run on")
    return path


def _variant(run: Path, model: str | None, lora: list[str] | None, component: list[str] | None):
    """The LoRAs / components of the run a command works on (run.yaml), the command line's checked against them."""
    from ..variants import component_options
    from ..variants.of_run import for_run

    return for_run(run, model, lora, component_options(component))


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
    seed: int = typer.Option(0, "--seed", help="Seed of the folds, bootstrap and permutations."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | mps: where activations are extracted."),
    denoiser: bool = typer.Option(False, "--denoiser/--no-denoiser", help="Also hook the UNet/transformer blocks (runs the pipeline)."),
    timesteps: Optional[str] = typer.Option(None, "--timesteps", help="Denoiser steps to hook, e.g. 0,10,-1 (default: first, middle, last)."),
    folds: int = typer.Option(5, "--folds", help="Grouped cross-validation folds."),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples (and permutations) for CIs and p-values."),
    probe_backend: str = typer.Option("torch", "--probe-backend",
                                      help="torch (batched on --device; matches scikit-learn) | sklearn (the reference)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    early: bool = typer.Option(False, "--early", help="Per-image failure probes from the first denoising steps "
                               "(cross-attention maps, pooled blocks) beside the prompt-only, text-encoder and "
                               "x0-preview references; writes probes/early.json and probes/early_probes.json."),
    at: str = typer.Option("0.1,0.2", "--at", help="With --early: fractions of the steps to read (e.g. 0.1,0.2,0.5)."),
    lora: Optional[list[str]] = typer.Option(None, "--lora", help=LORA_HELP + RUN_VARIANT_NOTE),
    component: Optional[list[str]] = typer.Option(None, "--component", help=COMPONENT_HELP + RUN_VARIANT_NOTE),
) -> None:
    """Linear probes: constituent decodability, failure prediction vs baseline, decodability ↔ success."""
    from ..ownership import require_kind
    from . import run_probe_stage

    require_kind(run, "run")  # probes/, activations/ and the manifest are written there
    from ..sources import refuse_without_pipeline

    refuse_without_pipeline("probe --early" if early else "probe", model=model or _run_model(run), run=run)
    model = model or _run_model(run)
    if not model:
        raise AuditError(f"{run}: the run does not record its model; pass --model")
    variant = _variant(run, model, lora, component)  # the run's LoRAs / components, as its images were made
    if early:
        _early(run, model, scorer=scorer, device=device, at=at, n_boot=bootstrap, seed=seed, quiet=quiet,
               variant=variant)
        return
    res = run_probe_stage(run, model=model, scorer=scorer, layers=layers,
                          poolings=tuple(p.strip() for p in poolings.split(",") if p.strip()),
                          seed=seed, device=device, denoiser=denoiser, progress=not quiet, n_splits=folds,
                          n_boot=bootstrap, timesteps=_int_list(timesteps, "--timesteps"),
                          probe_backend=probe_backend, variant=variant)
    if not res:  # another accelerate process: it extracted its share, the main one reports
        return
    fp = res.get("failure_prediction", {})
    typer.echo(f"probes written to {Path(run) / 'probes'}")
    if "auroc" in fp:
        from ..stats import auroc_too_few

        why = auroc_too_few(fp.get("n"), fp.get("failure_rate"), fp.get("n_compositions"))
        typer.echo(f"failure prediction ({fp['encoder']}/{fp['layer']}/{fp['pooling']}): "
                   + (f"AUROC {why}" if why else f"AUROC {_auroc({'auroc': fp['auroc']})} vs prompt-only baseline "
                      f"{_auroc({'auroc': fp['baseline_auroc']})} — {fp['verdict']}"))
    else:
        typer.echo(f"failure prediction skipped: {fp.get('skipped')}")
    cr = res.get("correlation", {})
    if "spearman" in cr:
        s = cr["spearman"]
        r, lo, hi, p = s.get("r"), *(list(s.get("ci") or []) + [None, None])[:2], s.get("p_perm")
        f3 = lambda x: "–" if x is None else f"{x:.3f}"  # noqa: E731 (None: undefined on this sample)
        typer.echo(f"decodability vs success ({cr['n_units']} {cr['unit']}s): " + (
            "Spearman undefined (a constant side)" if r is None else
            f"Spearman {f3(r)} CI [{f3(lo)}, {f3(hi)}] p_perm {'–' if p is None else f'{p:.3g}'}"))


def predict(
    model: str = typer.Option(..., "--model", help="Model card or folder (the one the run was probed with)."),
    prompts: Path = typer.Option(..., "--prompts", help="Suite YAML (expanded) or prompts.jsonl."),
    from_run: Path = typer.Option(..., "--from", help="Probed run directory (probes/failure_probe.json)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Ranking JSONL; default <prompts stem>.risk.jsonl."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Keep a balanced, deterministic subset of N "
                                        "prompts (the one `run --limit N` takes at its default --seed 0)."),
    device: str = typer.Option("cpu", "--device", help="cpu | cuda | cuda:N | mps: where the text encoder runs."),
    top: int = typer.Option(10, "--top", help="How many of the riskiest to print."),
    early: bool = typer.Option(False, "--early", help="Per image: run --of seeds of each prompt to --at and rank "
                               "(prompt, seed) by the per-image probe of `probe --early` (probes/early_probes.json)."),
    of: int = typer.Option(4, "--of", help="With --early: seeds per prompt."),
    at: float = typer.Option(0.2, "--at", help="With --early: fraction of the steps run."),
    seed: Optional[int] = typer.Option(None, "--seed", help="With --early: base seed of the scanned seeds; default: "
                                       "the first one after the --from run's whose seeds that run never generated."),
    allow_seen: bool = typer.Option(False, "--allow-seen", help="With --early: allow scanning seeds the --from run "
                                    "generated for the same prompt (its probe was fitted on those images)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at --out (never done otherwise)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines (--early's scan)."),
    lora: Optional[list[str]] = typer.Option(None, "--lora", help=LORA_HELP + " Default: the --from run's; "
                                             "another is refused."),
    component: Optional[list[str]] = typer.Option(None, "--component", help=COMPONENT_HELP + " Default: the "
                                                  "--from run's; another is refused."),
) -> None:
    """Rank never-generated prompts (or, with --early, their seeds) by predicted failure risk, using a run's fitted probe."""
    from ..cli_checks import require_suite
    from . import predict_failures

    require_suite(prompts)  # before --from's probe is read: each input named on its own
    _from_folder(from_run, run=False)
    from ..sources import refuse_without_pipeline

    refuse_without_pipeline("predict", model=model, run=from_run)
    out = out or prompts.with_name(prompts.stem + ".risk.jsonl")
    from ..ownership import claim_output_file

    claim_output_file(out, force=force)  # before any work, --early too: never replace a file unasked
    variant = _variant(from_run, model, lora, component)  # the probe was fitted on the --from run's variant
    if early:
        from .predict import load_prompts
        from ..select import freshness
        from ..select.scan import scan_only

        records = load_prompts(prompts, limit)
        # fresh seeds by construction, as select: in-sample risks of the probe's own training images rank nothing
        base = freshness.fresh_base_seed(from_run, records, of) if seed is None else seed
        freshness.check(from_run, records, of, base, allow_seen=allow_seen)
        ranked = sorted(scan_only(model, records, from_run, out, n_of=of, at=at, seed=base, device=device,
                                  progress=not quiet, variant=variant),
                        key=lambda r: -r["risk"])
        for r in ranked[:top]:
            typer.echo(f"{r['risk']:.3f}  seed {r['seed']}  {r['text']}")
        typer.echo(f"{len(ranked)} (prompt, seed) pairs scored -> {out}")
        return
    ranked = predict_failures(model, prompts, from_run, out, device=device, force=force, limit=limit,
                              variant=variant)
    for r in ranked[:top]:
        typer.echo(f"{r['rank']:>4}  {r['risk']:.3f}  {r['text']}")
    typer.echo(f"{len(ranked)} prompts ranked -> {out}")


def _fractions(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out:
        raise AuditError(f"--at {text!r}: expected comma-separated fractions such as 0.1,0.2")
    return out


def _early(run: Path, model: str, *, scorer, device, at, n_boot, seed, quiet, variant=None) -> None:
    from .capture.early import step_label
    from .early_stage import run_early_stage

    res = run_early_stage(run, model=model, device=device, fractions=_fractions(at), scorer=scorer,
                          n_boot=n_boot, seed=seed, progress=not quiet, variant=variant)
    if not res:
        return
    typer.echo(f"per-image probes written to {Path(run) / 'probes' / 'early.json'}")
    for cat, r in res["categories"].items():
        if "skipped" in r:
            typer.echo(f"  {cat}: skipped ({r['skipped']})")
            continue
        said = None
        for tag, st in r["steps"].items():
            c = st["families"]["probe"]["compositions"]
            refs = ", ".join(f"{k} {_auroc(v['auroc'])}" for k, v in c["references"].items())
            typer.echo(f"  {cat} {step_label(st['iterations'] - 1, res['loop_steps'])}: AUROC "
                       f"{_auroc(c['auroc'], ci=True)}"
                       f"{'; ' + refs if refs else ''}")
            why = c["auroc"].get("too_few")
            if why and why != said:  # the same rows at every step: say it once
                typer.echo(f"    ({why})")
            said = why
        seeds = next(iter(r["steps"].values()))["families"]["probe"]["seeds"] if r["steps"] else {}
        if "skipped" in seeds:
            typer.echo(f"  {cat}: held-out seeds not evaluated ({seeds['skipped']})")


def _auroc(a: dict, ci: bool = False) -> str:
    """An AUROC result (stats.auroc_ci / auroc_or_too_few) as printed: "too few" by the one rule, else the value."""
    from ..stats import shown

    text = shown(a.get("auroc"), a.get("too_few"))
    lo, hi = (a.get("ci") or [None, None])[:2]
    if not ci or a.get("too_few") or lo is None or hi is None or lo != lo:  # lo != lo: NaN
        return text
    return f"{text} (CI {lo:.3f}–{hi:.3f})"


def select(
    from_run: Path = typer.Option(..., "--from", help="Run probed with `probe --early` (probes/early_probes.json)."),
    prompts: Optional[list[Path]] = typer.Option(None, "--prompts", help="Suite YAML or prompts JSONL; default: the --from run's prompts."),
    model: Optional[str] = typer.Option(None, "--model", help="Default: the --from run's model."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep a balanced, deterministic subset of N prompts."),
    of: int = typer.Option(4, "--of", help="Seeds scanned per prompt (N)."),
    keep: int = typer.Option(1, "--keep", help="Seeds finished per prompt (K)."),
    at: float = typer.Option(0.2, "--at", help="Fraction of the steps the scan runs (a step the probes were fitted at)."),
    baseline: bool = typer.Option(True, "--baseline/--no-baseline", help="Also finish K random seeds per prompt, to measure the lift."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Base seed of the scanned seeds; default: the first "
                                       "one after the --from run's whose seeds that run never generated."),
    allow_seen: bool = typer.Option(False, "--allow-seen", help="Allow scanning seeds the --from run generated for "
                                    "the same prompt (its probe was fitted on those images)."),
    budget: Optional[float] = typer.Option(None, "--budget", help="Denoiser loop iterations per prompt: run the policy "
                                           "the --from run's selection study picks for this budget (see --study)."),
    holdout: bool = typer.Option(False, "--holdout", help="With --budget: refit the probe without the scored prompts' "
                                 "scenes and swap twins (the prompts are unseen by it)."),
    study: bool = typer.Option(False, "--study", help="Run the selection study on the --from run instead: success "
                               "against cost of every policy and reference (probes/selection.json)."),
    binding: bool = typer.Option(False, "--binding", help="With --study: also capture per-head maps, raw slot maps, "
                                 "the CFG gap and x0 colours, and write probes/binding.json (AUROC by step per family)."),
    bootstrap: int = typer.Option(2000, "--bootstrap", help="With --study: bootstrap resamples (prompt groups) for CIs."),
    shuffles: int = typer.Option(20, "--shuffles", min=1, help="With --study: label shuffles of the permutation "
                                 "control (each a probe fit): its null distribution."),
    batch_size: int = typer.Option(4, "--batch-size", help="Images denoised at once."),
    device: str = typer.Option("auto", "--device", help="auto | cuda | cuda:N | mps | cpu"),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory to write."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
    lora: Optional[list[str]] = typer.Option(None, "--lora", help=LORA_HELP + " Default: the --from run's; "
                                             "another is refused."),
    component: Optional[list[str]] = typer.Option(None, "--component", help=COMPONENT_HELP + " Default: the "
                                                  "--from run's; another is refused."),
) -> None:
    """Seed selection: scan N seeds of each prompt to an early step, finish the K the per-image probe likes."""
    from ..api import make_config
    from ..cli_checks import require_suite
    from ..select.command import select_run

    for p in prompts or ():  # before --from's probes are read: each input named on its own
        require_suite(p)
    if out is not None and not study:  # a foreign --out is refused before any input is read (nothing written)
        from ..ownership import check_claimable

        check_claimable(out, "run", command="select")
    _from_folder(from_run, run=True)
    from ..sources import refuse_without_pipeline

    refuse_without_pipeline("select", model=model or _run_model(from_run), run=from_run)
    if study:  # probes/ of the --from run are written: locked while this command writes them
        from ..ownership import require_kind

        require_kind(from_run, "run")
        _study(from_run, binding=binding, device=device, quiet=quiet, n_boot=bootstrap, n_perm=shuffles,
               variant=_variant(from_run, model, lora, component))
        return
    model = model or _run_model(from_run)
    if not model:
        raise AuditError(f"--from {from_run}: the run does not record its model; pass --model")
    paths = [str(p) for p in prompts] if prompts else [str(Path(from_run) / "prompts.jsonl")]
    # the --from run's LoRAs / components: its probes were fitted on that model's images
    variant = _variant(from_run, model, lora, component).as_config()
    cfg = make_config({"model": model, "prompts": paths, "seed": seed or 0, "batch_size": batch_size,
                       "device": device, "limit": limit, "out": str(out) if out else None, **variant},
                      "select options")
    if budget is not None:
        from ..select.budget import budget_select_run

        _budget_echo(budget_select_run(cfg, from_run, budget=budget, seed=seed, allow_seen=allow_seen,
                                       holdout=holdout, progress=not quiet))
        return
    if seed is None:
        from ..select.freshness import fresh_base_seed

        cfg = cfg.model_copy(update={"seed": fresh_base_seed(from_run, _expanded(cfg), of)})
    res = select_run(cfg, from_run, n_of=of, keep=keep, at=at, baseline=baseline, progress=not quiet,
                     allow_seen=allow_seen)
    c = res["cost"]
    # a cost beside its references, not a "saving": best of N whole images' success is not measured here
    typer.echo(f"cost: {c['selected_total']:g} loop iterations per prompt (scan {c['scan']:g}, continue "
               f"{c['finish']:g}); one whole image is {res['loop_steps']}, best of {of} whole images by the final "
               f"judge {c['best_of_n_by_final_judge']:g} (success at equal cost: select --study)")
    from ..stats import too_few

    why = too_few("rate", n=res["n_prompts"] * res["keep"], n_units=res["n_prompts"], items="kept images",
                  units="prompts")
    if why:
        typer.echo(f"kept vs random success: {why}")
    elif "lift" in res:
        typer.echo(f"kept {res['kept_success']:.3f} vs random {res['random_success']:.3f}: lift {res['lift']:+.3f} "
                   f"(CI {res['ci'][0]:+.3f}…{res['ci'][1]:+.3f}, {res['n_prompts']} prompts)")


def _expanded(cfg) -> list[dict]:
    from ..api import expand_suites

    return expand_suites(cfg.prompts, cfg.limit, 0)  # as select_run: the subset `run --limit N` takes


def _study(from_run: Path, *, binding: bool, device: str, quiet: bool, n_boot: int = 2000, n_perm: int = 20,
           variant=None) -> None:
    from .studies import pareto

    # measured by benchmarks/bench_selection_costs.py (seconds per loop iteration, decode, judge call on the
    # machine it names); package data through a link, so an installed t2i-audit has it too
    costs = Path(__file__).resolve().parents[1] / "data" / "selection_costs.json"
    pareto.preflight(from_run)  # one seed per prompt, or no category with the minimum: refused before any capture
    if binding:
        from ..rundir import RunDir
        from .capture.early import load_early
        from .studies import binding as binding_study
        from .studies import trajectory

        rd = RunDir(from_run)
        _, _, meta = load_early(rd)
        model = _run_model(from_run)
        trajectory.extract(rd, model, fractions=meta["fractions"], device="cpu" if device == "auto" else device,
                           progress=not quiet, variant=variant)
        binding_study.run(rd, n_boot=min(n_boot, 1000), progress=not quiet)
        typer.echo(f"binding study written to {rd.probes_dir / 'binding.json'}")
    res = pareto.run(from_run, n_boot=n_boot, costs_file=costs if costs.exists() else None, progress=not quiet,
                     n_perm=n_perm)
    typer.echo(f"selection study written to {Path(from_run) / 'probes' / 'selection.json'} (a policy's \"step k\" "
               f"is k of the {res['loop_steps']} loop iterations, as `probe --early` counts them)")
    for cat, r in res["categories"].items():
        if "skipped" in r:
            typer.echo(f"  {cat}: skipped ({r['skipped']})")
            continue
        h = r.get("headline") or {}
        if "skipped" in h:
            typer.echo(f"  {cat} (pre-registered): {h['skipped']}")
        elif h:
            g = h["gap_to_whole"]
            typer.echo(f"  {cat} (pre-registered) {h['policy']}: {h['success']['mean']:.3f} at "
                       f"{h['cost']['iterations']:.0f} iterations vs whole images {h['whole_images_at_same_cost']['mean']:.3f}"
                       f": {g['mean']:+.3f} (CI {g['ci'][0]:+.3f}…{g['ci'][1]:+.3f})")
        for name, reg in (r.get("registered") or {}).items():
            gs = reg.get("gap_to_whole_at_same_seconds")
            if gs:
                typer.echo(f"  {cat} (registered {name}) {reg['policy']}: {reg['success']['mean']:.3f} at "
                           f"{reg['seconds']:.2f} s vs whole images (oracle) {reg['whole_images_at_same_seconds']['mean']:.3f}"
                           f" at the same seconds: {gs['mean']:+.3f} (CI {gs['ci'][0]:+.3f}…{gs['ci'][1]:+.3f})")
        for B, b in r["budgets"].items():
            g = b["gap_to_whole"]
            typer.echo(f"  {cat} budget {B}: {b['success']['mean']:.3f} (whole images {b['whole_images_at_same_cost']['mean']:.3f}, "
                       f"{g['mean']:+.3f} CI {g['ci'][0]:+.3f}…{g['ci'][1]:+.3f})")


def _budget_echo(res: dict) -> None:
    typer.echo(f"budget {res['budget']:g} loop iterations per prompt, base seed {res['base_seed']} "
               f"({res['seeds_seen_by_the_fitted_run']} scanned seeds seen by the --from run"
               f"{'; probe refitted without these prompts' if res['holdout'] else ''})")
    for cat, r in res["categories"].items():
        lift, gap = r["lift_over_random"], r["gap_to_whole"]
        typer.echo(f"  {cat}: {r['policy']}{' (fell back to whole images)' if r['fell_back_to_whole_images'] else ''}: "
                   f"{r['success']['mean']:.3f} vs random {r['random_seed']['mean']:.3f} "
                   f"({lift['mean']:+.3f}, CI {lift['ci'][0]:+.3f}…{lift['ci'][1]:+.3f}) vs whole images at the "
                   f"same cost {r['whole_images_at_same_cost']['mean']:.3f} ({gap['mean']:+.3f}, CI "
                   f"{gap['ci'][0]:+.3f}…{gap['ci'][1]:+.3f}), {r['success']['n_prompts']} prompts")


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("predict")(predict)
    app.command("select")(select)
