"""CLI commands ``score``, ``scorers`` and ``calibrate`` (no torch at import)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AuditError


def parse_sets(sets: List[str] | None, models: List[str] | None = None) -> dict:
    """``--set clip.thresholds.margin=0.05`` and ``--model clip=/path`` → overrides per scorer."""
    from ..safeload import load_yaml_text

    out: dict = {}
    for item in sets or []:
        path, eq, raw = item.partition("=")
        parts = path.split(".")
        if not eq or len(parts) < 2 or not all(parts):
            raise AuditError(f"--set {item!r}: expected SCORER.KEY[.SUBKEY]=VALUE")
        node = out.setdefault(parts[0], {})
        for p in parts[1:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = load_yaml_text(raw, f"--set {item!r}")
    for item in models or []:
        name, eq, path = item.partition("=")
        if not eq or not name or not path:
            raise AuditError(f"--model {item!r}: expected SCORER=PATH_OR_REPO_ID")
        local = Path(path).expanduser().exists()
        m = out.setdefault(name, {}).setdefault("model", {})
        m["id"] = str(Path(path).expanduser().resolve()) if local else path
        if local:
            m["local"] = True
    return out


def _tiny(rd) -> bool:
    model = rd.read_manifest().get("model")
    return isinstance(model, dict) and str(model.get("source", "")).startswith("tiny:")


def run_scorers(rd) -> list[str] | None:
    """What `score RUN` scores by default: the scorers the run was scored with (manifest.json), else the ones
    `run` scores such a run with (its run.yaml's --scorer, else its model card's) — never the per-category
    defaults where the run names its own (a mini run would otherwise get an 8B judge to download)."""
    recorded = ((rd.read_manifest().get("stages") or {}).get("score") or {}).get("scorers")
    if recorded:
        return list(recorded)
    if not rd.config.is_file():
        return None
    from ..api import chosen_scorers, load_config
    from ..models import resolve_model

    cfg = load_config(rd.config)
    if cfg.scorers is not None:
        return cfg.scorers or None
    try:
        return chosen_scorers(cfg, resolve_model(cfg.model))
    except AuditError:  # the model is not available here: its card cannot say
        return None


def register(app: typer.Typer) -> None:
    @app.command("score")
    def score_cmd(
        run: Path = typer.Argument(..., help="Run directory (with prompts.jsonl and images.jsonl)."),
        scorer: Optional[List[str]] = typer.Option(None, "--scorer", "-s",
                                                   help="Scorer name (repeatable); default: per prompt category."),
        device: str = typer.Option("auto", help="cpu, cuda, cuda:1 or auto."),
        batch_size: Optional[int] = typer.Option(
            None, "--batch-size", "-b", min=1, help="Images per batch (default: the run's recorded one, else 16). "
            "Scores are byte-identical only at one batch size, so a run keeps the one it was first scored with."),
        card: Optional[List[Path]] = typer.Option(None, "--card", help="Extra scorer card YAML (repeatable)."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help="Card override SCORER.KEY=VALUE."),
        model: Optional[List[str]] = typer.Option(None, "--model", help="SCORER=local folder or repo id."),
        progress: bool = typer.Option(True, "--progress/--no-progress", " /--quiet", " /-q",
                                      help="Show a progress bar (-q/--quiet: none)."),
    ) -> None:
        """Score every image of RUN: one record per (image, question/metric) in scores/<scorer>.jsonl."""
        from ..rundir import RunDir, RunLock
        from . import default_scorers, run_score_stage

        rd = RunDir(run)
        if not rd.root.is_dir():
            raise AuditError(f"{rd.root}: run directory not found")
        from ..cli_checks import require_inputs

        require_inputs(card, "--card")
        from ..ownership import require_kind

        require_kind(rd.root, "run")  # scores/ and the manifest are written there: a run's folder only
        names = list(scorer or run_scorers(rd) or default_scorers({p.get("category", "") for p in rd.read_prompts()},
                                                                  tiny=_tiny(rd)))
        import os

        with RunLock(rd.root, int(os.environ.get("RANK", 0))):  # one lock per accelerate process
            counts = run_score_stage(rd, names, device=device, batch_size=batch_size, progress=progress,
                                     overrides=parse_sets(set_, model), extra_cards=[str(c) for c in card or []])
        for name, c in counts.items():
            typer.echo(score_line(rd, name, c))
        from .protocols import unsupported_warning  # as after `run`: "unsupported" is not "not run"

        warning = unsupported_warning(rd.scores_dir) if counts else None
        if warning:
            typer.echo(warning, err=True)

    def score_line(rd, name: str, c: dict) -> str:
        """What one scorer did, in words that hold on a resume: "passed 0, failed 0" read as a run where every
        image failed to score when nothing was left to score. The totals over every image come from its file."""
        from .stage import _verdict_counts

        total = {"passed": 0, "failed": 0, "undecided": 0, "excluded": 0, "truncated": 0, "failures": {}}
        _verdict_counts(rd.read_scores(rd.scores(name)), total)
        over_all = (f"all {c['images']} images: passed {total['passed']}, failed {total['failed']}"
                    + (f", undecided {total['undecided']}" if total["undecided"] else "")
                    + (f", excluded {total['excluded']} (flagged)" if total["excluded"] else ""))
        if c["scored"] == 0 and c["excluded"] == 0 and "error" not in c:
            return f"{name}: nothing new to score; {c['resumed']} images already scored ({over_all})"
        return (f"{name}: {c['scored']} scored now, {c['resumed']} already scored, {c['excluded']} excluded "
                f"(flagged); this time passed {c['passed']}, failed {c['failed']}; {over_all}; {c['records']} "
                f"records in {c['seconds']} s; truncated {c['truncated']}; failures {c['failures']}")

    @app.command("scorers")
    def scorers_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        card: Optional[List[Path]] = typer.Option(None, "--card", help="Extra scorer card YAML."),
    ) -> None:
        """List the registered scorers (cards in t2i_audit/cards/scorers, entry points, --card)."""
        from ..cli_checks import require_inputs
        from . import list_scorers

        require_inputs(card, "--card")
        rows = list_scorers([str(c) for c in card or []])
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        for r in rows:
            hib = "higher is better" if r["higher_is_better"] else "lower is better"
            typer.echo(f"{r['name']:<16} [{r['family']}] {r['model']}  range {r['range']}, {hib}")
            typer.echo(f"{'':<16} {r['description']}")
            ka = r.get("known_agreement")
            if ka:
                ka = ka if isinstance(ka, dict) else {"figure": ka}
                src = f" ({ka['source']})" if ka.get("source") else ""
                typer.echo(f"{'':<16} known agreement: {ka.get('figure', 'not published')}{src}")

    @app.command("calibrate")
    def calibrate_cmd(
        run: Path = typer.Argument(..., help="Run directory with scores/."),
        labels: Optional[Path] = typer.Option(None, help="labels.csv: prompt_id,sample[,question_id],label."),
        export_sheet: Optional[Path] = typer.Option(None, "--export-sheet", help="Write a labelling sheet CSV."),
        per: str = typer.Option("both", help="Sheet rows per prompt, question or both."),
        n: Optional[int] = typer.Option(None, "--n", help="With --export-sheet: only the N images `label --n N` "
                                        "samples (same --seed), not every image of the run."),
        seed: int = typer.Option(0, "--seed", help="With --export-sheet --n: the sampling seed, as `label --seed`."),
        scorer: Optional[List[str]] = typer.Option(None, "--scorer", "-s", help="Scorers (default: all)."),
        fit_threshold: bool = typer.Option(False, help="Fit the card's threshold by grouped CV; save a card copy."),
        folds: int = typer.Option(5, help="Cross-validation folds."),
        positive: float = typer.Option(0.5, help="Labels >= this count as yes."),
        bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the CIs."),
        card: Optional[List[Path]] = typer.Option(None, "--card", help="Extra scorer card YAML."),
        force: bool = typer.Option(False, "--force", help="Replace an existing file at --export-sheet (never done otherwise)."),
        quiet: bool = typer.Option(False, "--quiet", "-q",
                                   help="No progress lines while the agreements are bootstrapped."),
    ) -> None:
        """Agreement of scorers with labels (accuracy, Cohen's kappa, Kendall tau, Spearman rho, CIs).

        The agreement measured here decides which scorer gives each category's verdicts (report, compare, probe,
        predict) once a category has 50 labels (10 where the scorer's card has no measured agreement) of both kinds:
        fewer never replace a card's measured figure, and κ on labels that are all yes (or all no) is undefined,
        not chance. It prints what changes in that rule."""
        from ..cli_checks import require_inputs
        from .calibrate import calibrate, export_sheet as _export

        require_inputs(card, "--card")  # before any output is written

        if labels is not None:  # calibration/ is written into the run: a run's folder, locked while it is
            from ..ownership import require_kind

            require_kind(run, "run")
        if export_sheet is None and labels is None:
            raise AuditError("calibrate: give --labels labels.csv or --export-sheet sheet.csv")
        if export_sheet is not None:
            rows = _export(run, export_sheet, per=per, force=force, n=n, seed=seed)
            typer.echo(f"wrote {rows} rows to {export_sheet}")
        if labels is not None:
            from ..deciding import deciding_scorers

            before = deciding_scorers(run)
            rep = calibrate(run, labels, scorers=scorer, positive=positive, n_boot=bootstrap,
                            fit_threshold=fit_threshold, folds=folds, extra_cards=[str(c) for c in card or []],
                            progress=not quiet)
            from ..stats import shown, too_few

            if rep.get("merged"):
                typer.echo(f"{rep['n_label_rows']} labelled rows are {rep['n_labels']} labels: {rep['merged']} "
                           "(image, question) pairs labelled more than once were merged (majority / mean rating)")
            for name, e in rep["scorers"].items():
                typer.echo(f"{name}: {e['matched']} labels matched, {e['unmatched']} unmatched")
                reasons = set()
                for level, cats in e["levels"].items():
                    for cat, m in cats.items():
                        few = m.get("too_few") or {}
                        reasons.update(few.values())
                        reasons.update(f"κ {w}" for k, w in (m.get("undefined") or {}).items() if k == "kappa")
                        kappa = "undefined" if "kappa" in (m.get("undefined") or {}) else \
                            shown(m.get("kappa"), few.get("kappa"))
                        typer.echo(f"  {level:<8} {cat:<16} n={m['n']:<4} acc={shown(m.get('accuracy'), few.get('accuracy'))} "
                                   f"{_ci(m.get('accuracy_ci'))} kappa={kappa} "
                                   f"tau={shown(m.get('kendall_tau'), few.get('kendall_tau'))} "
                                   f"rho={shown(m.get('spearman_rho'), few.get('spearman_rho'))}")
                for why in sorted(reasons):
                    typer.echo(f"  ({why})")
                if "threshold" in e:
                    t = e["threshold"]
                    few = too_few("rate", n=t["n"], n_units=t.get("n_prompts"), items="labelled records",
                                  units="prompts")
                    typer.echo(f"  threshold {t['key']}: {t['previous']} -> {t['threshold']:.4g} "
                               f"(cv accuracy {shown(t['cv_accuracy'], few)} vs {shown(t['cv_accuracy_previous'], few)}); "
                               f"card copy {t.get('card')}")
            typer.echo(f"report: {Path(run) / 'calibration' / 'report.json'}")
            for line in deciding_changes(before, deciding_scorers(run)):
                typer.echo(line)


def deciding_changes(before: dict, after: dict) -> list[str]:
    """What the labels change in the deciding rule (t2i_audit/deciding.py), category by category: the scorer
    and the evidence it rests on before and after; set-aside calibrations say why."""
    from ..deciding import table

    def said(r: dict) -> str:
        return f"{r['scorer'] or 'no scorer'} ({r['source']}{'' if r['agreement'] == '—' else ': ' + r['agreement']})"

    was = {r["category"]: r for r in table(before)}
    out = ["which scorer decides each category (the next report, compare, probe and predict):"]
    for r in sorted(table(after), key=lambda r: str(r["category"])):
        a = was.get(r["category"])
        out.append(f"  {r['category']}: {said(r)} — unchanged" if a and said(a) == said(r)
                   else f"  {r['category']}: {said(a) if a else 'none'} -> {said(r)}")
        out += [f"    ({w.strip()})" for w in (r["why"] or "").split(";") if "set aside" in w]
    return out


def _ci(ci) -> str:
    return "" if not ci or ci[0] is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"
