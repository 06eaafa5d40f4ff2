"""Hosted models against a real server process on 127.0.0.1 (hosted_server.py), each protocol with its faults:
429 with Retry-After, 503, a slow answer past the timeout, a dropped connection, a body that is not an image, a
content-filter refusal, a rejected or missing token. What each request sent is read from the server's own log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError
from t2i_audit.generate import image_seed

from .serving import REPO, hosted_model

pytest.importorskip("openai")

# the first six prompts of `--prompts mini --limit 6` (the balanced subset at seed 0)
A, B, C, D, E, F = ("a red cross", "a blue triangle", "a red square and an orange cross",
                    "a yellow cross to the left of an orange triangle", "an orange square and a red cross",
                    "an orange triangle to the left of a yellow cross")
SECRET = "hf_SECRET_never_in_a_file_7f3a"


def _cfg(model: str, out: Path, **kw) -> api.RunConfig:
    return api.RunConfig(model=model, prompts=["mini"], limit=6, out=str(out), device="cpu",
                         stages=["prompts", "generate"], **kw)


def _files_hold(root: Path, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def _by_text(log: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in log:
        out.setdefault(r["text"], []).append(r)
    return out


def test_endpoint_retries_records_refusals_and_resumes_without_asking_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("T2I_AUDIT_REQUEST_TIMEOUT", "1")
    faults = [{"match": A, "kind": "429", "times": 1}, {"match": B, "kind": "drop", "times": 1},
              {"match": C, "kind": "503", "times": 2}, {"match": D, "kind": "slow", "times": 1},
              {"match": E, "kind": "notimage"}, {"match": F, "kind": "refuse"}]
    with hosted_model(tmp_path / "server", token=SECRET, faults=faults, slow=2.5) as (base, log):
        root = api.run_audit(_cfg(f"endpoint:{base}/generate", tmp_path / "run"), progress=False)
        asked = _by_text(log())
        root2 = api.run_audit(_cfg(f"endpoint:{base}/generate", tmp_path / "run"), progress=False)  # resume
        assert len(log()) == sum(map(len, asked.values())), "a resumed run asked again for something recorded"
    assert root2 == root
    images = [json.loads(x) for x in (root / "images.jsonl").read_text().splitlines()]
    prompts = {p["id"]: p["text"] for p in map(json.loads, (root / "prompts.jsonl").read_text().splitlines())}
    assert sorted(prompts[r["prompt_id"]] for r in images) == sorted([A, B, C, D])
    refusals = {prompts[r["prompt_id"]]: r for r in map(json.loads, (root / "refusals.jsonl").read_text().splitlines())}
    assert refusals[E]["reason"] == "not_an_image" and refusals[F]["reason"] == "content_filter"
    assert "safety filter" in refusals[F]["detail"] and refusals[F]["status"] == 400
    # each fault cost exactly its retries; 429's Retry-After: 1 was waited for
    assert {t: len(v) for t, v in asked.items()} == {A: 2, B: 2, C: 3, D: 2, E: 1, F: 1}
    assert asked[A][1]["t"] - asked[A][0]["t"] >= 1.0
    # every request: the per-image seed a local run uses, nothing the user did not give, the protocol's headers
    ids = {t: i for i, t in prompts.items()}
    for text, reqs in asked.items():
        for r in reqs:
            assert r["parameters"] == {"seed": image_seed(ids[text], 0, 0)}
            assert r["accept"] == "image/png" and r["content_type"] == "application/json" and r["authorized"]
    m = json.loads((root / "manifest.json").read_text())
    g = m["stages"]["generate"]
    assert (g["status"], g["images"], g["refused"], g["missing"]) == ("done", 4, 2, 0)
    assert g["refused_by_reason"] == {"not_an_image": 1, "content_filter": 1}
    assert g["provider_defaults"] == ["guidance", "size", "steps"] and g["generated_now"] == 0  # the resume's
    run_yaml = (root / "run.yaml").read_text()
    assert "steps: null" in run_yaml and "guidance: null" in run_yaml and "size: null" in run_yaml
    assert "provider's own default" in m["model"]["sources"]["steps"]
    assert _files_hold(root, SECRET) == []  # the token reaches no file
    from t2i_audit.verify import verify_run

    assert verify_run(root)["ok"], verify_run(root)  # refusals.jsonl is a known record kind, the stage is done
    # the report counts the refusals apart: not scored, not composition failures
    from t2i_audit.report import render_report

    page = render_report(root, progress=False).read_text()
    assert "refused by the provider" in page and "1 content filter" in page and "1 not an image" in page
    summary = json.loads((root / "summary.json").read_text())["report"]
    assert (summary["refused"], summary["refused_by_reason"], summary["images"]) == (
        2, {"not_an_image": 1, "content_filter": 1}, 4)


def test_openai_images_api_with_its_retries_refusals_and_no_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    faults = [{"match": A, "kind": "429", "times": 1}, {"match": B, "kind": "drop", "times": 1},
              {"match": C, "kind": "503", "times": 1}, {"match": E, "kind": "notimage"}, {"match": F, "kind": "refuse"}]
    with hosted_model(tmp_path / "server", "openai", token=SECRET, faults=faults) as (base, log):
        with pytest.raises(AuditError, match="--steps: the OpenAI Images API takes no such setting"):
            api.run_audit(_cfg("openai:mini-hosted", tmp_path / "refused", base_url=f"{base}/v1", steps=4))
        assert log() == [] and not (tmp_path / "refused").exists()  # refused before a request or a file
        root = api.run_audit(_cfg("openai:mini-hosted", tmp_path / "run", base_url=f"{base}/v1", size=32),
                             progress=False)
        asked = _by_text(log())
    assert {t: len(v) for t, v in asked.items()} == {A: 2, B: 2, C: 2, D: 1, E: 1, F: 1}
    assert asked[A][1]["t"] - asked[A][0]["t"] >= 1.0  # Retry-After
    for reqs in asked.values():
        for r in reqs:
            assert r["path"] == "/v1/images/generations" and r["authorized"]
            assert r["parameters"] == {"model": "mini-hosted", "n": 1, "size": "32x32"}  # no seed: the API takes none
    prompts = {p["id"]: p["text"] for p in map(json.loads, (root / "prompts.jsonl").read_text().splitlines())}
    refusals = {prompts[r["prompt_id"]]: r["reason"]
                for r in map(json.loads, (root / "refusals.jsonl").read_text().splitlines())}
    assert refusals == {E: "not_an_image", F: "content_filter"}
    g = json.loads((root / "manifest.json").read_text())["stages"]["generate"]
    assert (g["status"], g["images"], g["refused"]) == ("done", 4, 2)
    assert g["sent"] == {"size": 32} and "seed" in g["not_sent"]
    assert f"openai:mini-hosted@{base}/v1" == json.loads((root / "manifest.json").read_text())["model"]["source"]
    assert _files_hold(root, SECRET) == []


def test_a_wrong_or_missing_token_stops_the_run_before_any_image(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login token either
    with hosted_model(tmp_path / "server", token="the-right-one") as (base, log):
        monkeypatch.setenv("HF_TOKEN", "a-wrong-one")
        with pytest.raises(AuditError, match=r"answered 401 \(the token in \$HF_TOKEN was refused\)"):
            api.run_audit(_cfg(f"endpoint:{base}/g", tmp_path / "wrong"), progress=False)
        assert len(log()) == 1  # the first request goes alone
        monkeypatch.delenv("HF_TOKEN")
        with pytest.raises(AuditError, match=r"\$HF_TOKEN is not set"):
            api.run_audit(_cfg(f"endpoint:{base}/g", tmp_path / "missing"), progress=False)
        assert not log()[-1]["authorized"]
    for out in ("wrong", "missing"):
        assert not list((tmp_path / out).glob("images/*/*")) and not (tmp_path / out / "images.jsonl").exists()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AuditError, match=r"\$OPENAI_API_KEY is not set"):
        api.run_audit(_cfg("openai:gpt-image-1", tmp_path / "openai"), progress=False)


def test_endpoint_requests_are_the_ones_inference_client_sends(tmp_path):
    """Our request equals huggingface_hub's InferenceClient.text_to_image (run where the hub is not offline: its
    session refuses every URL under HF_HUB_OFFLINE=1, which is why the source sends with urllib3)."""
    from t2i_audit.sources.base import ImageRequest
    from t2i_audit.sources.providers import Endpoint

    with hosted_model(tmp_path / "server") as (base, log):
        script = (f"from huggingface_hub import InferenceClient\n"
                  f"InferenceClient(model={base + '/x'!r}, token='tok').text_to_image({A!r}, seed=5, "
                  "num_inference_steps=4, guidance_scale=3.5, width=32, height=32)\n")
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=REPO, timeout=60)
        os.environ["HF_TOKEN"] = "tok"
        try:
            reply = Endpoint(f"{base}/x").fetch(ImageRequest("p", 0, A, 5, 4, 3.5, 32))
        finally:
            del os.environ["HF_TOKEN"]
        theirs, ours = log()
    keys = ("path", "text", "parameters", "accept", "content_type", "authorized")
    assert {k: theirs[k] for k in keys} == {k: ours[k] for k in keys}
    assert ours["parameters"] == {"seed": 5, "num_inference_steps": 4, "guidance_scale": 3.5, "width": 32, "height": 32}
    assert reply.image[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hosted_generate_stage_needs_no_torch(tmp_path):
    """Sending requests needs neither torch nor Accelerate: a hosted run's generate stage imports neither (the
    command starts in a second, and a machine without torch can make the images)."""
    with hosted_model(tmp_path / "server") as (base, log):
        script = ("import sys\nfrom t2i_audit import api\n"
                  f"api.run_audit(api.RunConfig(model='endpoint:{base}/g', prompts=['mini'], limit=2, "
                  f"out={str(tmp_path / 'run')!r}, stages=['prompts', 'generate']), progress=False)\n"
                  "print(sorted(m for m in ('torch', 'accelerate', 'diffusers') if m in sys.modules))\n")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        res = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().splitlines()[-1] == "[]" and len(log()) == 2


def test_the_server_is_part_of_what_a_hosted_model_is_and_concurrency_is_not():
    def key(**kw):
        cfg = api.RunConfig(model="openai:gpt-image-1", prompts=["mini"], **kw)
        return cfg.fingerprint(api.resolve_model_for(cfg))

    assert key() == key(concurrency=16)  # how many requests are in flight never changes what is made
    assert key(base_url="http://127.0.0.1:1/v1") != key(base_url="http://127.0.0.1:2/v1") != key()
    endpoint = api.RunConfig(model="endpoint:http://127.0.0.1:1/a", prompts=["mini"])
    assert api.default_run_dir(endpoint).name.startswith("endpoint-127.0.0.1-1-a_mini_")  # a folder name, no URL
    with pytest.raises(AuditError, match="credentials in the URL would be written"):
        api.resolve_model_for(api.RunConfig(model="endpoint:https://user:pw@example.org/x", prompts=["mini"]))
