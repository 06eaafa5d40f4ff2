"""`run --prompts <imported>` end to end on a tiny twin, for every import format.

Small files in the benchmarks' real formats (GenEval's evaluation_metadata.jsonl, each
T2I-CompBench category's ``<category>_val.txt``, DPG-Bench's CSV) are imported and written as
PromptRecord JSONL, as `prompts import -o` does; one run then takes them all through prompts,
generate, score and report with tiny-sd and tiny-clip. Parsed and declined records both go through.
"""

from __future__ import annotations

import json

from t2i_audit import api
from t2i_audit.importers import import_prompts
from t2i_audit.rundir import RunDir

T2I_LINES = {  # one line each the grammar parses, one it declines (whole-prompt question only)
    "color": ["a green bench and a blue bowl", "Two toilet stall, one blue and the other orange."],
    "shape": ["an oblong cucumber and a teardrop plum"],
    "texture": ["a rubber tire and a glass vase"],
    "spatial": ["a cup on the left of a plate"],
    "non_spatial": ["A woman is holding a bouquet of flowers."],
    "complex": ["The white and yellow clock with a red roof reads 11:44."],
    "numeracy": ["three apples and one bowl"],
    "3d_spatial": ["a chair in front of a rabbit"],
}
GENEVAL = [{"tag": "two_object", "include": [{"class": "lamp", "count": 1}, {"class": "guitar", "count": 1}],
            "prompt": "a photo of a lamp and a guitar"},
           {"tag": "color_attr", "include": [{"class": "bench", "count": 1, "color": "red"}],
            "prompt": "a photo of a red bench"}]
DPG = """item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,question_natural_language
k1,"A red kettle sits to the left of a wooden bowl.",,1,0,entity,whole,entity - whole (kettle),Is there a kettle?
k1,"A red kettle sits to the left of a wooden bowl.",,2,0,entity,whole,entity - whole (bowl),Is there a bowl?
k1,"A red kettle sits to the left of a wooden bowl.",,3,1,attribute,color,"attribute - color (kettle, red)",Is the kettle red?
k1,"A red kettle sits to the left of a wooden bowl.",,4,"1,2",relation,spatial,"relation - spatial (kettle, bowl, left of)",Is the kettle to the left of the bowl?
"""


def _imported(tmp_path) -> list[str]:
    """Each source file imported into its own PromptRecord JSONL; their paths."""
    src = tmp_path / "src"
    src.mkdir()
    sources = []
    for cat, lines in T2I_LINES.items():
        f = src / f"{cat}_val.txt"
        f.write_text("\n".join(lines) + "\n", encoding="utf-8")
        sources.append((f, "t2i-compbench"))
    f = src / "evaluation_metadata.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in GENEVAL), encoding="utf-8")
    sources.append((f, "geneval"))
    f = src / "dpg_bench.csv"
    f.write_text(DPG, encoding="utf-8")
    sources.append((f, "dpg"))
    out = []
    for f, fmt in sources:
        recs = import_prompts(f, fmt)
        dest = tmp_path / f"{fmt}-{f.stem}.jsonl"
        dest.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
        out.append(str(dest))
    return out


def test_imported_prompts_of_every_format_run_through_score_and_report(tmp_path):
    files = _imported(tmp_path)
    records = [json.loads(line) for f in files for line in open(f, encoding="utf-8")]
    assert any(not r["parsed"] for r in records) and any(r["parsed"] for r in records)
    cfg = api.make_config(dict(model="tiny-sd", prompts=files, steps=2, size=32, batch_size=4,
                               scorers=["tiny-clip"], device="cpu", out=str(tmp_path / "run"),
                               stages=["prompts", "generate", "score", "report"]))
    rd = RunDir(api.run_audit(cfg, progress=False))

    stages = rd.read_manifest()["stages"]
    assert all(stages[s]["status"] == "done" for s in ("prompts", "generate", "score", "report")), stages
    images = [json.loads(line) for line in open(rd.images, encoding="utf-8") if line.strip()]
    assert {i["prompt_id"] for i in images} == {r["id"] for r in records}
    # every image gets a prompt-level score; where it has no verdict, every question of it was
    # declined by the scorer (`unsupported`: tiny-clip does not judge a whole-prompt question) — counted
    rows = [json.loads(line) for line in open(rd.scores("tiny-clip"), encoding="utf-8")]
    prompt_rows = {(s["prompt_id"], s["sample"]): s for s in rows if s["kind"] == "prompt"}
    assert set(prompt_rows) == {(i["prompt_id"], i["sample"]) for i in images}
    declined = [k for k, s in prompt_rows.items() if s["verdict"] is None]
    for pid, sample in declined:
        qs = [s for s in rows if s["kind"] == "question" and (s["prompt_id"], s["sample"]) == (pid, sample)]
        assert qs and all(s["extra"].get("unsupported") for s in qs), qs
    assert 0 < len(declined) < len(prompt_rows)  # the declined import; the parsed ones are judged
    report = rd.report_dir / "index.html"
    html = report.read_text(encoding="utf-8")
    assert "Scoring: not run" not in html and "tiny-clip" in html
