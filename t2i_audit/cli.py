"""The ``t2i-audit`` command line: thin Typer commands over :mod:`t2i_audit.api`.

Nothing here imports torch at module level, so ``--help``, ``prompts …`` and ``models`` are
instant. User errors (AuditError) print one clear message and exit with code 2.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .errors import AuditError
from .variants import COMPONENT_HELP, LORA_HELP, component_options

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Audit whether a text-to-image model composes what it knows.")
prompts_app = typer.Typer(no_args_is_help=True, help="Validate, inspect and export prompt suites.")
app.add_typer(prompts_app, name="prompts")


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"t2i-audit {__version__}")
        raise typer.Exit()


@app.callback()
def _app_options(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                              help="Print the version and exit.")) -> None:
    """Audit whether a text-to-image model composes what it knows."""

# Stage packages add their own commands; each registers through ``register(app)``.
PLUGIN_CLIS = ("t2i_audit.scorers.cli", "t2i_audit.probes.cli", "t2i_audit.report.cli", "t2i_audit.mini.cli",
               "t2i_audit.board.cli", "t2i_audit.track.cli")


@app.command()
def run(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Card name (see `models`), hf:org/repo\\[@rev], a local pipeline folder, endpoint:URL, openai:MODEL or python:module:function."),
    images: Optional[str] = typer.Option(None, "--images", help="Audit images made elsewhere instead of a --model: "
                                         "a folder (GenEval's, T2I-CompBench's or ImageFolder's layout, or a saved "
                                         "Hugging Face dataset), a CSV/JSONL manifest, or hf:ORG/NAME[:SPLIT]."),
    name: Optional[str] = typer.Option(None, "--name", help="The model's name in reports and boards (default: the card's; for --images the folder's)."),
    layout: Optional[str] = typer.Option(None, "--layout", help="Layout of --images: geneval | t2i-compbench | imagefolder | hf-dataset | manifest (default: detected)."),
    prompts: Optional[List[Path]] = typer.Option(None, "--prompts", "-p", help="Suite YAML file(s), or PromptRecords .jsonl (`prompts import`)."),
    config: Optional[Path] = typer.Option(None, "--config", help="A run.yaml to rerun; other options override it."),
    limit: Optional[int] = typer.Option(None, help="Keep a balanced, deterministic subset of N prompts."),
    images_per_prompt: Optional[int] = typer.Option(None, "--images-per-prompt", "-n", help="Images (seeds) per prompt "
                                                    "(default 1). A larger -n extends the run the same command made."),
    seed: Optional[int] = typer.Option(None, help="Base seed (default 0)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Images denoised at once (default 4; "
                                             "a resumed run keeps the batch size it was planned with)."),
    device: Optional[str] = typer.Option(None, help="auto | cuda | cuda:N | mps | cpu"),
    dtype: Optional[str] = typer.Option(None, help="float16 | bfloat16 | float32 (default: the card's)"),
    steps: Optional[int] = typer.Option(None, help="Denoising steps (default: the card's)."),
    guidance: Optional[float] = typer.Option(None, help="Classifier-free guidance scale (default: the card's)."),
    size: Optional[int] = typer.Option(None, help="Square image size in pixels."),
    scorer: Optional[List[str]] = typer.Option(None, "--scorer", help="Scorer(s) to run (default: per category)."),
    stages: Optional[str] = typer.Option(None, help="Comma-separated subset of prompts,generate,score,probe,report."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory (default runs/<model>_<suite>_<hash>)."),
    compile_: Optional[bool] = typer.Option(None, "--compile/--no-compile", help="torch.compile the denoiser (GPU: faster after a compile of minutes; its time is recorded)."),
    offload: Optional[str] = typer.Option(None, "--offload", help="none | model | sequential CPU offload (default: the card's, only when the weights do not fit the GPU)."),
    vae_tiling: Optional[bool] = typer.Option(None, "--vae-tiling/--no-vae-tiling", help="Decode in tiles (large sizes on small GPUs; default: the card's)."),
    lora: Optional[List[str]] = typer.Option(None, "--lora", help=LORA_HELP),
    component: Optional[List[str]] = typer.Option(None, "--component", help=COMPONENT_HELP),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Hosted models (endpoint:URL, openai:MODEL): "
                                              "requests in flight (default 4); what is made does not change."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="openai:MODEL: an OpenAI-compatible server "
                                           "(default: OpenAI's); part of what the model is."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
):
    """Generate, score, probe and report: every stage, resuming work already on disk.

    Images from anywhere: --model endpoint:URL (Hugging Face inference protocol; token in HF_TOKEN), openai:MODEL
    (Images API; OPENAI_API_KEY), python:package.module:function (your own sampler). Their runs score and report
    like any other; the probe stage needs a pipeline and is skipped."""
    from . import api
    from .cli_checks import require_input, require_suite

    if config is not None:
        require_input(config, "--config")
    for p in prompts or ():  # before any work: a FIFO or /dev/zero would never end
        require_suite(p)
    if images is not None:
        if model is not None:
            raise AuditError("run: give --model (a model that makes the images) or --images (images made "
                             "elsewhere), not both")
        model = "images:" + (images if images.startswith("hf:") else str(Path(images).resolve()))
    given = {"model": model, "name": name, "layout": layout, "prompts": [str(p) for p in prompts] if prompts else None, "limit": limit,
             "images_per_prompt": images_per_prompt, "seed": seed, "batch_size": batch_size, "device": device,
             "dtype": dtype, "steps": steps, "guidance": guidance, "size": size,
             "scorers": list(scorer) if scorer else None,
             "stages": stages.split(",") if stages else None, "out": str(out) if out else None,
             "compile": compile_, "offload": offload, "vae_tiling": vae_tiling,
             "loras": list(lora) if lora else None, "components": component_options(component) if component else None,
             "concurrency": concurrency, "base_url": base_url}
    if config is not None:
        cfg = api.load_config(config, **given)
    else:
        if not model or not prompts:
            raise AuditError("run needs --model (or --images) and --prompts (or --config run.yaml)")
        cfg = api.make_config({k: v for k, v in given.items() if v is not None}, where="command line")
    root = api.run_audit(cfg, progress=not quiet)
    if os.environ.get("RANK", "0") != "0":  # under accelerate/torchrun only the main process reports
        return
    typer.echo(f"run directory: {root}")
    from .scorers.protocols import unsupported_warning  # "unsupported" is not "not run": say who declined

    from .rundir import RunDir

    warning = unsupported_warning(RunDir(root).scores_dir)
    if warning:
        typer.echo(warning, err=True)
    report = Path(root) / "report" / "index.html"
    if report.exists():
        typer.echo(f"report: {report}")
    line = _headline(RunDir(root))
    if line:
        typer.echo(f"headline: {line}")


def _headline(run) -> Optional[str]:
    from .results_table import run_headline

    return run_headline(run)


@app.command("models")
def models_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable list.")):
    """List model cards (any hf:org/repo or local pipeline folder works too)."""
    from .models import list_models

    rows = list_models()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = [["name", "family", "pipeline", "steps", "cfg", "size", "dtype", "licence", "gated", "source"]]
    for r in rows:
        table.append([r["name"], r["family"], r["pipeline"] or "-", str(r["steps"]), str(r["guidance"]),
                      str(r["size"]), r["dtype"], r["licence"] or "-",
                      {True: "yes", False: "no"}.get(r["gated"], "-"), r["source"]])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    right = {3, 4, 5}  # numbers
    for row in table:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        typer.echo(" ".join(cells + [row[-1]]))


@prompts_app.command("validate")
def prompts_validate(files: List[Path] = typer.Argument(..., help="Suite YAML files, or shipped suites' names "
                                                       "(colors, spatial, mini …).")):
    """Validate suites strictly; print prompt counts, or every problem with file:line."""
    from .cli_checks import require_suite
    from .prompts import expand_files, template_counts

    for f in files:
        require_suite(f, "FILES")
    records = expand_files(files)
    for key, c in template_counts(records).items():
        typer.echo(f"ok  {key:<40} {c['prompts']:>6} prompts  ({c['category']}; {c['heldout']} held out, {c['twins']} with twins)")
    typer.echo(f"{len(records)} prompts in {len(files)} suite(s)")


@prompts_app.command("show")
def prompts_show(file: Path = typer.Argument(..., help="A suite YAML, or a shipped suite's name (colors, mini …)."),
                 limit: int = typer.Option(5, "--limit", "-n", help="Sample prompts shown per template."),
                 as_json: bool = typer.Option(False, "--json", help="Full records instead of text lines.")):
    """Counts per template and sample prompts with their questions."""
    from .cli_checks import require_suite
    from .prompts import expand_files, template_counts

    require_suite(file, "FILE")
    records = expand_files([file])
    for key, c in template_counts(records).items():
        typer.echo(f"{key}: {c['prompts']} prompts ({c['category']})")
    seen: dict[str, int] = {}
    for r in records:
        if seen.get(r["template"], 0) >= limit:
            continue
        seen[r["template"]] = seen.get(r["template"], 0) + 1
        if as_json:
            typer.echo(json.dumps(r, ensure_ascii=False))
            continue
        typer.echo(f"\n[{r['id']}] {r['text']}   ({r['template']}, {r['split']}{', twin ' + r['twin'] if r['twin'] else ''})")
        for q in r["questions"]:
            dep = f"  (if {', '.join(q['depends_on'])})" if q["depends_on"] else ""
            typer.echo(f"    {q['id']}: {q['text']}{dep}")


@prompts_app.command("export")
def prompts_export(files: List[Path] = typer.Argument(..., help="Suite YAML files, or shipped suites' names."),
                   out: Path = typer.Option(..., "--out", "-o", help="PromptRecords JSONL to write (with --layout: a folder)."),
                   limit: Optional[int] = typer.Option(None, help="Keep a balanced, deterministic subset of N prompts."),
                   seed: int = typer.Option(0, help="Seed of the --limit subset (and, with --layout imagefolder, the base seed of each image's seed)."),
                   layout: Optional[str] = typer.Option(None, "--layout", help="Hand the suite to another generator: geneval | t2i-compbench | imagefolder. Writes the prompt file it reads, prompts.jsonl and expected.txt (the images it must write back for `run --images`)."),
                   images_per_prompt: int = typer.Option(1, "--images-per-prompt", "-n", min=1, help="Images per prompt expected back (with --layout)."),
                   force: bool = typer.Option(False, "--force", help="Replace an existing file at --out (never done otherwise).")):
    """Expand suites to a JSONL file of PromptRecords, or (--layout) to another generator's prompt files."""
    from .api import export_prompts
    from .cli_checks import require_suite
    from .ownership import claim_output_file

    for f in files:
        require_suite(f, "FILES")
    if layout is not None:
        from .api import expand_suites, prompt_digest
        from .ownership import claim_output_dir
        from .sources.export import EXPORT_LAYOUTS, export_layout

        if layout not in EXPORT_LAYOUTS:
            raise AuditError(f"--layout {layout!r}: prompts export writes {', '.join(EXPORT_LAYOUTS)}")
        records = expand_suites([str(f) for f in files], limit, seed)
        claim_output_dir(out, "prompt-export", settings={"layout": layout, "images_per_prompt": images_per_prompt,
                                                         "seed": seed, "prompts": prompt_digest(records)})
        typer.echo(export_layout(records, layout, out, images_per_prompt, seed))
        return
    claim_output_file(out, force=force)
    n = export_prompts([str(f) for f in files], out, limit, seed)
    typer.echo(f"wrote {n} prompts to {out}")


@app.command("verify")
def verify_cmd(run_dir: Path = typer.Argument(..., help="A run directory."),
               as_json: bool = typer.Option(False, "--json", help="Machine-readable result.")):
    """Check every recorded file of a run (hashes, JSONL, score keys, activations); exit 1 if damaged."""
    from .verify import format_result, verify_run

    result = verify_run(run_dir)
    typer.echo(json.dumps(result, indent=2) if as_json else format_result(result))
    raise typer.Exit(0 if result["ok"] else 1)


@prompts_app.command("import")
def prompts_import(
    file: Path = typer.Argument(..., help="Your copy of the benchmark's prompt file."),
    fmt: str = typer.Option(..., "--format", "-f", help="geneval (evaluation_metadata.jsonl) | t2i-compbench (<category>_val.txt) | dpg (dpg_bench.csv)."),
    out: Path = typer.Option(..., "--out", "-o", help="PromptRecords JSONL; use it with `run --prompts`."),
    category: Optional[str] = typer.Option(None, help="T2I-CompBench category when the file name does not tell it."),
    vocab: Optional[List[Path]] = typer.Option(None, "--vocab", help="Extra suite YAML whose attribute lists the T2I-CompBench grammar knows."),
    questions_by: Optional[str] = typer.Option(None, "--questions-by", help="Question generator (cards/questioners.yaml: qwen3-8b, tiny-llm; NAME=PATH for a local copy of its model): an LLM writes DSG questions with dependencies for the prompts the grammar declines, once, into the records."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at --out (never done otherwise)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar while --questions-by writes questions."),
):
    """Import GenEval, T2I-CompBench or DPG-Bench prompts as PromptRecords (slots, questions, categories)."""
    from .cli_checks import require_inputs
    from .importers import import_prompts, parse_summary
    from .ownership import claim_output_file
    from .rundir import atomic_write_jsonl

    require_inputs(vocab, "--vocab")  # every format: a path given must exist, whether or not it is read
    claim_output_file(out, force=force)  # before the import's (and the question generator's) work
    if questions_by:  # a wrong card name fails before the import's work
        from .importers.llm_questions import LlmQuestioner, generate_questions, questioner_card

        questioner = LlmQuestioner(questioner_card(questions_by))
    records = import_prompts(file, fmt, category=category, vocab_files=[str(v) for v in vocab or []])
    s = parse_summary(records)
    for cat, c in s["categories"].items():
        typer.echo(f"ok  {fmt}/{cat:<24} {c['prompts']:>6} prompts ({c['parsed']} parsed)")
    if questions_by:
        q = generate_questions(records, questioner, progress=not quiet)
        why = "; ".join(f"{n}× {r}" for r, n in sorted(q["reasons"].items(), key=lambda x: -x[1]))
        typer.echo(f"questions by {questions_by.partition('=')[0]}: {q['generated']} of {q['asked']} unparsed prompts "
                   f"got DSG questions, {q['fallback']} kept the whole-prompt question{' (' + why + ')' if why else ''}")
    atomic_write_jsonl(out, records)
    typer.echo(f"{s['prompts']} prompts: {s['parsed']} parsed, {s['unparsed']} not parsed"
               f"{'' if questions_by else ' (whole-prompt question only)'}; wrote {out}")


@app.command("label")
def label_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="Run directory with prompts.jsonl and images."),
    n: int = typer.Option(60, "--n", help="Images to sample (stratified by category)."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file (default RUN/report/label.html)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing file at --out (never done otherwise)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress line."),
):
    """A self-contained labelling page (opens offline); its export is the CSV `calibrate --labels` reads."""
    from .report.label import render_label_page
    from .ownership import claim_output_file

    if out is not None:  # the default lies in the run's own report folder
        claim_output_file(out, force=force)
    else:  # writes into the run: a run's folder only, locked while this command writes
        from .ownership import require_kind

        require_kind(run_dir, "run")

    typer.echo(str(render_label_page(run_dir, n=n, seed=seed, out=out, progress=not quiet)))


def _register_plugins() -> None:
    for mod_name in PLUGIN_CLIS:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name and mod_name.startswith(e.name):
                continue  # that stage is not part of this install
            raise
        mod.register(app)


_register_plugins()


def _checked_device(value: Optional[str]) -> Optional[str]:
    """A ``--device`` torch does not know (``tpu``), or one this machine lacks, refused when the call is parsed —
    before any folder is made (torch's RuntimeError used to come from deep inside a pipeline)."""
    if value in (None, "", "auto"):
        return value
    from .generate import check_device

    return check_device(value)


def _check_device_options(typer_app: typer.Typer) -> None:
    """Every command's ``--device`` option, sub-apps and plugin commands included (so a new command is held to
    it), gets :func:`_checked_device` — unless it has a callback of its own."""
    import inspect

    for info in typer_app.registered_commands:
        for p in inspect.signature(info.callback).parameters.values():
            opt = p.default
            if isinstance(opt, typer.models.OptionInfo) and opt.callback is None and \
                    "--device" in (opt.param_decls or ("--" + p.name.replace("_", "-"),)):
                opt.callback = _checked_device
    for group in typer_app.registered_groups:
        _check_device_options(group.typer_instance)


_check_device_options(app)


def main() -> None:
    from .oserrors import first_actionable
    from .ownership import command_scope
    from .terminal import printable_echo

    with printable_echo():
        try:
            with command_scope():  # the folders this command writes stay locked until it ends
                app()
        except AuditError as e:
            typer.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            typer.echo("interrupted: finished work is on disk; rerun the same command to resume", err=True)
            sys.exit(130)
        except OSError as e:  # a full or read-only disk, no permission: said once here for every command
            said = first_actionable(e)
            if said is None:
                raise
            typer.echo(f"error: {said}", err=True)
            sys.exit(said.exit_code)


if __name__ == "__main__":
    main()
