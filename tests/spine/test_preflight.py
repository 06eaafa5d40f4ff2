"""Preflight: what a run will need later is found missing before the first image, with the fix in options the
command takes (t2i_audit/preflight.py). Real paths: a tiny pipeline folder (a non-tiny card, so the default judges
are the real ones), the real entry point, offline (tests/conftest.py sets HF_HUB_OFFLINE)."""

from __future__ import annotations

import pytest

from .test_command_properties import invoke


@pytest.fixture(scope="module")
def pipeline_folder():
    from t2i_audit.tiny import materialize

    return materialize("tiny-sd")  # a diffusers folder like a user's: its card is not tiny, its dtype float16


def test_a_judge_whose_weights_are_absent_offline_stops_the_run_before_any_image(pipeline_folder, tmp_path,
                                                                                monkeypatch, capsys):
    out = tmp_path / "run"
    code, said = invoke(["run", "--model", str(pipeline_folder), "--prompts", "colors", "--limit", "2", "--out", str(out)],
                        tmp_path, monkeypatch, capsys)
    assert code == 2, said
    assert "Traceback" not in said
    # the default judge of a colour prompt, its weights, their size and why they cannot come
    assert "qwen3-vl-8b needs Qwen/Qwen3-VL-8B-Instruct (about 17.5 GB)" in said, said
    assert "HF_HUB_OFFLINE is set" in said
    # the fixes are options of `run` itself (not `score`'s --model SCORER=PATH as the only way)
    assert "--scorer NAME" in said and "--stages prompts,generate" in said
    assert not out.exists() or not any(out.rglob("*.png")), "images were generated before the refusal"
    assert not out.exists(), "nothing is written before the check"


def test_an_unknown_scorer_is_refused_before_any_image(pipeline_folder, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    code, said = invoke(["run", "--model", str(pipeline_folder), "--prompts", "colors", "--limit", "2",
                         "--scorer", "qwen3-vl-8", "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2, said
    assert "unknown scorer 'qwen3-vl-8'" in said and "qwen3-vl-8b" in said  # with what was meant
    assert not out.exists()


def test_float16_on_cpu_is_said_up_front_and_recorded(pipeline_folder, tmp_path, monkeypatch, capsys):
    """The folder's dtype is float16; on CPU the run uses float32 and says so before generating (and -q hides it)."""
    from t2i_audit.rundir import RunDir

    argv = ["run", "--model", str(pipeline_folder), "--prompts", "colors", "--limit", "2", "--steps", "2",
            "--device", "cpu", "--stages", "prompts,generate", "--scorer", "mini-pixel"]
    code, said = invoke([*argv, "--out", str(tmp_path / "a")], tmp_path, monkeypatch, capsys)
    assert code == 0, said
    first = said.index("float16 does not run diffusion on CPU: float32 is used")
    assert first < said.index("generate tiny-sd"), said  # before the generate stage's bar
    gen = RunDir(tmp_path / "a").read_manifest()["stages"]["generate"]
    assert gen["dtype"] == "float32" and "float32 is used" in gen["dtype_note"]
    code, said = invoke([*argv, "--out", str(tmp_path / "b"), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0 and "float32 is used" not in said, said


def test_judge_weights_are_read_from_the_cards():
    """What the check looks for: a VLM's repo; an open_clip tag's Hub repo; a shipped judge's file; none for tiny
    judges and judges without weights."""
    from t2i_audit.preflight import judge_weights
    from t2i_audit.scorers.registry import load_cards

    cards = load_cards()
    assert [w.repo for w in judge_weights(cards["qwen3-vl-8b"])] == ["Qwen/Qwen3-VL-8B-Instruct"]
    geneval = judge_weights(cards["geneval"])
    assert geneval[0].repo == "facebook/mask2former-swin-small-coco-instance"
    assert geneval[1].backend == "open_clip" and geneval[1].repo == "timm/vit_large_patch14_clip_224.openai"
    (mini,) = judge_weights(cards["mini-judge"])
    assert mini.path.endswith("model.safetensors")
    assert judge_weights(cards["tiny-clip"]) == [] and judge_weights(cards["mini-pixel"]) == []


def test_a_missing_open_clip_is_found_before_any_image(pipeline_folder, tmp_path, monkeypatch, capsys):
    """open_clip not importable (``sys.modules[name] = None`` is how Python marks a module that cannot be imported):
    the open_clip judge is refused with the extra to install before generating, not after."""
    import sys

    monkeypatch.setitem(sys.modules, "open_clip", None)
    out = tmp_path / "run"
    code, said = invoke(["run", "--model", str(pipeline_folder), "--prompts", "colors", "--limit", "2",
                         "--scorer", "clip", "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2, said
    assert "clip: open_clip_torch is not installed: pip install 't2i-audit[open-clip]'" in said, said
    assert not out.exists()


def test_judges_a_cpu_run_will_download_are_named_with_their_size(tmp_path):
    """Online (a stand-in Hub on a real socket: huggingface_hub asks it for each repo's info), nothing cached: the
    judges and what they download are said up front — in a process of its own, as the Hub's address is read when
    huggingface_hub is imported."""
    import http.server
    import json
    import os
    import subprocess
    import sys
    import threading

    asked = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 — http.server's name
            asked.append(self.path)
            body = json.dumps({"id": self.path, "sha": "0" * 40, "siblings": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}", "HF_HUB_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "hf-home")}  # an empty cache
        code = ("from t2i_audit.preflight import check_judges\n"
                "check_judges(['qwen3-vl-8b', 'geneval'], device='cpu', say=print)\n")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    assert p.returncode == 0, p.stderr
    assert "judges to download before scoring: qwen3-vl-8b (about 17.5 GB: Qwen/Qwen3-VL-8B-Instruct), geneval " \
           "(about 2 GB: facebook/mask2former-swin-small-coco-instance + timm/vit_large_patch14_clip_224.openai)" \
           in p.stdout, p.stdout
    assert "--scorer NAME" in p.stdout
    assert "/api/models/Qwen/Qwen3-VL-8B-Instruct/revision/main" in asked


def test_track_stops_once_before_any_checkpoint(pipeline_folder, tmp_path, monkeypatch, capsys):
    """Each checkpoint's run would fail the same check in turn ("not audited", exit 0): the track checks once."""
    train = tmp_path / "train"
    (train / "checkpoint-2").mkdir(parents=True)
    out = tmp_path / "track"
    code, said = invoke(["track", str(train), "--model", str(pipeline_folder), "--prompts", "colors", "--limit", "2",
                         "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2, said
    assert "qwen3-vl-8b needs Qwen/Qwen3-VL-8B-Instruct" in said and "not audited" not in said, said
    assert "--scorer NAME" in said and "--stages" not in said  # track's own options
    assert not out.exists()


def test_a_rerun_whose_scores_are_written_checks_no_judge(tmp_path, monkeypatch, capsys):
    """A finished run copied to a machine without the judge's weights can be rerun (to report again): the judges
    whose scores are all written, with their current cards, are not checked; a new sample per prompt needs them."""
    from t2i_audit import api
    from t2i_audit.preflight import scored_already
    from t2i_audit.rundir import RunDir

    out = tmp_path / "run"
    code, said = invoke(["run", "--model", "mini", "--prompts", "mini", "--limit", "2", "--scorer", "mini-pixel",
                         "--stages", "prompts,generate,score", "--out", str(out), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0, said
    run = RunDir(out)
    records = api.expand_suites(["mini"], 2, 0)
    planned = {(r["id"], 0) for r in records}
    assert scored_already(run, "mini-pixel", planned)
    assert not scored_already(run, "mini-judge", planned)  # never scored with it
    assert not scored_already(run, "mini-pixel", planned | {(records[0]["id"], 1)})  # -n 2: a new image to score
