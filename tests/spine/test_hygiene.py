"""Run-directory hygiene: file modes follow the umask; resume and `t2i-audit verify` catch
damaged files (truncated or altered PNGs, stale score records, broken JSONL, activations)."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from t2i_audit import api
from t2i_audit.rundir import RunDir, process_umask
from t2i_audit.scorers.base import Answer, QuestionScorer
from t2i_audit.scorers.stage import run_score_stage
from t2i_audit.verify import format_result, verify_run


def cfg(repo_root, out, **kw):
    base = dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=2, steps=2, size=32,
                stages=["prompts", "generate"], out=str(out), device="cpu")
    return api.make_config({**base, **kw})


class YesJudge(QuestionScorer):
    """Answers yes to every question; counts the images it was asked about."""

    calls = 0

    def answer(self, items, queries):
        YesJudge.calls += len(items)
        return [{q["id"]: Answer(1.0, True) for q in qs} for qs in queries]


JUDGE = {"name": "yes", "class": f"{__name__}:YesJudge", "model": {"id": "none", "revision": "r1"}}


def score(root) -> int:
    YesJudge.calls = 0
    run_score_stage(RunDir(root), [], instances=[YesJudge(JUDGE)], progress=False)
    return YesJudge.calls


def verify_cli(*args):
    return subprocess.run([sys.executable, "-m", "t2i_audit", "verify", *map(str, args)],
                          capture_output=True, text=True, timeout=900)  # hang guard


@pytest.fixture(scope="module")
def clean(repo_root, tmp_path_factory):
    """A finished, scored 2-image run; tests damage copies of it."""
    root = api.run_audit(cfg(repo_root, tmp_path_factory.mktemp("clean") / "run"), progress=False)
    assert score(root) == 2
    return root


@pytest.fixture
def run(clean, tmp_path):
    return RunDir(shutil.copytree(clean, tmp_path / "run"))


def first_image(run: RunDir) -> dict:
    return run.read_images()[0]


def rerun(repo_root, run: RunDir) -> dict:
    api.run_audit(cfg(repo_root, run.root), progress=False)
    return run.read_manifest()["stages"]["generate"]


def modes(root):
    return {p.relative_to(root).as_posix(): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_file_follows_the_umask(repo_root, tmp_path, umask):
    from t2i_audit.report.thumbs import _write_cache_file

    old = os.umask(umask)
    process_umask.cache_clear()
    try:
        root = api.run_audit(cfg(repo_root, tmp_path / "r"), progress=False)
        _write_cache_file(root / "report" / "thumbs" / "ab" / "x.jpg", b"jpeg")
    finally:
        os.umask(old)
        process_umask.cache_clear()
    got = modes(root)
    assert {"images.jsonl", "manifest.json", "prompts.jsonl", "run.yaml", "shards/images.rank0.jsonl",
            "report/thumbs/ab/x.jpg"} <= set(got)
    assert sum(k.endswith(".png") for k in got) == 2
    want = {k: (0o777 if (root / k).is_dir() else 0o666) & ~umask for k in got}
    assert got == want  # 0644/0755 under 022, 0640/0750 under 027 (mkstemp alone gave 0600)


def test_truncated_png_is_reported_then_regenerated_with_the_same_bytes(repo_root, clean, run):
    rec = first_image(run)
    png = run.root / rec["path"]
    original = png.read_bytes()
    png.write_bytes(original[: len(original) // 2])
    r = verify_cli(run.root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{rec['path']}: sha256" in r.stdout and "not a decodable PNG" in r.stdout
    assert any(line.split() == ["images", "2", "images", "checked:", "1", "damaged"] for line in r.stdout.splitlines())
    data = json.loads(verify_cli(run.root, "--json").stdout)
    assert data["ok"] is False and data["summary"]["images"] == {"checked": 2, "damaged": 1,
                                                                 "regenerated_elsewhere": 0}
    # the scores of the damaged image no longer match the file either
    assert {(p["category"], p["path"]) for p in data["problems"]} == {("images", rec["path"]),
                                                                     ("scores", "scores/yes.jsonl")}
    before = run.scores("yes").read_bytes()

    gen = rerun(repo_root, run)
    assert gen["generated_now"] == 1 and gen["reused"] == 1 and gen["images"] == 2
    assert png.read_bytes() == original  # generation is deterministic: the very same bytes
    assert run.read_images() != [] and [r["sha256"] for r in run.read_images()] == \
        [r["sha256"] for r in RunDir(clean).read_images()]
    assert score(run.root) == 0  # same bytes, so its scores stand: nothing stale, nothing duplicated
    assert run.scores("yes").read_bytes() == before
    r = verify_cli(run.root)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout


def test_other_bytes_of_the_same_picture_are_regenerated_elsewhere_other_pictures_damaged(repo_root, run):
    """Another CPU or GPU rounds a few pixels differently: a file that decodes to the recorded size with
    the recorded pixel digest (8×8 block means within a few levels) is the same picture made elsewhere,
    not damage; a different picture of the same size and length is damage."""
    recs = run.read_images()
    pixels = np.asarray(Image.open(run.root / recs[0]["path"])).copy()
    original = (run.root / recs[0]["path"]).read_bytes()
    rng = np.random.default_rng(0)
    nudged = np.clip(pixels.astype(int) + rng.integers(-1, 2, pixels.shape) * (rng.random(pixels.shape) < 0.2),
                     0, 255).astype("uint8")  # ±1 level on a fifth of the values: rounding elsewhere
    Image.fromarray(nudged).save(run.root / recs[0]["path"])
    assert (run.root / recs[0]["path"]).read_bytes() != original
    other = np.asarray(Image.open(run.root / recs[1]["path"])).copy()
    Image.fromarray(255 - other).save(run.root / recs[1]["path"])  # the same size, another picture

    result = verify_run(run.root)
    assert result["summary"]["images"] == {"checked": 2, "damaged": 1, "regenerated_elsewhere": 1}
    assert [r["path"] for r in result["regenerated_elsewhere"]] == [recs[0]["path"]]
    assert result["regenerated_elsewhere"][0]["levels"] <= 1
    problems = {p["path"]: p["problem"] for p in result["problems"] if p["category"] == "images"}
    assert set(problems) == {recs[1]["path"]}
    assert "a valid 32×32 image with other bytes" in problems[recs[1]["path"]]
    assert "regenerated elsewhere, not damaged" in format_result(result)

    gen = rerun(repo_root, run)  # a resume regenerates both: here, the recorded bytes come back
    assert gen["generated_now"] == 2
    assert (run.root / recs[0]["path"]).read_bytes() == original
    assert verify_run(run.root)["ok"]


def test_stale_score_record_is_reported_and_rescored(run):
    """A regeneration that made other bytes (another thread count) but was not rescored."""
    rec = first_image(run)
    Image.new("RGB", (32, 32), "blue").save(run.root / rec["path"])
    new_sha = hashlib.sha256((run.root / rec["path"]).read_bytes()).hexdigest()
    images = run.read_images()
    images[0]["sha256"] = new_sha
    run.images.write_text("".join(json.dumps(r) + "\n" for r in images))

    result = verify_run(run.root)
    assert result["summary"]["images"]["damaged"] == 0 and result["summary"]["scores"]["damaged"] == 1
    (p,) = result["problems"]
    assert p["path"] == "scores/yes.jsonl" and rec["prompt_id"] in p["problem"]
    assert f"file now hashes {new_sha[:12]}" in p["problem"] and rec["path"] in p["problem"]

    # the score stage keys on image sha256: only that image's records are redone, scored among its
    # planned batch-mates (both images: one batch) so that its values are a whole run's
    assert score(run.root) == 2
    recs = [json.loads(x) for x in run.scores("yes").read_text().splitlines()]
    assert sum(r["kind"] == "prompt" for r in recs) == 2
    assert {r["image_sha256"] for r in recs if r["prompt_id"] == rec["prompt_id"]} == {new_sha}
    assert verify_run(run.root)["ok"]


def test_broken_jsonl_and_activations_are_reported(run, tmp_path):
    shard = run.image_shard(0)
    shard.write_bytes(shard.read_bytes() + b'{"prompt_id": "p1", "sam')  # a killed append
    run.prompts.write_bytes(b"not json\n" + run.prompts.read_bytes())
    enc = run.activations_dir / "text_encoder"
    enc.mkdir(parents=True)
    np.save(enc / "l0__eos.npy", np.zeros((2, 4), np.float16))
    np.save(enc / "l1__eos.npy", np.zeros((3, 4), np.float16))
    (enc / "l2__eos.npy").write_bytes((enc / "l0__eos.npy").read_bytes()[:100])
    (enc / "meta.json").write_text(json.dumps({"n": 2, "arrays": ["l0__eos", "l1__eos", "l2__eos", "l3__eos"]}))
    (enc / "index.jsonl").write_text('{"row": 0, "prompt_id": "a"}\n')

    problems = {(p["category"], p["path"]): p["problem"] for p in verify_run(run.root)["problems"]}
    assert problems == {
        ("json", "shards/images.rank0.jsonl"): problems[("json", "shards/images.rank0.jsonl")],
        ("json", "prompts.jsonl"): "1 corrupted line(s): 1 (first: prompts.jsonl:1: not valid JSON: Expecting value "
                                   "at column 1)",
        ("activations", "activations/text_encoder/l1__eos.npy"): "3 rows, meta.json says n = 2",
        ("activations", "activations/text_encoder/l2__eos.npy"): problems[("activations", "activations/text_encoder/l2__eos.npy")],
        ("activations", "activations/text_encoder/l3__eos.npy"): "missing (listed in meta.json)",
        ("activations", "activations/text_encoder/index.jsonl"): "1 rows, meta.json says n = 2",
        # the line put before the records also grows a file its stage finished
        ("complete", "prompts.jsonl"): "3 lines, but its stage finished it with 2 (lines added since)",
    }
    assert problems[("json", "shards/images.rank0.jsonl")].startswith("torn last line")
    assert problems[("activations", "activations/text_encoder/l2__eos.npy")].startswith("cannot load")


def test_not_a_run_directory_is_a_usage_error(tmp_path):
    r = verify_cli(tmp_path)
    assert r.returncode == 2 and "not a run directory (no prompts.jsonl)" in r.stderr


# --- what a rerun depends on, verify sees (issue 20, items 9-13) -------------------------------------

def categories(root) -> dict:
    result = verify_run(root)
    return {p["category"]: p["problem"] for p in result["problems"]}


def test_duplicated_records_are_reported(run):
    line = next(x for x in run.scores("yes").read_text().split("\n") if '"kind":"question"' in x)
    forged = json.loads(line)
    forged.update(verdict=not forged["verdict"], value=0.99)
    with run.scores("yes").open("a") as f:
        f.write(json.dumps(forged) + "\n")
    assert "repeat the key of an earlier line" in categories(run.root)["records"]
    with run.images.open("a") as f:
        f.write(run.images.read_text().split("\n")[0] + "\n")
    problems = [p for p in verify_run(run.root)["problems"] if p["category"] == "records"]
    assert {p["path"] for p in problems} == {"images.jsonl", "scores/yes.jsonl"}


def test_stray_score_file_and_png_are_reported(run):
    shutil.copy(run.scores("yes"), run.scores_dir / "evil.jsonl")
    Image.new("RGB", (32, 32)).save(run.root / "images" / "extra.png")
    problems = {p["path"]: p["problem"] for p in verify_run(run.root)["problems"] if p["category"] == "stray"}
    assert set(problems) == {"scores/evil.jsonl", "images/extra.png"}
    assert "no score stage of this run wrote it" in problems["scores/evil.jsonl"]


def test_unfinished_generation_is_reported(run):
    run.update_stage("generate", status="running")  # what a kill leaves
    images = run.images.read_text().split("\n")
    run.images.write_text(images[0] + "\n")
    assert "stage generate is unfinished (status running: 1 of 2 images)" in categories(run.root)["stages"]


def test_altered_activation_bytes_are_seen_and_extracted_again(run):
    from t2i_audit.probes.capture.denoiser import extract_denoiser_activations

    meta = extract_denoiser_activations(run, "tiny-sd", timesteps=[-1], progress=False)
    assert verify_run(run.root)["ok"] and set(meta["sha256"]) == set(meta["arrays"])
    path = run.activations_dir / "denoiser" / f"{meta['arrays'][0]}.npy"
    good = path.read_bytes()
    data = bytearray(good)
    data[-3] ^= 0xFF  # a flipped byte in the data: the array still loads with the right shape
    path.write_bytes(bytes(data))
    assert "sha256 differs" in categories(run.root)["activations"]
    extract_denoiser_activations(run, "tiny-sd", timesteps=[-1], progress=False)
    assert path.read_bytes() == good and verify_run(run.root)["ok"]


def test_damaged_denoiser_meta_is_named_by_verify_and_extracted_again(run):
    # before: json.loads of meta.json: a JSONDecodeError traceback under `probe`
    from t2i_audit.probes.capture.denoiser import extract_denoiser_activations

    meta = extract_denoiser_activations(run, "tiny-sd", timesteps=[-1], progress=False)
    path = run.activations_dir / "denoiser" / "meta.json"
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    assert "meta.json: not valid JSON" in categories(run.root)["json"]
    assert extract_denoiser_activations(run, "tiny-sd", timesteps=[-1], progress=False) == meta
    assert path.read_bytes() == good and verify_run(run.root)["ok"]


def test_a_moved_run_is_repaired_where_it_now_is(repo_root, run, tmp_path, monkeypatch, capsys):
    from .test_command_properties import invoke

    moved = RunDir(shutil.move(str(run.root), str(tmp_path / "moved")))
    rec = first_image(moved)
    original = (moved.root / rec["path"]).read_bytes()
    (moved.root / rec["path"]).write_bytes(original[:30])
    r = verify_cli(moved.root)
    assert f"t2i-audit run --config {moved.root}/run.yaml --out {moved.root}" in r.stdout, r.stdout
    # the advice as a user runs it, through the CLI's entry point (in this process: no second start-up)
    code, said = invoke(["run", "--config", str(moved.root / "run.yaml"), "--out", str(moved.root), "-q"], tmp_path,
                        monkeypatch, capsys)
    assert code == 0, said[-2000:]
    assert (moved.root / rec["path"]).read_bytes() == original
    assert not run.root.exists()  # nothing was written to the run.yaml's old out: path


def test_verify_json_lists_every_category_it_checks(run):
    data = json.loads(verify_cli(run.root, "--json").stdout)
    every = {"json", "fields", "images", "scores", "activations", "records", "stray", "stages", "complete"}
    assert data["ok"] and set(data["checks"]) == set(data["summary"]) == every  # clean ones too
    assert all(data["summary"][c]["damaged"] == 0 and data["checks"][c] for c in every)


def test_verify_reads_run_files_with_the_bounded_reader(run):
    """Nesting past the interpreter's limit was a RecursionError traceback; now file:line problems."""
    (run.root / "extra.json").write_text("[" * 100_000 + "]" * 100_000)
    with run.scores("yes").open("a") as f:
        f.write('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (run.root / "manifest.json").write_text('{\n  "stages": {\n    "score": ,\n')  # damaged at line 3
    r = verify_cli(run.root)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    problems = {p["path"]: p["problem"] for p in verify_run(run.root)["problems"] if p["category"] == "json"}
    assert "extra.json: JSON nested too deeply" in problems["extra.json"]
    assert "(first: scores/yes.jsonl:" in problems["scores/yes.jsonl"] and "nested too deeply" in problems["scores/yes.jsonl"]
    assert "manifest.json: not valid JSON: Expecting value at line 3 column 14" in problems["manifest.json"]
