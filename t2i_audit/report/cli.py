"""``t2i-audit report`` and ``t2i-audit compare``. No heavy imports at module level."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..board.settings import RULE
from .gate import GATE_RULE

def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        run: Path = typer.Argument(..., help="Run directory."),
        out: Optional[Path] = typer.Option(None, "--out", help="Folder for the report (default RUN/report)."),
        scorer: Optional[str] = typer.Option(None, "--scorer", help="Scorer for the headline (default: most verdicts)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
    ) -> None:
        """Render RUN/report/index.html (opens offline; its thumbnails lie beside it in thumbs/) + results.parquet/csv."""
        from . import render_report

        page = render_report(run, out_dir=out, progress=not quiet, scorer=scorer)
        from ..results_table import run_headline
        from ..rundir import RunDir

        line = run_headline(RunDir(run))  # its numbers, not only the page's path (as `run` ends)
        if line:
            typer.echo(f"headline: {line}")
        typer.echo(str(page))

    @app.command("compare", help="Compare models image by image (prompt id + sample) with paired bootstrap CIs. "
                 + RULE + " Settings that differ between the runs are named on the page.")
    def compare_cmd(
        runs: List[Path] = typer.Argument(..., help="Two or more run directories."),
        out: Path = typer.Option(..., "--out", help="Folder for the comparison page and tables."),
        allow_different_suites: bool = typer.Option(
            False, "--allow-different-suites", help="Compare runs of different suites on the prompts they share."),
        scorer: Optional[str] = typer.Option(None, "--scorer", help="Scorer whose verdicts are compared."),
        seed: int = typer.Option(0, "--seed", help="Seed of the paired bootstrap."),
        fail_on_drop: Optional[float] = typer.Option(
            None, "--fail-on-drop", metavar="D", help="Regression gate for CI, with exactly two runs BASE CANDIDATE: "
            + GATE_RULE + "."),
        allow_different_settings: bool = typer.Option(
            False, "--allow-different-settings", help="With --fail-on-drop: gate even though BASE and CANDIDATE were "
            "made at other model settings (steps, guidance, …); the difference is printed."),
    ) -> None:
        from ..errors import AuditError
        from . import gate
        from .compare import compare_with_summary

        if fail_on_drop is not None:
            if len(runs) != 2:
                raise AuditError(f"--fail-on-drop compares two runs, BASE CANDIDATE; got {len(runs)}")
            if not 0 <= fail_on_drop < 1:
                raise AuditError(f"--fail-on-drop {fail_on_drop}: a drop in success as a fraction in [0, 1) "
                                 "(0.05 = 5 points)")
        elif allow_different_settings:
            raise AuditError("--allow-different-settings is an option of the gate: give --fail-on-drop D")
        page, summary = compare_with_summary(list(runs), out, allow_different_suites=allow_different_suites,
                                             scorer=scorer, seed=seed,
                                             fixed_settings=fail_on_drop is not None and not allow_different_settings)
        if fail_on_drop is None:  # the gate prints its own table of these numbers, per category
            from ..results_table import compare_lines

            for line in compare_lines(summary):  # the numbers of the page, on the terminal (compare.json)
                typer.echo(line)
        typer.echo(str(page))
        if fail_on_drop is None:
            return
        cand = summary["models"][1]
        differ = summary["settings_differences"].get(cand) or {}
        if differ.get("settings") or differ.get("protocol"):  # only with --allow-different-settings
            typer.echo(f"settings: {cand} differs from {summary['models'][0]}: "
                       f"{'; '.join(differ['protocol'] + differ['settings'])} (--allow-different-settings)")
        result = gate.gate_verdict(summary, fail_on_drop)
        for line in gate.table(result):
            typer.echo(line)
        for note in result["notes"]:
            typer.echo(f"note: {note}")
        line = gate.summary_line(result)
        if result["exit"]:
            typer.echo(line, err=True)
            raise typer.Exit(result["exit"])
        typer.echo(line)
