"""Importers on the benchmarks' real formats: the grammar accounts for every word or declines.

tests/fixtures/import/t2i/ holds short hand-written files shaped like T2I-CompBench's
``examples/dataset/<category>_val.txt`` (CRLF line ends as several of theirs have; sentences of the
kinds the real files hold). The measurement on the real files is benchmarks/import_stats.py →
docs/benchmarks.md.
"""

import json
from pathlib import Path

import pytest

from t2i_audit.importers import import_prompts
from t2i_audit.importers import lexicon
from t2i_audit.importers.grammar import Declined, Grammar
from t2i_audit.importers.t2i_compbench import concept_vocabulary

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "import"
T2I = FIX / "t2i"


def _load(name):
    return {r["text"]: r for r in import_prompts(T2I / name, "t2i-compbench")}


def _objects(r):
    return [(o["name"], o["count"], o["attributes"]) for o in r["objects"]]


def _relations(r):
    by_id = {o["id"]: o["name"] for o in r["objects"]}
    return [(by_id[x["subject"]], x["family"], x["name"], x["text"], by_id[x["object"]]) for x in r["relations"]]


def _questions(r):
    return [q["text"] for q in r["questions"]]


def test_verbs_never_end_up_in_object_names():
    r = _load("complex_val.txt")["The red hat was on top of the wooden floor."]
    assert r["parsed"] and _objects(r) == [("hat", 1, {"color": "red"}), ("floor", 1, {"texture": "wooden"})]
    assert _relations(r) == [("hat", "spatial", "above", "on top of", "floor")]
    assert _questions(r)[-1] == "Is the hat on top of the floor?"
    assert {k: r["text"][a:b] for k, (a, b) in r["spans"].items()} == {
        "c1": "red", "o1": "hat", "t2": "wooden", "o2": "floor", "r": "on top of"}


def test_plurals_come_from_the_lexicon_not_from_stripping_letters():
    r = _load("numeracy_val.txt")["four horses, two vases and three tomatoes"]
    assert _objects(r) == [("horse", 4, {}), ("vase", 2, {}), ("tomato", 3, {})]
    assert [q for q in _questions(r) if "exactly" in q] == [
        "Are there exactly 4 horses?", "Are there exactly 2 vases?", "Are there exactly 3 tomatoes?"]
    people = _load("numeracy_val.txt")["a backpack, two people, and a bowl were on the kitchen counter"]
    assert [(o["name"], o["plural"], o["count"]) for o in people["objects"]][1] == ("person", "people", 2)
    assert _relations(people)[1] == ("person", "spatial", "on", "on", "kitchen counter")


def test_numeracy_sentences_keep_counts_and_relate_only_what_the_verb_says():
    rec = _load("numeracy_val.txt")
    r = rec["three apples rolled off the counter"]
    assert _objects(r) == [("apple", 3, {}), ("counter", 1, {})]
    assert _relations(r) == [("apple", "action", "roll off", "rolling off", "counter")]
    assert "Are the apples rolling off the counter?" in _questions(r)
    # a passive keeps its participle
    assert "Are the apples picked from the tree?" in _questions(rec["four apples were picked from the tree"])
    # "stuck" is a verb or an adjective: the counts are kept, the rest is asked as the whole prompt
    stuck = rec["two cars stuck on the road"]
    assert stuck["parsed"] and stuck["relations"] == [] and stuck["questions"][-1]["kind"] == "prompt"


def test_benchmark_colour_shape_size_and_texture_words():
    color = _load("color_val.txt")
    assert [_objects(color[t]) for t in ("a gold clock and a silver spoon", "a beige sofa and a tan dog")] == [
        [("clock", 1, {"color": "gold"}), ("spoon", 1, {"color": "silver"})],
        [("sofa", 1, {"color": "beige"}), ("dog", 1, {"color": "tan"})]]
    assert _objects(color["a red orange and a brown sheep"])[0] == ("orange", 1, {"color": "red"})
    assert _objects(color["an orange cup and a gray cell phone"])[1] == ("cell phone", 1, {"color": "gray"})
    shape = _load("shape_val.txt")
    assert _objects(shape["a spherical ball and a cylindrical vase"]) == [
        ("ball", 1, {"shape": "spherical"}), ("vase", 1, {"shape": "cylindrical"})]
    assert _objects(shape["a big dog and a small cat"]) == [("dog", 1, {"size": "big"}), ("cat", 1, {"size": "small"})]
    assert _objects(shape["an oblong table and a rectangular piece of lasagna"])[1] == (
        "piece of lasagna", 1, {"shape": "rectangular"})
    texture = _load("texture_val.txt")
    gloves = texture["rubber gloves and a fabric towel"]
    assert _questions(gloves) == ["Are there gloves?", "Are the gloves rubber?", "Is there a towel?", "Is the towel fabric?"]
    assert gloves["objects"][0]["plural_np"] is True


def test_3d_relations_are_their_own_family():
    rec = _load("3d_spatial_val.txt")
    assert [_relations(r) for r in rec.values()] == [
        [("chair", "depth", "in front of", "in front of", "rabbit")],
        [("girl", "depth", "hidden by", "hidden by", "desk")],
        [("vase", "depth", "behind", "behind", "cup")]]
    assert rec["a girl hidden by a desk"]["questions"][-1]["text"] == "Is the girl hidden by the desk?"


def test_actions_as_agent_action_patient():
    rec = _load("non_spatial_val.txt")
    r = rec["A man is holding a book and reading on a park bench."]
    assert _relations(r) == [("man", "action", "hold", "holding", "book"),
                             ("man", "action", "read on", "reading on", "park bench")]
    assert _questions(r)[-2:] == ["Is the man holding the book?", "Is the man reading on the park bench?"]
    # "on a lake" may modify the boat or the navigating: the objects are sure, that link is not
    lake = rec["A man is holding a map and navigating a boat on a lake."]
    assert _relations(lake) == [("man", "action", "hold", "holding", "map")]
    assert lake["questions"][-1] == {"id": "q5", "kind": "prompt", "depends_on": [],
                                     "text": 'Does the image show "A man is holding a map and navigating a boat on a lake."?'}


@pytest.mark.parametrize("name,text,reason", [
    ("color_val.txt", "a black gold and white vase sitting on a counter", "ambiguous"),  # "a black gold"?
    ("shape_val.txt", "A small kitten and a big dog sat side by side.", "no derivation"),
    ("texture_val.txt", "The leather jacket and metallic zipper keep the fluffy wearer warm on the glass sidewalk.",
     "no derivation"),
    ("non_spatial_val.txt", "A couple is talking to each other.", "no derivation"),
    ("non_spatial_val.txt", "A woman is watching her child play at the playground.", "ambiguous"),
    ("non_spatial_val.txt", "A couple is stargazing in a field.", "unknown word 'stargazing'"),
])
def test_what_the_grammar_cannot_account_for_is_declined_with_the_reason(name, text, reason):
    r = _load(name)[text]
    assert not r["parsed"] and r["objects"] == [] and r["parse_reason"].startswith(reason)
    assert r["questions"] == [{"id": "q0", "kind": "prompt", "depends_on": [], "text": f'Does the image show "{text}"?'}]


def test_every_parsed_object_is_named_by_nouns_of_the_prompt():
    """Property over every fixture line: an object's span is in the prompt, its head word is a noun
    of the lexicon whose singular is the name's last word, and no word of a name is a verb only."""
    for f in sorted(T2I.glob("*.txt")):
        for r in import_prompts(f, "t2i-compbench"):
            for o in r["objects"] if r["parsed"] else []:
                a, b = r["spans"][o["id"]]
                words = r["text"][a:b].lower().split()
                assert any(n.singular == o["name"].split()[-1] for n in lexicon.nouns(words[-1])), (r["text"], o)
                for w in o["name"].split():
                    assert lexicon.nouns(w) or w in concept_vocabulary().get("color", []) or w in ("of", "the"), \
                        (r["text"], o["name"], w)


def test_grammar_refuses_unknown_characters_and_words():
    g = Grammar(concept_vocabulary())
    with pytest.raises(Declined, match="unsupported character '&'"):
        g.analyse("a red cup & a blue bowl")
    # a number or time is only what a thing shows ("reads 11:44"), never a count or an object
    with pytest.raises(Declined, match="no derivation"):
        g.analyse("2 red cups")
    with pytest.raises(Declined, match="unknown word 'zorbly'"):
        g.analyse("a red zorbly and a blue cup")


def test_geneval_plurals_as_inflect_spells_them_spans_as_the_file_writes_them(tmp_path):
    f = tmp_path / "evaluation_metadata.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [
        {"tag": "counting", "include": [{"class": "sheep", "count": 2}], "exclude": [{"class": "sheep", "count": 3}],
         "prompt": "a photo of two sheeps"},
        {"tag": "counting", "include": [{"class": "bench", "count": 4}], "exclude": [{"class": "bench", "count": 5}],
         "prompt": "a photo of four benchs"}]) + "\n")
    sheep, bench = import_prompts(f, "geneval")
    assert _questions(sheep) == ["Is there a sheep?", "Are there exactly 2 sheep?"]
    assert {k: bench["text"][a:b] for k, (a, b) in bench["spans"].items()} == {"n1": "four", "o1": "benchs"}


def test_detection_scorer_declines_a_depth_relation(tmp_path):
    """A 3-D relation is not read as a 2-D one: the detector answers the objects and marks the
    relation unsupported (verdict null), as it does for any relation outside its SPATIAL table."""
    from PIL import Image

    from tests.scorers.test_detect import score

    rec = _load("3d_spatial_val.txt")["a chair in front of a rabbit"]
    boxes = {"chair": [(4, 20, 24, 40, 0.9)], "rabbit": [(40, 20, 60, 40, 0.8)]}
    q, pr = score(tmp_path, rec, Image.new("RGB", (64, 64), "white"), boxes)
    assert (q["q0"]["verdict"], q["q1"]["verdict"]) == (True, True)
    assert q["q2"]["extra"]["unsupported"] is True and q["q2"]["verdict"] is None


def test_dsg1k_rows_import_as_dpg_and_type_like_llm_output(tmp_path):
    """Rows as DSG-1k writes them (j-min/DSG 7330119 dsg/data/dsg-1k-anns.csv, the format DPG-Bench's CSV
    shares): ``global - - (…)``, ``entity - part``, ``other - text rendering``, a parent declared later
    ("background"). The DPG importer and the LLM path (dsg.assemble → dpg.dsg_record) build the same
    questions from them."""
    from t2i_audit.importers import dsg

    head = "item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,question_natural_language\n"
    text = 'A photo of a red sign saying "open", a tent in the background.'
    props = [(1, "0", "global - - (photo)", "Is this a photo?"), (2, "0", "entity - whole (sign)", "Is there a sign?"),
             (3, "2", "attribute - color (sign, red)", "Is the sign red?"),
             (4, "2", 'other - text rendering (sign, "open")', 'Does the sign say "open"?'),
             (5, "0", "entity - whole (tent)", "Is there a tent?"),
             (6, "5,7", "relation - spatial (tent, background, in)", "Is the tent in the background?"),
             (7, "0", "entity - whole (background)", "Is there a background?")]
    f = tmp_path / "dpg.csv"
    f.write_text(head + "".join(f'd1,"{text.replace(chr(34), chr(34) * 2)}",,{i},"{d}",,,"{t.replace(chr(34), chr(34) * 2)}",'
                                f'"{q.replace(chr(34), chr(34) * 2)}"\n' for i, d, t, q in props))
    (rec,) = import_prompts(f, "dpg")
    got = [(q["id"], q["kind"], q["depends_on"]) for q in rec["questions"]]
    assert got == [("q1", "other", []), ("q2", "exists", []), ("q3", "attribute", ["q2"]), ("q4", "other", ["q2"]),
                   ("q5", "exists", []), ("q6", "relation", ["q5", "q7"]), ("q7", "exists", [])]
    notes = []
    rows = dsg.assemble(dsg.parse_tuples("\n".join(f"{i} | {t}" for i, _, t, _ in props), notes),
                        "\n".join(f"{i} | {q}" for i, _, _, q in props),
                        "\n".join(f"{i} | {d}" for i, d, _, _ in props), notes)
    assert notes == []
    assert [(r["pid"], r["deps"], r["category_broad"], r["category_detailed"]) for r in rows][:2] == [
        (1, [], "global", "-"), (2, [], "entity", "whole")]
    assert [(f"q{r['pid']}", [f"q{d}" for d in r["deps"]]) for r in rows] == [(g[0], g[2]) for g in got]


CAPTIONS = {  # color_val.txt's MS-COCO-style lines: objects, and what is left to the whole prompt
    "A dining area features a wood table and chairs, a silver refrigerator and light brown cabinets.":
        [("dining area", {}), ("wood table", {}), ("chair", {}), ("refrigerator", {"color": "silver"}),
         ("cabinet", {"color": "light brown"})],
    "Bathroom scene with white background and tan accents.":
        [("bathroom scene", {}), ("background", {"color": "white"}), ("accent", {"color": "tan"})],
    "The man on the large black motorcycle has pink chaps.":
        [("man", {}), ("motorcycle", {"size": "large", "color": "black"}), ("chap", {"color": "pink"})],
    "A woman in a white shirt and jeans holds a pink umbrella in the rain.":
        [("woman", {}), ("shirt", {"color": "white"}), ("jeans", {}), ("umbrella", {"color": "pink"}), ("rain", {})],
    "A white bath tub sits empty in a tan, clean bathroom.":
        [("bath tub", {"color": "white"}), ("bathroom", {"color": "tan"})],
    "The white and yellow clock with a red roof reads 11:44.":
        [("clock", {"color": "white and yellow"}), ("roof", {"color": "red"})],
    "a red, white and blue flag": [("flag", {"color": "red, white and blue"})],
    "Two hot dogs sit on a white paper plate near a soda cup which are sitting on a green picnic table "
    "while a bike and a silver car are parked nearby.":
        [("hot dog", {}), ("paper plate", {"color": "white"}), ("soda cup", {}), ("picnic table", {"color": "green"}),
         ("bike", {}), ("car", {"color": "silver"})],
}


@pytest.mark.parametrize("text", list(CAPTIONS))
def test_caption_constructions_name_their_objects_and_guess_no_link(tmp_path, text):
    f = tmp_path / "color_val.txt"
    f.write_text(text + "\n", encoding="utf-8")
    (r,) = import_prompts(f, "t2i-compbench")
    assert r["parsed"], r.get("parse_reason")
    assert [(o["name"], o["attributes"]) for o in r["objects"]] == CAPTIONS[text]
    if len(r["objects"]) > 1 and not r["relations"]:
        assert r["questions"][-1]["kind"] == "prompt"  # the link between them: the whole prompt


def test_a_present_tense_verb_agrees_with_its_subject(tmp_path):
    # "cat" is also a verb (VBP): after the singular "the sharp black" it cannot be one
    f = tmp_path / "complex_val.txt"
    f.write_text("The sharp black cat clawed at the soft red blanket.\n", encoding="utf-8")
    (r,) = import_prompts(f, "t2i-compbench")
    assert [o["name"] for o in r["objects"]] == ["cat", "blanket"]
