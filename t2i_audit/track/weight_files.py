"""Weight files as training writes them: is one complete, which tensors does it hold — read from the
file's own structure, never by loading it (no torch, no pickle).

* safetensors (the safetensors format spec; ``safetensors.torch.save_file``): 8 bytes little-endian
  header length N, N bytes of JSON ``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": …}``,
  then the data; a complete file is exactly ``8 + N + max(end)`` bytes (the safetensors loader refuses any
  other length). A file still being written is shorter.
* ``.bin`` / ``.pt`` (``torch.save``): a zip archive; its end-of-central-directory record is written last,
  so ``zipfile.is_zipfile`` (which looks for it at the end) is False while the file is being written.
* sharded checkpoints: ``*.index.json`` names every shard in ``weight_map``; each must be there and complete.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Optional

MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on the header
# diffusers ModelMixin.save_pretrained (diffusers/utils/constants.py WEIGHTS_NAME, SAFETENSORS_WEIGHTS_NAME) and
# transformers PreTrainedModel.save_pretrained (model.safetensors, pytorch_model.bin), with an optional variant
# (``diffusion_pytorch_model.fp16.safetensors``) or shard suffix (``model-00001-of-00002.safetensors``)
_WEIGHTS = re.compile(r"^(diffusion_pytorch_model|model|pytorch_model)([.-][\w.-]+)?\.(safetensors|bin)$")


class Incomplete(Exception):
    """A weight file or folder that is not (yet) whole; the message says what is missing."""


def safetensors_header(path: Path) -> dict:
    """The tensors of a safetensors file (``{name: {dtype, shape, data_offsets}}``, metadata dropped), or
    Incomplete naming why the file is not a whole safetensors file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise Incomplete(f"{path.name}: {size} bytes, shorter than a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise Incomplete(f"{path.name}: header of {n} bytes does not fit the file's {size} bytes")
            raw = f.read(n)
    except OSError as e:
        raise Incomplete(f"{path.name}: cannot read ({e.strerror or e})") from None
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise Incomplete(f"{path.name}: safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise Incomplete(f"{path.name}: safetensors header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    ends = []
    for name, info in tensors.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise Incomplete(f"{path.name}: tensor {name!r} has no data_offsets")
        ends.append(offsets[1])
    expected = 8 + n + max(ends, default=0)
    if size != expected:
        raise Incomplete(f"{path.name}: {size} bytes, its header describes {expected} (truncated or still being written)")
    return tensors


def check_weight_file(path: Path) -> None:
    """Incomplete unless ``path`` is a whole weight file (safetensors, or a torch.save zip archive)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        safetensors_header(path)
        return
    try:
        whole = zipfile.is_zipfile(path)
    except OSError as e:
        raise Incomplete(f"{path.name}: cannot read ({e.strerror or e})") from None
    if not whole:
        raise Incomplete(f"{path.name}: not a whole torch.save archive (no end-of-archive record: truncated or "
                         "still being written)")


def model_weight_files(folder: Path) -> list[Path]:
    """The weight files a ``save_pretrained`` folder holds (shards through their index), each checked whole;
    Incomplete when there are none or one is not whole. safetensors is preferred where both are there, as
    diffusers and transformers load them."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise Incomplete(f"{folder.name}/config.json missing")
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    indexes = [n for n in names if n.endswith(".index.json")]
    if indexes:
        index = sorted(indexes, key=lambda n: not n.endswith(".safetensors.index.json"))[0]
        try:
            data = json.loads((folder / index).read_text())
            shards = sorted(set(data["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise Incomplete(f"{folder.name}/{index}: not a readable shard index") from None
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise Incomplete(f"{folder.name}: shard(s) {', '.join(missing)} of {index} missing")
        files = [folder / s for s in shards]
    else:
        found = [n for n in names if _WEIGHTS.match(n)]
        safe = [n for n in found if n.endswith(".safetensors")]
        files = [folder / n for n in (safe or found)]
    if not files:
        raise Incomplete(f"{folder.name}: config.json but no weights file")
    for f in files:
        try:
            check_weight_file(f)
        except Incomplete as e:
            raise Incomplete(f"{folder.name}/{e}") from None
    return files


def tensor_names(path: Path) -> Optional[set[str]]:
    """The tensor names of a safetensors file or of a model folder's safetensors files; None where they can be
    read only by loading the file (pickled .bin)."""
    path = Path(path)
    files = model_weight_files(path) if path.is_dir() else [path]
    if any(f.suffix != ".safetensors" for f in files):
        return None
    return {k for f in files for k in safetensors_header(f)}
