"""``prompts import``: GenEval, T2I-CompBench and DPG-Bench files → PromptRecords.

The fixtures in tests/fixtures/import/ are small hand-written files in each benchmark's real
format (see t2i_audit/importers.py for the sources of each format), not copies of their lists.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2i_audit import api
from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.importers import import_prompts, read_prompt_records, stable_id
from t2i_audit.scorers.foils import build_foils
from t2i_audit.scorers.verdicts import judge

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "import"


def _by_cat(records):
    return {r["category"]: r for r in records}


def _span_words(r):
    return {s: r["text"][a:b] for s, (a, b) in r["spans"].items()}


def test_geneval_records_structure_and_ids():
    recs = import_prompts(FIX / "geneval_metadata.jsonl", "geneval")
    assert [r["category"] for r in recs] == ["single_object", "two_object", "counting", "colors", "position", "color_attr"]
    assert all(r["source"] == "geneval" and r["parsed"] and r["split"] == "train" for r in recs)
    assert [r["source_line"] for r in recs] == [1, 2, 3, 4, 5, 6]
    c = _by_cat(recs)
    # ids: sha1 of (source, template, text, occurrence) — the same for every copy of the file
    assert c["colors"]["id"] == stable_id("geneval", "colors", "a photo of an orange umbrella")
    assert [r["id"] for r in import_prompts(FIX / "geneval_metadata.jsonl", "geneval")] == [r["id"] for r in recs]
    cnt = c["counting"]
    assert cnt["objects"][0]["count"] == 3 and cnt["slots"] == {"n1": "three", "o1": "apple"}
    assert [(q["kind"], q["text"], q["depends_on"]) for q in cnt["questions"]] == [
        ("exists", "Is there an apple?", []), ("count", "Are there exactly 3 apples?", ["q0"])]
    assert _span_words(cnt) == {"n1": "three", "o1": "apples"}
    # position: include[1] = [rel, 0] means include[1] is rel include[0]; o1 is the first named object
    pos = c["position"]
    assert [o["name"] for o in pos["objects"]] == ["cup", "teddy bear"]
    assert pos["relations"] == [{"slot": "r", "family": "spatial", "name": "left of", "text": "left of",
                                 "inverse": "right of", "subject": "o1", "object": "o2"}]
    assert pos["questions"][-1] == {"id": "q2", "kind": "relation", "text": "Is the cup left of the teddy bear?",
                                    "subject": "o1", "object": "o2", "family": "spatial", "value": "left of",
                                    "slot": "r", "depends_on": ["q0", "q1"]}
    ca = c["color_attr"]
    assert ca["bindings"] == [["color", "green", "bench"], ["color", "purple", "vase"]]
    assert ca["composition"] == "c1=green|c2=purple|o1=bench|o2=vase"
    assert _span_words(ca) == {"c1": "green", "o1": "bench", "c2": "purple", "o2": "vase"}


def test_geneval_spans_feed_the_scorers_foils():
    c = _by_cat(import_prompts(FIX / "geneval_metadata.jsonl", "geneval"))
    foils = {f["name"]: f["text"] for f in build_foils(c["color_attr"])}
    assert foils["swap_color"] == "a photo of a purple bench and a green vase"
    foils = {f["name"]: f["text"] for f in build_foils(c["position"])}
    assert foils["reverse_r"] == "a photo of a teddy bear left of a cup"


def test_t2i_compbench_grammar_and_unparsed_lines():
    color = import_prompts(FIX / "color_val.txt", "t2i-compbench")
    assert {r["category"] for r in color} == {"color"} and [r["parsed"] for r in color] == [True, True, True, False]
    assert color[2]["slots"] == {"c1": "orange", "o1": "umbrella", "c2": "white", "o2": "chair"}
    unparsed = color[3]
    assert unparsed["objects"] == [] and unparsed["questions"] == [
        {"id": "q0", "kind": "prompt", "depends_on": [],
         "text": 'Does the image show "A kitchen with a pink fridge next to a window."?'}]
    spatial = import_prompts(FIX / "spatial_val.txt", "t2i-compbench")
    # "on the top of" is T2I-CompBench's "subject above object" (UniDet_eval/2D_spatial_eval.py)
    rel = spatial[1]["relations"][0]
    assert (rel["name"], rel["text"], rel["inverse"]) == ("above", "on the top of", "below")
    assert spatial[1]["questions"][-1]["text"] == "Is the lamp on the top of the suitcase?"
    assert spatial[2]["relations"][0]["name"] == "next to" and not spatial[3]["parsed"]
    num = import_prompts(FIX / "numeracy_val.txt", "t2i-compbench")
    assert [r["parsed"] for r in num] == [True, True, True, True, False]
    # a counted subject with a verb phrase: the counts, and what the verb relates
    qs = [(q["kind"], q["text"]) for q in num[3]["questions"]]
    assert ("count", "Are there exactly 5 kites?") in qs and qs[-1] == ("relation", "Are the kites drifting over the beach?")
    assert num[4]["parse_reason"] == "no rule for the word 'quietly'"
    objs = [(o["name"], o["plural"], o["count"]) for o in num[2]["objects"]]
    assert objs == [("lamp", "lamps", 1), ("sheep", "sheep", 2), ("knife", "knives", 4)]
    assert [q["text"] for q in num[1]["questions"] if q["kind"] == "count"] == [
        "Are there exactly 2 mice?", "Is there exactly one cat?"]


def test_t2i_category_from_name_or_option(tmp_path):
    f = tmp_path / "my_prompts.txt"
    f.write_text("a red cup and a blue bench\n")
    with pytest.raises(AuditError, match="my_prompts.txt: cannot tell the T2I-CompBench category.*--category"):
        import_prompts(f, "t2i-compbench")
    (r,) = import_prompts(f, "t2i-compbench", category="color")
    assert r["category"] == "color" and r["parsed"]
    # a repeated line keeps its own stable id
    f.write_text("a red cup and a blue bench\na red cup and a blue bench\n")
    a, b = import_prompts(f, "t2i-compbench", category="color")
    assert a["id"] == r["id"] and b["id"] == stable_id("t2i-compbench", "color", r["text"], 1) != a["id"]


def test_t2i_vocabulary_extends_with_a_suite(tmp_path):
    f = tmp_path / "texture_val.txt"
    f.write_text("a tweed towel and a glass table\n")
    # "tweed" is in no vocabulary: a noun, so the object is a "tweed towel" of no texture
    assert import_prompts(f, "t2i-compbench")[0]["bindings"] == [["texture", "glass", "table"]]
    vocab = tmp_path / "extra.yaml"
    vocab.write_text("suite: extra\nversion: 1\nconcepts:\n  objects: {family: object, values: [towel]}\n"
                     "  textures: {family: texture, values: [tweed]}\ntemplates:\n  - name: t\n"
                     "    category: texture\n    text: '{t1} {o1}'\n    slots: {t1: textures, o1: objects}\n"
                     "    expect: {objects: [{id: o1, texture: t1}]}\n")
    (r,) = import_prompts(f, "t2i-compbench", vocab_files=[str(vocab)])
    assert r["parsed"] and r["bindings"] == [["texture", "tweed", "towel"], ["texture", "glass", "table"]]


def test_dpg_groups_rows_with_dependencies():
    recs = import_prompts(FIX / "dpg_small.csv", "dpg")
    assert [r["source_item"] for r in recs] == ["toy1", "toy2"] and [r["source_line"] for r in recs] == [2, 9]
    r1, r2 = recs
    assert [o["name"] for o in r1["objects"]] == ["kettle", "bowl", "window"]
    assert [(q["id"], q["kind"], q["depends_on"]) for q in r1["questions"]] == [
        ("q1", "exists", []), ("q2", "exists", []), ("q3", "attribute", ["q1"]), ("q4", "attribute", ["q2"]),
        ("q5", "relation", ["q1", "q2"]), ("q6", "exists", []), ("q7", "relation", ["q1", "q6"])]
    assert r1["objects"][1]["attributes"] == {"texture": "wooden"} and r1["questions"][3]["slot"] == "t2"
    assert [(x["name"], x["subject"], x["object"]) for x in r1["relations"]] == [("left of", "o1", "o2"),
                                                                                 ("under", "o1", "o3")]
    q = {x["id"]: x for x in r2["questions"]}
    assert q["q2"]["kind"] == "count" and q["q2"]["number"] == 3 and r2["objects"][0]["count"] == 3
    assert q["q3"]["family"] == "material" and q["q6"]["kind"] == "other" and q["q6"]["tuple"] == "global - (watercolour)"
    # the judge follows DPG's dependencies: no kettle → its colour and relations are skipped, not failed
    j = judge(r1, {"q1": False, "q2": True, "q3": True, "q4": True, "q5": True, "q6": True, "q7": True})
    assert {k: (v["verdict"], v["skipped_by"]) for k, v in j["questions"].items() if k in ("q3", "q5", "q7")} == {
        "q3": (None, ["q1"]), "q5": (None, ["q1"]), "q7": (None, ["q1"])}
    assert [f["type"] for f in j["failures"]] == ["missing_object"]


@pytest.mark.parametrize("name,fmt,message", [
    ("geneval_bad.jsonl", "geneval", r"geneval_bad\.jsonl:2: not a JSON object"),
    ("geneval_no_include.jsonl", "geneval", r"geneval_no_include\.jsonl:3: missing key\(s\) include"),
    ("color_bad.txt", "t2i-compbench", r"color_bad\.txt:2: expected one prompt per line"),
    ("dpg_bad.csv", "dpg", r"dpg_bad\.csv:3: .*dependency 'x' must be integers"),
    ("dpg_bad_dep.csv", "dpg", r"dpg_bad_dep\.csv:3: item 'toy1' proposition 2 depends on 5"),
    ("dpg_missing_column.csv", "dpg", r"dpg_missing_column\.csv:1: missing column\(s\) dependency, question_natural_language"),
])
def test_malformed_files_name_file_and_line(name, fmt, message):
    with pytest.raises(AuditError, match=message):
        import_prompts(FIX / name, fmt)


def test_unknown_format_and_missing_file():
    with pytest.raises(AuditError, match="unknown import format 'gen-eval'. Did you mean 'geneval'"):
        import_prompts(FIX / "geneval_metadata.jsonl", "gen-eval")
    with pytest.raises(AuditError, match="nope.txt: file not found"):
        import_prompts(FIX / "nope.txt", "t2i-compbench")


def test_cli_import_then_run_loads_the_jsonl(tmp_path, repo_root):
    out = tmp_path / "numeracy.jsonl"
    r = CliRunner().invoke(app, ["prompts", "import", str(FIX / "numeracy_val.txt"), "--format", "t2i-compbench",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "ok  t2i-compbench/numeracy" in r.output
    assert "5 prompts: 4 parsed, 1 not parsed (whole-prompt question only)" in r.output
    first = out.read_bytes()
    again = CliRunner().invoke(app, ["prompts", "import", str(FIX / "numeracy_val.txt"), "-f", "t2i-compbench",
                                     "-o", str(out)])
    assert "file exists" in str(again.exception)  # never replaced unasked (exit 2 under `main`)
    again = CliRunner().invoke(app, ["prompts", "import", str(FIX / "numeracy_val.txt"), "-f", "t2i-compbench",
                                     "-o", str(out), "--force"])
    assert again.exit_code == 0 and out.read_bytes() == first  # deterministic output
    # `run --prompts x.jsonl` goes through api.expand_suites: records as written, mixable with suites
    recs = api.expand_suites([str(out)])
    assert recs == [json.loads(line) for line in first.decode().splitlines()]
    mixed = api.expand_suites([str(repo_root / "prompts/counting.yaml"), str(out)], limit=6, seed=0)
    assert len(mixed) == 6 and len({r["id"] for r in mixed}) == 6


def test_read_prompt_records_checks_lines(tmp_path):
    f = tmp_path / "p.jsonl"
    good = import_prompts(FIX / "color_val.txt", "t2i-compbench")[0]
    bad = {k: v for k, v in good.items() if k != "questions"}
    f.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(AuditError, match=r"p\.jsonl:2: not a PromptRecord: missing questions"):
        read_prompt_records(f)
    f.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(AuditError, match=rf"p\.jsonl:2: id {good['id']} repeats line 1"):
        read_prompt_records(f)


def test_unparsed_prompt_does_not_break_the_detector():
    # an unparsed line has no objects: the detector must answer nothing rather than crash the batch
    # (before the guard in DetectionScorer.detect, OWLv2's tokenizer raised IndexError on [])
    from PIL import Image

    from t2i_audit.scorers import create_scorer

    rec = import_prompts(FIX / "spatial_val.txt", "t2i-compbench")[3]
    labels = [list(dict.fromkeys(o["name"] for o in rec["objects"]))]
    assert labels == [[]]
    assert create_scorer("detect-owlv2", device="cpu").detect([Image.new("RGB", (8, 8))], labels) == [{}]
