"""``t2i-audit report`` and ``t2i-audit compare``. No heavy imports at module level."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

# the regression gate (compare --fail-on-drop), as --help states it; report/compare.py regressions() applies it
GATE_RULE = ("exit 1 when, in some category, CANDIDATE's success is lower than BASE's by more than D (a fraction: "
             "0.05 = 5 points; paired images, same prompt and sample) AND the 95% paired-bootstrap CI of that drop "
             "(resampling twin groups) lies wholly above 0; the failing categories are printed. Exit 0 otherwise")


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

    @app.command("compare")
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
    ) -> None:
        """Compare models image by image (prompt id + sample) with paired bootstrap CIs."""
        from ..errors import AuditError
        from .compare import compare_with_summary, regressions

        if fail_on_drop is not None:
            if len(runs) != 2:
                raise AuditError(f"--fail-on-drop compares two runs, BASE CANDIDATE; got {len(runs)}")
            if not 0 <= fail_on_drop < 1:
                raise AuditError(f"--fail-on-drop {fail_on_drop}: a drop in success as a fraction in [0, 1) "
                                 "(0.05 = 5 points)")
        page, summary = compare_with_summary(list(runs), out, allow_different_suites=allow_different_suites,
                                             scorer=scorer, seed=seed)
        from ..results_table import compare_lines

        for line in compare_lines(summary):  # the numbers of the page, on the terminal (compare.json)
            typer.echo(line)
        typer.echo(str(page))
        if fail_on_drop is None:
            return
        base, cand = summary["models"][:2]
        failing = regressions(summary, fail_on_drop)
        for d in failing:
            r = summary["category_rates"].get(str(d["value"]), {})
            was, now = (r.get(base) or {}).get("rate"), (r.get(cand) or {}).get("rate")
            typer.echo(f"regression: {d['value']}: {was:.1%} -> {now:.1%} ({d['diff'] * 100:.1f} points lower, "
                       f"95% CI of the drop [{d['lo'] * 100:.1f}, {d['hi'] * 100:.1f}] > 0; limit {fail_on_drop * 100:.1f})")
        if failing:
            typer.echo(f"gate: FAIL — {len(failing)} categor{'y' if len(failing) == 1 else 'ies'} of {cand} dropped "
                       f"below {base} by more than {fail_on_drop * 100:.1f} points", err=True)
            raise typer.Exit(1)
        typer.echo(f"gate: ok — no category of {cand} is lower than {base} by more than {fail_on_drop * 100:.1f} "
                   "points with a 95% CI excluding 0")
