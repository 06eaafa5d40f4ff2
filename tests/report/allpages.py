"""One small page of every kind a user opens (run report, compare, board, track, label), built from synthetic runs
(synth.py: real run files, no model) in a few seconds: for the checks that hold on every page kind."""

from __future__ import annotations

from pathlib import Path

from synth import make_prompts, make_run

from t2i_audit.rundir import atomic_write_jsonl, read_jsonl

KINDS = ("report", "compare", "board", "track", "label")
CONFIG = {"steps": 20, "guidance": 7.0, "size": 48, "dtype": "float32"}  # run.yaml: what the board groups by
TRACK_POINTS = (("base", 0, 0.3), ("checkpoint-10", 10, 0.6), ("final", None, 0.9))


def made_here(run: Path, models: Path) -> Path:
    """The run's manifest and run.yaml as ``t2i-audit run --model FOLDER`` writes them on this machine: the model
    folder, the command line (the entry point's absolute path first) and the output folder, all absolute."""
    import yaml

    from t2i_audit.rundir import atomic_write_json, atomic_write_text
    from t2i_audit.safeload import read_json

    folder = str(models / run.name)
    m = read_json(run / "manifest.json")
    m["model"].update(source=folder, local=folder, repo=None)
    m["command"] = [str(models.parent / ".venv" / "bin" / "t2i-audit"), "run", "--model", folder, "--out", str(run)]
    m["stages"]["generate"]["resolved_from"] = folder
    atomic_write_json(run / "manifest.json", m)
    if (run / "run.yaml").is_file():
        cfg = yaml.safe_load((run / "run.yaml").read_text())
        atomic_write_text(run / "run.yaml", yaml.safe_dump({**cfg, "model": folder, "out": str(run)}, sort_keys=False))
    return run


def skip_dependants(root: Path, scorer: str = "vqa-blip") -> int:
    """Every question of a failed image whose dependency failed, recorded as the scorer records a skip (verdict None,
    ``extra.skipped_by``): the gallery cards then show the ``skipped`` badge. Returns how many."""
    path = root / "scores" / f"{scorer}.jsonl"
    recs = list(read_jsonl(path))
    prompts = {p["id"]: p for p in read_jsonl(root / "prompts.jsonl")}
    n = 0
    for r in recs:
        q = next((q for q in prompts[r["prompt_id"]]["questions"] if q["id"] == r.get("question_id")), None)
        if q and q["depends_on"] and r["verdict"] is None and not r.get("extra"):
            r.update(extra={"skipped_by": q["depends_on"][:1]})
            n += 1
    atomic_write_jsonl(path, recs)
    return n


def synthetic_track(root: Path, prompts: list[dict], weights: Path, points=TRACK_POINTS,
                    samples: int = 1) -> Path:
    """A track folder as ``t2i-audit track`` leaves it (track.json, prompts.jsonl, runs/<label>/), one synthetic run
    per checkpoint (label, step, skill) whose weights came from ``weights``/<label>; no activations (no
    decodability)."""
    from t2i_audit.track import index as ix

    root.mkdir(parents=True)
    atomic_write_jsonl(root / "prompts.jsonl", prompts)
    index = ix.Index(settings={"model": str(weights / "base")})  # as `track --model FOLDER` records it
    for label, step, skill in points:
        make_run(root / "runs" / label, prompts=prompts, skill=skill, probes=False, samples=samples, black=0)
        index.put(ix.Entry(label=label, step=step, order=ix.order_key(label, step), source=str(weights / label),
                           run=f"runs/{label}", status="done", layout="components"))
    ix.save_index(root, index)
    return root


def build_pages(base: Path) -> dict[str, Path]:
    """kind → the page's index.html (or label.html), every kind built from the same prompts."""
    from t2i_audit.board import build_board
    from t2i_audit.report import compare_runs, render_report
    from t2i_audit.report.label import render_label_page
    from t2i_audit.track.page import write_track_page

    base = Path(base)
    prompts = make_prompts(n_binding=8, n_rel=4, n_count=3)
    for i, p in enumerate(prompts):  # a held-out third: the track's widest table (seen, held-out and all columns)
        p["split"] = "heldout" if i % 3 == 0 else "train"
    # model names as long as real ones: the tables' columns and cells must wrap them, not scroll
    runs = [make_run(base / name, prompts=prompts, skill=skill, model=model, probes=name == "a", config=CONFIG)
            for name, skill, model in (("a", 1.0, "stabilityai/stable-diffusion-2-1-base"),
                                       ("b", 0.6, "runwayml/stable-diffusion-v1-5"),
                                       ("c", 0.4, "segmind/small-sd-distilled-checkpoint"))]
    for run in runs:
        assert skip_dependants(run)
        made_here(run, base / "models")
    a = runs[0]
    pages = {"report": render_report(a, progress=False), "compare": compare_runs(runs, base / "compare")}
    for run in runs[1:]:
        render_report(run, progress=False)
    pages["board"] = build_board(base / "board", runs).page
    track = synthetic_track(base / "track", prompts, base / "training")
    write_track_page(track, folds=2)
    pages["track"] = track / "index.html"
    pages["label"] = render_label_page(a, n=6, seed=0, out=base / "label.html", progress=False)
    return pages


def published(pages: dict) -> dict[str, list[Path]]:
    """kind → every file a user shares of it: the report folder, the comparison folder, the board folder (its page,
    card, tables and data: a Hub dataset), the track's page and data files (what ``dest`` copies for publishing;
    track.json and runs/ are the track's own working records, like a run's manifest)."""
    def files(folder: Path) -> list[Path]:
        return sorted(p for p in folder.rglob("*") if p.is_file())

    track = pages["track"].parent
    return {"report": files(pages["report"].parent), "compare": files(pages["compare"].parent),
            "board": files(pages["board"].parent),
            "track": [track / n for n in ("index.html", "curves.json", "success.csv", "success.parquet",
                                          "decodability.csv", "decodability.parquet") if (track / n).is_file()]}
