"""A run made with a LoRA is named by it wherever the run is named: its report page and summary.json, the ``run``
headline, ``compare``'s labels and page, the board's run labels — one name (t2i_audit/variants/labels.py: the
file's name, the scale, the short sha256), so a base run and a LoRA run of one model never read alike.

Real mini runs (the shipped generator, 4 prompts, 2 steps, the exact pixel judge) with a random LoRA saved as the
training scripts save theirs (``t2i_audit.tiny.lora.build_lora``)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pandas as pd
import pytest

from t2i_audit.rundir import RunDir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from t2i_audit import api
    from t2i_audit.tiny.lora import build_lora

    root = tmp_path_factory.mktemp("variant-names")
    lora = build_lora("mini", root / "my_lora")  # my_lora/pytorch_lora_weights.safetensors

    def run(name: str, **kw) -> Path:
        cfg = api.make_config(dict(model="mini", prompts=["mini"], limit=4, steps=2, scorers=["mini-pixel"],
                                   device="cpu", stages=["prompts", "generate", "score", "report"],
                                   out=str(root / name), **kw))
        return Path(api.run_audit(cfg, progress=False))

    base, adapted = run("base"), run("lora", loras=[f"{lora}:0.8"])
    sha = json.loads((adapted / "manifest.json").read_text())["model"]["adapted"]["loras"][0]["sha256"]
    return {"root": root, "base": base, "lora": adapted, "variant": f"my_lora@0.8 (sha256 {sha[:6]})"}


def test_the_report_and_the_headline_name_the_lora(runs):
    from t2i_audit.cli import _headline

    name = f"mini + {runs['variant']}"
    page = (runs["lora"] / "report/index.html").read_text()
    assert f"<h1>{escape(name)}</h1>" in page and f"<title>{escape(name)} · " in page
    assert "<h1>mini</h1>" in (runs["base"] / "report/index.html").read_text()
    report = json.loads((runs["lora"] / "summary.json").read_text())["report"]
    assert (report["model"], report["variant"]) == ("mini", runs["variant"])
    base = json.loads((runs["base"] / "summary.json").read_text())["report"]
    assert (base["model"], base["variant"]) == ("mini", None)
    assert _headline(RunDir(runs["lora"])).startswith(f"{name}: ")
    assert _headline(RunDir(runs["base"]))[0].isdigit()  # a base run's headline as it always was


def test_compare_labels_a_base_and_a_lora_run_apart(runs):
    from t2i_audit.report import compare_runs

    out = runs["root"] / "compare"
    page = compare_runs([runs["base"], runs["lora"]], out)
    name = f"mini + {runs['variant']}"
    assert json.loads((out / "compare.json").read_text())["models"] == ["mini", name]
    assert f"<h1>mini vs {escape(name)}</h1>" in page.read_text()


def test_the_board_labels_a_base_and_a_lora_run_apart(runs):
    from t2i_audit.board import build_board

    out = runs["root"] / "board"
    build_board(out, [runs["base"], runs["lora"]])
    index = json.loads((out / "board.json").read_text())
    (kept,) = next(e for e in index["runs"] if e["folder"] == "lora")["model"]["adapted"]["loras"]
    assert sorted(kept) == ["scale", "sha256", "source"]  # no local path beyond run.yaml's on a board that is published
    table = pd.read_parquet(out / index["snapshots"][-1]["files"]["runs"]["path"]).set_index("folder")
    assert table.loc["base", "label"] == "mini"
    assert table.loc["lora", "label"] == f"mini + {runs['variant']}"
    assert table.loc["base", "group"] == table.loc["lora", "group"]  # one model's variants ranked together
    assert escape(f"mini + {runs['variant']}") in (out / "index.html").read_text()
