"""What GPU users need, checked on CPU: the background image writer, --compile, the VAE's dtype per card,
CPU offload and VAE tiling as options, the scoring batch on an accelerator."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from t2i_audit import api, generate
from t2i_audit.errors import AuditError
from t2i_audit.families import pipeline_family
from t2i_audit.image_writer import BatchWriter
from t2i_audit.models import CARDS_FILE, resolve_model
from t2i_audit.rundir import RunDir


def cfg(repo_root, out, **kw):
    base = dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=4, steps=2, batch_size=2,
                stages=["prompts", "generate"], out=str(out), device="cpu")
    return api.make_config({**base, **kw})


def pixels(run_dir) -> dict:
    rd = RunDir(run_dir)
    return {r["prompt_id"]: np.asarray(Image.open(rd.root / r["path"]), dtype=int) for r in rd.read_images()}


def test_pngs_are_written_while_the_next_batch_is_denoised(repo_root, tmp_path, monkeypatch):
    """The writer thread encodes batch 1 while the pipeline already runs batch 2 (encoding slowed to make the
    overlap certain; the real encoder still runs)."""
    events, real_encode, real_load = [], generate._encode, generate.load_pipeline

    def slow_encode(arr):
        start = time.perf_counter()
        time.sleep(0.2)
        out = real_encode(arr)
        events.append(("encode", threading.current_thread().name, start, time.perf_counter()))
        return out

    def timed_load(*a, **kw):
        pipe = real_load(*a, **kw)
        pipe.unet.register_forward_pre_hook(lambda *_: events.append(("denoise", None, time.perf_counter(), None)))
        return pipe

    monkeypatch.setattr(generate, "_encode", slow_encode)
    monkeypatch.setattr(generate, "load_pipeline", timed_load)
    api.run_audit(cfg(repo_root, tmp_path / "r"), progress=False)
    encodes = [e for e in events if e[0] == "encode"]
    calls = [e[2] for e in events if e[0] == "denoise"]
    assert len(encodes) == 4 and {e[1] for e in encodes} == {"t2i-audit-writer"}
    first_batch_encoded = max(e[3] for e in encodes[:2])
    calls_per_batch = len(calls) // 2
    assert calls[calls_per_batch] < first_batch_encoded  # batch 2's first denoiser call began before batch 1 was written
    assert len(RunDir(tmp_path / "r").read_images()) == 4


def test_a_writer_error_reaches_the_generating_thread_and_stops_later_writes():
    written = []

    def write(i):
        if i == 1:
            raise OSError(28, "No space left on device")
        written.append(i)

    writer = BatchWriter(write, depth=1)
    writer.submit(0)
    writer.submit(1)
    with pytest.raises(OSError, match="No space"):
        for i in range(2, 50):  # raised at a later submit (or at close), never lost
            writer.submit(i)
        writer.close()
    writer.close()
    assert written == [0]


def test_disk_full_in_the_writer_is_one_clear_error(repo_root, tmp_path, monkeypatch):
    import errno

    from t2i_audit import rundir

    real = rundir.atomic_write_bytes
    count = {"n": 0}

    def full_after_two(path, data):
        count["n"] += 1
        if count["n"] > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(generate, "atomic_write_bytes", full_after_two)
    with pytest.raises(AuditError, match="no space left on device while writing images"):
        api.run_audit(cfg(repo_root, tmp_path / "full"), progress=False)
    shard = RunDir(tmp_path / "full").image_shard(0)
    assert shard.read_text().count("\n") == 2  # the first batch: PNGs and records; nothing of the failed one


def test_compile_is_applied_recorded_and_leaves_the_images(repo_root, tmp_path, monkeypatch):
    """--compile compiles the denoiser (dynamo traces the real UNet; backend aot_eager here: inductor's C++ kernels
    take minutes on this CPU and are measured on the GPU by benchmarks/gpu_accept.py). Tolerance: the same pixels
    within 1 of 255 levels (measured: aot_eager 0 levels; inductor on this CPU 1 level, float diff 3e-6)."""
    monkeypatch.setenv("T2I_AUDIT_COMPILE_BACKEND", "aot_eager")
    eager = api.run_audit(cfg(repo_root, tmp_path / "eager"), progress=False)
    compiled = api.run_audit(cfg(repo_root, tmp_path / "compiled", compile=True), progress=False)
    gen = RunDir(compiled).read_manifest()["stages"]["generate"]
    assert gen["settings"]["compile"] is True and gen["compile_backend"] == "aot_eager"
    assert gen["timing"]["compile_seconds"] > 0  # dynamo compiled the UNet during the first batch
    a, b = pixels(eager), pixels(compiled)
    assert a.keys() == b.keys() and all(np.abs(a[k] - b[k]).max() <= 1 for k in a)
    assert RunDir(eager).read_manifest()["fingerprint"] == RunDir(compiled).read_manifest()["fingerprint"]


def _card_files() -> dict:
    return yaml.safe_load(Path(CARDS_FILE).read_text())


@pytest.mark.parametrize("name", sorted(n for n, c in _card_files().items() if c["defaults"]["dtype"] == "float16"))
def test_every_float16_card_decides_its_vae_dtype(name):
    """A float16 VAE that overflows decodes NaN / black images (the SDXL VAE): each float16 card states its VAE's
    dtype, with a source, or its pipeline upcasts by itself (families.yaml vae_upcast, read off diffusers)."""
    card = resolve_model(name)
    upcasts = (pipeline_family(card.pipeline) or {}).get("vae_upcast") == "force_upcast"
    assert card.vae_dtype or upcasts, f"{name}: float16 without vae_dtype and its pipeline does not upcast"
    if card.vae_dtype:
        assert "vae_dtype" in card.sources or name == "pixart-sigma", f"{name}: vae_dtype without a source"


def test_a_float16_vae_that_asks_for_float32_gets_it():
    """tiny-sd3's AutoencoderKL keeps diffusers' default force_upcast=True and StableDiffusion3Pipeline never
    upcasts: in a float16 run its VAE decodes in float32, its transformer stays float16, and that is recorded."""
    import torch

    pipe = generate.load_pipeline(resolve_model("tiny-sd3"), "cpu", "float16")
    assert pipe.transformer.dtype == torch.float16 and pipe.vae.dtype == torch.float32
    d = pipe.t2i_placement["dtypes"]
    assert d["vae"] == "float32" and "does not upcast" in d["vae_why"] and d["denoiser"] == "float16"
    sdxl = generate.load_pipeline(resolve_model("tiny-sdxl"), "cpu", "float16")
    assert sdxl.vae.dtype == torch.float16  # its own __call__ upcasts (force_upcast): left to it
    assert "upcasts a force_upcast VAE itself" in sdxl.t2i_placement["dtypes"]["vae_why"]
    bf16 = generate.load_pipeline(resolve_model("tiny-sd3"), "cpu", "bfloat16")
    assert bf16.vae.dtype == torch.bfloat16  # bfloat16 has float32's range: nothing to upcast


def test_offload_is_refused_without_a_gpu(repo_root, tmp_path):
    with pytest.raises(AuditError, match="--offload model: CPU offload needs a CUDA device"):
        api.run_audit(cfg(repo_root, tmp_path / "o", offload="model"), progress=False)
    with pytest.raises(AuditError, match="offload: Input should be 'none', 'model' or 'sequential'"):
        cfg(repo_root, tmp_path / "o2", offload="gpu")


def test_a_card_offload_is_used_only_when_the_weights_do_not_fit():
    """On CPU (and on a GPU with room) a card's offload is not applied: the pipeline is simply placed."""
    card = resolve_model("flux-dev")
    assert card.offload == "model" and "enable_model_cpu_offload" in card.sources["offload"]
    pipe = generate.load_pipeline(resolve_model("tiny-flux"), "cpu", "float32")
    assert pipe.t2i_placement["offload"]["mode"] == "none" and pipe.t2i_placement["offload"]["weights_gb"] < 0.1


def test_vae_tiling_option_reaches_the_vae(repo_root, tmp_path):
    root = api.run_audit(cfg(repo_root, tmp_path / "t", model="tiny-sdxl", vae_tiling=True, limit=2), progress=False)
    gen = RunDir(root).read_manifest()["stages"]["generate"]
    assert gen["placement"]["vae_tiling"] is True and gen["images"] == 2
    pipe = generate.load_pipeline(resolve_model("tiny-sdxl"), "cpu", "float32", vae_tiling=True)
    assert pipe.vae.use_tiling


def test_scoring_fills_an_accelerator_and_keeps_the_cpu_batch(repo_root, tmp_path):
    c = cfg(repo_root, tmp_path / "s", batch_size=4)
    assert api.score_batch_size(c, "cpu") == 4
    assert api.score_batch_size(c, "cuda:0") == api.GPU_SCORE_BATCH == 16
    assert api.score_batch_size(cfg(repo_root, tmp_path / "s", batch_size=32), "cuda") == 32
