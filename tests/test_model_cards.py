"""Model cards (t2i_audit/models.yaml): every named pipeline class exists in the installed diffusers, the
open-model cards carry licence and gating, and `t2i-audit models` shows family / pipeline / licence / gated."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from t2i_audit.cli import app
from t2i_audit.models import CARDS_FILE, list_models, resolve_model

NEW = ["flux2-dev", "flux2-klein", "qwen-image", "z-image-turbo", "hidream-i1-full", "hidream-i1-dev",
       "hidream-i1-fast", "sana-1.5", "sana-sprint", "lumina-image-2", "cogview4", "chroma",
       "hunyuanimage-2.1", "kandinsky-5"]


def test_every_card_pipeline_is_a_diffusers_class():
    import diffusers

    cards = yaml.safe_load(CARDS_FILE.read_text())
    assert set(NEW) <= set(cards)
    for name, spec in cards.items():
        assert hasattr(diffusers, spec["pipeline"]), (name, spec["pipeline"])


def test_open_model_cards_carry_licence_and_gating():
    for name in NEW:
        card = resolve_model(name)
        assert card.repo and card.repo.count("/") == 1, name
        assert isinstance(card.licence, str) and card.licence, name
        assert isinstance(card.gated, bool), name
        assert card.as_dict()["licence"] == card.licence and card.as_dict()["gated"] is card.gated
    assert resolve_model("flux2-dev").gated is True
    assert resolve_model("qwen-image").call == {"true_cfg_scale": 4.0, "negative_prompt": " "}
    assert resolve_model("sd-1.5").licence is None  # optional fields


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
