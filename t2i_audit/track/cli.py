"""``t2i-audit track``: a training run's checkpoints audited in step order (registered on the main app). No torch."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def track(
    output_dir: Path = typer.Argument(..., metavar="OUTPUT_DIR", help="The training run's output folder (checkpoint-N/ folders, the final pipeline or LoRA)."),
    model: str = typer.Option(..., "--model", "-m", help="The base model the training started from (step 0): card, hf:org/repo or folder."),
    prompts: List[Path] = typer.Option(..., "--prompts", "-p", help="Suite YAML file(s) or PromptRecords .jsonl."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Track folder (default runs/track_<output folder name>)."),
    limit: Optional[int] = typer.Option(None, help="A balanced, deterministic subset of N prompts."),
    images_per_prompt: int = typer.Option(1, "--images-per-prompt", "-n", help="Images (seeds) per prompt, the same "
                                          "seeds at every checkpoint."),
    seed: int = typer.Option(0, help="Base seed (every checkpoint gets the same seeds)."),
    batch_size: int = typer.Option(4, "--batch-size", "-b", help="Images denoised at once."),
    device: str = typer.Option("auto", help="auto | cuda | cuda:N | mps | cpu"),
    dtype: Optional[str] = typer.Option(None, help="float16 | bfloat16 | float32 (default: the model's)."),
    steps: Optional[int] = typer.Option(None, help="Denoising steps (default: the base model's)."),
    guidance: Optional[float] = typer.Option(None, help="Classifier-free guidance scale (default: the base model's)."),
    size: Optional[int] = typer.Option(None, help="Square image size in pixels."),
    scorer: Optional[List[str]] = typer.Option(None, "--scorer", help="Scorer(s) (default: per category)."),
    ema: bool = typer.Option(False, "--ema", help="Audit the EMA weights (<component>_ema/) where a checkpoint has them."),
    settle: float = typer.Option(10.0, "--settle", help="Seconds a checkpoint must be left untouched before it counts as written."),
    denoiser_samples: int = typer.Option(4, "--denoiser-samples", help="Replays per prompt, on seeds no judged image used, whose denoiser states the decodability curves read (0: none)."),
    chance: Optional[float] = typer.Option(None, "--chance", help="Success by chance, for 'the step where held-out success first exceeds chance' (default: the base model's success)."),
    folds: int = typer.Option(5, "--folds", help="Grouped cross-validation folds of the decodability probes."),
    final_step: Optional[int] = typer.Option(None, "--final-step", help="The training step of the final output (placed after the checkpoints; no file names its step)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress output."),
):
    """Audit every checkpoint of a training run (and the base, step 0) on the same prompts and seeds: composition over training."""
    from ..api import make_config
    from ..cli_checks import require_input, require_suite
    from .runner import TrackConfig, run_track

    require_input(output_dir, "OUTPUT_DIR", kind="folder")
    for p in prompts:
        require_suite(p)
    data = {"model": model, "prompts": [str(p) for p in prompts], "limit": limit, "images_per_prompt": images_per_prompt,
            "seed": seed, "batch_size": batch_size, "device": device, "dtype": dtype, "steps": steps,
            "guidance": guidance, "size": size, "scorers": list(scorer) if scorer else None, "ema": ema,
            "settle": settle, "denoiser_samples": denoiser_samples, "chance": chance,
            "folds": folds, "final_step": final_step, "out": str(out) if out else None}
    cfg = make_config(data, where="command line", schema=TrackConfig)
    root = run_track(output_dir, cfg, progress=not quiet)
    from ..results_table import track_lines
    from ..safeload import read_json

    for line in track_lines(read_json(root / "curves.json")):  # the numbers the page draws, on the terminal
        typer.echo(line)
    typer.echo(f"track: {root}")
    typer.echo(f"page: {root / 'index.html'}")


def register(app: typer.Typer) -> None:
    app.command("track")(track)
