"""The score stage: batched, each image decoded once, resumable.

Resume rule (the records are the cache): an image counts as done for a scorer when
``scores/<scorer>.jsonl`` holds its ``prompt`` record (written last, in the same append as the
image's other records) with the same ``image_sha256``, ``scorer_model``, ``scorer_revision``
and ``extra.card_hash`` (a fingerprint of the card: model, templates, thresholds, options).
Records of an image whose prompt record is missing (a kill mid-append) or stale (regenerated
image, changed card) are dropped by an atomic rewrite before scoring starts, then recomputed.

A separate answer cache would hold the same raw values these records already hold, keyed
the same way (model + revision + image sha256 + question); changing only a threshold is what
``calibrate`` is for and needs no model call.

Batches are planned once from the run alone (:func:`plan_batches`: images.jsonl order cut every
``batch_size``), as generation plans its own: a kernel's result can depend on the batch-mates (a
CLIP score rescored alone moved by 7.8e-8), so resume reruns every planned batch that holds an
unfinished image, whole, and writes only the unfinished images' records. Same run, same batch
size, same machine and thread count ⇒ the same bytes, whatever was killed or damaged.

An image a scorer fails on (its batch raised) fails the stage: the other scorers finish, then an
AuditError names the scorer, the images and the error (exit 2 from the CLI), never just a warning.

Several processes (``accelerate launch``): batches are split between them, each appends to its
own ``scores/shards/<scorer>.rank<r>.jsonl``, and the main process folds the shards (and any a
killed run left) into ``scores/<scorer>.jsonl`` in images.jsonl order — the bytes a single
process writes. A kill loses at most each process's batch in flight.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..errors import AuditError
from ..records import score_records
from ..rundir import RunDir, append_jsonl, atomic_write_jsonl, repair_jsonl
from .base import Scorer, ScoreItem
from .registry import create_scorer, load_cards


def resolve_device(device: str) -> str:
    if device in (None, "", "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    from ..generate import check_device  # a device torch does not know is refused by name, not traced

    return check_device(device)


def _image_key(rec: Mapping) -> tuple[str, int]:
    return (rec["prompt_id"], int(rec.get("sample", 0)))


def shard_path(rd: RunDir, scorer: str, rank: int) -> Path:
    """Where Accelerate process ``rank`` appends its records when several processes score."""
    return rd.scores_dir / "shards" / f"{scorer}.rank{rank}.jsonl"


def score_shards(rd: RunDir, scorer: str) -> list[Path]:
    """Every process's shard of ``scorer`` (of any process count), by rank."""
    found = (rd.scores_dir / "shards").glob(f"{scorer}.rank*.jsonl")
    ranks = {p: p.stem.rsplit(".rank", 1)[1] for p in found}
    return sorted((p for p, r in ranks.items() if r.isdigit()), key=lambda p: int(ranks[p]))


def _by_image(records: Iterable[dict]) -> dict[tuple, list[dict]]:
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        by_key[_image_key(r)].append(r)
    return by_key


def _finished(recs: list[dict], img: Mapping, scorer: Scorer) -> bool:
    """An image's records are finished and current: one prompt record, same image and card."""
    prompt = [r for r in recs if r.get("kind") == "prompt"]
    return len(prompt) == 1 and all(
        (prompt[0].get("image_sha256") == img.get("sha256"),
         prompt[0].get("scorer_model") == scorer.model_id,
         prompt[0].get("scorer_revision") == scorer.revision,
         (prompt[0].get("extra") or {}).get("card_hash") == scorer.fingerprint))


def compact_scores(path: Path, scorer: Scorer, images: Mapping[tuple, dict],
                   shards: Sequence[Path] = ()) -> set[tuple]:
    """Fold ``shards`` into ``path``, drop unfinished/stale images' records; return finished keys.

    The file is rewritten in one canonical order — images in ``images`` (images.jsonl) order,
    each image's records as its scorer wrote them, then records of images no longer listed
    (left alone) — so any process count, batch split or resume gives the same bytes. Shards are
    deleted once folded (a kill between the rewrite and the deletion leaves duplicates that the
    next fold drops: the first finished group of an image wins). Main process only.
    """
    sources = [Path(path), *shards]
    chosen: dict[tuple, list[dict]] = {}
    unknown: list[dict] = []
    before: list[dict] = []
    for i, src in enumerate(sources):
        repair_jsonl(src)
        records = score_records(src, merging=True)  # repeats are what this fold resolves
        if i == 0:
            before = records
        for key, recs in _by_image(records).items():
            if key not in images:  # not (or no longer) in images.jsonl: leave it alone
                unknown.extend(recs)
            elif key not in chosen and _finished(recs, images[key], scorer):
                chosen[key] = recs
    merged = [r for key in images if key in chosen for r in chosen[key]] + unknown
    if merged != before:
        atomic_write_jsonl(path, merged)
    for shard in shards:
        shard.unlink(missing_ok=True)
    return set(chosen)


def finished_keys(path: Path, scorer: Scorer, images: Mapping[tuple, dict]) -> set[tuple]:
    """Finished keys of a compacted file (what every process reads after the main one folded)."""
    return {key for key, recs in _by_image(score_records(path, merging=True)).items()
            if key in images and _finished(recs, images[key], scorer)}


def plan_batches(images: Sequence[dict], batch_size: int) -> list[list[dict]]:
    """The score stage's batches: every image in images.jsonl order, cut every ``batch_size``.

    A function of the run and the batch size alone, never of what is already scored, so a resumed
    or sharded stage scores every image among the batch-mates of a fresh single-process run
    (:func:`t2i_audit.generate.plan_batches` is the same rule for generation).
    """
    step = max(1, batch_size)
    return [list(images[i:i + step]) for i in range(0, len(images), step)]


def _decode(run_dir: RunDir, rec: Mapping):
    from PIL import Image

    path = run_dir.root / rec["path"]
    if not path.exists():
        raise AuditError(f"{path}: image listed in {run_dir.images} is missing")
    try:
        with Image.open(path) as im:
            return im.convert("RGB"), path
    except OSError as e:
        raise AuditError(f"{path}: cannot decode image ({e})") from None


def _verdict_counts(records: Iterable[dict], counts: dict) -> None:
    for r in records:
        if r["kind"] != "prompt":
            continue
        if (r.get("extra") or {}).get("excluded"):
            counts["excluded"] += 1
        elif r["verdict"] is True:
            counts["passed"] += 1
        elif r["verdict"] is False:
            counts["failed"] += 1
        else:
            counts["undecided"] += 1
        for f in r.get("failures") or []:
            counts["failures"][f["type"]] = counts["failures"].get(f["type"], 0) + 1
        counts["truncated"] += int(bool(r.get("truncated")))


DEFAULT_BATCH_SIZE = 16


def run_score_stage(run_dir: RunDir | str | Path, scorers: Sequence[str], *, device: str = "cpu",
                    batch_size: int | None = None, progress: bool = True,
                    overrides: Mapping[str, dict] | None = None,
                    extra_cards: Iterable[str | Path] = (),
                    instances: Sequence[Scorer] | None = None, state=None) -> dict:
    """Score every image of ``run_dir`` with each scorer; returns counts per scorer (main process;
    ``{}`` on the others).

    ``batch_size``: images per planned batch; the run keeps the one its scoring was first planned
    with (``planned_batch_size`` in the manifest; another one asked is noted and not used). None:
    the recorded one, else :data:`DEFAULT_BATCH_SIZE`.

    ``overrides`` maps scorer name → a partial card merged into its card (e.g.
    ``{"clip": {"model": {"id": "/models/clip"}}}``). ``instances`` passes ready scorer
    objects instead of names (tests, notebooks).

    Under ``accelerate launch`` / ``torchrun`` the batches are split between processes (contiguous
    shares, as generation splits images): each appends to ``scores/shards/<scorer>.rank<r>.jsonl``
    after each batch and the main process folds the shards into ``scores/<scorer>.jsonl``, in the
    order a single process writes, batches cut at the same images — so the records are the ones a
    single process computes, even where a kernel's result depends on the batch. A single process
    appends to ``scores/<scorer>.jsonl`` directly.
    """
    from ..processes import gather, process_state, rank_device, share_cpu

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    dev = resolve_device(device)
    state = state or process_state(dev)
    main, rank, world = state.is_main_process, state.process_index, state.num_processes
    state.wait_for_everyone()  # the main process has merged the previous stage (images.jsonl)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    if not images:
        raise AuditError(f"{rd.images}: no images to score (run the generate stage first)")
    for rec in images:
        if not rec.get("flags") and not (rd.root / rec["path"]).is_file():  # fail before writing anything
            raise AuditError(f"{rd.root / rec['path']}: image listed in {rd.images} is missing")
        if rec["prompt_id"] not in prompts:
            raise AuditError(f"{rd.images}: image {rec.get('path')} refers to prompt "
                             f"{rec['prompt_id']!r}, which is not in {rd.prompts}")
    dev = rank_device(state, dev)
    share_cpu(state, dev)
    if instances is None:
        if not scorers:
            raise AuditError("no scorer given (see `t2i-audit scorers`)")
        cards = load_cards(extra_cards)
        instances = [create_scorer(n, device=dev, cards=cards,
                                   overrides=(overrides or {}).get(n)) for n in scorers]
    by_key = {_image_key(r): r for r in images}
    batch_size, plan_note = keep_recorded_plan(rd, batch_size)  # every process reads the same record
    for s in instances:  # records edited or damaged since they were written are refused before a byte is written
        for path in (rd.scores(s.name), *score_shards(rd, s.name)):
            score_records(path, merging=True)  # a killed stage's repeats are folded below
    if main:
        rd.scores_dir.mkdir(parents=True, exist_ok=True)
        rd.mark_unfinished(*(rd.scores(s.name) for s in instances))
        rd.update_stage("score", status="running", running=[s.name for s in instances], world_size=world,
                        planned_batch_size=batch_size, plan_note=plan_note)
        if plan_note:  # what was asked is not what runs: said even without progress output
            print(f"[score] {plan_note}", file=sys.stderr)
        for s in instances:  # leftovers of a killed run, of any process count, are folded first
            compact_scores(rd.scores(s.name), s, by_key, score_shards(rd, s.name))
    state.wait_for_everyone()  # everyone reads the same compacted files before anyone appends
    out_path = {s.name: rd.scores(s.name) if world == 1 else shard_path(rd, s.name, rank) for s in instances}
    todo: dict[str, set] = {}
    counts: dict[str, dict] = {}
    for s in instances:
        done = finished_keys(rd.scores(s.name), s, by_key)
        todo[s.name] = {k for k in by_key if k not in done}
        counts[s.name] = {"images": len(by_key), "resumed": len(by_key) - len(todo[s.name]),
                          "scored": 0, "excluded": 0, "passed": 0, "failed": 0, "undecided": 0,
                          "truncated": 0, "records": 0, "seconds": 0.0, "load_seconds": 0.0, "failures": {},
                          "model": s.model_id, "revision": s.revision}
    # whole planned batches that hold unfinished work: their batch-mates are scored with them
    batches = [b for b in plan_batches(images, batch_size)
               if any(_image_key(r) in t for r in b for t in todo.values())]
    with state.split_between_processes(batches) as share:
        mine = list(share)
    assigned = {s.name: sum(_image_key(r) in todo[s.name] for b in mine for r in b) for s in instances}
    bar = None
    if progress and main and mine:
        from tqdm import tqdm

        bar = tqdm(total=sum(map(len, mine)), desc="score" if world == 1 else f"score (1 of {world} processes)",
                   unit="img")
    t_stage = time.perf_counter()
    broken: dict[str, str] = {}  # scorer name -> the error that stopped it
    for chunk in mine:
        items = []
        for rec in chunk:  # each image decoded once, shared by all scorers
            prompt = prompts[rec["prompt_id"]]
            if rec.get("flags"):
                items.append(ScoreItem(prompt, rec))
            else:
                img, path = _decode(rd, rec)
                items.append(ScoreItem(prompt, rec, img, path))
        for s in instances:
            todo_here = [it for it in items if it.key in todo[s.name]]
            if not todo_here or s.name in broken:
                continue
            # the whole planned batch, finished members too (their records are not written again)
            live = [it for it in items if not it.flags] if any(not it.flags for it in todo_here) else []
            if live and not s._loaded:
                t_load = time.perf_counter()
                s.load()
                counts[s.name]["load_seconds"] = round(time.perf_counter() - t_load, 3)
                counts[s.name]["applied"] = s.model_details()  # e.g. the tag's QuickGELU and mean/std
            t0 = time.perf_counter()
            results = {}
            try:
                if live:
                    for it, recs in zip(live, s.score(live)):
                        results[it.key] = recs
            except Exception as e:  # noqa: BLE001 - one broken scorer must not sink the others
                # Nothing of this batch is written, so a rerun retries exactly these images.
                broken[s.name] = f"{type(e).__name__}: {e}"
                counts[s.name]["error"] = broken[s.name]
                counts[s.name]["failed_images"] = [f"{it.key[0]} sample {it.key[1]}" for it in todo_here
                                                   if not it.flags]
                counts[s.name]["skipped"] = assigned[s.name] - counts[s.name]["scored"] - counts[s.name]["excluded"]
                continue
            out = []
            for it in todo_here:
                out.extend(s.excluded_records(it) if it.flags else results[it.key])
            append_jsonl(out_path[s.name], out)
            c = counts[s.name]
            c["seconds"] += time.perf_counter() - t0
            c["scored"] += sum(not it.flags for it in todo_here)
            c["records"] += len(out)
            _verdict_counts(out, c)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    state.wait_for_everyone()  # every shard is complete
    every = gather(state, counts)
    if not main:
        _fail_if_broken(_sum_counts(every))  # every process fails the stage alike
        return {}
    for s in instances:  # the shards become scores/<scorer>.jsonl, in images.jsonl order
        compact_scores(rd.scores(s.name), s, by_key, score_shards(rd, s.name))
    with contextlib.suppress(OSError):  # only if empty: another scorer's shards may wait there
        (rd.scores_dir / "shards").rmdir()
    rd.mark_finished(*(rd.scores(s.name) for s in instances))
    counts = _sum_counts(every)
    broken = {name: c["error"] for name, c in counts.items() if "error" in c}
    for c in counts.values():
        c["seconds"] = round(c["seconds"], 3)
        c["records_per_s"] = round(c["records"] / c["seconds"], 1) if c["seconds"] > 0 else None
    before = rd.read_manifest().get("stages", {}).get("score", {}).get("scorers")
    merged = {**(before if isinstance(before, dict) else {}), **counts}  # other scorers' counts stay
    rd.update_stage("score", status="done_with_errors" if broken else "done", scorers=merged, running=[],
                    errors=broken,
                    seconds=round(time.perf_counter() - t_stage, 3),
                    device=instances[0].device if instances else device, world_size=world,
                    # images each process scored (or excluded), summed over scorers: the load balance
                    images_per_process=[sum(c["scored"] + c["excluded"] for c in r.values()) for r in every])
    _fail_if_broken(counts)
    return counts


def keep_recorded_plan(rd: RunDir, asked: int | None) -> tuple[int, str | None]:
    """(batch size, note): a run's scoring keeps the batch size it was first planned with, as
    generation keeps its own — records depend on their batch-mates (a CLIP score moved 7.8e-8), so
    rescoring in other batches would give other bytes than the first scoring."""
    recorded = ((rd.read_manifest().get("stages") or {}).get("score") or {}).get("planned_batch_size")
    if recorded is None:
        return asked or DEFAULT_BATCH_SIZE, None
    if asked is None or asked == int(recorded):
        return int(recorded), None
    return int(recorded), (f"batch size {asked} asked, {recorded} kept: this run's scoring was planned in batches "
                           f"of {recorded} (scores depend on their batch-mates); use a new run for another batch size")


def _fail_if_broken(counts: Mapping[str, dict]) -> None:
    """An AuditError naming each failed scorer, the images of the batch it failed on, and why."""
    broken = {name: c for name, c in counts.items() if "error" in c}
    if broken:
        raise AuditError("\n".join(
            f"scorer {name} failed on {', '.join(c.get('failed_images', [])[:5]) or 'a batch'}"
            f"{' …' if len(c.get('failed_images', [])) > 5 else ''} ({c['error']}); {c['skipped']} image(s) "
            "left unscored for it (the other scorers' records are kept) — fix the cause and rerun to score them"
            for name, c in broken.items()))


_ADDED = ("scored", "excluded", "passed", "failed", "undecided", "truncated", "records", "seconds", "skipped")


def _sum_counts(per_rank: Sequence[dict]) -> dict:
    """One process's counts per scorer, from every process's: work counts add up, the scorer's
    load time is the slowest process's, its error the first process's that hit one."""
    out: dict[str, dict] = {}
    for counts in per_rank:
        for name, c in counts.items():
            if name not in out:
                out[name] = {**c, "failures": dict(c["failures"])}
                continue
            o = out[name]
            for k in _ADDED:
                if k in c:
                    o[k] = o.get(k, 0) + c[k]
            for f, n in c["failures"].items():
                o["failures"][f] = o["failures"].get(f, 0) + n
            o["load_seconds"] = max(o["load_seconds"], c["load_seconds"])
            for k in ("applied", "error"):
                if k in c and k not in o:
                    o[k] = c[k]
            if "failed_images" in c:
                o["failed_images"] = o.get("failed_images", []) + c["failed_images"]
    for o in out.values():
        if "error" in o:
            o.setdefault("skipped", 0)
    return out
