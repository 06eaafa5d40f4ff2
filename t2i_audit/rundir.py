"""The run directory: layout, atomic writes, append-only JSONL, the writer lock.

Every stage reads and writes files here, so a stage can run alone, is idempotent and resumes
where it was killed. Rules that make SIGKILL safe:

* whole files (JSON, YAML, PNG, NPY, merged JSONL) are written to a temp file in the same
  folder and ``os.replace``-d into place, so a reader never sees half a file;
* per-item records are appended one line at a time and flushed; a kill can leave at most a
  partial *last* line, which :func:`read_jsonl` drops (and :func:`repair_jsonl` truncates)
  because that item was never finished;
* one writer per directory (per Accelerate rank): :class:`RunLock` holds an ``flock`` that the
  kernel releases when the process dies, so a stale lock never blocks a resume.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import AuditError
from .finished_files import FINISHED, complete_lines
from .records import read_document, read_records, score_records
from .safeload import jsonl_lines


class RunLockedError(AuditError):
    pass


@functools.lru_cache(maxsize=1)
def process_umask() -> int:
    """The process umask, read once and cached (a process that changes its umask later must
    call ``process_umask.cache_clear()``).

    Linux exposes it in /proc/self/status (kernel ≥ 4.7), a read that changes nothing. Elsewhere
    the only way is ``os.umask(0)`` then restoring it, which is not thread-safe: for that instant
    the umask is 0 for every thread, so a file another thread creates then gets mode 0666. Doing
    it once per process, at the first write (before stages start threads), keeps that window tiny.
    """
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` would give a new file: 0644 under umask 022, 0640 under 027."""
    return 0o666 & ~process_umask()


def persist(f, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to the open binary file ``f`` and make it durable: every file the tool writes goes through
    here (whole files, appended records, folder markers), so a test that makes it raise ``OSError(ENOSPC)``
    fills the disk for every writer at once. ``durable=False``: no fsync, for a copy of bytes that still lie
    where they came from (an ingested image: after a power cut a resume finds its sha256 wrong and copies it again)."""
    f.write(data)
    f.flush()
    if durable:
        os.fsync(f.fileno())


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError raised while writing ``path`` names ``path`` — not the temp file it went through, nor
    nothing (a ``write`` that hits a full disk carries no file name) — so the user is told where."""
    try:
        yield
    except OSError as e:
        if e.errno is None or e.filename == str(path):
            raise
        raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from e


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """``data`` to ``path`` through a staged name and a rename: a kill never leaves a torn file (``durable``:
    :func:`persist`)."""
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            # mkstemp creates 0600 and os.replace keeps it: a shared run directory (a lab group,
            # a web server showing the images) could not read our files. Honour the umask instead.
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), file_mode())
                persist(f, data, durable=durable)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


# atomic_write_bytes' staging names: mkstemp(prefix=".<name>.", suffix=".tmp") adds 8 characters of this alphabet
_STAGED = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def remove_write_leftovers(folder: Path) -> list[Path]:
    """Delete the staging files of :func:`atomic_write_bytes` that a kill left between write and rename, under
    ``folder``. Ours by name; call it only where no write can be in flight (the stage's every process done)."""
    gone = []
    for p in sorted(Path(folder).rglob(".*.tmp")):
        if p.is_file() and _STAGED.match(p.name):
            p.unlink()
            gone.append(p)
    return gone


_SETTLED_NS = 5_000_000_000  # mtimes tick in 1 ms (ext4) to 2 s (FAT): an older file changes stat when rewritten
_digests: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes (raises FileNotFoundError).

    Memoised by (path, device, inode, size, mtime) for files last written over 5 s ago: a
    resume hashes every image twice (what is done, then the merge), and an atomic rewrite gets a
    new inode, an in-place one a new mtime. A younger file is always re-read, since a rewrite in
    the same clock tick would keep its stat. ``read_bytes`` beats ``hashlib.file_digest`` here
    (measured 23 vs 51 µs a 3 KB PNG, 3.0 vs 3.7 ms a 3 MB one).
    """
    st = os.stat(path)
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    digest = _digests.get(key)
    if digest is None:
        if st.st_size <= _WHOLE_READ:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        else:  # weights of GBs: streamed, never held in memory at once
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
            digest = h.hexdigest()
        if time.time_ns() - st.st_mtime_ns > _SETTLED_NS:
            _digests[key] = digest
    return digest


_WHOLE_READ = 64 << 20  # files up to this size are hashed from one read (faster for images); larger ones streamed
_CHUNK = 8 << 20
# a Hugging Face cache snapshot links each file to blobs/<its content address>: sha256 for LFS files (weights), the
# git blob sha1 for small ones — the hub's own content hash, so reading GBs again to learn it is not needed
_HUB_BLOB = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def content_id(path: Path) -> str:
    """What a cache or reuse decision keys a file on: its content (never its size and mtime, which a file replaced
    by other bytes can keep). The hub cache's content address where the file is a link into ``blobs/``, else
    :func:`file_sha256` (memoised within a process)."""
    p = Path(path)
    if p.is_symlink():
        target = p.resolve()
        if target.parent.name == "blobs" and _HUB_BLOB.match(target.name):
            return target.name
    return file_sha256(p)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def dumps_line(record: dict) -> str:
    """One JSONL line: strict JSON, so NaN or infinity is refused here (ValueError naming the key) instead of
    written as ``NaN``, which no JSON reader but Python's accepts and every reader of ours refuses."""
    try:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        from .records import _non_finite, key_path

        where = _non_finite(record)
        raise ValueError(f"record not written: {key_path(where or ())} is not a finite number (JSON has no NaN "
                         f"or infinity): {str(record)[:200]}") from None


def atomic_write_jsonl(path: Path, records: Iterable[dict]) -> int:
    lines = [dumps_line(r) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)


def append_jsonl(path: Path, records: Iterable[dict]) -> None:
    """Append records, one line each, in a single write, then fsync.

    One ``write`` call per batch keeps the window for a torn line as small as the OS allows;
    whatever is torn is only ever the last line and is dropped on read.
    """
    payload = "".join(dumps_line(r) + "\n" for r in records)
    if not payload:
        return
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            persist(f, payload.encode("utf-8"))


def read_jsonl(path: Path, *, strict: bool = False) -> list[dict]:
    """Read a JSONL file (missing: no records). A partial last line (a killed append) is dropped.

    A malformed line anywhere else is corruption and raises with the file and line number. The run's own
    record kinds are read through :func:`t2i_audit.records.read_records`, which also checks each record.
    """
    path = Path(path)
    if not path.exists():
        return []
    return [value for _, value in jsonl_lines(path, strict=strict)]


def repair_jsonl(path: Path) -> bool:
    """Truncate a torn last line in place; True if something was cut."""
    path = Path(path)
    if not path.exists():
        return False
    raw = path.read_bytes()
    if not raw or raw.endswith(b"\n"):
        return False
    cut = raw.rfind(b"\n") + 1
    tail = raw[cut:]
    try:
        json.loads(tail)
        with open(path, "ab") as f:  # complete record, just missing its newline
            f.write(b"\n")
        return False
    except json.JSONDecodeError:
        with open(path, "r+b") as f:
            f.truncate(cut)
        return True


@contextlib.contextmanager
def staged_into(folder: Path) -> Iterator[Path]:
    """Yield an empty staging folder inside ``folder``; on success move each entry written there
    over its namesake in ``folder``. Only those names are replaced: any other file in ``folder``
    stays, and a kill leaves the previous entries whole (a file is replaced atomically)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".staging-", dir=folder))
    try:
        yield stage
        for entry in sorted(stage.iterdir()):
            dest = folder / entry.name
            if (entry.is_dir() or dest.is_dir()) and (dest.exists() or dest.is_symlink()):
                os.replace(dest, stage / f".old-{entry.name}")  # our previous entry; removed with the stage
            os.replace(entry, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


_held: dict[str, list] = {}  # real path of a lock file → [fd, depth]: the locks this process holds
_held_guard = threading.Lock()


def process_rank() -> int:
    """This process's rank under ``accelerate launch`` / ``torchrun`` (0 alone): each rank locks its own file."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``<run>/.lock[.<rank>]``.

    The kernel drops it when the holder dies, so ``kill -9`` never leaves a stale lock. Re-entrant within a
    process: a command that holds its folder's lock (``ownership.command_scope``) calls stages that take it
    again, and every read-modify-write of a shared file (manifest.json, summary.json) takes it around itself.
    """

    def __init__(self, run_dir: Path, rank: int = 0):
        self.path = Path(run_dir) / (".lock" if rank == 0 else f".lock.{rank}")
        self._key: str | None = None

    def acquire(self) -> "RunLock":
        with naming(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.path)
        with _held_guard:
            if key in _held:
                _held[key][1] += 1
                self._key = key
                return self
            with naming(self.path):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise RunLockedError(
                    f"{self.path.parent}: in use by pid {holder} (another t2i-audit command is writing it); "
                    "wait for it to finish, then rerun — or choose another --out"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            _held[key] = [fd, 1]
            self._key = key
        return self

    def release(self) -> None:
        with _held_guard:
            if self._key is None:
                return
            entry = _held[self._key]
            entry[1] -= 1
            if entry[1] == 0:
                fcntl.flock(entry[0], fcntl.LOCK_UN)
                os.close(entry[0])
                del _held[self._key]
            self._key = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class RunDir:
    """Paths of one run directory. Creating the object touches nothing on disk."""

    def __init__(self, root: "Path | str | RunDir"):
        self.root = root.root if isinstance(root, RunDir) else Path(root)

    # --- layout -------------------------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.root / "run.yaml"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts.jsonl"

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def images(self) -> Path:
        return self.root / "images.jsonl"

    def image_shard(self, rank: int) -> Path:
        return self.root / "shards" / f"images.rank{rank}.jsonl"

    def image_path(self, prompt_id: str, sample: int) -> Path:
        return self.images_dir / prompt_id / f"{sample}.png"

    @property
    def scores_dir(self) -> Path:
        return self.root / "scores"

    def scores(self, scorer: str) -> Path:
        return self.scores_dir / f"{scorer}.jsonl"

    @property
    def activations_dir(self) -> Path:
        return self.root / "activations"

    @property
    def probes_dir(self) -> Path:
        return self.root / "probes"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    # --- the run's records, read through their schemas (t2i_audit.records) -------------------
    def read_manifest(self) -> dict:
        return read_document(self.manifest, "manifest")

    def update_stage(self, stage: str, **fields: Any) -> dict:
        """Merge ``fields`` into ``manifest.stages[stage]`` and rewrite atomically, under the writer lock (the
        command's own, re-entered; or taken for this write): another command's update is never lost between
        our read and our write."""
        with RunLock(self.root):
            m = self.read_manifest()
            m.setdefault("stages", {}).setdefault(stage, {}).update(fields)
            atomic_write_json(self.manifest, m)
        return m

    def mark_finished(self, *paths: Path) -> None:
        """Record in manifest.json the lines each file in ``paths`` holds now, as its stage finishes it: every later
        reader checks the file against it (finished_files.check_whole), so a file cut short is named, never read as a
        smaller run. A missing file is recorded as unfinished."""
        with RunLock(self.root):
            m = self.read_manifest()
            table = m.setdefault(FINISHED, {})
            for path in paths:
                if Path(path).is_file():
                    table[self.rel(path)] = complete_lines(Path(path).read_bytes())
                else:
                    table.pop(self.rel(path), None)
            atomic_write_json(self.manifest, m)

    def mark_unfinished(self, *paths: Path) -> None:
        """The files in ``paths`` are being written again (their stage started): no line count holds until it ends."""
        with RunLock(self.root):
            m = self.read_manifest()
            table = m.get(FINISHED) or {}
            if any(self.rel(p) in table for p in paths):
                for p in paths:
                    table.pop(self.rel(p), None)
                atomic_write_json(self.manifest, m)

    def read_summary(self) -> dict:
        return read_document(self.summary, "summary")

    def update_summary(self, key: str, value: Any) -> None:
        """Set one top-level key of summary.json, keeping every other key as it is on disk now (under the lock)."""
        with RunLock(self.root):
            current = self.read_summary()
            current[key] = value
            atomic_write_json(self.summary, current)

    def read_prompts(self) -> list[dict]:
        if not self.prompts.exists():
            raise AuditError(f"{self.root}: not a run directory (no prompts.jsonl)")
        return read_records(self.prompts, "prompts")

    def read_images(self, *, merging: bool = False) -> list[dict]:
        """images.jsonl's records; ``merging``: the generate stage's merge, which writes it again, reads what is
        there (a file cut short or a repeated line included: the merge makes it whole, one record an image)."""
        return read_records(self.images, "images", merging=merging)

    def read_image_shards(self) -> list[dict]:
        """Every record in shards/images.rank*.jsonl (the resume's other source), in file order."""
        return [r for p in sorted((self.root / "shards").glob("images.rank*.jsonl"))
                for r in read_records(p, "image-shard")]

    def read_scores(self, path: "Path | str") -> list[dict]:
        """The records of a score file (``scores/<scorer>.jsonl`` or one of its shards), each checked."""
        return score_records(path)
