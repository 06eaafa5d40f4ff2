"""T2I-CompBench's layout (Karine-Huang/T2I-CompBench, the evaluation scripts read ``<outdir>/samples/``): each
image named ``<prompt>_<NNNNNN>.png``, the prompt text itself and a six-digit counter that the sampling scripts
run over the whole prompt file (prompt after prompt, sample after sample). The counter is the benchmark's own
order: it tells the samples of a prompt apart, and the occurrences of a prompt the file repeats."""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import AuditError
from ..base import inside
from . import IMAGE_NAME, Entry, Listing, folder_entries, rel

LOOKS_FOR = "T2I-CompBench's samples/<prompt>_<NNNNNN>.png"
NAME = re.compile(r"^(.+)_(\d{6})\.(png|jpe?g|webp)$", re.IGNORECASE)


def detect(root: Path) -> bool:
    samples = root / "samples"
    return samples.is_dir() and any(NAME.match(e.name) for e in folder_entries(samples))


def read(root: Path) -> Listing:
    samples = root / "samples"
    if not samples.is_dir():
        raise AuditError(f"{root}: no samples/ folder ({LOOKS_FOR})")
    inside(samples, root, "samples")
    entries, skipped, counters = [], [], {}
    for f in folder_entries(samples):
        name = rel(Path(f.path), root)
        m = NAME.match(f.name)
        if not m:
            skipped.append(f"{name}: not <prompt>_<NNNNNN>.png" if IMAGE_NAME.search(f.name) else
                           f"{name}: not an image name")
            continue
        counter = int(m.group(2))
        if counter in counters:  # one counter runs over the whole prompt file: two files with one is two runs mixed
            raise AuditError(f"{name}: counter {m.group(2)} again (also {counters[counter]}); T2I-CompBench numbers "
                             "every image of a run once")
        counters[counter] = name
        entries.append(Entry(name=name, where=str(f.path), text=m.group(1), index=counter, path=Path(f.path)))
    return Listing("t2i-compbench", str(root), root, entries, skipped)
