"""Images made elsewhere as a run's images: ``run --images DIR`` (model reference ``images:DIR``).

The folder (or manifest, or Hugging Face dataset) is read by its layout (:mod:`.layouts`), each image matched to a
suite record and sample (:mod:`.match`), then every matched image is read once, hashed and decoded (a regular file
inside the folder, a readable image under the pixel bound) *before* the run folder is claimed: their sha256 enter
the run's identity, so a changed folder never resumes silently into a run made from other images, and a hostile
file stops the run before anything is written. Then each image is copied into ``images/`` as its own bytes, with
its record (``source``: where it came from, ``source_sha256``), exactly as generate.py records a pipeline's — the
source is only ever read. Settings the folder does not state (steps, guidance, size, dtype) stay unknown (null).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..errors import AuditError
from ..rundir import RunDir, append_jsonl, repair_jsonl
from . import layouts
from .base import ImageRequest, checked_image, read_image_file, record_image
from .match import Matched, match

PREFIX = "images:"
UNKNOWN_SETTINGS = {"steps": None, "guidance": None, "size": None, "dtype": None}  # not the generic defaults
SHOWN = 10  # unmatched images / prompts without images listed on the terminal (all of them in manifest.json)
KEPT = 1000  # … and in the manifest, at most
THREADS = 4  # images read, hashed and decoded at once
BATCH = 64  # images copied between two appends of their records (a kill copies at most these again)


def card_for(ref: str):
    from ..models import ModelCard

    target = ref[len(PREFIX):]
    if not target:
        raise AuditError(f"model {ref!r}: name the folder, manifest or dataset: images:DIR")
    name = target.rstrip("/").rsplit("/", 1)[-1].split(":")[0] or "images"
    return ModelCard(name=name, kind="images", target=target, defaults=dict(UNKNOWN_SETTINGS))


@dataclass
class Checked:
    entry: layouts.Entry
    source_sha256: str
    fields: Optional[dict] = None  # the record's fields (decoded): only for the samples the run uses
    ext: str = ".png"
    converted: bool = False  # stored as PNG (a format readers may not open)
    stat: Optional[tuple] = None  # the file's (device, inode, size, mtime) when it was hashed


@dataclass
class Scan:
    listing: layouts.Listing
    matched: Matched
    checked: dict[tuple[str, int], Checked]  # every matched image, samples past -n too (hashed, not decoded)
    digest: str


_SCANS: dict[tuple, Scan] = {}  # the scan the run's identity was made from, taken (once) by its make_images


def scan(card, prompts: list[dict], images_per_prompt: int, *, suite: Optional[list[dict]] = None,
         progress: bool = False) -> Scan:
    """The folder read, matched to ``prompts`` (drawn from ``suite`` by --limit), every matched image hashed and
    the ones the run uses decoded. An image that matches no record of the suite is an error naming it: a typo'd
    prompt or a folder made for another suite must not pass as "prompt without images"."""
    listing = layouts.read(card.target, _layout(card))
    matched = match(listing.entries, prompts, images_per_prompt, suite)
    if matched.unmatched or not matched.images:
        m = matched.unmatched
        raise AuditError(f"--images {listing.source}: " + (
            f"{len(m)} of {len(listing.entries)} images match no prompt of the suite ({listing.layout} layout; matched "
            "by prompt id, the benchmark's own order, or the exact prompt text):\n  " + "\n  ".join(m[:SHOWN])
            + (f"\n  … {len(m) - SHOWN} more" if len(m) > SHOWN else "") if m else
            f"none of its {len(listing.entries)} images is of a prompt of this run ({listing.layout} layout"
            + (f"; {len(matched.outside)} are of prompts --limit left out" if matched.outside else "") + ")"))
    every = {**matched.images, **{("", i): e for i, e in enumerate(matched.beyond)}}

    def check(item) -> Checked:
        k, e = item
        raw = _read(e, listing.root)
        if not k[0]:  # a sample past -n: hashed for the identity, not used
            return Checked(e, hashlib.sha256(raw).hexdigest())
        data, fields, ext = checked_image(raw, e.file)  # decoded once, here: before the run folder is claimed
        return Checked(e, fields["sha256"] if data is raw else hashlib.sha256(raw).hexdigest(), fields, ext,
                       converted=data is not raw, stat=_stat(e))

    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    # PIL decodes and hashlib hashes without the GIL: threads use the machine's cores. map keeps the order, so the
    # error raised is the first bad image's whatever the thread count
    with ThreadPoolExecutor(max_workers=min(THREADS, os.cpu_count() or 1)) as pool:
        found = pool.map(check, every.items())
        checked = dict(zip(every, tqdm(found, total=len(every), desc=f"check {card.name}", unit="img",
                                       disable=not progress)))
    lines = sorted(f"{c.entry.name}\t{c.source_sha256}" for c in checked.values())
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return Scan(listing, matched, {k: c for k, c in checked.items() if k[0]}, digest)


def _key(card, prompts: list[dict], images_per_prompt: int) -> tuple:
    return (card.target, _layout(card), tuple(p["id"] for p in prompts), images_per_prompt)


def identity(card, prompts: list[dict], images_per_prompt: int, out: Optional[Path] = None, *,
             suite: Optional[list[dict]] = None, progress: bool = False) -> dict:
    """What the run's identity holds of its images: the layout and a digest of every matched image's sha256."""
    _refuse_run_inside(card, out)
    s = _SCANS[_key(card, prompts, images_per_prompt)] = scan(card, prompts, images_per_prompt, suite=suite,
                                                              progress=progress)  # always read anew
    said = {"images": f"{s.listing.layout} layout, {len(s.checked)} images matched, sha256 {s.digest[:16]}"}
    if out is not None:
        _refuse_changed(s, Path(out), said["images"])
    return said


def _refuse_changed(s: Scan, out: Path, now: str) -> None:
    """A run made from this folder whose images changed since: refused naming the files (the claim would refuse
    too, by the digest alone); a run the folder has not changed for, or another folder, is left to the claim."""
    from ..api import recorded_settings

    recorded = (recorded_settings(out) if out.is_dir() else None) or {}
    if "images" not in recorded or recorded["images"] == now:
        return
    rd = RunDir(out)
    was = {r.get("source"): r.get("source_sha256") for r in rd.read_images() + rd.read_image_shards()}
    is_now = {c.entry.name: c.source_sha256 for c in s.checked.values()}
    changed = [f"{s.listing.root / name if s.listing.layout != 'hf-dataset' else name}: sha256 {was[name][:12]}… "
               f"when ingested, {sha[:12]}… now" for name, sha in is_now.items() if name in was and was[name] != sha]
    gone = [name for name in was if name not in is_now]
    if changed or gone:
        raise AuditError(f"{out}: was made from other images of {s.listing.source} — a run's images are part of "
                         "its identity, so it is not resumed with these; ingest into another --out:\n  "
                         + "\n  ".join((changed + [f"{g}: ingested, no longer in the folder" for g in gone])[:SHOWN]))


def make_images(run: RunDir, prompts: list[dict], card, settings, *, state=None, progress: bool = True) -> dict:
    from ..generate import _done_items, merge_shards

    main = state is None or state.is_main_process
    n = settings.images_per_prompt
    made = 0
    if main:  # one process reads the folder; copying bytes needs no accelerator
        s = _SCANS.pop(_key(card, prompts, n), None) or scan(card, prompts, n, suite=_suite(run), progress=progress)
        repair_jsonl(run.image_shard(0))
        done = _done_items(run)
        order = [(p["id"], k) for p in prompts for k in range(n)]
        todo = [key for key in order if key in s.checked
                and (done.get(key) or {}).get("source_sha256") != s.checked[key].source_sha256]
        run.update_stage("generate", status="running", source=card.source, settings=asdict(settings),
                         requested=len(order), reused=len(s.checked) - len(todo), ingest=_summary(s, n))
        _say(s, prompts, n)
        from tqdm.auto import tqdm

        from concurrent.futures import ThreadPoolExecutor

        bar = tqdm(total=len(todo), desc=f"ingest {card.name}", unit="img", disable=not progress)
        # copying is file-system work (folders, staged names, renames) that waits without the GIL: on threads
        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            for start in range(0, len(todo), BATCH):  # a batch's files first, then their records: one durable append
                batch = todo[start:start + BATCH]
                append_jsonl(run.image_shard(0), list(pool.map(lambda key: _copy(run, card, s, key), batch)))
                bar.update(len(batch))
        bar.close()
        made = len(todo)
    if state is not None:
        state.wait_for_everyone()
    if not main:
        return {}
    return merge_shards(run, prompts, n, made_now=made)


def _copy(run: RunDir, card, s: Scan, key: tuple[str, int]) -> dict:
    """The image of ``key`` copied into the run (its file written; its record returned, to be appended)."""
    c = s.checked[key]
    raw = _read(c.entry, s.listing.root)
    # the bytes hashed before the claim are the bytes copied: a file whose stat is unchanged since (inode, size,
    # mtime in ns) was not rewritten; dataset rows, and files whose stat moved, are hashed again
    same = c.stat is not None and _stat(c.entry) == c.stat and len(raw) == c.stat[2]
    if not same and hashlib.sha256(raw).hexdigest() != c.source_sha256:
        raise AuditError(f"{c.entry.file}: changed while this run was reading the folder; rerun when the folder "
                         "is complete (images already copied are kept)")
    data = checked_image(raw, c.entry.file)[0] if c.converted else raw
    req = ImageRequest(key[0], key[1], "", c.entry.seed)
    return record_image(run, card.name, req, data, c.fields, c.ext, seconds=None, append=False, durable=False,
                        extra={"source": c.entry.name, "source_sha256": c.source_sha256})


def _stat(e: layouts.Entry) -> Optional[tuple]:
    if e.path is None:
        return None
    st = os.stat(e.path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _suite(run: RunDir) -> Optional[list[dict]]:
    """The whole suite a ``--limit`` run drew its prompts from (run.yaml), None for a run of all of it."""
    from ..api import expand_suites
    from ..safeload import load_yaml

    cfg = load_yaml(run.config) if run.config.exists() else {}
    return expand_suites(cfg["prompts"]) if isinstance(cfg, dict) and cfg.get("limit") else None


def _read(e: layouts.Entry, root: Path) -> bytes:
    if e.fetch is not None:
        data = e.fetch()
        from .base import MAX_IMAGE_BYTES

        if len(data) > MAX_IMAGE_BYTES:
            raise AuditError(f"{e.where}: more than the {MAX_IMAGE_BYTES:,} bytes an image may have")
        return data
    return read_image_file(e.path, root, e.file)


def _layout(card) -> Optional[str]:
    return (card.source_options or {}).get("layout")


def _refuse_run_inside(card, out: Optional[Path]) -> None:
    src = Path(card.target)
    if out is None or card.target.startswith("hf:") or not src.exists():
        return
    base = src.resolve() if src.is_dir() else src.resolve().parent
    here = Path(out).resolve()
    if here == base or base in here.parents:
        raise AuditError(f"--out {out}: lies inside the images folder {card.target}; the run would be read back "
                         "as images of the folder — choose an output folder outside it")


def _summary(s: Scan, n: int) -> dict:
    m = s.matched
    return {"layout": s.listing.layout, "source": s.listing.source, "matched": len(m.images),
            "outside_limit": len(m.outside), "beyond_n": len(m.beyond), "prompts_without_images": len(m.without),
            "skipped": len(s.listing.skipped), "images_per_prompt": n,
            "lists": {"outside_limit": m.outside[:KEPT], "prompts_without_images": m.without[:KEPT],
                      "beyond_n": [e.name for e in m.beyond[:KEPT]], "skipped": s.listing.skipped[:KEPT]}}


def _say(s: Scan, prompts: list[dict], n: int) -> None:
    """How the folder matched the suite: said on every run (not progress: -q keeps it)."""
    m, texts = s.matched, {p["id"]: p["text"] for p in prompts}
    lines = [f"[images] {s.listing.layout} layout, {s.listing.source}: {len(m.images)} images matched "
             f"{len(prompts) - len(m.without)} of {len(prompts)} prompts (-n {n}); {len(m.without)} prompt(s) without "
             "images" + (f", {len(m.outside)} of prompts --limit left out (not used)" if m.outside else "")
             + (f", {len(m.beyond)} past -n {n} not used" if m.beyond else "")
             + (f", {len(s.listing.skipped)} file(s) the layout does not name" if s.listing.skipped else "")]
    for title, items in (("prompts without images", [f"{p}: {texts[p]!r}" for p in m.without]),
                         ("not read", s.listing.skipped)):
        if items:
            lines.append(f"  {title}:" + "".join(f"\n    {x}" for x in items[:SHOWN])
                         + (f"\n    … {len(items) - SHOWN} more (manifest.json stages.generate.ingest)"
                            if len(items) > SHOWN else ""))
    print("\n".join(lines), file=sys.stderr)
