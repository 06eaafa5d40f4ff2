"""Bounded, located parsing of files a user hands us: YAML, JSON, JSONL, CSV.

Every reader of outside text goes through here, so each gets the same limits and the same kind
of error: an :class:`AuditError` naming ``file:line`` and the reason, never a traceback.

* YAML: a document may share nodes through anchors and aliases, so 565 bytes can stand for
  billions of values (the "billion laughs"). We compose the node graph (linear in the text),
  then count what it would expand to, and refuse past :data:`MAX_YAML_NODES` or
  :data:`MAX_DEPTH` before anything is built. Only safe tags are constructed.
* JSON: ``NaN`` / ``Infinity`` (and ``1e999``, which Python reads as infinity) are refused
  where a file must hold finite numbers; nesting past the interpreter's limit is refused
  instead of raising RecursionError.
* Lines: split on ``\\n`` only. ``str.splitlines`` also splits on U+2028, U+2029, U+0085 and
  others, which JSON allows inside strings.
* CSV: the csv module's own errors (a field over its size limit, a NUL) become located errors.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Iterator, Optional

import yaml

from .errors import AuditError

MAX_INPUT_BYTES = 1 << 30  # a text input (suite, JSONL, CSV, run record) larger than 1 GiB is not one we wrote or expect
MAX_YAML_NODES = 200_000  # values after alias expansion; the largest shipped YAML (models.yaml) has ~900
MAX_DEPTH = 100  # nesting of YAML collections


def split_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) split on ``\\n`` only; a ``\\r`` before it (CRLF files) is dropped."""
    for i, line in enumerate(text.split("\n"), 1):
        yield i, line[:-1] if line.endswith("\r") else line


# --- YAML ---------------------------------------------------------------------------------


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Refuse a node graph that expands past the limits, or that contains itself.

    Iterative post-order walk with the expanded size of each distinct node memoised, so the
    cost is linear in the text however many times an alias is used.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            if size[key] > MAX_YAML_NODES:
                raise AuditError(f"{where}:{node.start_mark.line + 1}: YAML expands to more than {MAX_YAML_NODES:,} "
                                 "values (anchors and aliases repeat the same block); refusing to build it")
            continue
        if key in size:
            continue
        if key in on_path:
            raise AuditError(f"{where}:{node.start_mark.line + 1}: YAML alias refers to a block that contains it")
        if depth > MAX_DEPTH:
            raise AuditError(f"{where}:{node.start_mark.line + 1}: YAML nested more than {MAX_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(node))


def _yaml_error(e: yaml.YAMLError, where: str) -> AuditError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    loc = f":{mark.line + 1}" if mark is not None else ""
    reason = getattr(e, "problem", None) or str(e)
    if isinstance(e, yaml.constructor.ConstructorError):
        return AuditError(f"{where}{loc}: YAML value not allowed: {reason}")
    return AuditError(f"{where}{loc}: invalid YAML: {reason}")


def compose_yaml(text: str, where: str) -> Optional[yaml.Node]:
    """The node graph of one YAML document (None if empty), checked against the limits."""
    try:  # the reader refuses control characters as soon as it is made
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise AuditError(f"{where}:{line}: invalid YAML: {e.reason} (character #x{e.character:04x})") from None
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as e:
        raise _yaml_error(e, where) from None
    except RecursionError:
        line = loader.get_mark().line + 1
        raise AuditError(f"{where}:{line}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    if node is not None:
        _check_expansion(node, where)
    return node


def construct_yaml(node: yaml.Node, where: str) -> Any:
    """Python value of a checked node (safe tags only); a refused tag names its line."""
    try:
        return yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as e:
        raise _yaml_error(e, where) from None
    except RecursionError:
        raise AuditError(f"{where}:{node.start_mark.line + 1}: YAML nested too deeply") from None


def load_yaml_text(text: str, where: str) -> Any:
    """``yaml.safe_load`` with bounded expansion and located errors."""
    node = compose_yaml(text, where)
    return None if node is None else construct_yaml(node, where)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    return load_yaml_text(read_text(path), str(path))


def regular_file(path: str | Path, where: Optional[str] = None, limit: int = MAX_INPUT_BYTES) -> os.stat_result:
    """``path``'s stat when it is a regular file of at most ``limit`` bytes; an AuditError otherwise, before a byte
    is read: ``/dev/zero`` reads forever (until the kernel kills a process on a shared machine), a FIFO blocks
    forever, a folder is not a file. ``where`` names the option it came from (else the path)."""
    path = Path(path)
    name = f"{where} {path}" if where else str(path)
    try:
        st = os.stat(path)  # stat never opens: a FIFO does not block here
    except FileNotFoundError:
        raise AuditError(f"{name}: file not found") from None
    except NotADirectoryError:
        raise AuditError(f"{name}: file not found (a part of the path is a file)") from None
    except PermissionError:
        raise AuditError(f"{name}: permission denied (cannot read it)") from None
    if stat.S_ISDIR(st.st_mode):
        raise AuditError(f"{name}: is a folder, expected a file")
    if not stat.S_ISREG(st.st_mode):
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise AuditError(f"{name}: {what}, not a regular file; t2i-audit reads only regular files (save the "
                         "content to a file and give that)")
    if st.st_size > limit:
        raise AuditError(f"{name}: {st.st_size:,} bytes, more than the {limit:,} a t2i-audit input may have")
    return st


def read_bytes(path: str | Path) -> bytes:
    """A regular file's bytes (:func:`regular_file`: bounded, never a FIFO or device), or an AuditError naming it."""
    regular_file(path)
    try:
        return Path(path).read_bytes()
    except PermissionError:
        raise AuditError(f"{path}: permission denied (cannot read it)") from None


def read_text(path: str | Path) -> str:
    """A UTF-8 text file (a BOM is dropped), or an AuditError naming the file."""
    raw = read_bytes(path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise AuditError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


# --- JSON ---------------------------------------------------------------------------------


class _NotFinite(ValueError):
    pass


def _finite_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _NotFinite(s)
    return v


def _no_constant(s: str):
    raise _NotFinite(s)


def loads_json(text: str | bytes, where: str, *, finite: bool = True, what: str = "") -> Any:
    """``json.loads`` whose every failure is an AuditError at ``where`` (e.g. ``file:line``),
    worded ``"{where}: {what} ({reason})"`` when ``what`` is given.

    ``finite``: refuse NaN, Infinity and numbers too large for a float (a count of Infinity
    would reach ``int()`` as OverflowError). Run files we wrote ourselves may hold NaN scores.
    """
    kw = {"parse_float": _finite_float, "parse_constant": _no_constant} if finite else {}
    try:
        return json.loads(text, **kw)
    except _NotFinite as e:
        reason = f"number {e} is not finite"
    except json.JSONDecodeError as e:
        at = f"line {e.lineno} column {e.colno}" if e.lineno > 1 else f"column {e.colno}"  # a .json file spans lines
        reason = f"not valid JSON: {e.msg} at {at}"
    except RecursionError:
        reason = "JSON nested too deeply"
    except ValueError as e:  # e.g. an integer of more digits than int() accepts
        reason = f"not valid JSON: {e}"
    raise AuditError(f"{where}: {what} ({reason})" if what else f"{where}: {reason}")


def jsonl_lines(path: str | Path, *, strict: bool = False, finite: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each line of a JSONL file; blank lines skipped. A partial last line (an append
    cut short by a kill: no newline, not JSON) is dropped — that item was never finished — unless ``strict``.
    Any other line that does not parse is an AuditError at ``file:line``."""
    path = Path(path)
    lines = read_bytes(path).split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    for i, line in enumerate(complete, 1):
        if line.strip():
            yield i, loads_json(line, f"{path}:{i}", finite=finite, what="corrupted JSONL line")
    if tail.strip():
        # a complete JSON object without its newline is still kept; anything else is the torn record
        try:
            value = loads_json(tail, f"{path}:{len(lines)}", finite=finite)
        except AuditError:
            if strict:
                raise AuditError(f"{path}:{len(lines)}: torn last line") from None
            return
        yield len(lines), value


def read_json(path: str | Path, *, finite: bool = True) -> Any:
    path = Path(path)
    return loads_json(read_text(path), str(path), finite=finite)


def read_cache_json(path: str | Path) -> Optional[dict]:
    """A JSON object the tool wrote as a cache index (e.g. activations' meta.json), or None when it
    is missing or damaged: the caller then rebuilds what it indexes (``verify`` names the damage)."""
    try:
        data = read_json(path, finite=False)
    except AuditError:
        return None
    return data if isinstance(data, dict) else None


# --- CSV ----------------------------------------------------------------------------------


def csv_dict_rows(text: str, where: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """(header, [(line number, row)]) of a CSV text; the csv module's errors are located.

    Rows are read from the text itself (``newline=""``), so a quoted field may hold newlines
    and nothing splits on U+2028 and its kin.
    """
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = list(reader.fieldnames or [])
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as e:
        raise AuditError(f"{where}:{reader.line_num + 1}: unreadable CSV ({e})") from None
    return header, rows
