"""Kill-and-damage drill across every stage (issue 20): a finished run has one stage's output
damaged or left unfinished, the way a kill or a bad disk leaves it; `run --config RUN/run.yaml`
resumes it, and then every file of the run holds the bytes of the undamaged run — apart from the
fields listed in VARYING, which record when and how long, not what — and `verify` says clean.

The denoiser replay is not a stage of `run` (`probe --denoiser`): it is drilled the same way on
its own, interrupted between its parts.

The run is made once, copied aside, then damaged and resumed in place, so paths (run.yaml's
``out:``) are the same and need no exception.
"""

import json
import re
import shutil

import pytest

from t2i_audit import api
from t2i_audit.rundir import RunDir
from t2i_audit.verify import verify_run

# What differs between two runs of one config without any damage, left out of the comparison
# (every other byte of every file must match):
# * manifest.json: each stage's entry describes the stage's *last invocation* (work done now, work
#   reused, seconds, the scorer's load details), so only its ``status`` is compared; ``created_utc``
#   and ``command`` say when and how it was started. (``fingerprint`` is compared: it hashes the
#   resolved settings, which `run --config run.yaml` reads back.)
# * report/index.html: its "Manifest" section renders those same manifest fields; its footer says
#   when it was generated (to the minute).
# * images.jsonl: ``seconds``, each image's generation time.
# * shards/images.rank<r>.jsonl: generation's per-process append logs, merged into images.jsonl
#   (compared). What a log holds records the history — a record torn there by a kill stays in
#   images.jsonl and is not appended again; another process count writes other logs — so only
#   its presence is compared.
# * summary.json: ``seconds``, ``extract_seconds``, ``fit_seconds``, and the report's thumbnail
#   counts (made now vs reused).
SECONDS = {"seconds", "extract_seconds", "fit_seconds"}
MANIFEST_SECTION = re.compile(rb'<section id="manifest">.*?</section>', re.S)
GENERATED_AT = re.compile(rb"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _strip(obj, keys):
    if isinstance(obj, dict):
        return {k: _strip(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_strip(v, keys) for v in obj]
    return obj


def _jsonl(raw):
    return [_strip(json.loads(x), SECONDS) for x in raw.decode().split("\n") if x]


def _content(root, rel):
    raw = (root / rel).read_bytes()
    if rel == "manifest.json":
        m = json.loads(raw)
        return ({k: v for k, v in m.items() if k not in ("created_utc", "command", "stages")},
                {stage: info.get("status") for stage, info in m["stages"].items()})
    if rel == "report/index.html":
        return GENERATED_AT.sub(b"", MANIFEST_SECTION.sub(b"", raw))
    if rel == "images.jsonl":
        return _jsonl(raw)
    if rel.startswith("shards/images.rank"):
        return None
    if rel == "summary.json":
        return _strip(json.loads(raw), SECONDS | {"thumbnails"})
    return raw


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name != ".lock" and not p.name.startswith(".lock."))


def assert_same_run(root, reference):
    assert _files(root) == _files(reference)
    differ = [rel for rel in _files(root) if _content(root, rel) != _content(reference, rel)]
    assert not differ, f"differ from the undamaged run: {differ}"
    result = verify_run(root)
    assert result["ok"], result["problems"]


# colors.yaml in small (expanding the shipped suite takes seconds before --limit samples it)
SUITE = """suite: drill
version: 1
concepts:
  objects: {family: object, values: [apple, cup, dog]}
  colors: {family: color, values: [red, blue, green]}
templates:
  - {name: single, category: color, text: "a photo of {c1.a} {o1}", slots: {c1: colors, o1: objects},
     expect: {objects: [{id: o1, color: c1}]}}
  - {name: two_objects, category: color_binding, text: "a photo of {c1.a} {o1} and {c2.a} {o2}",
     slots: {c1: colors, o1: objects, c2: colors, o2: objects}, constraints: ["o1 != o2", "c1 != c2"],
     expect: {objects: [{id: o1, color: c1}, {id: o2, color: c2}]}, twins: [[c1, c2]]}
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(run folder, untouched copy of it): a finished run of every stage."""
    base = tmp_path_factory.mktemp("drill")
    (base / "suite.yaml").write_text(SUITE)
    cfg = api.make_config(dict(model="tiny-sd", prompts=[str(base / "suite.yaml")], limit=4, steps=2, size=32,
                               batch_size=2, scorers=["tiny-clip"], device="cpu", out=str(base / "run")))
    root = api.run_audit(cfg, progress=False)
    reference = shutil.copytree(root, base / "reference")
    return root, reference


@pytest.fixture
def run(made):
    root, reference = made
    shutil.rmtree(root)
    shutil.copytree(reference, root)
    return RunDir(root), reference


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _damage_generate(rd):
    recs = rd.read_images()
    (rd.root / recs[1]["path"]).unlink()  # a PNG lost
    _truncate(rd.root / recs[2]["path"])  # a PNG torn
    raw = rd.image_shard(0).read_bytes()  # a kill mid-append: the shard's last record torn
    rd.image_shard(0).write_bytes(raw[: raw.rstrip(b"\n").rfind(b"\n") + 20])
    rd.update_stage("generate", status="running")


def _damage_score(rd):
    path = rd.scores("tiny-clip")
    lines = path.read_text().split("\n")
    first = json.loads(lines[0])["prompt_id"]
    kept = [x for x in lines if x and json.loads(x)["prompt_id"] != first]  # an image's records lost
    path.write_text("\n".join(kept[:-1]) + "\n" + kept[-1][:25])  # and a kill mid-append
    rd.update_stage("score", status="running")


def _damage_text_encoder(rd):
    enc = rd.activations_dir / "text_encoder"
    arrays = sorted(enc.glob("*.npy"))
    arrays[0].unlink()
    _truncate(arrays[1])
    data = bytearray(arrays[2].read_bytes())
    data[-2] ^= 0xFF  # a flipped byte: the array still loads
    arrays[2].write_bytes(bytes(data))
    rd.update_stage("probe", status="running")


def _damage_probe(rd):
    fits = sorted(rd.probes_dir.glob("*.jsonl"))
    fits[0].unlink()
    _truncate(fits[1])
    rd.update_stage("probe", status="running")


def _damage_report(rd):
    (rd.report_dir / "index.html").unlink()
    _truncate(rd.report_dir / "results.csv")
    _truncate(rd.report_dir / "results.parquet")
    rd.update_stage("report", status="running")


DAMAGE = {"generate": _damage_generate, "score": _damage_score, "text-encoder": _damage_text_encoder,
          "probe": _damage_probe, "report": _damage_report}


def test_small_runs_report_says_the_probe_stage_ran(made):
    """This run's probe stage fits nothing (4 prompts) and writes empty probes/*.jsonl: its report
    said "Probes: not run"."""
    root, _ = made
    html = (root / "report" / "index.html").read_text()
    assert "Probes: not run." not in html and "Decodability: nothing fitted." in html


@pytest.mark.parametrize("stage", list(DAMAGE))
def test_damaged_stage_resumes_to_the_same_bytes(run, stage):
    rd, reference = run
    DAMAGE[stage](rd)
    assert not verify_run(rd.root)["ok"]  # verify sees the damage first
    api.run_audit(api.load_config(rd.config), progress=False)  # what `run --config RUN/run.yaml` does
    assert_same_run(rd.root, reference)


def test_interrupted_denoiser_replay_resumes_to_the_same_bytes(run, monkeypatch):
    from t2i_audit.probes.capture import denoiser

    rd, _ = run
    monkeypatch.setattr(denoiser, "CHUNK", 2)  # one planned batch (of 2) a part: several parts
    whole = denoiser.extract_denoiser_activations(rd, "tiny-sd", timesteps=[-1], progress=False)
    good = {p.name: p.read_bytes() for p in (rd.activations_dir / "denoiser").iterdir() if p.is_file()}
    shutil.rmtree(rd.activations_dir / "denoiser")

    real, calls = denoiser.run_hooked, {"n": 0}

    def killed_after_one_part(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # the first part is on disk, the second never finishes
        return real(*a, **kw)

    monkeypatch.setattr(denoiser, "run_hooked", killed_after_one_part)
    with pytest.raises(KeyboardInterrupt):
        denoiser.extract_denoiser_activations(rd, "tiny-sd", timesteps=[-1], progress=False)
    monkeypatch.setattr(denoiser, "run_hooked", real)
    assert denoiser.extract_denoiser_activations(rd, "tiny-sd", timesteps=[-1], progress=False) == whole
    arrays = sorted(rd.activations_dir.glob("denoiser/*.npy"))
    _truncate(arrays[0])  # and a damaged array afterwards
    (rd.activations_dir / "denoiser" / "meta.json").write_text("{")  # and its index
    assert denoiser.extract_denoiser_activations(rd, "tiny-sd", timesteps=[-1], progress=False) == whole
    now = {p.name: p.read_bytes() for p in (rd.activations_dir / "denoiser").iterdir() if p.is_file()}
    assert now == good and verify_run(rd.root)["ok"]
