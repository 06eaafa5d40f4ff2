"""Thumbnails keyed by image sha256: made once, reused by every re-render.

``<out>/thumbs/<sha[:2]>/<sha>.jpg``. A thumbnail whose file exists is never remade (its
name is the content hash of the source, so it cannot be stale); thumbnails no longer
referenced are pruned after a render.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
from pathlib import Path

from ..rundir import file_mode

THUMB_PX = 160


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

    def ensure(self, image_path: Path, sha: str | None) -> str | None:
        image_path = Path(image_path)
        if not sha:
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
            else:
                self.missing += 1
                return None
            self.used.add(rel)
        return rel

    def prune(self) -> int:
        """Delete thumbnails this render did not use; returns how many."""
        root = self.out_dir / "thumbs"
        if not root.is_dir():
            return 0
        gone = 0
        for f in root.glob("*/*.jpg"):
            if f"thumbs/{f.parent.name}/{f.name}" not in self.used:
                f.unlink()
                gone += 1
        return gone
