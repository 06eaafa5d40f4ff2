"""Issue 36's properties over every command the Typer app registers (the table of
tests/spine/test_command_properties.py, ``CASES``: a command without a case fails there):

(1) a run's own records are inputs: a mutated record (t2i_audit.records.RECORD_KINDS) is refused by every
    command that reads it — exit 2, the file (and line), no traceback, nothing rewritten — and ``verify``
    names it (the same schemas); what a quick command reads is recorded as it runs, so a case cannot
    under-declare its reads;
(2) one writer at a time: a command that writes a folder (``Case.writes``) is refused at once while another
    process holds that folder's lock, and writes nothing; a command that only reads a run is never blocked;
(3) inputs are regular files of bounded size: a FIFO, ``/dev/zero``, a folder or a file past the bound given
    to any file parameter is refused at once, named, exit 2;
(4) a full disk, a quota, a read-only file system or no permission at the write function — every writing
    command says what, where and what to do, exit 2, and leaves no half-written file.

Every case runs the real entry point (``t2i_audit.cli.main``) in-process. A call that cannot reach the
property with this world's inputs is skipped with the reason written on it.
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import math
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from t2i_audit import records
from t2i_audit.ownership import MARKER, SHARED_KINDS, WRITERS
from t2i_audit.records import RECORD_KINDS
from t2i_audit.safeload import MAX_INPUT_BYTES

from ..drills.test_drill_three import bounded
from ..drills.test_record_kinds import SAMPLES
from .test_command_properties import (CASES, IN_DIR, IN_FILE, OUT_DIR, OUT_FILE, _argv, _snapshot, invoke,
                                      world)  # noqa: F401 (world: the fixture of valid inputs)

RUNS = ("RUN", "RUN2", "REPORTED")  # the world inputs that are run folders

# --- (1) a mutated record of every kind --------------------------------------------------------------------

# where each kind lives when the world lacks it, and the mutation the command level uses (the drill's own
# reproducers where it names one: a verdict "false", a probe's unknown pooling)
FILE_OF = {"scores": "scores/mini-pixel.jsonl", "score-shard": "scores/shards/mini-pixel.rank1.jsonl",
           "image-shard": "shards/images.rank0.jsonl", "calibration": "calibration/report.json",
           "activation-index": "activations/text_encoder/index.jsonl", "selection": "selection.jsonl",
           "early-risk": "probes/early_risk.jsonl", "failure-probe": "probes/failure_probe.json",
           "early-probes": "probes/early_probes.json", "prompts": "prompts.jsonl", "images": "images.jsonl",
           "manifest": "manifest.json", "summary": "summary.json", "refusals": "refusals.jsonl"}
MUTATE = {"scores": (("verdict",), "false"), "score-shard": (("verdict",), "false"), "images": (("sample",), -1),
          "image-shard": (("sha256",), 5), "prompts": (("questions",), "q0"), "summary": (("report",), "x"),
          "manifest": (("stages", "generate", "status"), "finished"), "activation-index": (("row",), "0"),
          "calibration": (("scorers", "clip-foil", "levels", "prompt", "color_binding", "accuracy"), math.nan),
          "failure-probe": (("pooling",), "max"), "early-probes": (("settings", "dtype"), "float8"),
          "selection": (("risk",), math.nan), "early-risk": (("risk",), 1.5), "refusals": (("reason",), "nsfw")}


def _records_of(kind: str, run: Path) -> list[dict]:
    """Sound records of ``kind`` for this run (its own where it has them)."""
    own = run / FILE_OF[kind]
    if own.is_file():
        return [json.loads(line) for line in own.read_text().splitlines() if line.strip()] \
            if RECORD_KINDS[kind].lines else [json.loads(own.read_text())]
    if kind in ("scores", "score-shard"):  # mini-pixel's: the scorer the score case runs
        lines = (run / "scores" / "clip-foil.jsonl").read_text().splitlines()
        return [{**json.loads(x), "scorer": "mini-pixel"} for x in lines if x.strip()][:6]
    if kind == "image-shard":
        return _records_of("images", run)
    if kind in ("activation-index",):
        return [{"row": i, "prompt_id": p["id"]} for i, p in enumerate(_records_of("prompts", run))]
    if kind == "calibration":
        return [{"scorers": {"clip-foil": {"levels": {"prompt": {"color_binding": {"n": 12, "accuracy": 0.8,
                                                                                   "kappa": 0.5}}}}}}]
    return [copy.deepcopy(SAMPLES[kind]), copy.deepcopy(SAMPLES[kind])] if RECORD_KINDS[kind].lines \
        else [copy.deepcopy(SAMPLES[kind])]


def _write(path: Path, kind: str, recs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in recs) if RECORD_KINDS[kind].lines
                    else json.dumps(recs[0], allow_nan=True, indent=1))


def damage(run: Path, kind: str) -> str:
    """Give ``run`` a file of ``kind`` whose one record is mutated; return where a refusal must point
    (``file:line`` for a JSONL record, the file for a document)."""
    recs = _records_of(kind, run)
    assert recs, kind
    keys, value = MUTATE[kind]
    line = min(2, len(recs))
    node = recs[line - 1]
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    path = run / FILE_OF[kind]
    _write(path, kind, recs)
    return f"{path}:{line}:" if RECORD_KINDS[kind].lines else f"{path}:"


def _copies(world: dict, tmp: Path) -> dict:
    """The world with its runs copied (the copies get damaged)."""
    w = dict(world)
    for key in RUNS:
        w[key] = Path(shutil.copytree(world[key], tmp / "w" / key))
    return w


def _data(root: Path) -> dict:
    """A folder's files by content, lock files left out (a writer's lock is not data)."""
    return {k: v for k, v in _snapshot(root).items() if not Path(k).name.startswith(".lock")}


def _reads():
    out = []
    for cmd, case in CASES.items():
        for param, kinds in case.reads.items():
            out += [pytest.param(cmd, param, kind, id=f"{cmd.replace(' ', '-')}:{param}:{kind}") for kind in sorted(kinds)]
    return out


def test_every_record_kind_is_read_by_a_command_that_is_held_to_it():
    declared = {k for case in CASES.values() for kinds in case.reads.values() for k in kinds}
    # verify reads every kind (below); the others are each read by at least one command of the table
    assert declared <= set(RECORD_KINDS) and len(declared) >= 10, declared
    assert set(MUTATE) == set(FILE_OF) == set(RECORD_KINDS), "a new record kind needs a file and a mutation here"


@pytest.mark.parametrize("cmd,param,kind", _reads())
def test_a_mutated_record_is_refused_by_every_command_that_reads_it(cmd, param, kind, world, tmp_path, monkeypatch,
                                                                    capsys):
    case = CASES[cmd]
    w = _copies(world, tmp_path)
    run = w[case.values[param]] if case.values.get(param) in RUNS else w["RUN"]  # the board reads a reported run
    runs = [w["RUN"], w["RUN2"]] if cmd == "compare" else [run]
    where = damage(run, kind)
    if cmd == "compare":
        damage(w["RUN2"], kind)  # whichever run is read first
    given = {param: str(run)}
    before = {str(r): _data(r) for r in runs}
    argv = _argv(case, w, tmp_path / "out", **given)
    code, out = invoke(argv, tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2 and "Traceback" not in out, out
    said = "not a sound" in out or "damaged fitted probe" in out  # probes/probe_files.py words its own
    if cmd == "compare":
        assert f"{FILE_OF[kind]}:" in out and said, out
    else:
        assert where in out and said, (where, out)
    assert {str(r): _data(r) for r in runs} == before, "a refused command rewrote the run"
    assert not (tmp_path / "out").exists(), "a refused command wrote its output"


@pytest.mark.parametrize("kind", sorted(RECORD_KINDS))
def test_verify_names_every_record_its_readers_refuse(kind, world, tmp_path, monkeypatch, capsys):
    w = _copies(world, tmp_path)
    where = damage(w["RUN"], kind)
    before = _data(w["RUN"])
    code, out = invoke(["verify", str(w["RUN"])], tmp_path, monkeypatch, capsys)
    assert code == 1, out
    rel = FILE_OF[kind]
    line = where.rsplit(":", 2)[-2] if RECORD_KINDS[kind].lines else None
    assert any(l.strip().startswith(f"{rel}: ") and (line is None or f"line(s) {line}" in l) for l in out.splitlines()
               if "its readers refuse" in l or "—" in l), out
    assert "fields: a record its readers refuse" in out, out
    assert _data(w["RUN"]) == before


@pytest.mark.parametrize("cmd", sorted(k for k, v in CASES.items() if v.quick and v.reads))
def test_a_quick_command_reads_only_the_kinds_its_case_declares(cmd, world, tmp_path, monkeypatch, capsys):
    """Every read of a run record goes through t2i_audit.records; a kind read but not declared fails here (so
    the refusal test above covers it)."""
    case = CASES[cmd]
    w = _copies(world, tmp_path)
    for kind in ("calibration", "image-shard"):  # files a run may hold that the synthetic world lacks
        recs = _records_of(kind, w["RUN"])
        _write(w["RUN"] / FILE_OF[kind], kind, recs)
    seen: set[str] = set()  # the kinds read from the world's runs (not from the command's own new output)
    runs = [str(w[k]) + os.sep for k in RUNS]
    monkeypatch.setattr(records, "_observers", [lambda kind, path: seen.add(kind) if any(
        str(Path(path).absolute()).startswith(r) for r in runs) else None])
    (tmp_path / "cwd").mkdir()
    code, out = invoke(_argv(case, w, tmp_path / "cwd"), tmp_path / "cwd", monkeypatch, capsys)
    assert code == 0, out
    declared = set().union(*case.reads.values())
    assert seen <= declared, f"{cmd} reads {sorted(seen - declared)} without declaring it (Case.reads)"


# --- (2) one writer at a time ------------------------------------------------------------------------------

PID = "4242"


@contextmanager
def held(folder: Path):
    """Another process's writer lock on ``folder``: a second open file description of its lock file, flock-ed
    (RunLock in this process opens its own and is refused, as it would be in another process)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, PID.encode(), 0)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _kind_made_by(cmd: str) -> str:
    return next(kind for kind, cmds in WRITERS.items() if cmd in cmds)


def _writes():
    out = []
    for cmd, case in CASES.items():
        for param in sorted(case.writes):
            marks = []
            if case.paths[param] == OUT_DIR and _kind_made_by(cmd) in SHARED_KINDS:
                marks.append(pytest.mark.skip(reason="a sweep's folder is written by several workers at once by "
                                                     "design, each model under its own lock (mini/sweep_work.py)"))
            if cmd == "select":
                marks.append(pytest.mark.skip(reason="select claims its folder only after a probed --from run; "
                                                     "its claim is run's (claim_output_dir), held the same way"))
            out.append(pytest.param(cmd, param, id=f"{cmd.replace(' ', '-')}:{param}", marks=marks))
    return out


@pytest.mark.parametrize("cmd,param", _writes())
def test_a_writer_is_refused_while_another_process_writes_the_folder(cmd, param, world, tmp_path, monkeypatch, capsys):
    case = CASES[cmd]
    w = _copies(world, tmp_path)
    if case.paths[param] == IN_DIR:
        folder = w[case.values[param]]
    else:  # a folder this command made before (a version-1 marker: kind only, settings never compared)
        folder = tmp_path / f"own-{param}"
        folder.mkdir()
        (folder / MARKER).write_text(json.dumps({"tool": "t2i-audit", "kind": _kind_made_by(cmd), "version": 1}))
    before = _data(tmp_path / "w") if (tmp_path / "w").exists() else {}
    with held(folder):
        snapshot = _data(folder)
        code, out = invoke(_argv(case, w, tmp_path, **{param: str(folder)}), tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2 and f"in use by pid {PID}" in out and str(folder) in out, out
    assert _data(folder) == snapshot and _data(tmp_path / "w") == before, "a refused writer wrote"


def _run_readers():
    return [pytest.param(cmd, param, id=f"{cmd.replace(' ', '-')}:{param}") for cmd, case in CASES.items()
            for param, role in case.paths.items()
            if role == IN_DIR and case.values.get(param) in RUNS and param not in case.writes]


@pytest.mark.parametrize("cmd,param", _run_readers())
def test_a_command_that_only_reads_a_run_is_never_blocked(cmd, param, world, tmp_path, monkeypatch, capsys):
    case = CASES[cmd]
    w = _copies(world, tmp_path)
    folder = w[case.values[param]]
    with held(folder):
        before = _data(folder)
        code, out = invoke(_argv(case, w, tmp_path), tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"{code!r}\n{out}"
    assert "in use by pid" not in out, out
    if case.quick:
        assert code == 0, out
    assert _data(folder) == before


@pytest.mark.parametrize("cmd", sorted(k for k, v in CASES.items() if v.quick))
def test_a_quick_command_writes_only_the_folders_its_case_declares(cmd, world, tmp_path, monkeypatch, capsys):
    """So the lock test above is held to every folder a command writes: an undeclared write fails here."""
    case = CASES[cmd]
    w = _copies(world, tmp_path)
    inputs = {p: w[case.values[p]] for p, role in case.paths.items() if role == IN_DIR and case.values.get(p) in RUNS}
    before = {p: _data(f) for p, f in inputs.items()}
    (tmp_path / "cwd").mkdir()
    code, out = invoke(_argv(case, w, tmp_path / "cwd"), tmp_path / "cwd", monkeypatch, capsys)
    assert code == 0, out
    changed = {p for p, f in inputs.items() if _data(f) != before[p]}
    assert changed == {p for p in inputs if p in case.writes}, (changed, case.writes)


def test_label_writing_into_the_run_takes_its_lock(world, tmp_path, monkeypatch, capsys):
    """label's default page lies in the run (RUN/report/label.html): then it writes the run; with --out, it reads."""
    w = _copies(world, tmp_path)
    with held(w["RUN"]):
        code, out = invoke(["label", str(w["RUN"]), "--n", "2"], tmp_path, monkeypatch, capsys)
    assert code == 2 and f"in use by pid {PID}" in out, out
    assert not (w["RUN"] / "report" / "label.html").exists()


# --- (3) special files as inputs ---------------------------------------------------------------------------


def _special(kind: str, tmp: Path, suffix: str) -> Path:
    if kind == "device":
        return Path("/dev/zero")
    path = tmp / f"{kind}{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "x.yaml").write_text("a: 1\n")
    else:  # past the bound, sparse: no disk used
        with open(path, "wb") as f:
            f.truncate(MAX_INPUT_BYTES + 1)
    return path


def _file_params():
    return [pytest.param(cmd, param, kind, id=f"{cmd.replace(' ', '-')}:{param}:{kind}")
            for cmd, case in CASES.items() for param, role in case.paths.items() if role == IN_FILE
            for kind in ("fifo", "device", "folder", "huge")]


@pytest.mark.parametrize("cmd,param,kind", _file_params())
def test_a_special_file_given_as_an_input_is_refused_at_once(cmd, param, kind, world, tmp_path, monkeypatch, capsys):
    case = CASES[cmd]
    suffix = Path(str(world.get(case.values.get(param), "x.yaml"))).suffix
    path = _special(kind, tmp_path, suffix)
    with bounded():
        code, out = invoke(_argv(case, world, tmp_path, **{param: str(path)}), tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"{code!r}\n{out}"
    assert code == 2 and "Traceback" not in out and str(path) in out, out


# --- (4) full, read-only and forbidden disks ---------------------------------------------------------------

FAULTS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT)
SAID = {errno.ENOSPC: "no space left on the device (ENOSPC); free space", errno.EROFS:
        "the file system is read-only (EROFS); copy the folder to a writable disk",
        errno.EACCES: "permission denied (EACCES); make it readable and writable",
        errno.EDQUOT: "disk quota exceeded (EDQUOT); free space within your quota"}
NO_FAST_WRITE = {
    "select": "its first write follows a scan of a probed --from run; its writes are run's (rundir.atomic_write_bytes)",
    "predict": "its one write (atomic_write_jsonl --out) follows a fitted probe of the mini encoder; prompts export "
               "writes the same way",
    "mini eval-generator": "its --grid is written after an evaluation of the mini generator; mini render writes a PNG "
                           "the same way",
}


def _writers():
    out = []
    names = sorted(k for k, v in CASES.items() if v.writes or OUT_FILE in v.paths.values())
    for i, cmd in enumerate(names):
        marks = [pytest.mark.skip(reason=NO_FAST_WRITE[cmd])] if cmd in NO_FAST_WRITE else []
        out.append(pytest.param(cmd, FAULTS[i % len(FAULTS)], id=f"{cmd.replace(' ', '-')}:"
                                f"{errno.errorcode[FAULTS[i % len(FAULTS)]]}", marks=marks))
    out += [pytest.param("report", e, id=f"report:{errno.errorcode[e]}") for e in FAULTS]  # every errno, one command
    return out


@pytest.mark.parametrize("cmd,err", _writers())
def test_a_full_or_read_only_disk_is_said_with_what_where_and_what_to_do(cmd, err, world, tmp_path, monkeypatch,
                                                                          capsys):
    from t2i_audit import rundir

    def failing(f, data, *, durable=True):  # rundir.persist's signature
        raise OSError(err, os.strerror(err))

    case = CASES[cmd]
    w = _copies(world, tmp_path)
    monkeypatch.setattr(rundir, "persist", failing)
    (tmp_path / "cwd").mkdir()
    code, out = invoke(_argv(case, w, tmp_path / "cwd"), tmp_path / "cwd", monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2 and "Traceback" not in out, out
    line = next((l for l in out.splitlines() if l.startswith("error: ")), "")
    assert SAID[err] in line and str(tmp_path) in line, out  # what, where (the file meant), what to do
    assert not [p for p in tmp_path.rglob(".*.tmp")], "a half-written staging file was left"
