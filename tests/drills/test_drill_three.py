"""The third drill (issue 36), one reproducer per class, as a hostile or unlucky user meets it: files the tool
reads back edited, a resume with another suite or fewer samples, verify's advice followed to the letter, two
writers at once, special files as inputs, a disk that fills or is read-only, surprising defaults. Each goes
through the real entry point (``t2i_audit.cli.main``) and asserts what the user sees and what is left on disk.
The properties behind them — over every record kind and every command — are in tests/drills/test_record_kinds.py
and tests/spine/test_command_safety.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from t2i_audit import api
from t2i_audit.rundir import RunDir

from ..spine.test_command_properties import invoke

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from synth import make_prompts, make_run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict:
    """Every file under ``root`` by content (lock files are no data)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".lock")}


def _refused(code, out: str, *fragments: str) -> None:
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2 and "Traceback" not in out and out.startswith("error: "), out
    for f in fragments:
        assert f in out, (f, out)


@pytest.fixture
def two_runs(tmp_path) -> tuple[Path, Path]:
    prompts = make_prompts(n_binding=4, n_rel=2, n_count=2)
    a = make_run(tmp_path / "a", prompts=prompts, samples=1, black=0, scorers=("clip-foil",), probes=False)
    b = make_run(tmp_path / "b", prompts=prompts, samples=1, black=0, scorers=("clip-foil",), probes=False, skill=0.5)
    return a, b


# --- 1. files the tool reads back are checked, not trusted by type ------------------------------------------


def test_a_verdict_false_as_a_string_is_refused_by_compare_report_and_verify(two_runs, tmp_path, monkeypatch,
                                                                            capsys):
    """Drill: a score file whose verdict is the string "false" counted as a pass — compare gave that run 1.000
    against 0.438 ("+0.56, significant"), report rewrote index.html then died, verify said clean."""
    a, b = two_runs
    path = a / "scores" / "clip-foil.jsonl"
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if json.loads(line)["verdict"] is False)
    recs = [json.loads(line) for line in lines]
    path.write_text("".join(json.dumps({**r, "verdict": "false" if r["verdict"] is False else r["verdict"]}) + "\n"
                            for r in recs))
    before = _files(a)
    code, out = invoke(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")], tmp_path, monkeypatch, capsys)
    _refused(code, out, f"{path}:{first}: not a sound scores record: verdict: Input should be a valid boolean")
    assert not (tmp_path / "cmp").exists()
    code, out = invoke(["report", str(a)], tmp_path, monkeypatch, capsys)
    _refused(code, out, f"{path}:{first}:")
    assert _files(a) == before, "report rewrote part of the run (page and summary.json would disagree)"
    code, out = invoke(["verify", str(a)], tmp_path, monkeypatch, capsys)
    assert code == 1 and f"scores/clip-foil.jsonl: " in out and f"first, line {first}: verdict" in out, out


# --- 2. the run's identity covers every input --------------------------------------------------------------


def test_a_suite_edited_in_place_is_not_resumed_as_the_old_one(tmp_path, monkeypatch, capsys):
    """Drill: a category changed, texts the same: the run kept its old records without a word."""
    suite = tmp_path / "mine.yaml"
    suite.write_text((REPO / "prompts" / "mini.yaml").read_text())
    argv = ["run", "--model", "mini", "--prompts", str(suite), "--limit", "4", "--stages", "prompts",
            "--out", str(tmp_path / "run")]
    code, out = invoke(argv, tmp_path, monkeypatch, capsys)
    assert code == 0, out
    before = _files(tmp_path / "run")
    suite.write_text(suite.read_text().replace("category: color_binding", "category: binding_of_colours"))
    code, out = invoke(argv, tmp_path, monkeypatch, capsys)
    _refused(code, out, "other settings", "prompts: ")
    assert _files(tmp_path / "run") == before


def test_the_prompt_digest_covers_the_whole_records_and_still_matches_an_older_marker():
    records = api.expand_suites([str(REPO / "prompts" / "mini.yaml")], 4)
    edited = [{**r, "category": "other"} if i == 0 else r for i, r in enumerate(records)]
    assert api.prompt_digest(records) != api.prompt_digest(edited)  # texts and ids the same
    assert api.prompt_digest(records).startswith("4 prompts, content sha256 ")
    lines = "\n".join(f"{r['id']}\t{r['text']}" for r in records)  # what a marker recorded before
    older = f"4 prompts, sha256 {hashlib.sha256(lines.encode()).hexdigest()[:16]}"
    assert api.prompt_digest(records, older) == older  # a run made before still resumes
    assert api.prompt_digest(records[:3], older) != older


def _tiny(out: Path, **kw) -> list[str]:
    """A tiny-sd run of 2 prompts at 2 steps: images in about a second."""
    args = {"--limit": "2", "--steps": "2", "-n": "2", "--batch-size": "2", **kw}
    return ["run", "--model", "tiny-sd", "--prompts", str(REPO / "prompts" / "colors.yaml"),
            *[x for k, v in args.items() for x in (k, v)], "--device", "cpu", "--stages", "prompts,generate",
            "-q", "--out", str(out)]


def test_fewer_images_per_prompt_never_shrinks_a_run(tmp_path, monkeypatch, capsys):
    """Drill: resuming a `-n 4` run with `-n 2` rewrote images.jsonl from 32 records to 16."""
    code, out = invoke(_tiny(tmp_path / "run"), tmp_path, monkeypatch, capsys)
    assert code == 0, out
    before = _files(tmp_path / "run")
    assert len(RunDir(tmp_path / "run").read_images()) == 4
    code, out = invoke(_tiny(tmp_path / "run", **{"-n": "1"}), tmp_path, monkeypatch, capsys)
    _refused(code, out, "holds 2 images per prompt", "-n 2")
    assert _files(tmp_path / "run") == before


# --- 3. verify reads what the resume reads; its advice, followed, loses nothing -----------------------------


@contextmanager
def disk_fills(after: int, err: int = errno.ENOSPC):
    """Every durable write (an fsync: whole files, appended records, markers) fails after ``after`` of them."""
    real = os.fsync
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] > after:
            raise OSError(err, os.strerror(err))
        return real(fd)

    os.fsync = fsync
    try:
        yield
    finally:
        os.fsync = real


def test_a_full_disk_mid_generate_is_said_once_and_verifys_advice_followed_loses_nothing(clean_tiny, tmp_path,
                                                                                        monkeypatch, capsys):
    """Drill: ENOSPC in the manifest update right after the clean "no space left" message gave a traceback; and
    after a kill mid-generate, verify called finished images "stray" and advised moving them out of the run (it
    read images.jsonl, never the shards the resume reads). Every piece of verify's advice is followed here; the
    run then ends with the bytes of an uninterrupted one."""
    run = tmp_path / "run"
    with disk_fills(after=8):  # the prompts stage's files, then the first batches of images
        code, out = invoke(_tiny(run, **{"--limit": "4"}), tmp_path, monkeypatch, capsys)
    _refused(code, out, "no space left")
    assert out.count("error: ") == 1
    made = {r["path"]: r["sha256"] for shard in sorted((run / "shards").glob("images.rank*.jsonl"))
            for r in map(json.loads, shard.read_text().splitlines())}
    assert made and not (run / "images.jsonl").exists()
    code, out = invoke(["verify", str(run), "--json"], tmp_path, monkeypatch, capsys)
    result = json.loads(out)
    assert code == 1 and not result["ok"], out
    moved = tmp_path / "moved-out"
    for p in result["problems"]:  # "stray": move the files listed as stray out of the run directory
        if p["category"] == "stray":
            (moved / p["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(run / p["path"], moved / p["path"])
    taken = {p.relative_to(moved).as_posix() for p in moved.rglob("*") if p.is_file()} if moved.exists() else set()
    assert not taken & set(made), f"verify advised moving finished images out of the run: {sorted(taken & set(made))}"
    assert {p["category"] for p in result["problems"]} <= {"stages", "images", "stray"}, result["problems"]
    code, out = invoke(result["resume"].split()[1:], tmp_path, monkeypatch, capsys)  # "rerun the command …"
    assert code == 0, out
    final = {r["path"]: r["sha256"] for r in RunDir(run).read_images()}
    assert all(final.get(p) == sha for p, sha in made.items()), "an image finished before the disk filled was lost"
    assert _files(run / "images") == _files(clean_tiny / "images")
    strip = lambda rd: [{k: v for k, v in r.items() if k != "seconds"} for r in rd.read_images()]  # noqa: E731
    assert strip(RunDir(run)) == strip(RunDir(clean_tiny))  # all but the timing
    code, out = invoke(["verify", str(run)], tmp_path, monkeypatch, capsys)
    assert code == 0, out


def test_verifys_advice_on_damaged_scores_followed_to_the_letter_redoes_them_identically(tmp_path, monkeypatch,
                                                                                       capsys):
    """A record edited by hand (fields), a line appended twice (records), a user's file in scores/ (stray): each
    piece of advice, done as written — the commands it names run as printed — ends with the run's own records."""
    run, ref = tmp_path / "run", tmp_path / "ref"
    code, out = invoke([*_tiny(run), "--stages", "prompts,generate,score", "--scorer", "tiny-clip"], tmp_path,
                       monkeypatch, capsys)
    assert code == 0, out
    shutil.copytree(run, ref)
    scores = run / "scores" / "tiny-clip.jsonl"
    recs = [json.loads(line) for line in scores.read_text().splitlines()]
    i = next(k for k, r in enumerate(recs) if isinstance(r["verdict"], bool))
    recs[i]["verdict"] = str(recs[i]["verdict"]).lower()  # "false" or "true", a string
    scores.write_text("".join(json.dumps(r) + "\n" for r in recs + recs[-1:]))  # the last line twice
    shutil.copy(ref / "scores" / "tiny-clip.jsonl", run / "scores" / "mine.jsonl")
    code, out = invoke(["verify", str(run), "--json"], tmp_path, monkeypatch, capsys)
    result = json.loads(out)
    # the appended line also grows a file its stage finished (complete): the same rescore repairs both
    assert {p["category"] for p in result["problems"]} == {"fields", "records", "stray", "complete"}, result["problems"]
    for category in ("stray", "fields", "records"):
        for p in (p for p in result["problems"] if p["category"] == category):
            path = run / p["path"]
            if category == "stray":  # "move the files listed as stray … out of the run directory"
                shutil.move(path, tmp_path / path.name)
            elif category == "fields":  # "… — remove the file and rerun `t2i-audit score RUN --scorer tiny-clip`"
                path.unlink()
                command = p["problem"].rsplit("`t2i-audit ", 1)[1].rstrip("`").split()
                code, out = invoke(command, tmp_path, monkeypatch, capsys)
                assert code == 0, out
            else:  # "remove the duplicated lines (keep the first), then rerun the stage": the rerun wrote it anew
                assert len(set(path.read_text().splitlines())) == len(path.read_text().splitlines())
    assert scores.read_bytes() == (ref / "scores" / "tiny-clip.jsonl").read_bytes()
    assert _files(run / "images") == _files(ref / "images")
    code, out = invoke(["verify", str(run)], tmp_path, monkeypatch, capsys)
    assert code == 0, out


def test_verify_never_calls_a_killed_score_stages_file_stray(two_runs, tmp_path, monkeypatch, capsys):
    """A score stage killed before it recorded its counts has written scores/<scorer>.jsonl: it is the run's."""
    a, _ = two_runs
    manifest = json.loads((a / "manifest.json").read_text())
    manifest["stages"]["score"] = {"status": "running", "running": ["clip-foil"]}
    (a / "manifest.json").write_text(json.dumps(manifest))
    code, out = invoke(["verify", str(a)], tmp_path, monkeypatch, capsys)
    assert "stray" in out and "move it out" not in out, out
    assert "stage score is unfinished" in out


# --- 4. one writer at a time ---------------------------------------------------------------------------------


def test_a_second_writer_is_refused_while_the_first_writes_and_readers_go_on(two_runs, tmp_path, monkeypatch,
                                                                              capsys):
    """Drill: only run, score and select took the writer lock; two `probe`s at once ended in a
    FileNotFoundError traceback. Here another process holds the run as a writer does."""
    a, b = two_runs
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from t2i_audit.rundir import RunLock; RunLock(sys.argv[1]).acquire(); "
                               "print('held', flush=True); time.sleep(120)", str(a)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _files(a)
        for argv in (["probe", str(a), "--model", "mini", "-q"], ["probe", str(a), "--early", "--model", "mini"],
                     ["report", str(a), "-q"]):
            code, out = invoke(argv, tmp_path, monkeypatch, capsys)
            _refused(code, out, f"{a}: in use by pid {holder.pid}")
        assert _files(a) == before
        code, out = invoke(["verify", str(a)], tmp_path, monkeypatch, capsys)  # readers are never blocked
        assert code in (0, 1) and "a run is writing this directory now" in out, out
        code, out = invoke(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")], tmp_path, monkeypatch, capsys)
        assert code == 0, out
    finally:
        holder.kill()
        holder.wait()


# --- 5. special files as inputs --------------------------------------------------------------------------------


@contextmanager
def bounded(seconds: int = 60, extra_bytes: int = 2 << 30):
    """A refusal is instant: a read that never ends (a FIFO) or never stops growing (/dev/zero) fails the test
    on a timer or a memory cap instead of hanging it or taking a shared machine down."""
    def timeout(*_):
        raise TimeoutError(f"no answer in {seconds} s (a read that never ends)")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    cap = vm + extra_bytes if hard == resource.RLIM_INFINITY else min(hard, vm + extra_bytes)
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("argv", [["run", "--model", "mini", "--stages", "prompts", "--prompts"],
                                  ["prompts", "validate"], ["prompts", "show"], ["prompts", "export", "--out", "x.jsonl"]],
                         ids=["run", "validate", "show", "export"])
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_a_fifo_as_prompts_is_refused_at_once(argv, special, tmp_path, monkeypatch, capsys):
    """Drill: `--prompts /dev/zero` read until the kernel killed it (23 GB); a FIFO blocked forever. `run` and
    `prompts validate/show/export` skipped the input check the other commands make."""
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "suite.yaml"
        os.mkfifo(path)
    with bounded():
        code, out = invoke([*argv, str(path)], tmp_path, monkeypatch, capsys)
    _refused(code, out, str(path), "not a regular file")
    assert not (tmp_path / "x.jsonl").exists()


# --- 6. full and read-only disks -------------------------------------------------------------------------------


@pytest.mark.parametrize("err,said", [(errno.EROFS, "the file system is read-only (EROFS)"),
                                      (errno.ENOSPC, "no space left on the device (ENOSPC)"),
                                      (errno.EACCES, "permission denied (EACCES)")])
def test_report_and_a_new_out_on_a_bad_disk_say_what_where_and_what_to_do(err, said, two_runs, tmp_path, monkeypatch,
                                                                           capsys):
    """Drill: EROFS in `report`, ENOSPC in a new `--out` gave tracebacks."""
    a, b = two_runs
    before = _files(a)
    with disk_fills(after=0, err=err):
        code, out = invoke(["report", str(a), "-q"], tmp_path, monkeypatch, capsys)
        _refused(code, out, said, str(a))
        code, out = invoke(["compare", str(a), str(b), "--out", str(tmp_path / "new")], tmp_path, monkeypatch, capsys)
        _refused(code, out, said, str(tmp_path / "new"))
    assert _files(a) == before and not list(tmp_path.rglob(".*.tmp"))


# --- 7. defaults and acceptances -------------------------------------------------------------------------------


def test_score_without_scorer_uses_the_scorers_the_run_was_scored_with(two_runs, tmp_path, monkeypatch, capsys):
    """Drill: `score RUN` on a mini run picked qwen3-vl-8b (an 8B judge to download), not the run's scorers."""
    a, _ = two_runs
    manifest = json.loads((a / "manifest.json").read_text())
    manifest["stages"]["score"] = {"status": "done", "scorers": {"mini-pixel": {"scored": 16}}}
    (a / "manifest.json").write_text(json.dumps(manifest))
    code, out = invoke(["score", str(a), "--device", "cpu", "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0 and out.startswith("mini-pixel: "), out
    assert [line.split(":")[0] for line in out.splitlines() if " scored now, " in line] == ["mini-pixel"], out


def test_score_of_an_unscored_run_uses_the_scorers_run_would(tmp_path):
    from t2i_audit.scorers.cli import run_scorers

    (tmp_path / "run.yaml").write_text("model: mini\nprompts: [mini]\n")
    assert run_scorers(RunDir(tmp_path)) == ["mini-pixel", "mini-judge"]  # the mini card's
    (tmp_path / "run.yaml").write_text("model: mini\nprompts: [mini]\nscorers: [mini-pixel]\n")
    assert run_scorers(RunDir(tmp_path)) == ["mini-pixel"]


def test_a_report_never_replaces_another_runs_report_nor_lands_inside_another_run(two_runs, tmp_path, monkeypatch,
                                                                                 capsys):
    """Drill: `report A --out B/report` replaced B's report; `--out` inside another run broke its verify."""
    a, b = two_runs
    code, out = invoke(["report", str(b), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    theirs = _files(b)
    code, out = invoke(["report", str(a), "--out", str(b / "report"), "-q"], tmp_path, monkeypatch, capsys)
    _refused(code, out, f"lies inside the t2i-audit run {b}")
    code, out = invoke(["compare", str(a), str(b), "--out", str(b / "cmp")], tmp_path, monkeypatch, capsys)
    _refused(code, out, f"lies inside the t2i-audit run {b}")
    assert _files(b) == theirs
    code, out = invoke(["report", str(a), "--out", str(tmp_path / "rep"), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    code, out = invoke(["report", str(b), "--out", str(tmp_path / "rep"), "-q"], tmp_path, monkeypatch, capsys)
    _refused(code, out, "other settings", "run: ")  # a report folder is claimed for the run it shows


def test_compare_refuses_one_run_given_twice(two_runs, tmp_path, monkeypatch, capsys):
    a, _ = two_runs
    code, out = invoke(["compare", str(a), str(a), "--out", str(tmp_path / "c")], tmp_path, monkeypatch, capsys)
    _refused(code, out, "given twice")
    assert not (tmp_path / "c").exists()


def test_terminal_escape_sequences_in_a_suite_are_printed_escaped(tmp_path, monkeypatch, capsys):
    """Drill: escape sequences in a suite's category reached the terminal raw (a retitled window, a cleared
    screen, hidden text)."""
    suite = tmp_path / "evil.yaml"
    suite.write_text((REPO / "prompts" / "mini.yaml").read_text().replace(
        "category: color\n", 'category: "colour\\e]0;pwned\\a\\e[2J\\e[8m"\n', 1))
    code, out = invoke(["prompts", "validate", str(suite)], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "colour\\x1b]0;pwned\\x07\\x1b[2J\\x1b[8m" in out, out


def test_select_limit_takes_the_subset_run_limit_takes(probed_mini, tmp_path, monkeypatch, capsys):
    """Drill: `select --limit N` expanded the suite with the scan's seed, so it took another subset than
    `run --limit N`."""
    code, out = invoke(["select", "--from", str(probed_mini), "--prompts", str(REPO / "prompts" / "mini.yaml"),
                        "--limit", "4", "--of", "2", "--keep", "1", "--at", "0.5", "--no-baseline",
                        "--device", "cpu", "-q", "--out", str(tmp_path / "sel")], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    run_ids = [r["id"] for r in api.expand_suites([str(REPO / "prompts" / "mini.yaml")], 4)]
    assert [r["id"] for r in RunDir(tmp_path / "sel").read_prompts()] == run_ids


# --- the import circle ownership ↔ resume ↔ rundir -------------------------------------------------------------


def test_the_run_folder_modules_form_no_import_circle():
    """rundir re-exported ownership's names (a lazy import back): ownership → rundir → ownership, and
    ownership → resume → rundir → ownership. Every import counts, function-level ones too."""
    import ast

    names = ("ownership", "resume", "rundir", "records", "safeload", "errors", "oserrors")
    edges = {}
    for name in names:
        path = REPO / "t2i_audit" / f"{name}.py"
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        edges[name] = found & set(names)

    def cycle(start, node, seen):
        for nxt in edges.get(node, ()):
            if nxt == start or (nxt not in seen and cycle(start, nxt, seen | {nxt})):
                return True
        return False

    assert not [n for n in edges if cycle(n, n, {n})], edges
