"""What every image source shares: the requests a run makes (prompt, sample, seed, settings), and the one way an
image that arrives from anywhere becomes a run's image — validated, written atomically under ``images/``, recorded
in the process's shard exactly as a pipeline's image is (generate.py), so resume, verify, scoring and reports treat
it the same. The sources themselves (folder.py, hosted.py, callable.py) only decide where the bytes come from.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Optional

from ..errors import AuditError
from ..rundir import RunDir, append_jsonl, atomic_write_bytes

MAX_PIXELS = 8192 * 8192  # a bound on what one image may decode to (PIL's own bomb check sits near 89 M pixels)
EXTENSIONS = {"PNG": ".png", "JPEG": ".jpg", "WEBP": ".webp"}  # the formats kept as their own bytes


@dataclass(frozen=True)
class ImageRequest:
    """One image a run asks for: the same prompt, sample and seed a local pipeline would use."""

    prompt_id: str
    sample: int
    text: str
    seed: int
    steps: Optional[int] = None
    guidance: Optional[float] = None
    size: Optional[int] = None


def plan_requests(prompts: list[dict], settings) -> list[ImageRequest]:
    """Every (prompt, sample) of the run in order, each with the per-image seed generate.py gives it."""
    from ..generate import image_seed

    return [ImageRequest(p["id"], k, p["text"], image_seed(p["id"], k, settings.seed), settings.steps,
                         settings.guidance, settings.size)
            for p in prompts for k in range(settings.images_per_prompt)]


def decode(data: bytes, where: str):
    """The image in ``data`` (PIL, fully loaded), or an AuditError naming ``where`` and what is wrong."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data))
        if img.width * img.height > MAX_PIXELS:
            raise AuditError(f"{where}: {img.width}x{img.height} px is over the {MAX_PIXELS:,}-pixel bound")
        img.load()
    except AuditError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise AuditError(f"{where}: not a readable image ({type(e).__name__}: {e})") from None
    return img


def image_record_fields(data: bytes, img) -> dict:
    """The fields of an image record that describe its bytes and pixels (as generate.py records them)."""
    import numpy as np

    from ..generate import BLACK_MAX, pixel_digest

    rgb = img.convert("RGB")
    flags = ["black"] if float(np.asarray(rgb).max()) / 255 < BLACK_MAX else []
    return {"sha256": hashlib.sha256(data).hexdigest(), "width": int(img.width), "height": int(img.height),
            "pixel_digest": pixel_digest(rgb), "flags": flags}


def write_image(run: RunDir, model: str, req: ImageRequest, image, *, seconds: float, rank: int = 0,
                where: str = "", extra: Optional[dict] = None) -> dict:
    """Record one arrived image of ``req``: ``image`` is its encoded bytes (PNG, JPEG, WebP: kept as they are) or a
    PIL image (written as PNG). The file first (atomic), then its line in the process's shard: a record never
    outruns its file, and a killed run resumes without asking for it again. Returns the record."""
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
        img = decode(data, where or f"{req.prompt_id}/{req.sample}")
        if img.format not in EXTENSIONS:  # a format a reader may not open (TIFF, BMP …): stored as PNG
            data, img = _png(img), None
    else:
        data, img = _png(image), None
    if img is None:
        img = decode(data, where or f"{req.prompt_id}/{req.sample}")
    path = run.image_path(req.prompt_id, req.sample).with_suffix(EXTENSIONS[img.format])
    atomic_write_bytes(path, data)
    record = {"prompt_id": req.prompt_id, "sample": req.sample, "seed": req.seed, "path": run.rel(path),
              **image_record_fields(data, img), "seconds": round(seconds, 4), "model": model, "rank": rank,
              **(extra or {})}
    append_jsonl(run.image_shard(rank), [record])
    return record


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
