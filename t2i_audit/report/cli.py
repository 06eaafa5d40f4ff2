"""``t2i-audit report`` and ``t2i-audit compare``. No heavy imports at module level."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


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
        typer.echo(str(page))

    @app.command("compare")
    def compare_cmd(
        runs: List[Path] = typer.Argument(..., help="Two or more run directories."),
        out: Path = typer.Option(..., "--out", help="Folder for the comparison page and tables."),
        allow_different_suites: bool = typer.Option(
            False, "--allow-different-suites", help="Compare runs of different suites on the prompts they share."),
        scorer: Optional[str] = typer.Option(None, "--scorer", help="Scorer whose verdicts are compared."),
        seed: int = typer.Option(0, "--seed", help="Seed of the paired bootstrap."),
    ) -> None:
        """Compare models image by image (prompt id + sample) with paired bootstrap CIs."""
        from . import compare_runs

        page = compare_runs(list(runs), out, allow_different_suites=allow_different_suites,
                            scorer=scorer, seed=seed)
        typer.echo(str(page))
