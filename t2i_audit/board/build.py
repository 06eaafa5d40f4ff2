"""Build or extend a board: read the new runs, write their files once, then recompute what depends on every
run (groups, ranks, comparisons: small) into a new snapshot, the dataset card, the eval results and the page.

Order, so that bad input leaves the board as it was: the folder is checked as ours; every input is read and
validated (new runs, the board's own files, by hash); only then is anything written, ``board.json`` last.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import deciding as rule
from ..cli_checks import require_input
from ..errors import AuditError
from ..ownership import check_claimable, claim_output_dir
from ..rundir import RunLock, atomic_write_json, atomic_write_text
from ..shareable import shareable
from . import card, judgecheck, ranks, readers, settings, store, tables
from .page import render_page
from .snapshot import category_frame, comparison_frame, run_frame

THUMBS_MAX = 480  # images on the page's disagreement cards, shared among the groups (a card shows every run's)


@dataclass
class BoardResult:
    root: Path
    page: Path
    snapshot: str
    new_snapshot: bool
    added: list = field(default_factory=list)
    refreshed: list = field(default_factory=list)
    already: list = field(default_factory=list)
    changed: dict = field(default_factory=dict)  # run id -> what changed, for runs kept as they were read
    numbers: dict = field(default_factory=dict)
    seconds: float = 0.0


def _log(progress: bool, msg: str) -> None:
    if progress:
        print(f"[board] {msg}", file=sys.stderr, flush=True)


def _options(index: dict | None, out: Path, *, images, allow_different_suites, strict_settings, title, seed) -> dict:
    if index is None:
        return store.new_index(title=title or out.resolve().name, images=images or "none",
                               allow_different_suites=bool(allow_different_suites),
                               strict_settings=bool(strict_settings), seed=0 if seed is None else seed)
    if images is not None and images != index["images"]:
        raise AuditError(f"--images {images}: the board {out} holds images as {index['images']!r} (chosen when it "
                         "was made, so every run's files have one layout); omit --images or use another --out")
    if allow_different_suites:
        index["allow_different_suites"] = True
    if strict_settings:  # kept once chosen, as --allow-different-suites: the board's groups are its identity
        index["strict_settings"] = True
    if title:
        index["title"] = title
    if seed is not None:
        index["seed"] = seed
    return index


def _check_board_files(out: Path, index: dict) -> None:
    """Every Parquet file the index names must hold the bytes written (a hand edit is named, never read)."""
    seen = set()
    recs = [r for e in index["runs"] for r in e["files"].values()]
    recs += [r for s in index["snapshots"] for r in s["files"].values()]
    for rec in recs:
        if rec["path"] not in seen:
            seen.add(rec["path"])
            readers.check_file(out / rec["path"], rec["sha256"])


def _entry(out: Path, rid: str, run: readers.RunFiles, now: str, files: dict) -> dict:
    suites = sorted({f"{p.get('suite')}@{p.get('suite_version')}" for p in run.prompts.values()})
    return {"id": rid, "file_id": store.file_id(rid, run.hashes), "path": store.relative_path(out, run.root),
            "folder": run.root.name,
            "added_utc": now, "hashes": run.hashes, "files": files,
            "config": shareable({k: v for k, v in run.config.items() if k != "out"}, out),  # published: no local path
            "model": shareable(settings.model_card(run.manifest), out),  # a LoRA's or a folder's path too
            "suites": suites, "judges": run.judges, "calibration": run.calibration, "scorers": run.scorers,
            "images": int(len(run.results[["prompt_id", "sample"]].drop_duplicates())) if len(run.results) else 0}


def _write_run_files(out: Path, rid: str, run: readers.RunFiles, mode: str) -> tuple[dict, pd.DataFrame]:
    fid = store.file_id(rid, run.hashes)
    q = tables.question_rows(rid, run)
    embedded = readers.image_bytes(run.root, q) if mode in ("embed", "folder") else None
    im = tables.image_rows(q, run, embedded if mode == "embed" else None)
    files, stored = {}, {}
    for name, df, schema in (("questions", q, tables.SCHEMAS["questions"]),
                             ("images", im, tables.image_schema(mode == "embed")),
                             ("probes", tables.probe_rows(rid, run), tables.SCHEMAS["probes"])):
        rel = f"data/{name}/{fid}.parquet"
        rec, stored[name] = tables.write_parquet(out / rel, df, schema)
        files[name] = {"path": rel, **rec}
    if mode == "folder":
        files[card.GALLERY] = tables.write_gallery(out, f"images/{fid}", im, embedded)
    # the rows as a later build reads them back: one set of numbers, whether a run was added now or before
    return files, stored["images"].drop(["image"] if mode == "embed" else []).to_pandas()


def _decided(im: pd.DataFrame, run_ids: list) -> list[dict]:
    """Per run {judge: {category: image verdicts given}}: what t2i_audit.deciding weighs."""
    out = []
    s = im[im["image_verdict"].notna() & im["judge"].notna()]
    for r in run_ids:
        counts: dict = {}
        for (judge, cat), n in s[s["run_id"] == r].groupby(["judge", "category"]).size().items():
            counts.setdefault(judge, {})[cat] = int(n)
        out.append(counts)
    return out


def compute(index: dict, images: dict, *, seed: int) -> dict:
    """Groups, deciding judges, rates, rank intervals, comparisons (Holm over all) and disagreements."""
    entries = index["runs"]
    labels = dict(zip((e["id"] for e in entries), settings.labels(entries)))
    found = settings.groups(entries, allow_different_suites=index["allow_different_suites"],
                            strict_settings=index.get("strict_settings", False))
    out_groups, comparisons = [], []
    budget = THUMBS_MAX
    from ..scorers.registry import load_cards

    cards = load_cards()  # once for every group
    for gi, g in enumerate(found):
        ids = [e["id"] for e in g.entries]
        im = pd.concat([images[i] for i in ids], ignore_index=True)
        cats = sorted({str(c) for c in im["category"].dropna()})
        calib = rule.pool_calibration([e["calibration"] for e in g.entries if isinstance(e.get("calibration"), dict)])
        dec = rule.deciding_scorers([Path(e["path"]) for e in g.entries], cats, decided=_decided(im, ids),
                                    calibration=calib, cards=cards)
        by_text = len({s for e in g.entries for s in e.get("suites") or []}) > 1
        v = ranks.verdict_frame(im, dec, by_text=by_text)
        keys_of = {}
        for r in ids:
            mine = im[im["run_id"] == r]
            keys_of[r] = set((mine["template"].astype(str) + "|" + mine["prompt"].astype(str)) if by_text
                             else mine["prompt_id"])
        v, shared = ranks.shared(v, ids, keys_of)
        rate_rows, comps = ranks.group_numbers(v, ids, seed=seed + 1000 * gi) if shared else ([], [])
        for c in comps:
            c["group"] = g.name
        comparisons += comps
        checks = judgecheck.judge_checks(g.entries, {c: dec.get(c) for c in cats}, labels, cards)
        study_of = {r: st["name"] for st in g.studies for r in st["runs"]}
        rows = []
        for r in ids:
            mine = {x["category"]: x for x in rate_rows if x["run_id"] == r}
            for cat, x in mine.items():
                x["judge"] = (dec.get(cat) or {}).get("scorer") if cat != ranks.OVERALL else None
                check = checks.get(str(cat))
                x["judge_checked"] = None if check is None else r not in check["unchecked"]
                x["judge_measured_on"] = None if check is None else check["measured_on"]
            e = next(e for e in g.entries if e["id"] == r)
            rows.append({"run_id": r, "label": labels[r], "model": settings.subject(e)["model"], "entry": e,
                         "settings": settings.settings_text(e), "study": study_of.get(r),
                         "overall": mine.get(ranks.OVERALL) or _empty(),
                         "categories": {c: mine.get(c) or _empty() for c in cats}})
        limit = budget // max(1, len(found) - gi) // len(ids)
        dis = ranks.disagreements(v, ids, limit) if len(ids) > 1 and shared else []
        budget -= len(dis) * len(ids)
        out_groups.append({"name": g.name, "conditions": g.conditions, "judges": g.judges,
                           "conditions_text": card.conditions_text(g.conditions),
                           "apart": settings.differences(g, found[0]) if gi else [], "runs": ids, "rows": rows,
                           "categories": cats, "shared": len(shared), "by_text": by_text, "deciding": dec,
                           "studies": [{**st, "labels": [labels[r] for r in st["runs"]]} for st in g.studies],
                           "judge_checks": checks,
                           "verdicts": v, "disagreements": dis})
    ranks.holm(comparisons)
    return {"groups": out_groups, "labels": labels, "comparisons": comparisons}


def _empty() -> dict:
    return {"n": 0, "k": 0, "rate": float("nan"), "lo": float("nan"), "hi": float("nan"), "failed": 0,
            "failures": [], "rank": None, "rank_lo": None, "rank_hi": None, "units": 0}


def _gather(out: Path, given, index: dict, refresh: bool) -> tuple[list, list, dict]:
    """(runs to read: (entry or None, path), run ids given that are on the board unchanged, changed runs)."""
    by_path = {str(store.run_root(out, e)): e for e in index["runs"]}
    changed = {e["id"]: readers.changed_files(store.run_root(out, e), e["hashes"]) for e in index["runs"]}
    changed = {k: v for k, v in changed.items() if v}
    todo, already, seen = [], [], set()
    for r in given:
        path = str(require_input(r, "RUN", "folder").resolve())
        if path in seen:
            continue
        seen.add(path)
        e = by_path.get(path)
        if e is None:
            todo.append((None, Path(path)))
        elif e["id"] in changed and refresh:
            todo.append((e, Path(path)))
        else:
            already.append(e["id"])
    if refresh:
        for e in index["runs"]:
            root = store.run_root(out, e)
            if e["id"] in changed and root.is_dir() and str(root) not in seen:
                todo.append((e, root))
    return todo, already, changed


def build_board(out, runs=(), *, refresh: bool = False, allow_different_suites: bool = False,
                strict_settings: bool = False, images: str | None = None, title: str | None = None,
                seed: int | None = None, progress: bool = False, repo: str | None = None) -> BoardResult:
    """Add ``runs`` to the board in ``out`` (made when new) and render it; ``repo``: the Hub dataset it is pushed
    to (named in the card and the eval results)."""
    t0 = time.perf_counter()
    out = Path(out)
    check_claimable(out, "board")  # a folder that is not ours is named before any input is read
    if images is not None and images not in store.IMAGE_MODES:
        raise AuditError(f"--images {images!r}: one of {', '.join(store.IMAGE_MODES)}")
    index_path = out / store.INDEX
    index = store.validate(readers.read_index(index_path), index_path) if index_path.is_file() else None
    if index is None and not runs:
        raise AuditError(f"--out {out}: a new board needs at least one run (t2i-audit board RUN ... --out {out})")
    before = index and (index["seed"], index["allow_different_suites"], index["strict_settings"])
    index = _options(index, out, images=images, allow_different_suites=allow_different_suites,
                     strict_settings=strict_settings, title=title, seed=seed)
    regroup = before != (index["seed"], index["allow_different_suites"], index["strict_settings"])  # other numbers: a new snapshot
    if repo:
        index["repo"] = repo
    _check_board_files(out, index)
    todo, already, changed = _gather(out, runs, index, refresh)
    reads = []
    for e, path in todo:
        _log(progress, f"reading {path}")
        run = readers.read_run(path)
        moved = next((x for x in index["runs"] if e is None and x["hashes"] == run.hashes), None)
        if moved is not None:  # the same files under another path: the run was moved, not made again
            _log(progress, f"{path}: already on the board as {moved['id']} (its files are those read from "
                           f"{store.run_root(out, moved)}); its path is updated")
            moved["path"] = store.relative_path(out, run.root)
            already.append(moved["id"])
            changed.pop(moved["id"], None)
            continue
        reads.append((e, run))
    kept = {e["id"]: readers.read_table(out / e["files"]["images"]["path"], e["files"]["images"]["sha256"])
            for e in index["runs"]}
    read_as = index_path.read_bytes() if index_path.is_file() else None
    claim_output_dir(out, "board")
    with RunLock(out):  # one writer at a time (a second `board` on this folder is refused, named)
        now_as = index_path.read_bytes() if index_path.is_file() else None
        if now_as != read_as:
            raise AuditError(f"{index_path}: changed by another `t2i-audit board` while this one read its inputs; "
                             "nothing was written by this one — run it again")
        return _write(out, index, reads, kept, already, changed, regroup, progress, t0)


def _write(out: Path, index: dict, reads: list, kept: dict, already: list, changed: dict, regroup: bool,
           progress: bool, t0: float) -> BoardResult:
    now = store.utc_now()
    taken = {e["id"] for e in index["runs"]}
    added, refreshed = [], []
    for e, run in reads:
        rid = e["id"] if e else store.run_id(run.root.name, taken)
        taken.add(rid)
        files, im = _write_run_files(out, rid, run, index["images"])
        new = _entry(out, rid, run, e["added_utc"] if e else now.isoformat(), files)
        if e:
            new["refreshed_utc"] = now.isoformat()
            index["runs"][index["runs"].index(e)] = new
            refreshed.append(rid)
            changed.pop(rid, None)
        else:
            index["runs"].append(new)
            added.append(rid)
        kept[rid] = im
    new_snapshot = bool(reads) or regroup or not index["snapshots"]
    numbers = compute(index, kept, seed=index["seed"])
    if new_snapshot:
        split = store.split_name(now, {s["split"] for s in index["snapshots"]})
        snap = {"split": split, "utc": now.isoformat(), "runs": [store.entry_files(e) for e in index["runs"]],
                "files": _write_snapshot_tables(out, split, index, numbers, changed)}
        index["snapshots"].append(snap)
    write_published(out, index, numbers, now)
    page = render_page(out, index, numbers, changed, progress=progress)
    atomic_write_json(out / store.INDEX, index)
    _log(progress, f"{len(index['runs'])} runs in {len(numbers['groups'])} group(s); wrote {page}")
    return BoardResult(out, page, index["snapshots"][-1]["split"], new_snapshot, added, refreshed, already, changed,
                       numbers, time.perf_counter() - t0)


def write_published(out: Path, index: dict, numbers: dict, now) -> None:
    """The dataset card and (once the board has a Hub repo) each run's ``.eval_results`` file."""
    atomic_write_text(out / "README.md", card.dataset_card(index, numbers))
    for rel, text in card.eval_results(index, numbers, now.strftime("%Y-%m-%d")).items():
        atomic_write_text(out / rel, text)


def _write_snapshot_tables(out: Path, split: str, index: dict, numbers: dict, changed: dict) -> dict:
    files = {}
    for name, df in (("runs", run_frame(index, numbers, changed)), ("categories", category_frame(numbers)),
                     ("comparisons", comparison_frame(numbers))):
        rel = f"data/{name}/{split}.parquet"
        files[name] = {"path": rel, **tables.write_parquet(out / rel, df, tables.SCHEMAS[name])[0]}
    return files
