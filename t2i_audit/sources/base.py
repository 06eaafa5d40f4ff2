"""What every image source shares: the requests a run makes (prompt, sample, seed, settings), and the one way an
image that arrives from anywhere becomes a run's image — validated, written atomically under ``images/``, recorded
in the process's shard exactly as a pipeline's image is (generate.py), so resume, verify, scoring and reports treat
it the same. The sources themselves (folder.py, hosted.py, callable.py) only decide where the bytes come from.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
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
    except UnidentifiedImageError:
        raise AuditError(f"{where}: not a readable image (no image format PIL knows: PNG, JPEG, WebP …)") from None
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise AuditError(f"{where}: not a readable image ({type(e).__name__}: {e})") from None
    return img


def image_record_fields(data: bytes, img) -> dict:
    """The fields of an image record that describe its bytes and pixels (as generate.py records them)."""
    from ..generate import BLACK_MAX, pixel_digest

    rgb = img if img.mode == "RGB" else img.convert("RGB")
    digest = pixel_digest(rgb)
    # black: the brightest value under BLACK_MAX. No pixel is darker than the brightest 8×8 block mean, so a
    # digest with a bright block settles it without a pass over every pixel (the exact test runs only otherwise)
    dark = max(bytes.fromhex(digest)) / 255 < BLACK_MAX and max(hi for _, hi in rgb.getextrema()) / 255 < BLACK_MAX
    return {"sha256": hashlib.sha256(data).hexdigest(), "width": int(img.width), "height": int(img.height),
            "pixel_digest": digest, "flags": ["black"] if dark else []}


def write_image(run: RunDir, model: str, req: ImageRequest, image, *, seconds: float, rank: int = 0,
                where: str = "", extra: Optional[dict] = None) -> dict:
    """Record one arrived image of ``req``: ``image`` is its encoded bytes (PNG, JPEG, WebP: kept as they are) or a
    PIL image (written as PNG). The file first (atomic), then its line in the process's shard: a record never
    outruns its file, and a killed run resumes without asking for it again. Returns the record."""
    data = bytes(image) if isinstance(image, (bytes, bytearray)) else _png(image)
    data, fields, ext = checked_image(data, where or f"{req.prompt_id}/{req.sample}")
    return record_image(run, model, req, data, fields, ext, seconds=seconds, rank=rank, extra=extra)


def checked_image(data: bytes, where: str) -> tuple[bytes, dict, str]:
    """(the bytes to store, the record's fields that describe them, their extension): ``data`` decoded once (an
    AuditError naming ``where`` when it is no image or over the pixel bound); a format a reader may not open (TIFF,
    BMP …) is stored as PNG, the others as their own bytes."""
    img = decode(data, where)
    if img.format not in EXTENSIONS:
        data = _png(img)
        img = decode(data, where)
    return data, image_record_fields(data, img), EXTENSIONS[img.format]


def record_image(run: RunDir, model: str, req: ImageRequest, data: bytes, fields: dict, ext: str, *,
                 seconds: Optional[float], rank: int = 0, extra: Optional[dict] = None, append: bool = True,
                 durable: bool = True) -> dict:
    """Write ``data`` (checked by :func:`checked_image`, which gave ``fields`` and ``ext``) as the image of
    ``req`` and append its record to the process's shard; the file first (atomic), then the record. ``seconds``:
    what the image cost to make, None where nobody says (images made elsewhere). ``append=False``: the caller
    appends the returned record, with others, after their files (one durable append a batch, as generate.py).
    ``durable=False``: the file is not fsynced (a copy whose source stays: rundir.persist). The fsync it saves
    costs more than decoding the image on this machine's disk (3 ms against 10 ms for a 512² PNG)."""
    path = run.image_path(req.prompt_id, req.sample).with_suffix(ext)
    atomic_write_bytes(path, data, durable=durable)
    record = {"prompt_id": req.prompt_id, "sample": req.sample, "seed": req.seed, "path": run.rel(path),
              **fields, "seconds": None if seconds is None else round(seconds, 4), "model": model, "rank": rank, **(extra or {})}
    if append:
        append_jsonl(run.image_shard(rank), [record])
    return record


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


MAX_IMAGE_BYTES = 256 << 20  # one image file: an 8192² RGBA PNG stored uncompressed is ~256 MiB


def inside(path: Path, root: Path, where: str) -> Path:
    """``path`` resolved (symlinks followed) when it lies inside ``root``; an AuditError otherwise: a folder made
    elsewhere may hold a link to ``/etc/shadow`` or ``~/.ssh``, and we read only what the folder itself holds."""
    real, base = Path(os.path.realpath(path)), Path(os.path.realpath(root))
    if real != base and base not in real.parents:
        raise AuditError(f"{where}: {path.name} points outside {root} (to {real}); t2i-audit reads only files "
                         "inside the images folder — copy the image there instead of linking it")
    return real


def read_image_file(path: Path, root: Path, where: str = "") -> bytes:
    """The bytes of an image file of an images folder: inside ``root`` (links too), a regular file (never a FIFO,
    device or socket: a read that never ends), at most :data:`MAX_IMAGE_BYTES`. Read, never moved or changed."""
    from ..safeload import regular_file

    where = where or str(path)
    real = inside(path, root, where)
    regular_file(real, where, MAX_IMAGE_BYTES)
    try:
        with open(real, "rb") as f:
            data = f.read(MAX_IMAGE_BYTES + 1)  # bounded even if the file grew since its stat
    except PermissionError:
        raise AuditError(f"{where}: permission denied (cannot read it)") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise AuditError(f"{where}: more than the {MAX_IMAGE_BYTES:,} bytes an image may have")
    return data


def main_process_only(make):
    """``make_images`` of a source whose work needs no accelerator (requests, a lab's own sampler): the main process
    makes every image, ``make(run, prompts, card, settings, progress)``, and the others wait for it."""

    def make_images(run, prompts: list[dict], card, settings, *, state=None, progress: bool = True) -> dict:
        counts = make(run, prompts, card, settings, progress) if state is None or state.is_main_process else {}
        if state is not None:
            state.wait_for_everyone()
        return counts

    return make_images
