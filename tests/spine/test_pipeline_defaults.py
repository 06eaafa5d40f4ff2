"""A model without a card runs at its pipeline's own defaults, not at a generic 512 px / 30 steps / 5.0.

The reference is the pipeline itself: called with no size, steps or guidance, the loaded pipeline makes an
image of the resolved size, runs the resolved number of loop iterations and guides at the resolved scale."""

import shutil

import pytest

from t2i_audit import api
from t2i_audit.errors import AuditError
from t2i_audit.models import GENERIC_DEFAULTS, resolve_model
from t2i_audit.tiny import materialize


@pytest.fixture(scope="module")
def sdxl_folder(tmp_path_factory):
    """A tiny SDXL saved as a user's own pipeline folder (no card names it)."""
    folder = tmp_path_factory.mktemp("user") / "my-sdxl-finetune"
    shutil.copytree(materialize("tiny-sdxl"), folder)
    return folder


def test_local_folder_gets_the_pipelines_defaults(sdxl_folder):
    import torch

    from t2i_audit.generate import load_pipeline

    card = resolve_model(str(sdxl_folder))
    d = card.defaults
    assert (d["size"], d["steps"], d["guidance"]) != (GENERIC_DEFAULTS["size"], GENERIC_DEFAULTS["steps"],
                                                       GENERIC_DEFAULTS["guidance"])
    pipe = load_pipeline(card, "cpu", "float32")
    seen = []
    out = pipe(prompt=["a red cube"], generator=[torch.Generator("cpu").manual_seed(0)], output_type="np",
               callback_on_step_end=lambda p, i, t, kw: seen.append(i) or {})
    # what the pipeline does when given nothing, compared with what was resolved without loading a weight
    assert out.images[0].shape[:2] == (d["size"], d["size"]) == (pipe.default_sample_size * pipe.vae_scale_factor,) * 2
    assert len(seen) == d["steps"] == 50  # StableDiffusionXLPipeline.__call__ num_inference_steps=50
    assert pipe.guidance_scale == d["guidance"] == 5.0
    assert "default_sample_size 16 x vae_scale_factor 2" in card.sources["size"]
    assert card.sources["steps"] == "StableDiffusionXLPipeline.__call__ num_inference_steps=50"


def test_run_config_of_a_cardless_folder_records_those_defaults(sdxl_folder):
    cfg = api.make_config({"model": str(sdxl_folder), "prompts": ["prompts/colors.yaml"]})
    card = resolve_model(cfg.model)
    assert api.resolved_settings(cfg, card) == {"steps": 50, "guidance": 5.0, "size": 32, "dtype": "float16"}
    assert card.as_dict()["sources"]["guidance"] == "StableDiffusionXLPipeline.__call__ guidance_scale=5.0"  # manifest
    cfg = api.make_config({"model": str(sdxl_folder), "prompts": ["prompts/colors.yaml"], "size": 64, "steps": 3})
    assert api.resolved_settings(cfg, card)["size"] == 64 and api.resolved_settings(cfg, card)["steps"] == 3


def test_a_cards_defaults_are_left_alone():
    card = resolve_model("tiny-sdxl")
    assert (card.defaults["steps"], card.defaults["size"]) == (2, 32)


def test_a_folder_whose_configs_do_not_build_is_named(tmp_path, sdxl_folder):
    broken = tmp_path / "broken"
    shutil.copytree(sdxl_folder, broken)
    (broken / "unet" / "config.json").write_text('{"_class_name": "UNet2DConditionModel", "block_out_channels": "x"}')
    with pytest.raises(AuditError, match=r"broken: cannot build the pipeline from its configs.*--size"):
        resolve_model(str(broken))
