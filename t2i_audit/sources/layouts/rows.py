"""Tables of images — a JSONL or CSV file, one image a row: the file (relative to the table's folder), the prompt
text or a suite record's id, optionally sample and seed. Hugging Face ImageFolder's ``metadata.jsonl`` and a plain
manifest are both read here; each row's problem names file:line."""

from __future__ import annotations

import reprlib
from pathlib import Path

from ...errors import AuditError
from ...safeload import csv_dict_rows, loads_json, read_text, split_lines
from . import Entry

PROMPT_KEYS = ("prompt", "text", "caption")  # the prompt's text, first found
ID_KEYS = ("prompt_id",)


def table_rows(path: Path) -> tuple[list[str], list[tuple[int, dict]]]:
    """(columns seen, [(line, row)]) of a .jsonl or .csv table."""
    text = read_text(path)
    if path.suffix.lower() == ".csv":
        return csv_dict_rows(text, str(path))
    if path.suffix.lower() != ".jsonl":
        raise AuditError(f"{path}: a table of images is .csv or .jsonl (one image a row), not {path.suffix or 'no suffix'}")
    rows, columns = [], []
    for i, line in split_lines(text):
        if not line.strip():
            continue
        row = loads_json(line, f"{path}:{i}", what="not a JSON object")
        if not isinstance(row, dict):
            raise AuditError(f"{path}:{i}: expected a JSON object (one image a line), got {type(row).__name__}")
        columns += [k for k in row if k not in columns]
        rows.append((i, row))
    return columns, rows


def entries_of(path: Path, root: Path, file_keys: tuple[str, ...]) -> list[Entry]:
    """An Entry per row of the table ``path``; files are named relative to ``root`` by the first of ``file_keys``."""
    columns, rows = table_rows(path)
    if not rows:
        raise AuditError(f"{path}: no rows (one image a row: {file_keys[0]}, prompt)")
    file_key = next((k for k in file_keys if k in columns), None)
    prompt_keys = [k for k in PROMPT_KEYS + ID_KEYS if k in columns]
    if file_key is None or not prompt_keys:
        need = [f"a {' / '.join(file_keys)} column" if file_key is None else "",
                f"a {' / '.join(PROMPT_KEYS + ID_KEYS)} column" if not prompt_keys else ""]
        raise AuditError(f"{path}:{rows[0][0]}: no {' and no '.join(n.removeprefix('a ') for n in need if n)} "
                         f"(columns: {', '.join(columns) or 'none'})")
    entries = []
    for line, row in rows:
        where = f"{path}:{line}"
        file = _text(row.get(file_key), file_key, where)
        rel = Path(file)
        if rel.is_absolute() or ".." in rel.parts:
            raise AuditError(f"{where}: {file_key} {file!r} must name a file inside {root} (relative, no '..')")
        text = _text(row.get(next((k for k in PROMPT_KEYS if k in row and row[k] not in (None, "")), "prompt")),
                     "prompt", where, optional=True)
        pid = _text(row.get("prompt_id"), "prompt_id", where, optional=True)
        if text is None and pid is None:
            raise AuditError(f"{where}: neither a prompt nor a prompt_id for {file!r}")
        entries.append(Entry(name=rel.as_posix(), where=where, text=text, prompt_id=pid,
                             sample=_whole(row.get("sample"), "sample", where),
                             seed=_whole(row.get("seed"), "seed", where), path=root / rel))
    return entries


def _text(value, what: str, where: str, optional: bool = False):
    if value is None or value == "":
        if optional:
            return None
        raise AuditError(f"{where}: no {what}")
    if not isinstance(value, str):
        raise AuditError(f"{where}: {what} {reprlib.repr(value)} must be a string")
    return value


def _whole(value, what: str, where: str):
    """A sample number or seed: a whole number ≥ 0 (an int, or digits in a CSV cell); never a bool or fraction."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 20:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuditError(f"{where}: {what} {reprlib.repr(value)} must be a whole number of at least 0")
    return value
