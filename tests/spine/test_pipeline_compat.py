"""Generation calls and outputs across pipeline classes whose ``__call__`` / output differ (issue 13).

Read off the installed diffusers 0.42: HunyuanImagePipeline.__call__ takes ``distilled_guidance_scale`` and no
``guidance_scale``; Kandinsky5T2IPipeline returns ``KandinskyImagePipelineOutput(image=...)``, its video
siblings ``KandinskyPipelineOutput(frames=...)``; model_index.json names each text encoder's class.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from t2i_audit.errors import AuditError
from t2i_audit.generate import output_images, pipeline_call_kwargs
from t2i_audit.models import discover_text_encoders, encoder_kind

ARGS = dict(steps=3, guidance=4.5, size=32, output_type="np")


def test_guidance_goes_to_the_argument_the_pipeline_has():
    from diffusers import HunyuanImagePipeline, StableDiffusionPipeline

    kw, ignored = pipeline_call_kwargs(HunyuanImagePipeline, ["a"], None, call={"negative_prompt": ""}, **ARGS)
    assert kw["distilled_guidance_scale"] == 4.5 and "guidance_scale" not in kw and ignored == []
    assert (kw["num_inference_steps"], kw["height"], kw["width"], kw["negative_prompt"]) == (3, 32, 32, "")
    kw, _ = pipeline_call_kwargs(StableDiffusionPipeline, ["a"], None, **ARGS)
    assert kw["guidance_scale"] == 4.5 and "distilled_guidance_scale" not in kw


def test_a_setting_the_pipeline_lacks_is_left_out_and_reported():
    class NoGuidance:
        def __call__(self, prompt, generator=None, num_inference_steps=2, height=8, width=8, output_type="pil"):
            pass

    kw, ignored = pipeline_call_kwargs(NoGuidance, ["a", "b"], None, **ARGS)
    assert ignored == ["guidance_scale"] and set(kw) == {"prompt", "generator", "num_inference_steps", "height",
                                                        "width", "output_type"}


def test_a_card_call_key_the_pipeline_lacks_is_an_error():
    from diffusers import HunyuanImagePipeline

    with pytest.raises(AuditError, match="has no argument 'true_cfg_scale'.*distilled_guidance_scale"):
        pipeline_call_kwargs(HunyuanImagePipeline, ["a"], None, call={"true_cfg_scale": 4.0}, **ARGS)


def test_images_are_read_from_images_image_or_the_first_frame():
    from diffusers.pipelines.hidream_image.pipeline_output import HiDreamImagePipelineOutput
    from diffusers.pipelines.kandinsky5.pipeline_output import KandinskyImagePipelineOutput, KandinskyPipelineOutput

    arr = np.random.default_rng(0).random((2, 4, 4, 3)).astype(np.float32)
    assert output_images(HiDreamImagePipelineOutput(images=arr)) is arr
    assert output_images(KandinskyImagePipelineOutput(image=arr)) is arr
    video = np.stack([arr, arr * 0], axis=1)  # (B, F, H, W, C): frame 0 is the image
    got = output_images(KandinskyPipelineOutput(frames=video))
    assert len(got) == 2 and all(np.array_equal(g, a) for g, a in zip(got, arr))
    with pytest.raises(AuditError, match="no images, image or frames"):
        output_images(object())


@pytest.mark.parametrize("cls, kind", [
    ("CLIPTextModelWithProjection", "clip"), ("T5EncoderModel", "t5"), ("UMT5EncoderModel", "umt5"),
    ("LlamaForCausalLM", "llama"), ("Qwen2_5_VLForConditionalGeneration", "qwen2.5-vl"), ("Qwen3Model", "qwen3"),
    ("Gemma2Model", "gemma2"), ("Gemma3ForCausalLM", "gemma3"), ("Mistral3ForConditionalGeneration", "mistral3"),
    ("GlmModel", "glm"), ("SomethingNew", "SomethingNew")])
def test_encoder_kind_from_the_class_name(cls, kind):
    assert encoder_kind(cls) == kind


def test_discovered_encoders_carry_their_kind(tmp_path):
    """HiDream's model_index.json layout: two CLIPs, T5, Llama 3 — not four "clip"s."""
    index = {"_class_name": "HiDreamImagePipeline",
             "text_encoder": ["transformers", "CLIPTextModelWithProjection"],
             "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
             "text_encoder_3": ["transformers", "T5EncoderModel"],
             "text_encoder_4": ["transformers", "LlamaForCausalLM"],
             "tokenizer_4": ["transformers", "PreTrainedTokenizerFast"],
             "text_encoder_5": [None, None], "transformer": ["diffusers", "HiDreamImageTransformer2DModel"]}
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    got = discover_text_encoders(str(tmp_path))
    assert [(t["name"], t["tokenizer"], t["kind"]) for t in got] == [
        ("text_encoder", "tokenizer", "clip"), ("text_encoder_2", "tokenizer_2", "clip"),
        ("text_encoder_3", "tokenizer_3", "t5"), ("text_encoder_4", "tokenizer_4", "llama")]


def test_batch_dependent_pipeline_generates_one_at_a_time_and_resizes_are_recorded(repo_root, tmp_path):
    """Kandinsky 5 pads a batch to its longest prompt and its transformer sees the padding unmasked, so
    generate makes its images alone (recorded); it also snaps 32 px to its 1024 px table: recorded, not excluded."""
    from t2i_audit import api
    from t2i_audit.rundir import RunDir

    cfg = api.make_config(dict(model="tiny-kandinsky5", prompts=[str(repo_root / "prompts/colors.yaml")], limit=2,
                               steps=1, batch_size=2, stages=["prompts", "generate"], out=str(tmp_path / "r"),
                               device="cpu"))
    rd = RunDir(api.run_audit(cfg, progress=False))
    gen = rd.read_manifest()["stages"]["generate"]
    assert gen["settings"]["batch_size"] == 1 and "batch-mates" in gen["batch_size_note"]
    images = rd.read_images()
    assert len(images) == 2 and all(r["width"] != 32 and r["requested_size"] == 32 and not r["flags"] for r in images)
    assert "for --size 32" in gen["size_note"]
