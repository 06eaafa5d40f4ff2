"""Reports: one run (:func:`render_report`) and models side by side (:func:`compare_runs`).

Both render from files only (never import torch) into one folder that opens offline as it is: one
``index.html`` with CSS/JS inlined, ``thumbs/`` (JPEGs keyed by image sha256, made once and
reused), and machine-readable tables beside it (Parquet + CSV).

Run report outputs (``RUN/report/`` unless ``out_dir``):

* ``index.html``; ``thumbs/<sha[:2]>/<sha>.jpg``;
* ``results.parquet`` / ``results.csv``: one row per image × question, with for each scorer
  ``<scorer>.verdict``, ``<scorer>.value``, ``<scorer>.image_verdict``, ``verdict`` (that of the
  scorer deciding the row's category, :mod:`t2i_audit.deciding`) and ``decided_by`` (its name);
* ``summary.json`` key ``"report"`` (read-modify-write; other keys are left as found);
* ``manifest.json`` stage ``"report"``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..ownership import claim_output_dir, require_kind
from ..rundir import RunDir, atomic_write_text

__all__ = ["render_report", "compare_runs", "update_summary_key"]


def _log(progress: bool, msg: str) -> None:
    if progress:
        print(f"[report] {msg}", file=sys.stderr, flush=True)


def update_summary_key(rd: RunDir, key: str, value) -> None:
    """Set one top-level key of summary.json, keeping every other key as it is on disk now (under the lock)."""
    rd.update_summary(key, value)


def _summary_payload(ctx: dict, data, out: Path, rd: RunDir, table: dict, seconds: float, thumbs) -> dict:
    h = ctx["headline"]
    clean = lambda r: {k: (None if isinstance(v, float) and v != v else v)  # noqa: E731
                       for k, v in r.items() if k in ("n", "k", "rate", "lo", "hi")}
    fails = {}
    for r in ctx["failures"]["rows"]:
        fails[r["category"]] = {"failed": r["failed"], "scored": r["scored"],
                                "types": {t: n for t, n in r["segments"]}}
    try:
        index = rd.rel(out / "index.html")
    except ValueError:
        index = str(out / "index.html")
    from ..variants.labels import label_of

    return {
        "index": index, "model": data.model, "variant": label_of(data.adapted) or None,  # a LoRA run says so
        "scorer": data.scorer, "scorers": sorted(data.scorers),
        "deciding": {str(c): {k: d.get(k) for k in ("scorer", "source", "agreement", "why")}
                     for c, d in data.deciding.items()},
        "images": ctx["n_images"], "scored": ctx["n_scored"], "flagged": ctx["n_flagged"],
        # a provider's refusals (content filter, not an image): never scored, never composition failures
        "refused": ctx["source"]["refused"]["n"], "refused_by_reason": ctx["source"]["refused"]["by_reason"],
        "needs_weights": sorted(ctx["source"]["needs_weights"]),
        "overall": clean(h["overall"]) if h else None,
        "by_category": {c["category"]: clean(c) for c in h["categories"]} if h else {},
        "by_template": {t["template"]: clean(t) for c in h["categories"] for t in c["templates"]} if h else {},
        "by_split": {str(s["split"]): clean(s) for s in h["splits"]} if h else {},  # seen vs held-out compositions
        "random_weights": ctx.get("random_weights"),
        "failure_types": fails,
        "scorer_agreement": [{"a": p["a"], "b": p["b"], "image_rate": p["image"]["rate"],
                              "image_kappa": p["image"]["kappa"], "question_rate": p["question"]["rate"],
                              "question_kappa": p["question"]["kappa"]} for p in ctx["scorers"]["pairs"]],
        "tables": {"parquet": table["parquet"], "csv": table["csv"], "rows": table["rows"]},
        "thumbnails": {"made": thumbs.made, "reused": thumbs.reused, "missing": thumbs.missing},
        "seconds": round(seconds, 3),
    }


def render_report(run_dir, *, out_dir=None, progress: bool = True, scorer: str | None = None) -> Path:
    """Render ``RUN/report/index.html`` (or into ``out_dir``); returns the path of index.html.

    ``scorer`` forces the scorer of every category; by default each category is decided by the
    scorer with the best measured agreement (:func:`t2i_audit.deciding.deciding_scorers`).
    Updates ``summary.json["report"]`` and the manifest's ``report`` stage.
    """
    from .html import build_context, render
    from .tables import load_run, write_tables
    from .thumbs import Thumbs

    t0 = time.perf_counter()
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    data = load_run(rd, scorer)
    rd.read_summary()  # checked before anything is written: it is rewritten last, page and summary must agree
    from ..sources.recording import recorded_refusals

    recorded_refusals(rd)  # the page counts them: a damaged refusals.jsonl is refused before anything is written
    require_kind(rd.root, "run")  # summary.json and the manifest are written there too
    # RUN/report is part of the run; a folder of the user's choice must be new, empty, or a report of this run
    # (claimed like a run folder: another run's report is not replaced, a folder inside another run refused)
    out = rd.report_dir if out_dir is None else Path(out_dir)
    own = os.path.realpath(out).startswith(os.path.realpath(rd.root) + os.sep)
    claim_output_dir(out, "report", within=rd.root,
                     settings=None if own else {"run": os.path.realpath(rd.root)})
    _log(progress, f"{len(data.prompts)} prompts, {len(data.images)} images, scorers: "
                   f"{', '.join(sorted(data.scorers)) or 'none'}")
    thumbs = Thumbs(out)
    ctx = build_context(data, out, thumbs, progress)
    page = out / "index.html"
    atomic_write_text(page, render("report.html.j2", ctx))
    table = write_tables(data.questions_df, out, "results")  # atomic writes honour the umask (rundir)
    pruned = thumbs.prune()
    seconds = time.perf_counter() - t0
    update_summary_key(rd, "report", _summary_payload(ctx, data, out, rd, table, seconds, thumbs))
    rd.update_stage("report", status="done", seconds=round(seconds, 3), images=len(data.images),
                    rows=table["rows"], thumbnails_made=thumbs.made, thumbnails_reused=thumbs.reused,
                    index=str(page), finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    _log(progress, f"wrote {page} in {seconds:.2f}s (thumbnails: {thumbs.made} made, "
                   f"{thumbs.reused} reused, {pruned} pruned)")
    return page


def compare_runs(run_dirs: list, out_dir, *, allow_different_suites: bool = False,
                 scorer: str | None = None, seed: int = 0) -> Path:
    """Compare runs image by image (prompt id + sample); returns ``out_dir/index.html``."""
    from .compare import compare

    return compare(run_dirs, out_dir, allow_different_suites=allow_different_suites,
                   scorer=scorer, seed=seed)
