"""Model cards (t2i_audit/models.yaml): every named pipeline class exists in the installed diffusers, the
open-model cards carry licence and gating, `t2i-audit models` shows family / pipeline / licence / gated, every
setting names its source, and every `call` / `components` name is one the real pipeline class takes."""

from __future__ import annotations

import inspect
import json

import pytest
import yaml
from typer.testing import CliRunner

from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.models import CARDS_FILE, _from_card, list_models, resolve_model

NEW = ["flux2-dev", "flux2-klein", "qwen-image", "z-image-turbo", "hidream-i1-full", "hidream-i1-dev",
       "hidream-i1-fast", "sana-1.5", "sana-sprint", "lumina-image-2", "cogview4", "chroma",
       "hunyuanimage-2.1", "kandinsky-5"]


def test_every_card_pipeline_is_a_diffusers_class():
    import diffusers

    cards = yaml.safe_load(CARDS_FILE.read_text())
    assert set(NEW) <= set(cards)
    for name, spec in cards.items():
        assert hasattr(diffusers, spec["pipeline"]), (name, spec["pipeline"])


def test_every_card_carries_licence_and_gating():
    """Every card, the tiny twins included: `t2i-audit models` never shows "-" where a licence or an access gate
    matters (issue 37: flux-dev, sd-3.x, sd-xl, sd-1.5 and pixart-sigma showed "-"); the hub-page cards say where
    each was read (sources.licence / sources.gated)."""
    from t2i_audit.models import card_names

    for name in card_names():
        card = resolve_model(name)
        assert isinstance(card.licence, str) and card.licence, name
        assert isinstance(card.gated, bool), name
        assert card.as_dict()["licence"] == card.licence and card.as_dict()["gated"] is card.gated
    for name in _cards():
        card = resolve_model(name)
        assert card.repo is None or card.repo.count("/") == 1, name
        assert {"licence", "gated"} <= set(card.sources) or name in NEW, f"{name}: say where licence/gated were read"
    assert resolve_model("flux2-dev").gated is True and resolve_model("flux-dev").gated is True
    assert resolve_model("sd-xl").licence == "openrail++" and resolve_model("sd-xl").gated is False
    assert resolve_model("qwen-image").call == {"true_cfg_scale": 4.0, "negative_prompt": " "}


def test_models_lists_family_from_families_yaml():
    rows = {r["name"]: r for r in list_models()}
    assert rows["qwen-image"]["family"] == rows["tiny-qwen-image"]["family"] == "qwen-image"
    assert rows["sana-1.5"]["family"] == rows["tiny-sana"]["family"] == "sana"
    assert rows["sd-xl"]["family"] == "sdxl"
    assert rows["flux2-dev"]["family"] == rows["tiny-flux2"]["family"] == "flux2"
    assert rows["sana-sprint"]["family"] == rows["tiny-sana-sprint"]["family"] == "sana-sprint"


def test_models_command_shows_pipeline_licence_gated():
    out = CliRunner().invoke(app, ["models"])
    assert out.exit_code == 0, out.output
    header, *lines = out.output.splitlines()
    assert header.split()[:3] == ["name", "family", "pipeline"] and "licence" in header and "gated" in header
    row = next(line.split() for line in lines if line.startswith("flux2-dev "))
    assert row[1:3] == ["flux2", "Flux2Pipeline"] and "flux-dev-non-commercial" in row and "yes" in row
    as_json = json.loads(CliRunner().invoke(app, ["models", "--json"]).output)
    assert {r["name"]: r["gated"] for r in as_json}["z-image-turbo"] is False
    assert not [line for line in lines if line.split()[7:9] == ["-", "-"]], "a card without licence and gated"


def _cards() -> dict:
    return yaml.safe_load(CARDS_FILE.read_text())


@pytest.mark.parametrize("name", sorted(_cards()))
def test_every_card_setting_names_its_source(name):
    """steps / guidance / size, and call / components when the card has them: each names where it comes from."""
    card = resolve_model(name)
    needed = {"steps", "guidance", "size"} | ({"call"} if card.call else set()) | (
        {"components"} if card.components else set())
    missing = needed - {k for k, v in card.sources.items() if isinstance(v, str) and v.strip()}
    assert not missing, f"{name}: no source for {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(_cards()))
def test_call_and_component_names_are_the_pipeline_classes_own(name):
    """A `call` key the pipeline's __call__ does not name explicitly would be swallowed by **kwargs or raise at
    generation time; a component must be an __init__ argument, its class importable."""
    import diffusers
    import transformers

    card = resolve_model(name)
    cls = getattr(diffusers, card.pipeline)
    params = inspect.signature(cls.__call__).parameters
    named = {k for k, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    assert set(card.call) <= named, f"{name}: {sorted(set(card.call) - named)} not in {cls.__name__}.__call__"
    init = inspect.signature(cls.__init__).parameters
    for comp, spec in card.components.items():
        assert comp in init, f"{name}: {comp} is not a {cls.__name__} component"
        assert hasattr(transformers, spec["class"]) or hasattr(diffusers, spec["class"]), (name, spec)


def test_a_card_with_an_unknown_field_is_refused_with_a_suggestion():
    with pytest.raises(AuditError, match=r"card 'x': unknown field 'sourcse'.*'sources'"):
        _from_card("x", {"repo": "a/b", "sourcse": {"steps": "somewhere"}})
    with pytest.raises(AuditError, match=r"components.text_encoder_4: expected \{repo, class"):
        _from_card("x", {"repo": "a/b", "components": {"text_encoder_4": {"repo": "a/llama"}}})
    with pytest.raises(AuditError, match=r"sources.stepz: not a setting.*'steps'"):
        _from_card("x", {"repo": "a/b", "sources": {"stepz": "README"}})


def test_cards_follow_their_sources():
    """issue 19 §2: the values read off the authors' own files (see each card's sources)."""
    lumina = resolve_model("lumina-image-2")  # Alpha-VLLM/Lumina-Image-2.0 README.md, Diffusers inference
    assert (lumina.defaults["steps"], lumina.defaults["guidance"], lumina.defaults["size"]) == (50, 4.0, 1024)
    assert lumina.call == {"cfg_trunc_ratio": 0.25, "cfg_normalization": True}
    sana = resolve_model("sana-1.5")  # NVlabs/Sana docs/sana.md (the hub's 18-step PAG snippet is a generic template)
    assert (sana.defaults["steps"], sana.defaults["guidance"], sana.call) == (20, 4.5, {})
    for name in ("hidream-i1-full", "hidream-i1-dev", "hidream-i1-fast"):  # the repos ship no Llama
        assert resolve_model(name).components == {
            "tokenizer_4": {"repo": "meta-llama/Meta-Llama-3.1-8B-Instruct", "class": "AutoTokenizer"},
            "text_encoder_4": {"repo": "meta-llama/Meta-Llama-3.1-8B-Instruct", "class": "LlamaForCausalLM"}}
    text = CARDS_FILE.read_text()
    assert "Mistral Small 3.1" not in text and "Mistral Small 3.2" in text  # black-forest-labs/flux2 text_encoder.py
