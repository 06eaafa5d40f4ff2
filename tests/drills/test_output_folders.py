"""Output folders (issue 20, "Data loss"): a command writes only into a folder that is new, empty
or already its own (``.t2i-audit.json``, or an older version's layout); anything else is refused
with the path and the reason, exit code 2, and nothing it did not write is overwritten or deleted.
Issue 26: "its own" means made by the same command (``run`` and ``select`` both make runs) with the same
settings, checked over every writer that ``ownership.WRITERS`` registers.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

from t2i_audit.resume import settings_id
from t2i_audit.ownership import MARKER, claim_output_dir, folder_kind

from .test_malformed_corpus import _invoke, _snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from synth import make_prompts, make_run  # noqa: E402


def _foreign(root: Path) -> Path:
    """A folder of somebody's files, shaped like what our commands write."""
    (root / "sub").mkdir(parents=True)
    (root / "important.txt").write_text("my notes")
    (root / "sub" / "keep.txt").write_text("keep")
    (root / "index.html").write_text("<p>my page</p>")
    (root / "thumbs" / "ab").mkdir(parents=True)
    (root / "thumbs" / "ab" / "mine.jpg").write_bytes(b"my picture")
    return root


def _refused(code, err, fragments, before, after):
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: "), err
    for f in fragments:
        assert f in err, (f, err)
    assert before == after, "a refused command must not touch the folder"


SUITE = "suite: s\nversion: 1\nconcepts:\n  o: {family: object, values: [cube, ball]}\ntemplates:\n" \
        "  - {name: t, category: objects, text: 'a {o1}', slots: {o1: o}, expect: {objects: [{id: o1}]}}\n"


def _run_argv(out: str) -> list:
    return ["run", "--model", "tiny-sd", "--prompts", "suite.yaml", "--stages", "prompts", "--out", out]


@pytest.mark.parametrize("command", ["train-judge", "train-generator"])
def test_mini_training_refuses_a_folder_that_is_not_its_own(tmp_path, monkeypatch, capsys, command):
    # before: shutil.rmtree(out) — both files gone, exit 0
    _foreign(tmp_path / "v")
    before = _snapshot(tmp_path)
    code, err = _invoke(["mini", command, "--smoke", "--out", "v"], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["v:", "not empty", MARKER], before, _snapshot(tmp_path))


def test_mini_retraining_replaces_only_what_it_writes(tmp_path, monkeypatch, capsys):
    (tmp_path / "j.tmp").mkdir()  # the old trainer staged in (and first deleted) a sibling <out>.tmp
    (tmp_path / "j.tmp" / "keep.txt").write_text("mine")
    code, err = _invoke(["mini", "train-judge", "--smoke", "--out", "j"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert folder_kind(tmp_path / "j") == "mini-judge"
    (tmp_path / "j" / "notes.txt").write_text("my notes about this judge")
    first = (tmp_path / "j" / "card.json").read_text()
    code, err = _invoke(["mini", "train-judge", "--smoke", "--seed", "1", "--out", "j"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert (tmp_path / "j" / "notes.txt").read_text() == "my notes about this judge"
    assert (tmp_path / "j.tmp" / "keep.txt").read_text() == "mine"
    assert json.loads((tmp_path / "j" / "card.json").read_text())["seed"] == 1 != json.loads(first)["seed"]
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == [  # no staging left behind (the writer lock's
        ".lock", MARKER, "card.json", "config.json", "model.safetensors", "notes.txt"]  # file stays: flock)


def test_run_refuses_a_folder_that_is_not_its_own(tmp_path, monkeypatch, capsys):
    # before: run.yaml, manifest.json, prompts.jsonl written into the user's folder, exit 0
    (tmp_path / "suite.yaml").write_text(SUITE)
    _foreign(tmp_path / "d")
    before = _snapshot(tmp_path)
    code, err = _invoke(_run_argv("d"), tmp_path, monkeypatch, capsys)
    _refused(code, err, ["d:", "not empty", "choose a new or empty folder"], before, _snapshot(tmp_path))
    # a shared run.yaml whose out: points at that folder is refused the same way
    (tmp_path / "shared.yaml").write_text(f"model: tiny-sd\nprompts: [suite.yaml]\nstages: [prompts]\nout: {tmp_path / 'd'}\n")
    before = _snapshot(tmp_path)
    code, err = _invoke(["run", "--config", "shared.yaml"], tmp_path, monkeypatch, capsys)
    _refused(code, err, [f"{tmp_path / 'd'}:", "not empty"], before, _snapshot(tmp_path))


def test_run_out_an_existing_file_is_refused(tmp_path, monkeypatch, capsys):
    # before: FileExistsError traceback
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "f").write_text("a file")
    before = _snapshot(tmp_path)
    code, err = _invoke(_run_argv("f"), tmp_path, monkeypatch, capsys)
    _refused(code, err, ["f:", "is a file, not a folder"], before, _snapshot(tmp_path))


def test_run_resumes_its_own_folder_and_one_made_before_the_marker(tmp_path, monkeypatch, capsys):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "empty").mkdir()
    for out in ("new", "empty"):
        code, err = _invoke(_run_argv(out), tmp_path, monkeypatch, capsys)
        assert code in (0, None), err
        marker = json.loads((tmp_path / out / MARKER).read_text())
        assert {k: marker[k] for k in ("tool", "kind", "version", "command")} == {
            "tool": "t2i-audit", "kind": "run", "version": 2, "command": "run"}
        assert marker["settings"]["model"] == "tiny-sd" and marker["settings_id"] == settings_id(marker["settings"])
    code, err = _invoke(_run_argv("new"), tmp_path, monkeypatch, capsys)  # its own: resumes
    assert code in (0, None), err
    # a run made by an older version: a marker with its kind only, then no marker (manifest.json + run.yaml)
    (tmp_path / "new" / MARKER).write_text(json.dumps({"tool": "t2i-audit", "kind": "run", "version": 1}))
    code, err = _invoke(_run_argv("new") + ["--steps", "3"], tmp_path, monkeypatch, capsys)  # settings unknown
    assert code in (0, None), err
    (tmp_path / "new" / MARKER).unlink()
    code, err = _invoke(_run_argv("new"), tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    # another kind's folder is not a run
    claim_output_dir(tmp_path / "cmp", "compare")
    code, err = _invoke(_run_argv("cmp"), tmp_path, monkeypatch, capsys)
    assert code == 2 and "holds a t2i-audit compare, not a run" in err, err


def test_claim_by_two_processes_at_once_agrees(tmp_path):
    """Accelerate ranks claim the same run folder together: the O_EXCL marker decides, both pass."""
    import concurrent.futures as cf

    for i in range(20):
        with cf.ThreadPoolExecutor(2) as ex:
            got = list(ex.map(lambda _: claim_output_dir(tmp_path / f"r{i}", "run"), range(2)))
        assert got == [tmp_path / f"r{i}"] * 2 and folder_kind(tmp_path / f"r{i}") == "run"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    prompts = make_prompts(n_binding=8, n_rel=4, n_count=3)
    good = make_run(base / "good", prompts=prompts, skill=1.0, model="model-good", probes=False, black=0,
                    scorers=("clip-foil",))
    bad = make_run(base / "bad", prompts=prompts, skill=0.3, model="model-bad", probes=False, black=0,
                   scorers=("clip-foil",))
    return good, bad


def test_compare_refuses_a_folder_that_is_not_its_own(tmp_path, monkeypatch, capsys, two_runs):
    # before: D/thumbs/ab/mine.jpg deleted by a glob, D/index.html overwritten, exit 0
    good, bad = two_runs
    _foreign(tmp_path / "d")
    before = _snapshot(tmp_path)
    code, err = _invoke(["compare", str(good), str(bad), "--out", "d"], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["d:", "not empty"], before, _snapshot(tmp_path))


def test_report_out_refuses_a_folder_that_is_not_its_own(tmp_path, monkeypatch, capsys, two_runs):
    good, _ = two_runs
    _foreign(tmp_path / "d")
    before = _snapshot(tmp_path)
    code, err = _invoke(["report", str(good), "--out", "d", "-q"], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["d:", "not empty"], before, _snapshot(tmp_path))


def test_thumbnails_are_pruned_by_the_tools_own_index_never_by_name(tmp_path, monkeypatch, capsys, two_runs):
    good, bad = two_runs
    code, err = _invoke(["compare", str(good), str(bad), "--out", "c"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    made = json.loads((tmp_path / "c" / "thumbs" / "index.json").read_text())
    assert made and all((tmp_path / "c" / rel).is_file() for rel in made)
    # a file of the user's in our thumbs folder, named like a thumbnail
    mine = tmp_path / "c" / "thumbs" / "ab" / ("ab" + "0" * 62 + ".jpg")
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_bytes(b"mine")
    # two copies of one run: no disagreement, no thumbnail used; ours go, the user's stays
    copy = shutil.copytree(good, tmp_path / "good-copy")
    code, err = _invoke(["compare", str(good), str(copy), "--out", "c"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert not any((tmp_path / "c" / rel).exists() for rel in made)
    assert mine.read_bytes() == b"mine"
    assert json.loads((tmp_path / "c" / "thumbs" / "index.json").read_text()) == []


# --- single-file outputs: a file has no marker, so an existing one is replaced only with --force ------

def _file_argv(command, good):
    return {"prompts-export": ["prompts", "export", "suite.yaml", "--out", "f.out"],
            "prompts-import": ["prompts", "import", "color_val.txt", "--format", "t2i-compbench", "--out", "f.out"],
            "predict": ["predict", "--model", "tiny-sd", "--prompts", "suite.yaml", "--from", "probed", "--out", "f.out"],
            "label": ["label", str(good), "--n", "2", "--out", "f.out"],
            "mini-render": ["mini", "render", "a red circle to the left of a blue square", "--out", "f.out"]}[command]


def _probed_run(root: Path) -> Path:
    """A run folder holding only a failure probe on tiny-sd's text encoder (all `predict` reads)."""
    from t2i_audit.probes.capture.activations import encoder_fingerprint, resolve_text_encoders

    info = resolve_text_encoders("tiny-sd")
    enc = info["text_encoders"][0]
    dim = json.loads((Path(info["path"]) / enc["name"] / "config.json").read_text())["hidden_size"]
    probe = {"encoder": enc["name"], "layer": "final", "pooling": "eos", "model": "tiny-sd",
             "fingerprint": encoder_fingerprint(info["path"], enc, info["revision"]), "oof_auroc": 0.5,
             "mean": [0.0] * dim, "scale": [1.0] * dim, "coef": [0.1] * dim, "intercept": 0.0}
    (root / "probes").mkdir(parents=True)
    (root / "probes" / "failure_probe.json").write_text(json.dumps(probe))
    return root


# prompts-import and predict: before, the user's f.out replaced, exit 0
@pytest.mark.parametrize("command", ["prompts-export", "prompts-import", "predict", "label", "mini-render"])
def test_single_file_output_never_overwrites_without_force(tmp_path, monkeypatch, capsys, two_runs, command):
    # before: the user's f.out replaced, exit 0
    good, _ = two_runs
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "color_val.txt").write_text("a red apple and a blue cup\n")
    if command == "predict":
        _probed_run(tmp_path / "probed")
    (tmp_path / "f.out").write_text("my notes")
    before = _snapshot(tmp_path)
    code, err = _invoke(_file_argv(command, good), tmp_path, monkeypatch, capsys)
    _refused(code, err, ["f.out:", "file exists", "refusing to overwrite", "--force"], before, _snapshot(tmp_path))
    code, err = _invoke(_file_argv(command, good) + ["--force"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert (tmp_path / "f.out").read_bytes() != b"my notes"
    (tmp_path / "f.out").unlink()
    (tmp_path / "f.out").mkdir()  # a folder where the file should go: refused, not a traceback
    code, err = _invoke(_file_argv(command, good) + ["--force"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "f.out: is a folder" in err, err


def test_predict_names_a_damaged_failure_probe(tmp_path, monkeypatch, capsys):
    # before: json.JSONDecodeError traceback
    (tmp_path / "suite.yaml").write_text(SUITE)
    probe = _probed_run(tmp_path / "probed") / "probes" / "failure_probe.json"
    probe.write_text(probe.read_text()[:40])
    before = _snapshot(tmp_path)
    code, err = _invoke(_file_argv("predict", None), tmp_path, monkeypatch, capsys)
    _refused(code, err, ["failure_probe.json: not valid JSON"], before, _snapshot(tmp_path))


# --- one rule over every registered writer (ownership.WRITERS): the next command registered gets it free -----

def _writer_pairs():
    from t2i_audit.ownership import WRITERS

    return [(kind, command) for kind, commands in WRITERS.items() for command in commands]


def _made_by(root: Path, kind: str, command: str, settings=None) -> Path:
    """A folder another t2i-audit command made, with a file of its own in it."""
    if settings is None:  # the marker as written, so that this also runs against code without the rule
        root.mkdir(parents=True)
        (root / MARKER).write_text(json.dumps({"tool": "t2i-audit", "kind": kind, "version": 2, "command": command}))
    else:
        claim_output_dir(root, kind, command=command, settings=settings)
    (root / "theirs.txt").write_text(f"made by {command}")
    return root


@pytest.mark.parametrize("kind,command", _writer_pairs(), ids=lambda v: v.replace(" ", "-"))
def test_every_writer_claims_only_what_it_made_with_its_settings(tmp_path, kind, command):
    from t2i_audit.errors import AuditError

    for other_kind, other in _writer_pairs():
        if (other_kind, other) == (kind, command):
            continue
        root = _made_by(tmp_path / f"{other_kind}-{other.replace(' ', '-')}", other_kind, other, {"x": 1})
        before = _snapshot(root)
        with pytest.raises(AuditError, match=f"^{root}: (holds a t2i-audit {other_kind}, not a {kind}|made by "
                                             f"`t2i-audit {other}`, not by `t2i-audit {command}`)"):
            claim_output_dir(root, kind, command=command, settings={"x": 1})
        assert _snapshot(root) == before
    own = _made_by(tmp_path / "own", kind, command, {"x": 1, "y": [1, 2]})
    before = _snapshot(own)
    with pytest.raises(AuditError, match=r"with other settings \(x: 1 → 2\)"):
        claim_output_dir(own, kind, command=command, settings={"x": 2, "y": [1, 2]})
    assert _snapshot(own) == before
    assert claim_output_dir(own, kind, command=command, settings={"y": (1, 2), "x": 1}) == own  # the same: resumes
    assert claim_output_dir(own, kind, command=command) == own  # a command that replaces states none
    assert _snapshot(own) == before


def _writer_argv(command: str, out: Path, world: dict) -> list:
    """A valid call of each registered writer with ``--out out``: it reaches its claim before any model loads."""
    return {"run": ["run", "--model", "mini", "--prompts", world["suite"], "--limit", "2", "--stages", "prompts"],
            "select": ["select", "--from", world["probed"], "--prompts", world["suite"], "--limit", "2", "--of", "2",
                       "--at", "0.5", "--seed", "1", "--device", "cpu", "--quiet"],
            "report": ["report", world["good"], "-q"],
            "compare": ["compare", world["good"], world["bad"]],
            "board": ["board", world["good"], "-q"],
            "mini train-judge": ["mini", "train-judge", "--smoke"],
            "mini train-generator": ["mini", "train-generator", "--smoke"],
            "mini sweep": ["mini", "sweep", "--smoke"],
            "track": ["track", world["good"], "--model", "mini", "--prompts", world["suite"], "--limit", "2"],
            "prompts export": ["prompts", "export", world["suite"], "--limit", "2", "--layout", "imagefolder"],
            }[command] + ["--out", str(out)]


def test_every_writer_command_refuses_a_folder_another_command_made(tmp_path, monkeypatch, capsys, two_runs,
                                                                    probed_mini, repo_root):
    # before: `select --out RUN` into a plain run's folder exited 0 and replaced its images
    world = {"suite": str(repo_root / "prompts/mini.yaml"), "probed": str(probed_mini), "good": str(two_runs[0]),
             "bad": str(two_runs[1])}
    pairs = _writer_pairs()
    for command in sorted({c for _, c in pairs}):
        own = {k for k, c in pairs if c == command}
        for other_kind, other in pairs:
            if other == command and other_kind in own:
                continue
            root = _made_by(tmp_path / command.replace(" ", "-") / f"{other_kind}-{other.replace(' ', '-')}",
                            other_kind, other)
            before = _snapshot(tmp_path)
            code, err = _invoke(_writer_argv(command, root, world), tmp_path, monkeypatch, capsys)
            _refused(code, err, [f"{root}: ", "refusing to write into it"], before, _snapshot(tmp_path))
