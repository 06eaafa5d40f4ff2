"""Output folders: one rule for who may write where.

A command writes only into a folder that is new, empty, or already its own. "Its own" means: the
folder's marker (``.t2i-audit.json``) names the same kind of output, the same command, and — for a
command that resumes its folder — the same settings. The marker records

* ``kind``: what readers accept (``report``, ``verify``, ``score`` take any ``run``);
* ``command``: which command made it (``run`` and ``select`` both make runs, but a ``select`` into a
  plain run would replace its images with other ones);
* ``settings`` and ``settings_id``: what determines the folder's contents (:mod:`t2i_audit.resume`),
  for the commands that resume: a second call with other settings would mix two results in one folder.

:data:`WRITERS` is the registry: every kind, and the commands allowed to make it. Folders made before
a marker named its command (a version-1 marker, or no marker: an older layout) keep working as they
did: their kind is read from the marker or the layout, their command inferred where the files tell it,
their settings are unknown and so never compared.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from .errors import AuditError
from .resume import differences, settings_id
from . import rundir
from .rundir import RunLock, atomic_write_bytes, file_mode, naming, process_rank

MARKER = ".t2i-audit.json"  # {"tool": "t2i-audit", "kind", "version", "command", "settings_id", "settings"}
MARKER_VERSION = 2  # 1: kind only

# kinds whose folder several processes write at once by design, each part under its own lock: a sweep's
# workers (`--workers 2`, or two sweeps on one --out) each train their own model (mini/sweep_work.py)
SHARED_KINDS = frozenset({"sweep"})

# kind → the commands that make it (the first is the default of ``claim_output_dir``). A command
# registered here gets the ownership rule, and the property tests over every writer, for free.
WRITERS: dict[str, tuple[str, ...]] = {
    "run": ("run", "select"),
    "report": ("report",),
    "compare": ("compare",),
    "mini-judge": ("mini train-judge",),
    "mini-generator": ("mini train-generator",),
    "mini-samples": ("mini train-generator",),
    "sweep": ("mini sweep",),
    "board": ("board",),
    "track": ("track",),
    "prompt-export": ("prompts export",),  # --layout: another generator's prompt files (sources/export.py)
}


def _card_kind(root: Path) -> str | None:
    try:
        card = json.loads((root / "card.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return card.get("kind") if isinstance(card, dict) else None


_SAMPLE = re.compile(r"^(grid|eval)_[\w-]*\.png$")

# Folders made before the marker existed, recognised by their layout so that old runs still resume.
LEGACY_LAYOUTS: dict[str, Callable[[Path], bool]] = {
    "run": lambda r: (r / "manifest.json").is_file() and ((r / "run.yaml").is_file() or (r / "prompts.jsonl").is_file()),
    "report": lambda r: ((r / "index.html").is_file() and (r / "results.csv").is_file())
    or (r.name == "report" and LEGACY_LAYOUTS["run"](r.parent)),  # a run's own report folder (label.html only)
    "compare": lambda r: (r / "compare.json").is_file() and (r / "index.html").is_file(),
    "mini-judge": lambda r: _card_kind(r) == "mini-judge",
    "mini-generator": lambda r: _card_kind(r) == "mini-generator",
    "sweep": lambda r: (r / "sweep.json").is_file() or [p.name for p in r.iterdir()] == ["models"],
    "track": lambda r: False,  # made with its marker from the start: no older layout
    "mini-samples": lambda r: any(r.iterdir()) and all(p.is_file() and _SAMPLE.match(p.name) for p in r.iterdir()),
}


@dataclass(frozen=True)
class Maker:
    """What made a folder, as far as it records it."""

    kind: str  # "" for a claim killed between creating the marker and writing it
    command: Optional[str] = None  # None: not recorded and not inferable
    settings: Optional[dict] = None  # None: not recorded (a command that replaces, or an older folder)
    settings_id: Optional[str] = None


def _read_manifest(root: Path) -> dict:
    try:
        m = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return m if isinstance(m, dict) else {}


def _inferred_command(root: Path, kind: str) -> Optional[str]:
    """The command that made an older folder (no command in its marker), where its files tell it."""
    writers = WRITERS.get(kind, ())
    if len(writers) == 1:
        return writers[0]
    if kind == "run":
        manifest = _read_manifest(root)
        if not manifest:
            return None
        generate = (manifest.get("stages") or {}).get("generate")
        return "select" if isinstance(generate, dict) and "selection" in generate else "run"
    return None


def folder_maker(root: "Path | str") -> Optional[Maker]:
    """What made ``root`` (its marker, else a legacy layout), or None when t2i-audit did not."""
    root = Path(root)
    marker = root / MARKER
    if marker.is_file():
        for _ in range(100):  # a concurrent claim (another rank) writes it right after creating it
            raw = marker.read_bytes()
            if raw:
                break
            time.sleep(0.01)
        else:
            return Maker(kind="")  # created and never written: a claim killed in between; ours, kind unknown
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        kind = data.get("kind") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            raise AuditError(f"{marker}: damaged t2i-audit marker; remove it only if the folder is yours to overwrite")
        command = data.get("command")
        settings = data.get("settings")
        return Maker(kind=kind, command=command if isinstance(command, str) else _inferred_command(root, kind),
                     settings=settings if isinstance(settings, dict) else None,
                     settings_id=data.get("settings_id") if isinstance(settings, dict) else None)
    if not root.is_dir():
        return None
    kind = next((k for k, is_layout in LEGACY_LAYOUTS.items() if is_layout(root)), None)
    return Maker(kind=kind, command=_inferred_command(root, kind)) if kind else None


def folder_kind(root: "Path | str") -> str | None:
    """The kind of t2i-audit output ``root`` holds (its marker, else a legacy layout), or None."""
    maker = folder_maker(root)
    return maker.kind if maker else None


def resume_command(root: "Path | str") -> str:
    """The command that continues the run in ``root``: the one its manifest records (``select`` records
    itself: a `run --config RUN/run.yaml` would generate every seed in full), else `run --config`."""
    root = Path(root)
    manifest = _read_manifest(root)
    argv = manifest.get("resume_argv")
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return shlex.join(["t2i-audit", *argv, "--out", str(root)])
    selection = ((manifest.get("stages") or {}).get("generate") or {}).get("selection")
    if isinstance(selection, dict):  # a select run made before it recorded its command
        shown = ", ".join(f"--{k} {selection[k]}" for k in ("from", "of", "keep", "at") if k in selection)
        return (f"the `t2i-audit select` command that made it ({shown}, as manifest.json records) with --out {root}; "
                f"not `run --config`, which would generate every seed in full")
    return shlex.join(["t2i-audit", "run", "--config", str(root / "run.yaml"), "--out", str(root)])


# --- one writer at a time --------------------------------------------------------------------------

_scope: list[contextlib.ExitStack] = []  # the command running now (cli.main), whose writer locks are held


@contextlib.contextmanager
def command_scope() -> Iterator[None]:
    """The span of one command (``cli.main``): every folder it claims or writes into (:func:`claim_output_dir`,
    :func:`require_kind`) is locked for writing until it ends — a second command writing the same folder is
    refused at once with the holder's pid; commands that only read a folder never take its lock."""
    with contextlib.ExitStack() as stack:
        _scope.append(stack)
        try:
            yield
        finally:
            _scope.pop()


def hold(folder: "Path | str") -> None:
    """Lock ``folder`` for writing (this process's rank's lock) until the running command ends; outside a
    command (the Python API) nothing is held here: its callers lock what they write (``api.run_audit``)."""
    if _scope:
        _scope[-1].enter_context(RunLock(Path(folder), process_rank()))


def enclosing_run(path: "Path | str") -> Optional[Path]:
    """The t2i-audit run folder ``path`` lies inside (not ``path`` itself), or None."""
    p = Path(os.path.abspath(path))
    for parent in p.parents:
        if parent.is_dir() and _is_run(parent):
            return parent
    return None


def _is_run(root: Path) -> bool:
    marker = root / MARKER
    if marker.is_file():
        with contextlib.suppress(OSError, ValueError, RecursionError):
            data = json.loads(marker.read_bytes() or b"{}")
            return isinstance(data, dict) and data.get("kind") == "run"
        return False
    return LEGACY_LAYOUTS["run"](root)


def _refuse_other_maker(root: Path, maker: Maker, kind: str, command: str, settings: Optional[Mapping]) -> None:
    if maker.kind != kind:
        raise AuditError(f"{root}: holds a t2i-audit {maker.kind}, not a {kind}; refusing to write into it "
                         "— choose another output folder")
    if maker.command is not None and maker.command != command:
        hint = f"; to continue it: {resume_command(root)}" if kind == "run" else ""
        raise AuditError(f"{root}: made by `t2i-audit {maker.command}`, not by `t2i-audit {command}`; refusing to "
                         f"write into it (its files would be mixed with or replaced by this command's) — choose "
                         f"another output folder{hint}")
    if settings is not None and maker.settings_id is not None and maker.settings_id != settings_id(settings):
        diff = "; ".join(differences(maker.settings or {}, settings))
        raise AuditError(f"{root}: made by `t2i-audit {command}` with other settings ({diff}); refusing to resume "
                         f"it with these (its files would mix two settings) — choose another output folder, or "
                         f"rerun with the settings {root / MARKER} records")


def _marker_bytes(kind: str, command: str, settings: Optional[Mapping]) -> bytes:
    data: dict[str, Any] = {"tool": "t2i-audit", "kind": kind, "version": MARKER_VERSION, "command": command}
    if settings is not None:
        data.update(settings_id=settings_id(settings), settings=json.loads(json.dumps(settings, default=str)))
    return json.dumps(data, ensure_ascii=False).encode() + b"\n"


PACKAGE_DIR = Path(__file__).resolve().parent


def refuse_package_path(path: "Path | str", what: str = "output") -> Path:
    """The tool never writes into its own installed package (with an editable install: into the checkout's
    ``t2i_audit/``): a path inside it is refused with what to do. The shipped weights and cards are data the
    tests and the README's numbers rest on; a command that rewrote them would change them under every user."""
    p = Path(path)
    resolved = p.resolve()
    if resolved == PACKAGE_DIR or PACKAGE_DIR in resolved.parents:
        raise AuditError(f"{what} {p}: inside the installed t2i-audit package ({PACKAGE_DIR}), which t2i-audit never "
                         "writes into; copy what you mean to change out of it first (e.g. `cp -r "
                         f"{resolved} my-copy`) and name the copy")
    return p


def check_claimable(path: "Path | str", kind: str, *, command: Optional[str] = None,
                    settings: Optional[Mapping[str, Any]] = None) -> Optional[Maker]:
    """:func:`claim_output_dir`'s refusals, writing nothing: for a command that reads its inputs before it
    knows all its settings, so that a foreign ``--out`` is named before any input's problem. Returns what
    made the folder (None: new or empty)."""
    command = command or WRITERS[kind][0]
    if command not in WRITERS.get(kind, ()):
        raise ValueError(f"{command!r} is not a registered writer of {kind!r} folders (ownership.WRITERS)")
    root = refuse_package_path(path)
    if root.exists() and not root.is_dir():
        raise AuditError(f"{root}: is a file, not a folder; choose another output folder")
    maker = folder_maker(root) if root.is_dir() else None
    if maker is not None and maker.kind:
        _refuse_other_maker(root, maker, kind, command, settings)
        return maker
    entries = {p.name for p in root.iterdir()} if maker is None and root.is_dir() else set()
    if MARKER in entries and (root / MARKER).is_file():  # claimed by another process since we looked
        return check_claimable(root, kind, command=command, settings=settings)
    if entries:
        raise AuditError(f"{root}: folder is not empty and was not made by t2i-audit (no {MARKER}); refusing "
                         "to write into it, so nothing of yours is overwritten — choose a new or empty folder")
    return maker


def claim_output_dir(path: "Path | str", kind: str, *, command: Optional[str] = None,
                     settings: Optional[Mapping[str, Any]] = None, within: "Path | str | None" = None) -> Path:
    """Make ``path`` the output folder of ``command`` (a writer of ``kind``, :data:`WRITERS`), or refuse
    with the path, what made it and what differs — before anything is written.

    Allowed: a new folder, an empty one, or one this command made (its marker, or an older layout of
    this kind) — with the same ``settings`` when it records them and they are given (a command that
    resumes its folder gives them; one that replaces what it writes does not). The marker is created
    with O_EXCL, so processes of one run (Accelerate ranks) claiming together agree; nothing else is
    written here. Anything else — a file, a folder holding files this tool did not write, another
    kind's or command's output, a folder inside a run (``within``, the run the command writes, excepted: a
    run's own report) — is refused: we never overwrite or delete what is not ours. In a command, the folder
    (or ``within``) stays locked for writing until the command ends (:func:`command_scope`).
    """
    command = command or WRITERS[kind][0]
    root = Path(path)
    run = enclosing_run(root)
    if run is not None and (within is None or os.path.realpath(run) != os.path.realpath(within)):
        raise AuditError(f"{root}: lies inside the t2i-audit run {run}; refusing to write there (that run's "
                         "files would be mixed with or replaced by this output) — choose a folder outside it")
    maker = check_claimable(root, kind, command=command, settings=settings)
    if maker is None or not maker.kind:
        _create_marker(root, kind, command, settings, maker)
    if kind not in SHARED_KINDS:
        hold(within if run is not None else root)
    return root


def _create_marker(root: Path, kind: str, command: str, settings: Optional[Mapping], maker: Optional[Maker]) -> None:
    new = not root.exists()
    with naming(root / MARKER):
        root.mkdir(parents=True, exist_ok=True)
    data = _marker_bytes(kind, command, settings)
    if maker is not None:  # an interrupted claim of ours (empty marker): finish it
        atomic_write_bytes(root / MARKER, data)
        return
    try:
        with naming(root / MARKER):
            fd = os.open(root / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode())
    except FileExistsError:  # another process claimed it first: fine if for the same command and settings
        check_claimable(root, kind, command=command, settings=settings)
        return
    except OSError:
        if new:
            with contextlib.suppress(OSError):
                root.rmdir()  # the folder we made for it, empty: a full or read-only disk leaves nothing of ours
        raise
    try:
        with naming(root / MARKER), os.fdopen(fd, "wb") as f:
            rundir.persist(f, data)  # looked up at call time: a test that fills the disk fills it here too
    except BaseException:
        with contextlib.suppress(OSError):  # ours (O_EXCL): a marker never written is not left to be read
            os.unlink(root / MARKER)
            if new:
                root.rmdir()
        raise


def claim_output_file(path: "Path | str", *, force: bool = False) -> Path:
    """The single-file output of a command (``prompts export --out``, ``label --out``, ``mini render
    --out``), or refuse with the path and why. A file has no room for a marker telling that we wrote
    it, so an existing one is never replaced unless the user says so (``force``), as a folder
    without our marker is never written into."""
    out = refuse_package_path(path)
    if out.is_dir():
        raise AuditError(f"{out}: is a folder; give a file path")
    if (out.exists() or out.is_symlink()) and not force:
        raise AuditError(f"{out}: file exists and t2i-audit cannot tell it wrote it; refusing to overwrite it "
                         "— choose another path, or pass --force to replace it")
    return out


def require_kind(path: "Path | str", kind: str) -> Path:
    """Refuse unless ``path`` already holds this kind of t2i-audit output (writes nothing): the check of a
    command that writes into it. Any writer of the kind will do: ``score``, ``probe``, ``report``,
    ``calibrate`` write into a run made by ``run`` or ``select``. In a command, ``path`` stays locked for
    writing until the command ends (:func:`command_scope`)."""
    root = Path(path)
    if not root.is_dir():
        raise AuditError(f"{root}: {kind} directory not found (or not a folder)")
    found = folder_kind(root)
    if found != kind:
        what = f"a t2i-audit {found}" if found else "not made by t2i-audit"
        raise AuditError(f"{root}: not a t2i-audit {kind} ({what}); refusing to write into it")
    hold(root)
    return root
