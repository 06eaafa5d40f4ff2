"""--lora and --component: accepted, recorded, part of the run's identity by content, refused with a location.

Every refusal goes through the real entry point (``t2i_audit.cli.main``): exit 2, a message naming the input, and
nothing written (the ``--out`` folder is never created). A run without a variant keeps the fingerprint and
identity it had before variants existed (the values below were computed on the code before them).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError

from .test_command_properties import _snapshot, invoke

RUN = ["run", "--model", "tiny-sd", "--prompts", "mini", "--limit", "2", "--stages", "prompts"]


@pytest.fixture
def files(variant_files):
    return variant_files


def _cfg(**kw):
    return api.make_config({"model": "tiny-sd", "prompts": ["mini"], "limit": 2, **kw})


def test_no_variant_keeps_the_identity_it_had_before_variants():
    from t2i_audit.models import resolve_model
    from t2i_audit.resume import settings_id

    cfg = _cfg()
    card = resolve_model("tiny-sd")
    records = [{"id": "a", "text": "x"}]
    # the prompts as a folder made then recorded them (ids and texts; whole records since issue 36, and a folder
    # recorded before keeps its digest while those match: api.prompt_digest)
    then = {"prompts": f"1 prompts, sha256 {hashlib.sha256(b'a' + bytes([9]) + b'x').hexdigest()[:16]}"}
    identity = api.run_identity(cfg, card, records, recorded=then)
    # computed on c2acf83 (before RunConfig.loras / components) for the same config and prompt
    assert (cfg.fingerprint(card), cfg._hash(), settings_id(identity)) == ("c0a3af", "60a4d0", "0034030b224f160d")
    assert "loras" not in identity and "components" not in identity


def test_identity_is_the_files_content_and_the_scale(files, tmp_path):
    from t2i_audit.models import resolve_model

    card = resolve_model("tiny-sd")
    fp = lambda **kw: _cfg(**kw).fingerprint(card)  # noqa: E731
    base, lora = fp(), fp(loras=[f"{files['lora']}:0.5"])
    moved = tmp_path / "elsewhere.safetensors"
    shutil.copyfile(files["lora"], moved)
    assert len({base, lora, fp(loras=[f"{files['lora']}:0.8"]), fp(loras=[str(files["lora_edited"])])}) == 4
    assert fp(loras=[f"{moved}:0.5"]) == lora  # the same bytes elsewhere: the same run
    assert fp(loras=[str(files["lora"])]) == fp(loras=[f"{files['lora'].parent}:1.0"])  # a folder finds the file
    assert fp(components={"unet": str(files["unet_folder"])}) not in (base, lora)
    identity = api.run_identity(_cfg(loras=[f"{files['lora']}:0.5"]), card, [{"id": "a", "text": "x"}])
    assert identity["loras"] == [{"sha256": api.RunConfig(model="m", prompts=["p"], loras=[str(files["lora"])])
                                  .variant().loras[0].sha256, "scale": 0.5}]


def test_options_are_accepted_and_recorded(files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    code, said = invoke([*RUN, "--lora", f"{files['lora']}:0.5", "--component", f"unet={files['unet_folder']}",
                         "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 0, said
    cfg = api.load_config(out / "run.yaml")
    assert cfg.loras == [f"{files['lora'].resolve()}:0.5"] and cfg.components == {"unet": str(files["unet_folder"])}
    model = json.loads((out / "manifest.json").read_text())["model"]
    variant = model["adapted"]
    assert model["variant"] is None  # the card's weights variant (fp16 files) is its own key
    assert variant["loras"][0]["scale"] == 0.5 and len(variant["loras"][0]["sha256"]) == 64
    assert variant["components"]["unet"]["kind"] == "folder"
    marker = json.loads((out / ".t2i-audit.json").read_text())["settings"]
    assert marker["loras"] == [{"sha256": variant["loras"][0]["sha256"], "scale": 0.5}]
    # the same command resumes; another scale, file or component is refused with the difference named
    assert invoke([*RUN, "--config", str(out / "run.yaml")], tmp_path, monkeypatch, capsys)[0] == 0
    before = _snapshot(out)
    for extra in (["--lora", f"{files['lora']}:0.8"], ["--lora", str(files["lora_edited"])]):
        code, said = invoke([*RUN, *extra, "--component", f"unet={files['unet_folder']}", "--out", str(out)],
                            tmp_path, monkeypatch, capsys)
        assert code == 2 and "other settings (loras:" in said, said
    code, said = invoke([*RUN, "--lora", f"{files['lora']}:0.5", "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2 and "components:" in said, said
    assert _snapshot(out) == before


@pytest.mark.parametrize("case, needle", [
    (["--model", "tiny-pixart", "--lora", "{lora}"], "PixArtSigmaPipeline (model 'tiny-pixart') has no LoRA loader"),
    (["--lora", "{lora_other_family}"], "its keys match no layer of StableDiffusionPipeline"),
    (["--lora", "{lora_no_match}"], "its keys match no layer of StableDiffusionPipeline"),
    (["--lora", "./missing.safetensors"], "--lora './missing.safetensors': no such file or folder"),
    (["--lora", "{lora}:nan"], "scale 'nan' is not a finite number"),
    (["--lora", "{lora}:x0.5"], "scale 'x0.5' is not a number"),
    (["--component", "unett={unet_folder}"], "has no component 'unett'. Did you mean 'unet'?"),
    (["--component", "unet={text_encoder_file}"], "its weights do not fit the base model's UNet2DConditionModel"),
    (["--component", "unet={other_unet_folder}"], "does not fit the pipeline's (has down_blocks"),
    (["--component", "unet={text_encoder_file_parent}"], "the folder holds a CLIPTextModel"),
    (["--component", "unet"], "expected NAME=PATH"),
])
def test_refused_with_a_location_and_nothing_written(files, tmp_path, monkeypatch, capsys, case, needle):
    paths = {k: str(v) for k, v in files.items()} | {"text_encoder_file_parent": str(files["text_encoder_file"].parent)}
    argv = [a.format(**paths) for a in case]
    model = [] if "--model" in argv else ["--model", "tiny-sd"]
    out = tmp_path / "run"
    code, said = invoke(["run", *model, "--prompts", "mini", "--limit", "2", "--stages", "prompts", *argv,
                         "--out", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2 and needle in said, said
    assert "Traceback" not in said and not out.exists()


def test_missing_peft_names_the_extra(files, monkeypatch):
    from t2i_audit.models import resolve_model
    from t2i_audit.variants import resolve
    from t2i_audit.variants.check import check_variant

    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(AuditError, match=r"peft is not installed: pip install 't2i-audit\[lora\]'"):
        check_variant(resolve_model("tiny-sd"), resolve([str(files["lora"])]))


def test_commands_on_a_run_use_its_variant_and_refuse_another(files, tmp_path, monkeypatch, capsys):
    from t2i_audit.variants.of_run import for_run

    out = tmp_path / "run"
    lora = tmp_path / "mine.safetensors"
    shutil.copyfile(files["lora"], lora)
    assert invoke([*RUN, "--lora", f"{lora}:0.5", "--out", str(out)], tmp_path, monkeypatch, capsys)[0] == 0
    used = for_run(out, "tiny-sd")
    assert [(x.file, x.scale) for x in used.loras] == [(str(lora.resolve()), 0.5)]
    assert for_run(out, "tiny-sd", [f"{lora}:0.5"]) == used  # the same one given again is fine
    assert not for_run(out, "tiny-sdxl")  # another model: only what the command line gives
    for argv in (["probe", str(out), "--lora", f"{lora}:0.9"],
                 ["select", "--from", str(out), "--lora", str(files["lora_unet_only"])],
                 ["predict", "--model", "tiny-sd", "--prompts", "mini", "--from", str(out), "--out",
                  str(tmp_path / "r.jsonl"), "--component", f"unet={files['unet_folder']}"]):
        code, said = invoke(argv, tmp_path, monkeypatch, capsys)
        assert code == 2 and f"the run {out} was made with other ones" in said, (argv[0], said)
    shutil.copyfile(files["lora_edited"], lora)  # the file changed after the run: its images were not made with it
    code, said = invoke(["probe", str(out)], tmp_path, monkeypatch, capsys)
    assert code == 2 and "its LoRA / component files changed since the run was made" in said, said


def test_a_hub_lora_is_the_file_the_hub_cache_holds(files, tmp_path, monkeypatch):
    """org/repo and hf:org/repo[@rev][/file] go through hf_hub_download (here from a prepared Hub cache, offline):
    the same bytes as a local file are the same run."""
    import huggingface_hub.constants as hub

    commit = "0" * 40
    snapshot = tmp_path / "models--someone--tiny-lora" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(commit)
    shutil.copyfile(files["lora"], snapshot / "pytorch_lora_weights.safetensors")
    shutil.copyfile(files["lora_edited"], snapshot / "other.safetensors")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    local = _cfg(loras=[f"{files['lora']}:0.5"]).variant().identity()
    assert _cfg(loras=["someone/tiny-lora:0.5"]).variant().identity() == local
    hub_lora = _cfg(loras=["hf:someone/tiny-lora/other.safetensors"]).variant().loras[0]
    assert hub_lora.source == "hf:someone/tiny-lora/other.safetensors" and hub_lora.file.endswith("other.safetensors")
    with pytest.raises(AuditError, match="someone/absent cannot be fetched"):
        _cfg(loras=["someone/absent"]).variant()
    with pytest.raises(AuditError, match="expected hf:org/repo"):
        _cfg(loras=["hf:bad"]).variant()


def test_a_variant_is_named_by_its_files_scales_and_short_sha256():
    """One name for a recorded variant (variants/labels.py), as every page and progress line shows it: a file's own
    name, or its folder where training scripts give every file the same name; the scale; six hex of its sha256."""
    from t2i_audit.variants import Variant
    from t2i_audit.variants.labels import described_of_config, label_of, model_label

    file = "/w/my_lora/pytorch_lora_weights.safetensors"
    lora = {"source": file, "file": file, "sha256": "1a2b3c" + "0" * 58, "scale": 0.8}
    assert model_label("mini", {"loras": [lora]}) == "mini + my_lora@0.8 (sha256 1a2b3c)"
    assert model_label("mini", {}) == model_label("mini", None) == "mini"
    described = {
        "loras": [{**lora, "source": "/w/style.safetensors", "scale": 1.0},
                  {"source": "hf:org/repo@v2", "file": "/cache/x.safetensors", "sha256": "ab" * 32,
                   "scale": 0.30000000000000004}],
        "components": {"unet": {"path": "/out/checkpoint-3/unet_ema", "kind": "folder", "sha256": "cd" * 32},
                       "text_encoder": {"path": "/out/checkpoint-3/model_1.safetensors", "kind": "file",
                                        "sha256": "ef" * 32},
                       "vae": {"path": "/mine/my-vae", "kind": "folder", "sha256": "01" * 32}}}
    assert label_of(described) == (
        "style@1 (sha256 1a2b3c) + org/repo@0.30000000000000004 (sha256 ababab) + "
        "text_encoder=checkpoint-3/model_1.safetensors (sha256 efefef) + unet=checkpoint-3/unet_ema (sha256 cdcdcd) + "
        "vae=my-vae (sha256 010101)")
    # run.yaml's specs alone (no sha256 there) give the same names without it
    config = Variant().as_config() | {"loras": ["/w/my_lora/pytorch_lora_weights.safetensors:0.8"],
                                      "components": {"unet": "/out/checkpoint-3/unet"}}
    assert label_of(described_of_config(config)) == "my_lora@0.8 + unet=checkpoint-3/unet"
