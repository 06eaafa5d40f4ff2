"""Thumbnails keyed by image sha256: made once, reused by every re-render.

``<out>/thumbs/<sha[:2]>/<sha>.jpg``. A thumbnail whose file exists is never remade (its
name is the content hash of the source, so it cannot be stale). ``thumbs/index.json`` lists the
thumbnails this tool made there; after a render, those no longer referenced are pruned — only
those: a file the index does not name is never deleted, whatever its name.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

from ..rundir import atomic_write_json, file_mode

THUMB_PX = 160
_SHA = re.compile(r"[0-9a-f]{64}")


def thumb_rel(sha: str) -> str:
    return f"thumbs/{sha[:2]}/{sha}.jpg"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_thumb(src: Path, dst: Path, px: int = THUMB_PX) -> None:
    from PIL import Image

    with Image.open(src) as im:
        im = im.convert("RGB")
        im.thumbnail((px, px), Image.Resampling.LANCZOS if max(im.size) > px else Image.Resampling.NEAREST)
        if max(im.size) < px:  # tiny test images: upscale crisp so they are visible
            scale = px // max(im.size)
            if scale > 1:
                im = im.resize((im.width * scale, im.height * scale), Image.Resampling.NEAREST)
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=85, optimize=True)
    _write_cache_file(dst, buf.getvalue())


def _write_cache_file(dst: Path, data: bytes) -> None:
    """Temp file + ``os.replace`` (kill-safe: never a torn thumbnail) but no fsync: a thumbnail
    is a cache of a content-addressed source, and fsync cost 7 ms a file here (7 s for 1,000
    thumbnails), more than making them."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, file_mode())  # mkstemp made it 0600; follow the umask like every run file
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class Thumbs:
    """Collects the thumbnails a page needs; ``ensure`` returns the page-relative path."""

    def __init__(self, out_dir: Path, px: int = THUMB_PX):
        self.out_dir = Path(out_dir)
        self.px = px
        self.used: set[str] = set()
        self.made = 0
        self.reused = 0
        self.missing = 0
        self.made_now: set[str] = set()

    def ensure(self, image_path: Path, sha: str | None) -> str | None:
        image_path = Path(image_path)
        if not sha or not _SHA.fullmatch(str(sha)):  # a record's sha names a file: hex only
            if not image_path.exists():
                self.missing += 1
                return None
            sha = file_sha256(image_path)
        rel = thumb_rel(sha)
        dst = self.out_dir / rel
        if rel not in self.used:
            if dst.exists():
                self.reused += 1
            elif image_path.exists():
                try:
                    make_thumb(image_path, dst, self.px)
                except OSError:
                    self.missing += 1
                    return None
                self.made += 1
                self.made_now.add(rel)
            else:
                self.missing += 1
                return None
            self.used.add(rel)
        return rel

    @property
    def index_path(self) -> Path:
        return self.out_dir / "thumbs" / "index.json"

    def _made_before(self) -> set[str]:
        try:
            names = json.loads(self.index_path.read_text())
        except (OSError, ValueError, RecursionError):
            return set()  # no index (or a damaged one): nothing is known to be ours
        ok = isinstance(names, list)  # only names of thumbnails, never a path elsewhere
        return {n for n in names if isinstance(n, str) and _SHA.fullmatch(n[10:-4]) and n == thumb_rel(n[10:-4])} if ok else set()

    def prune(self) -> int:
        """Delete the thumbnails this tool made that this render did not use; returns how many."""
        ours = self._made_before() | self.made_now
        gone = 0
        for rel in sorted(ours - self.used):
            with contextlib.suppress(FileNotFoundError):
                (self.out_dir / rel).unlink()
                gone += 1
        kept = sorted(ours & self.used)
        if kept or self.index_path.exists():
            atomic_write_json(self.index_path, kept)
        return gone
