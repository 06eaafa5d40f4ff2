"""A Hugging Face dataset with an image column and a prompt column, read with ``datasets`` — how T2I-CoReBench's
and UniGenBench++'s images are published: a folder ``save_to_disk`` wrote (``state.json``, ``dataset_info.json``),
a folder of Parquet files (itself or ``data/``), or ``hf:ORG/NAME[/CONFIG][:SPLIT]`` on the Hub. The image column
is the one of type ``Image``; the prompt column the first of ``prompt`` / ``text`` / ``caption`` (or a
``prompt_id`` column); ``sample`` and ``seed`` are read where present. Images are taken as their stored bytes."""

from __future__ import annotations

import reprlib
from pathlib import Path

from ...errors import AuditError
from . import Entry, Listing
from .rows import ID_KEYS, PROMPT_KEYS, _whole

LOOKS_FOR = ("a Hugging Face dataset (save_to_disk folder or Parquet files) with an Image column and a prompt "
             "column")


def _parquet(root: Path) -> list[Path]:
    return sorted(p for d in (root, root / "data") if d.is_dir() for p in d.glob("*.parquet"))


def detect(root: Path) -> bool:
    return (((root / "state.json").is_file() and (root / "dataset_info.json").is_file())
            or (root / "dataset_dict.json").is_file() or bool(_parquet(root)))


def read(source: "str | Path") -> Listing:
    try:
        import datasets
    except ImportError:
        raise AuditError(f"--images {source}: reading a Hugging Face dataset needs the datasets package "
                         "(pip install datasets)") from None
    source = str(source)
    try:
        ds, root = _load(datasets, source)
    except AuditError:
        raise
    except Exception as e:  # datasets raises many kinds (FileNotFoundError, DatasetNotFoundError, ValueError …)
        raise AuditError(f"--images {source}: cannot read it as a Hugging Face dataset "
                         f"({type(e).__name__}: {e})") from None
    images = [c for c, f in ds.features.items() if isinstance(f, datasets.Image)]
    columns = list(ds.features)
    prompt = next((c for c in PROMPT_KEYS + ID_KEYS if c in columns), None)
    if len(images) != 1 or prompt is None:
        why = ("no image column (of type Image)" if not images else
               f"several image columns ({', '.join(images)})" if len(images) > 1 else
               f"no prompt column ({' / '.join(PROMPT_KEYS + ID_KEYS)})")
        raise AuditError(f"--images {source}: {why}; its columns: {', '.join(columns)}")
    image = images[0]
    ds = ds.cast_column(image, datasets.Image(decode=False))  # the stored bytes, as they are
    wanted = [c for c in (*PROMPT_KEYS, *ID_KEYS, "sample", "seed") if c in columns]
    meta = ds.select_columns(wanted).to_list()
    entries = []
    for i, row in enumerate(meta):
        where = f"{source} row {i}"
        text = next((row[k] for k in PROMPT_KEYS if row.get(k) not in (None, "")), None)
        pid = row.get("prompt_id") or None
        for what, v in (("prompt", text), ("prompt_id", pid)):
            if v is not None and not isinstance(v, str):
                raise AuditError(f"{where}: {what} {reprlib.repr(v)} must be a string")
        if text is None and pid is None:
            raise AuditError(f"{where}: neither a prompt nor a prompt_id")
        entries.append(Entry(name=f"row {i}", where=where, text=text, prompt_id=pid,
                             sample=_whole(row.get("sample"), "sample", where),
                             seed=_whole(row.get("seed"), "seed", where), fetch=_fetcher(ds, image, i, where)))
    return Listing("hf-dataset", source, root, entries)


def _fetcher(ds, column: str, i: int, where: str):
    def fetch() -> bytes:
        cell = ds[i][column]
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data:
            path = cell.get("path") if isinstance(cell, dict) else None
            raise AuditError(f"{where}: the image is stored as a path ({path!r}), not as bytes; t2i-audit reads "
                             "images a dataset holds (push it with the images embedded, or use --layout imagefolder)")
        return bytes(data)

    return fetch


def _load(datasets, source: str):
    """(the dataset's one split, the folder its files lie in)."""
    if source.startswith("hf:"):
        ref, _, split = source[3:].partition(":")
        parts = ref.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise AuditError(f"--images {source}: expected hf:ORG/NAME[/CONFIG][:SPLIT]")
        ds = datasets.load_dataset("/".join(parts[:2]), parts[2] if len(parts) == 3 else None, split=split or None)
        return _one_split(ds, source), Path.cwd()
    root = Path(source)
    if (root / "state.json").is_file() or (root / "dataset_dict.json").is_file():
        return _one_split(datasets.load_from_disk(str(root)), source), root
    files = _parquet(root)
    if not files:
        raise AuditError(f"--images {source}: no Parquet files and no save_to_disk folder ({LOOKS_FOR})")
    return datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train"), root


def _one_split(ds, source: str):
    if isinstance(ds, dict):  # a DatasetDict
        if len(ds) != 1:
            raise AuditError(f"--images {source}: the dataset has splits {', '.join(ds)}; name one "
                             "(hf:ORG/NAME:SPLIT, or a folder of that split)")
        return next(iter(ds.values()))
    return ds
