"""``t2i-audit board``: many runs on one board, published as a dataset. No heavy imports at module level."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def _printed(result, *, quiet: bool) -> list[str]:
    from ..analysis import rate_text  # the pages' and the card's formatter; pandas only when a board is built

    lines = []
    for rid in result.added:
        lines.append(f"added {rid}")
    for rid in result.refreshed:
        lines.append(f"read again {rid} (its files changed)")
    for rid in result.already:
        lines.append(f"already on the board: {rid}")
    for rid, files in result.changed.items():
        lines.append(f"changed since added: {rid}: {', '.join(files)} (kept as read; --refresh reads it again)")
    labels = result.numbers["labels"]
    first = result.numbers["groups"][0]["name"] if result.numbers["groups"] else ""
    for g in result.numbers["groups"]:
        lines.append(f"{g['name']}: {g['conditions_text']} — {g['shared']} shared prompts")
        if g["apart"]:
            lines.append(f"  set apart from {first}: {'; '.join(g['apart'])}")
        for r in sorted(g["rows"], key=lambda r: (r["overall"]["rank"] is None, r["overall"]["rank"] or 0)):
            o = r["overall"]
            rank = "-" if o["rank"] is None else f"{o['rank']} [{o['rank_lo']}-{o['rank_hi']}]"
            rate = "no verdicts" if not o["n"] else f"{rate_text(o['rate'], o['lo'], o['hi'])} of {o['n']} images"
            study = f" [settings study {r['study']}]" if r.get("study") else ""
            lines.append(f"  rank {rank:<9} {labels[r['run_id']]}: {rate} — {r['settings']}{study}")
        for cat, j in (g.get("judge_checks") or {}).items():
            if j["unchecked"]:
                lines.append(f"  judge {j['scorer']} on {cat}: measured on {j['measured_on']}; never checked on "
                             f"{', '.join(labels[r] for r in j['unchecked'])}")
        for st in g.get("studies") or []:
            lines.append(f"  settings study {st['name']}: {st['model']} at {st['n_settings']} settings "
                         f"(varied: {', '.join(st['varies'])}): {'; '.join(st['labels'])}")
    lines.append(f"snapshot {result.snapshot}{' (new)' if result.new_snapshot else ''}; page: {result.page}")
    return lines if not quiet else [lines[-1]]


def board_help() -> str:
    from .settings import RULE

    return ("Rank runs on one board (per-category success with CIs, rank intervals, paired tests with Holm), kept as "
            "a Hugging Face dataset folder with a self-contained page. " + RULE + " Runs whose protocol differs form "
            "separate groups, the difference named. Adding a run writes only that run's files.")


def register(app: typer.Typer) -> None:
    @app.command("board", help=board_help())
    def board_cmd(
        runs: Optional[List[Path]] = typer.Argument(None, metavar="RUN", help="Run folders to add (each generated, scored and reported)."),
        out: Path = typer.Option(..., "--out", "-o", help="The board folder: made new, or extended when it is a board already."),
        refresh: bool = typer.Option(False, "--refresh", help="Read again the runs whose files changed since they were added (all of them, or the RUNs given); otherwise they are named and kept as read."),
        allow_different_suites: bool = typer.Option(False, "--allow-different-suites", help="Rank runs of different suites together, on the prompts they share (matched by template and text); otherwise the suite sets runs apart."),
        strict_settings: bool = typer.Option(False, "--strict-settings", help="For ablations: runs whose model settings differ (steps, guidance, size, scheduler, …) are also set apart, each setting its own group; kept once the board is made so."),
        images: Optional[str] = typer.Option(None, "--images", help="none (default) | embed (image bytes in the images table) | folder (ImageFolder layout under images/, for datasets' imagefolder); fixed when the board is made."),
        title: Optional[str] = typer.Option(None, "--title", help="The board's title (default: the folder's name)."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the bootstraps (default 0)."),
        push_to_hub: Optional[str] = typer.Option(None, "--push-to-hub", metavar="REPO", help="After building, send the board to the Hub dataset repo REPO (huggingface_hub create_repo + upload_folder)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="With --push-to-hub: list what would be sent and send nothing."),
        private: bool = typer.Option(False, "--private", help="With --push-to-hub: make the repo private when it is created."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output; print only the page's path."),
    ) -> None:
        # (the help is the command's: board_help() below, the ranking rule in the words of settings.RULE)
        from ..errors import AuditError
        from .build import build_board
        from .hub import check_push, push

        if dry_run and not push_to_hub:
            raise AuditError("--dry-run lists what --push-to-hub would send: give --push-to-hub REPO")
        if push_to_hub:  # the token and offline mode checked before the build
            check_push(push_to_hub, dry_run=dry_run)
        result = build_board(out, list(runs or []), refresh=refresh, allow_different_suites=allow_different_suites,
                             strict_settings=strict_settings,
                             images=images, title=title, seed=seed, progress=not quiet, repo=push_to_hub)
        for line in _printed(result, quiet=quiet):
            typer.echo(line)
        if push_to_hub:
            sent = push(Path(out), push_to_hub, private=private, dry_run=dry_run)
            total = sum(n for _, n in sent)
            if dry_run:
                typer.echo(f"dry run: would send {len(sent)} files ({total:,} bytes) to the dataset repo {push_to_hub}:")
                for path, n in sent:
                    typer.echo(f"  {path}  {n:,}")
            else:
                typer.echo(f"sent {len(sent)} files ({total:,} bytes) to https://huggingface.co/datasets/{push_to_hub}")
