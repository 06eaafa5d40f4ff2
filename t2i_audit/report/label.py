"""``t2i-audit label RUN``: a self-contained labelling page for human ground truth.

One HTML file (no server, no CDN, opens offline): each sampled image large, embedded as a data
URI, with its questions — first the whole prompt (``question_id`` empty, as in the sheet of
``calibrate --export-sheet``), then the record's own questions — and yes / no / unsure buttons.
Keys: y / n / u answer, j / k (or ↓ / ↑) move between questions, ← / → (or h / l) between
images, Backspace clears. Answers autosave in the browser's localStorage, keyed by run and
sample, so closing the tab loses nothing. "Export CSV" downloads exactly the columns
:func:`t2i_audit.scorers.calibrate.export_sheet` writes (``calibrate --labels`` reads them):
yes → 1, no → 0, unsure → empty label (``read_labels`` skips it); unanswered questions are left
out. ``window.exportCsv()`` returns the same text (for scripts and tests).

The sample is stratified by prompt category with a seed: every category gets its share of
``n`` (at least one image when ``n`` allows), flagged images are never shown.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import io
import random
import sys
from pathlib import Path
from typing import Optional

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_text

# the columns of calibrate.export_sheet, in its order (tests/report/test_label.py pins them)
SHEET_COLUMNS = ["prompt_id", "sample", "image", "image_path", "category", "prompt", "question_id", "kind",
                 "question", "label"]
MAX_PX = 768  # larger images are downscaled (JPEG) so a 60-image page stays a few MB


def allocate(n: int, sizes: dict[str, int]) -> dict[str, int]:
    """Images per category: proportional to its size (largest deficit first), at least one each
    when ``n`` is at least the number of categories, never more than it has."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    cats = sorted(sizes)
    quota = {c: (1 if n >= len(cats) and sizes[c] else 0) for c in cats}
    while sum(quota.values()) < n:
        open_ = [c for c in cats if quota[c] < sizes[c]]
        c = max(open_, key=lambda c: (n * sizes[c] / total - quota[c], sizes[c], [-ord(ch) for ch in c]))
        quota[c] += 1
    return quota


def stratified_sample(images: list[dict], prompts: dict[str, dict], n: int, seed: int) -> list[dict]:
    """``n`` unflagged images, stratified by category; page order shuffled by ``seed``."""
    by_cat: dict[str, list[dict]] = {}
    for img in sorted(images, key=lambda r: (r["prompt_id"], int(r.get("sample", 0)))):
        p = prompts.get(img["prompt_id"])
        if p is None or img.get("flags"):
            continue
        by_cat.setdefault(str(p.get("category")), []).append(img)
    quota = allocate(n, {c: len(v) for c, v in by_cat.items()})
    picked = []
    for cat in sorted(by_cat):
        pool = list(by_cat[cat])
        random.Random(f"{seed}:{cat}").shuffle(pool)
        picked += pool[: quota[cat]]
    random.Random(seed).shuffle(picked)
    return picked


def data_uri(path: Path, max_px: int = MAX_PX) -> str:
    """The image as a data URI (its own bytes when small enough, else a JPEG); decoded in full first, so a
    truncated file raises here (OSError) instead of showing as a broken picture."""
    from PIL import Image

    raw = path.read_bytes()
    with Image.open(io.BytesIO(raw)) as im:
        im.load()
        if max(im.size) <= max_px and im.format in ("PNG", "JPEG", "WEBP"):
            return f"data:image/{im.format.lower()};base64,{base64.b64encode(raw).decode()}"
        im = im.convert("RGB")
        im.thumbnail((max_px, max_px), Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=90)
    return f"data:image/jpeg;base64,{base64.b64encode(buf.getvalue()).decode()}"


def label_items(rd: RunDir, picked: list[dict], prompts: dict[str, dict]) -> tuple[list[dict], list[str], list[str]]:
    """(page items, missing image paths, "path: why" of damaged images). An image whose bytes are not the ones
    images.jsonl recorded, or that does not decode, is skipped and named, as ``verify`` names it: a label on it
    would be a label on another picture than the one scored."""
    from PIL import Image

    from ..rundir import file_sha256
    from ..verify import _describe_png

    items, missing, damaged = [], [], []
    for img in picked:
        p = prompts[img["prompt_id"]]
        path = rd.root / img["path"]
        if not path.is_file():
            missing.append(img["path"])
            continue
        if img.get("sha256") and file_sha256(path) != img["sha256"]:
            damaged.append(f"{img['path']}: {_describe_png(path, img)}")
            continue
        try:
            src = data_uri(path)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # PIL's decoder errors
            damaged.append(f"{img['path']}: not a decodable image ({type(e).__name__}: {e})")
            continue
        qs = [{"question_id": "", "kind": "prompt", "text": f'Does the image show "{p["text"]}"?'}]
        qs += [{"question_id": q["id"], "kind": q.get("kind"), "text": q["text"]} for q in p.get("questions", [])]
        items.append({"key": f"{img['prompt_id']}/{int(img.get('sample', 0))}", "prompt_id": img["prompt_id"],
                      "sample": int(img.get("sample", 0)), "image": img["path"],
                      "image_path": str(path.resolve()), "category": p.get("category"), "prompt": p["text"],
                      "src": src, "questions": qs})
    return items, missing, damaged


def render_label_page(run_dir, *, n: int = 60, seed: int = 0, out: Optional[Path] = None,
                      progress: bool = True) -> Path:
    """Write the labelling page (default ``RUN/report/label.html``); returns its path."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    if n <= 0:
        raise AuditError(f"--n must be positive, not {n}")
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    if not images:
        raise AuditError(f"{rd.images}: no images to label; run `t2i-audit run --stages prompts,generate` first")
    picked = stratified_sample(images, prompts, n, seed)
    items, missing, damaged = label_items(rd, picked, prompts)
    for what in damaged:  # always said, not progress: the page lacks these images
        print(f"[label] skipped damaged image {what}", file=sys.stderr, flush=True)
    if not items:
        raise AuditError(f"{rd.root}: no unflagged, undamaged image files to label"
                         + (f" ({len(damaged)} damaged; `t2i-audit verify {rd.root}` names them)" if damaged else ""))
    # the autosave key: same run, same sample → same answers; another seed or n starts fresh
    sample_key = hashlib.sha1("|".join(i["key"] for i in items).encode()).hexdigest()[:10]
    cats: dict[str, int] = {}
    for i in items:
        cats[str(i["category"])] = cats.get(str(i["category"]), 0) + 1
    from .random_weights import random_weights_note

    ctx = {"title": f"label · {rd.root.name}", "run": rd.root.name, "seed": seed, "n": n,
           "random_weights": random_weights_note([rd.read_manifest()]),
           "sample_key": sample_key, "columns": SHEET_COLUMNS, "categories": sorted(cats.items()),
           "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "data": {"run": rd.root.name, "sample_key": sample_key, "columns": SHEET_COLUMNS, "items": items}}
    page = Path(out) if out is not None else rd.report_dir / "label.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                      undefined=StrictUndefined)  # autoescape: prompt texts come from users' files
    atomic_write_text(page, env.get_template("label.html.j2").render(**ctx))
    if progress:
        extra = f"; {len(missing)} image file(s) missing, skipped" if missing else ""
        extra += f"; {len(damaged)} damaged, skipped" if damaged else ""
        print(f"[label] {len(items)} images ({', '.join(f'{c}: {k}' for c, k in sorted(cats.items()))}){extra}",
              file=sys.stderr, flush=True)
    return page
