"""The drill of issue 42 (the newest features: LoRA and component variants, track, board, record validation), one
test per finding that did not hold, through the entry point a user meets where there is one. The properties
behind the record findings (every reader refuses a repeated key; a finished file cut short) are in
tests/drills/test_drill42_records.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.rundir import append_jsonl, atomic_write_jsonl, dumps_line

from ..spine.test_command_properties import invoke
from .test_output_folders import SUITE, _probed_run, _snapshot

REPO = Path(__file__).resolve().parents[2]


# --- predict --from a probe whose pooling the prompts cannot give ------------------------------------------------

def test_predict_refuses_a_probe_pooling_the_prompts_lack_at_its_line(tmp_path, monkeypatch, capsys):
    """Before: 280 NaN risks ranked, exit 0, ``"risk":NaN`` written into the JSONL. A ``slot-o9`` pooling on
    prompts with no slot o9 leaves every feature row NaN: refused at the probe file's line, nothing written."""
    (tmp_path / "suite.yaml").write_text(SUITE)
    probe = _probed_run(tmp_path / "probed") / "probes" / "failure_probe.json"
    data = json.loads(probe.read_text())
    probe.write_text(json.dumps({**data, "pooling": "slot-o9"}, indent=1))  # pretty: the pooling on its own line
    line = next(i for i, t in enumerate(probe.read_text().splitlines(), 1) if '"pooling"' in t)
    before = _snapshot(tmp_path)
    code, out = invoke(["predict", "--model", "tiny-sd", "--prompts", "suite.yaml", "--from", "probed",
                        "--out", "risk.jsonl"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in out, out
    assert f"failure_probe.json:{line}: pooling 'slot-o9' cannot be read from 2 of 2 prompts" in out, out
    assert "no slot 'o9'" in out and "--prompts" in out
    assert not (tmp_path / "risk.jsonl").exists() and _snapshot(tmp_path) == before


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_jsonl_writer_emits_nan_or_infinity(tmp_path, value):
    """The one JSONL writer (rundir.dumps_line, under atomic_write_jsonl and append_jsonl) writes strict JSON: a
    non-finite number is refused naming its key, and nothing reaches the file."""
    record = {"prompt_id": "p", "extra": {"risk": [0.5, value]}}
    for write in (atomic_write_jsonl, append_jsonl):
        path = tmp_path / f"{write.__name__}.jsonl"
        with pytest.raises(ValueError, match=r"extra\.risk\[1\] is not a finite number"):
            write(path, [{"prompt_id": "ok"}, record])
        assert not path.exists()
    assert json.loads(dumps_line({"a": 1.5})) == {"a": 1.5}


# --- the mini judge's open_clip config leaves no folder in the temp directory ------------------------------------

def test_mini_judge_scoring_leaves_no_folder_in_the_temp_directory(tmp_path):
    """Before: every scoring with the mini open_clip judge left a ``t2i_audit_oc_*`` folder in the temp directory.
    A real scoring in a fresh process (the registration happens once a process), TMPDIR pointed at an empty
    folder: nothing of ours is left in it."""
    from t2i_audit import api

    run = api.run_audit(api.make_config(dict(model="mini", prompts=[str(REPO / "prompts/mini.yaml")], limit=2,
                                             images_per_prompt=1, steps=1, stages=["prompts", "generate"],
                                             out=str(tmp_path / "run"), device="cpu")), progress=False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "t2i_audit", "score", str(run), "--scorer", "mini-judge", "-q"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (Path(run) / "scores" / "mini-judge.jsonl").is_file()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("t2i_audit_oc_")] == []


def test_an_open_clip_config_stays_registered_after_its_folder_is_gone():
    """The folder is removed right after open_clip reads it: the architecture stays known through a later rescan
    (another registration), so removing the folder costs the judge nothing."""
    from t2i_audit.extras import open_clip
    from t2i_audit.scorers.clip_models import register_open_clip_config

    cfg = json.loads((REPO / "t2i_audit/mini/weights/judge/config.json").read_text())
    cfg = cfg.get("model_cfg", cfg)
    register_open_clip_config("t2i-audit-test-arch-a", cfg)
    register_open_clip_config("t2i-audit-test-arch-b", {**cfg, "embed_dim": cfg["embed_dim"] * 2})
    assert open_clip.get_model_config("t2i-audit-test-arch-a") == json.loads(json.dumps(cfg))
    assert open_clip.get_model_config("t2i-audit-test-arch-b")["embed_dim"] == cfg["embed_dim"] * 2


# --- links built from data are paths, never a scheme ----------------------------------------------------------

HOSTILE = "javascript:alert(1)#x?y"  # a folder name a user (or an unpacked archive) can give a run


def _links(page: Path) -> list[str]:
    import re

    return re.findall(r'(?:href|src)="([^"]*)"', page.read_text())


def _safe_and_resolving(page: Path) -> list[str]:
    """The data links of ``page`` (not in-page anchors, not inlined data): each a relative path that starts with
    ./ or ../ and, unquoted, names a file that exists."""
    import re
    from urllib.parse import unquote

    links = [x for x in _links(page) if not x.startswith(("#", "data:"))]
    for x in links:
        assert not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", x), f"{page.name}: {x!r} is read as a scheme"
    own = re.compile(r"^thumbs/[0-9a-f]{2}/[0-9a-f]{64}\.jpg$")  # the page's own thumbnails, named by sha256
    data = [x for x in links if "/" in x and not own.match(x)]
    for x in data:
        assert x.startswith(("./", "../")), f"{page.name}: {x!r}"
        assert (page.parent / unquote(x)).exists(), f"{page.name}: {x!r} leads nowhere"
    return data


def test_a_run_folder_named_like_a_scheme_is_a_path_on_every_page(tmp_path, monkeypatch, capsys):
    """Before: a run folder ``javascript:…`` inside the board folder became ``href="javascript:…"`` on the board
    page. Every link a page builds from data (board, compare, the run's own report) is relative, ./-prefixed and
    quoted, and leads to the file it names."""
    sys.path.insert(0, str(REPO / "tests" / "board"))
    from boardkit import reported_run

    import shutil

    board = tmp_path / "board"
    other = reported_run(tmp_path / "plain", skill=0.5, model="model-plain")
    assert invoke(["board", str(other), "--out", str(board), "-q"], tmp_path, monkeypatch, capsys)[0] == 0
    odd = Path(shutil.copytree(reported_run(tmp_path / "odd", skill=0.9, model="model-odd"), board / HOSTILE))
    code, out = invoke(["board", str(odd), "--out", str(board), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    page = board / "index.html"
    hrefs = _safe_and_resolving(page)
    assert any("javascript%3Aalert%281%29%23x%3Fy/report/index.html" in x for x in hrefs), hrefs
    assert 'href="javascript:' not in page.read_text()
    code, out = invoke(["compare", str(odd), str(other), "--out", str(board / "cmp")], tmp_path, monkeypatch, capsys)
    assert code in (0, 1), out
    assert any("javascript%3A" in x for x in _safe_and_resolving(board / "cmp" / "index.html"))
    _safe_and_resolving(odd / "report" / "index.html")


def test_a_track_link_to_a_checkpoint_run_is_a_quoted_path():
    from t2i_audit.track.page import _run_href

    assert _run_href("runs/javascript:alert(1)") == "./runs/javascript%3Aalert%281%29/report/index.html"


# --- checkpoints: one folder a step, odd names said; one LoRA once ----------------------------------------------

def _training_output(root: Path, *names: str) -> Path:
    """A training output folder whose checkpoint folders are named ``names`` (empty: discovery reads names first)."""
    for n in names:
        (root / n).mkdir(parents=True)
    return root


def _track(out: Path, tmp_path, monkeypatch, capsys, *extra) -> tuple:
    return invoke(["track", str(out), "--model", "tiny-sd", "--prompts", str(REPO / "prompts/colors.yaml"),
                   "--limit", "2", "--settle", "0", "--out", str(tmp_path / "track"), *extra],
                  tmp_path, monkeypatch, capsys)


def test_two_folders_of_one_step_are_refused_naming_both(tmp_path, monkeypatch, capsys):
    """Before: ``checkpoint-10`` and ``checkpoint-00010`` were both audited as step 10."""
    out = _training_output(tmp_path / "train", "checkpoint-10", "checkpoint-00010", "checkpoint-20")
    code, said = _track(out, tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in said, said
    assert "checkpoint-00010 and checkpoint-10 are both step 10" in said, said
    assert "checkpoint-20" not in said.split("error:")[-1] and not (tmp_path / "track").exists()


def test_checkpoint_folders_without_a_step_number_are_named(tmp_path, monkeypatch, capsys):
    """Before: ``checkpoint-abc`` and ``checkpoint-7.5`` were left out of the curve without a word. Said in one
    warning line, before anything else happens (here the --out folder is then refused: the warning came first)."""
    from t2i_audit.track.discover import Base, discover

    out = _training_output(tmp_path / "train", "checkpoint-abc", "checkpoint-7.5", "checkpoints/checkpoint_x",
                           "logs")
    found = discover(out, Base(components=("unet",)), settle=0)
    assert found.ignored == ["checkpoint-7.5", "checkpoint-abc", "checkpoints/checkpoint_x"]
    (tmp_path / "track").mkdir()
    (tmp_path / "track" / "mine.txt").write_text("x")  # not a track folder: refused after discovery
    code, said = _track(out, tmp_path, monkeypatch, capsys, "-q")
    assert code == 2, said
    warning = next(line for line in said.splitlines() if "warning" in line)
    assert "3 folder(s) named like checkpoints have no step number" in warning
    assert "checkpoint-7.5, checkpoint-abc, checkpoints/checkpoint_x" in warning and "logs" not in warning


def test_the_same_lora_twice_is_refused_naming_the_spec(variant_files, tmp_path, monkeypatch, capsys):
    """Before: ``--lora F --lora F:0.5`` loaded two adapters of one file (applied twice). A copy of the file under
    another name is the same weights too."""
    import shutil

    lora = variant_files["lora"]
    copy = Path(shutil.copy(lora, tmp_path / "copy.safetensors"))
    for second in (f"{lora}:0.5", str(copy)):
        out = tmp_path / "run"
        code, said = invoke(["run", "--model", "tiny-sd", "--prompts", "mini", "--limit", "2", "--stages", "prompts",
                             "--lora", str(lora), "--lora", second, "--out", str(out)], tmp_path, monkeypatch, capsys)
        assert code == 2 and "Traceback" not in said, said
        assert f"--lora '{second}': the same LoRA weights as --lora '{lora}'" in said, said
        assert not out.exists()


# --- reuse keyed on content, never on (size, mtime) -------------------------------------------------------------

def _same_size_and_mtime_other_bytes(path: Path) -> None:
    """Replace ``path`` by other bytes of its size (a new file, as a copy or a download does) and give it the old
    mtime back: what a stat signature cannot tell apart."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last byte of a safetensors file is tensor data: other weights, a whole file still
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_a_checkpoint_replaced_by_other_weights_of_the_same_size_and_mtime_is_audited_again(tmp_path):
    """Before: ``track`` keyed reuse on (size, mtime), so the replaced checkpoint kept its old run and numbers. The
    signature a rerun compares (index.files_signature, _unchanged) now follows the content."""
    from t2i_audit.track.index import Entry, files_signature
    from t2i_audit.track.runner import _unchanged

    weights = tmp_path / "checkpoint-10" / "unet" / "diffusion_pytorch_model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"\x08" + bytes(7) + b"{}      " + bytes(range(256)) * 64)
    os.utime(weights, (1_700_000_000, 1_700_000_000))  # written long ago, as a finished checkpoint
    before = files_signature([weights.parent])
    entry = dict(label="checkpoint-10", step=10, order=[1, 10, 0], source=str(weights.parent.parent),
                 layout="components", components={"unet": str(weights.parent)}, run="runs/checkpoint-10")
    old = Entry(**entry, files=before)
    _same_size_and_mtime_other_bytes(weights)
    after = files_signature([weights.parent])
    assert after != before
    assert not _unchanged(old, Entry(**entry, files=after))


def test_an_encoder_replaced_by_other_weights_of_the_same_size_changes_its_fingerprint(tmp_path):
    """Before: the text encoder's fingerprint (what `predict` and the activation cache key on) hashed its weights'
    *sizes*: a probe fitted on other weights passed as the same encoder."""
    import shutil

    from t2i_audit.probes.capture.activations import encoder_fingerprint, resolve_text_encoders

    info = resolve_text_encoders("tiny-sd")
    enc = info["text_encoders"][0]
    model = tmp_path / "model"
    for sub in (enc["name"], enc["tokenizer"]):
        shutil.copytree(Path(info["path"]) / sub, model / sub)
    before = encoder_fingerprint(str(model), enc, None)
    weights = next((model / enc["name"]).glob("*.safetensors"))
    _same_size_and_mtime_other_bytes(weights)
    assert encoder_fingerprint(str(model), enc, None) != before
