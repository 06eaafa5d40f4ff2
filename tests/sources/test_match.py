"""Matching a folder's images to suite records (t2i_audit/sources/match.py): by id, by the benchmark's own order
for a file `prompts import` read (GenEval's index is the line of evaluation_metadata.jsonl; T2I-CompBench's counter
runs over the prompt file, so a repeated prompt's images go to its occurrences in order), by normalised text."""

from __future__ import annotations

import json

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.importers import import_prompts
from t2i_audit.sources.layouts import Entry
from t2i_audit.sources.match import match, normalise


def _e(name, **kw):
    return Entry(name=name, where=f"/f/{name}", **kw)


def test_text_is_normalised_for_white_space_and_unicode_form_only():
    assert normalise("  a  red\tcube\u00a0") == "a red cube"
    assert normalise("cafe\u0301") == normalise("caf\u00e9")
    assert normalise("A Red cube") != normalise("a red cube")


def test_a_repeated_t2i_compbench_prompt_goes_to_its_occurrences_in_counter_order(tmp_path):
    f = tmp_path / "color_val.txt"
    f.write_text("a red bench and a blue bowl\na green cup and a red plate\na red bench and a blue bowl\n")
    records = import_prompts(f, "t2i-compbench")
    assert records[0]["id"] != records[2]["id"]  # the repeat keeps its own id
    text = "a red bench and a blue bowl"
    entries = [_e(f"{text}_{c:06d}.png", text=text, index=c) for c in (5, 4, 1, 0)]  # listed in any order
    entries += [_e(f"a green cup and a red plate_{c:06d}.png", text="a green cup and a red plate", index=c)
                for c in (2, 3)]
    m = match(entries, records, 2)
    got = {k: e.name for k, e in m.images.items()}
    assert got[(records[0]["id"], 0)].endswith("_000000.png") and got[(records[0]["id"], 1)].endswith("_000001.png")
    assert got[(records[2]["id"], 0)].endswith("_000004.png") and got[(records[2]["id"], 1)].endswith("_000005.png")
    assert got[(records[1]["id"], 1)].endswith("_000003.png") and not m.unmatched and not m.without


def test_geneval_index_is_the_line_of_the_imported_file_and_a_disagreeing_prompt_is_refused(tmp_path):
    lines = [{"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat"},
             {"tag": "single_object", "include": [{"class": "dog", "count": 1}], "prompt": "a photo of a dog"}]
    f = tmp_path / "evaluation_metadata.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    records = import_prompts(f, "geneval")
    m = match([_e("00001/samples/0000.png", text="a photo of a dog", index=1, sample=0)], records, 1)
    assert list(m.images) == [(records[1]["id"], 0)] and m.without == [records[0]["id"]]
    with pytest.raises(AuditError, match=r"/f/00000/samples/0000.png: index 0 is line 1 .*'a photo of a cat'.*"
                                         r"'a photo of a dog'"):
        match([_e("00000/samples/0000.png", text="a photo of a dog", index=0, sample=0)], records, 1)


def test_a_text_two_records_share_without_an_order_is_an_error_naming_both():
    records = [{"id": "pa", "text": "a cat"}, {"id": "pb", "text": "a  cat"}]
    with pytest.raises(AuditError, match=r"/f/x.png: its prompt 'a cat' is the text of two suite records \(pa and pb\)"):
        match([_e("x.png", text="a cat")], records, 1)
    m = match([_e("x.png", text="a cat", prompt_id="pb")], records, 1)  # an id settles it
    assert list(m.images) == [("pb", 0)]


def test_samples_past_n_are_set_aside_and_images_of_prompts_limit_left_out_are_not_unmatched():
    suite = [{"id": "pa", "text": "a cat"}, {"id": "pb", "text": "a dog"}]
    entries = [_e("a0", text="a cat", sample=0), _e("a3", text="a cat", sample=3), _e("b0", text="a dog", sample=0)]
    m = match(entries, suite[:1], 2, suite)
    assert list(m.images) == [("pa", 0)] and [e.name for e in m.beyond] == ["a3"]
    assert m.outside == ["b0"] and not m.unmatched
    assert match(entries, suite[:1], 2).unmatched == ["/f/b0: no prompt of the suite reads 'a dog'"]
