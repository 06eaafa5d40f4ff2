"""DSG questions by an LLM for the prompts the grammar declines (importers/dsg.py, llm_questions.py).

The tiny twin (tiny/llm.py) has random weights and writes garbage. So the import is tested twice:
with the twin's ``generate`` replaced by a script that answers in DSG's format (tokenizer, chat
template, batching, decoding, parsing, record building and writing all run for real), and with the
twin as it is, whose output must make the records fall back with a reason, never crash.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.importers import dsg, import_prompts, llm_questions, read_prompt_records

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "import" / "t2i" / "non_spatial_val.txt"

COUPLE = "A couple is talking to each other."
WOMAN = "A woman is watching her child play at the playground."
# what a well-behaved LLM answers for each step, with the chatter real ones add
SCRIPT = {
    ("tuple", COUPLE): "Sure, here are the tuples:\n1 | entity - whole (couple)\n2 | relation - action (couple, each other, talk)"
                       "\n\ninput: A dog.\noutput: 1 | entity - whole (dog)",
    ("question", COUPLE): "1 | Is there a couple?\n2 | Is the couple talking to each other?",
    ("dependency", COUPLE): "output: 1 | 0\n2 | 1",
    ("tuple", WOMAN): "```\n1 | entity - whole (woman)\n2 | entity - whole (child)\n3 | entity - whole (playground)\n"
                      "4 | relation - action (woman, child, watch)\n5 | attribute - state (child, playing)\n"
                      "6 | relation - spatial (child, playground, at)\n7 | the woman is nice\n```",
    ("question", WOMAN): "1 | Is there a woman?\n2 | Is there a child?\n3 | Is there a playground?\n"
                         "4 | Is the woman watching the child?\n5 | Is the child playing?\n6 | Is the child at the playground?",
    ("dependency", WOMAN): "1 | 0\n2 | 0\n3 | 0\n4 | 1,2\n5 | 2, background\n6 | 2,3,9",
}


def _step_and_text(prompt: str) -> tuple[str, str]:
    user = prompt.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
    step = next(s for s in dsg.STEPS if user.startswith(dsg._INSTRUCTIONS[s]))
    return step, user.rsplit("\n\ninput: ", 1)[1].split("\n")[0].removesuffix("output:").strip()


def _scripted_generate(tok):
    """The model boundary only: answer from SCRIPT (else chatter), as token ids after the prompt."""
    import torch

    def generate(input_ids, attention_mask=None, generation_config=None, **_):
        answers = [SCRIPT.get(_step_and_text(tok.decode(row)), "I am not sure what you mean.")
                   for row in input_ids]
        new = [tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for a in answers]
        width = max(map(len, new))
        new = torch.tensor([n + [tok.pad_token_id] * (width - len(n)) for n in new])
        return torch.cat([input_ids, new], dim=1)

    return generate


def test_prompts_follow_dsg_input_output_format():
    p = dsg.build_prompt("tuple", COUPLE)
    assert p.startswith("Task:") and "output format: id | tuple" in p
    assert p.endswith(f"\n\ninput: {COUPLE}\noutput:")
    assert "input: A red bicycle leans against a brick wall next to two potted plants.\noutput: 1 | entity - whole (bicycle)" in p
    q = dsg.build_prompt("dependency", COUPLE, "1 | entity - whole (couple)")
    assert q.endswith(f"input: {COUPLE}\n1 | entity - whole (couple)\noutput:")
    assert "output: 1 | 0\n2 | 0\n3 | 0\n4 | 1\n" in q  # DSG ids start at 1; 0 = no parent


def test_parsing_keeps_what_is_usable_and_says_what_it_dropped():
    notes = []
    tuples = dsg.parse_tuples(SCRIPT[("tuple", WOMAN)], notes)
    assert list(tuples) == [1, 2, 3, 4, 5, 6] and tuples[6] == "relation - spatial (child, playground, at)"
    assert any("not of the form 'category - detail (arguments)'" in n for n in notes)
    rows = dsg.assemble(tuples, SCRIPT[("question", WOMAN)] + "\n7 | Is it nice", SCRIPT[("dependency", WOMAN)], notes)
    assert [(r["pid"], r["deps"]) for r in rows] == [(1, []), (2, []), (3, []), (4, [1, 2]), (5, [2]), (6, [2, 3])]
    assert any("parent(s) 9 not another question or closing a cycle" in n for n in notes)
    # parents may come later (DSG-1k has such); a self-reference or a cycle is cut, in id order
    cyc = dsg.assemble({1: "entity - whole (cat)", 2: "entity - whole (mat)", 3: "relation - spatial (cat, mat, on)"},
                       "1 | Is there a cat?\n2 | Is there a mat?\n3 | Is the cat on the mat?", "1 | 3, 1\n2 | 0\n3 | 1,2", [])
    assert [(r["pid"], r["deps"]) for r in cyc] == [(1, [3]), (2, []), (3, [2])]
    # the model continuing with another example is cut off (DSG parse_with_input_name)
    assert dsg.parse_tuples(SCRIPT[("tuple", COUPLE)], []) == {
        1: "entity - whole (couple)", 2: "relation - action (couple, each other, talk)"}
    # a repeated question keeps the first id, and its children point there
    rows = dsg.assemble({1: "entity - whole (cat)", 2: "entity - whole (cat)", 3: "attribute - color (cat, red)"},
                        "1 | Is there a cat?\n2 | Is there a cat?\n3 | Is the cat red?", "1 | 0\n2 | 0\n3 | 2", n := [])
    assert [(r["pid"], r["deps"]) for r in rows] == [(1, []), (3, [1])] and "same question as 1" in n[0]
    with pytest.raises(dsg.DsgError, match="no 'id . category - detail"):
        dsg.parse_tuples("I cannot help with that.", [])
    with pytest.raises(dsg.DsgError, match="no tuple got a yes/no question"):
        dsg.assemble({1: "entity - whole (cat)"}, "1 | A cat.", "", [])


def test_import_writes_dsg_questions_with_generator_and_revision(tmp_path, monkeypatch):
    load = llm_questions.LlmQuestioner.load

    def load_scripted(self):
        load(self)
        self.model.generate = _scripted_generate(self.tokenizer)
        return self

    monkeypatch.setattr(llm_questions.LlmQuestioner, "load", load_scripted)
    out = tmp_path / "ns.jsonl"
    r = CliRunner().invoke(app, ["prompts", "import", str(FIX), "-f", "t2i-compbench", "-o", str(out),
                                 "--questions-by", "tiny-llm"])
    assert r.exit_code == 0, r.output
    assert "questions by tiny-llm: 2 of 3 unparsed prompts got DSG questions, 1 kept the whole-prompt question" in r.output
    recs = {x["text"]: x for x in read_prompt_records(out)}  # the stages' own reader accepts them
    plain = {x["text"]: x for x in import_prompts(FIX, "t2i-compbench")}
    for text, rec in recs.items():
        if plain[text]["parsed"]:
            assert rec == json.loads(json.dumps(plain[text]))  # the grammar's records are untouched
    woman = recs[WOMAN]
    assert woman["id"] == plain[WOMAN]["id"] and woman["parsed"] is False
    assert woman["parse_reason"] == plain[WOMAN]["parse_reason"]
    by = woman["questions_by"]
    assert (by["generator"], by["model"], by["revision"], by["method"], by["status"]) == (
        "tiny-llm", "tiny:llm", "tiny-random-v1", "dsg", "generated")
    assert [(q["id"], q["kind"], q["depends_on"]) for q in woman["questions"]] == [
        ("q1", "exists", []), ("q2", "exists", []), ("q3", "exists", []), ("q4", "other", ["q1", "q2"]),
        ("q5", "other", ["q2"]), ("q6", "relation", ["q2", "q3"])]
    assert woman["questions"][5]["text"] == "Is the child at the playground?"
    assert woman["questions"][5]["slot"] == "r" and woman["relations"][0]["name"] == "at"
    assert [o["name"] for o in woman["objects"]] == ["woman", "child", "playground"]
    assert woman["questions"][3]["tuple"] == "relation - action (woman, child, watch)"
    assert woman["questions"][3]["category_broad"] == "relation"
    couple = recs[COUPLE]["questions"]
    assert [(q["id"], q["text"], q["depends_on"]) for q in couple] == [
        ("q1", "Is there a couple?", []), ("q2", "Is the couple talking to each other?", ["q1"])]
    stars = recs["A couple is stargazing in a field."]
    assert stars["questions"] == plain[stars["text"]]["questions"]  # the whole-prompt question
    assert stars["questions_by"]["status"] == "fallback" and "no 'id | category" in stars["questions_by"]["reason"]
    assert stars["questions_by"]["output_head"] == "I am not sure what you mean."


def test_random_tiny_llm_output_falls_back_with_a_reason(tmp_path):
    records = import_prompts(FIX, "t2i-compbench")
    before = json.loads(json.dumps(records))
    q = llm_questions.LlmQuestioner(llm_questions.questioner_card("tiny-llm"))
    stats = llm_questions.generate_questions(records, q)
    assert stats["asked"] == 3 and stats["fallback"] == 3 and stats["generated"] == 0
    for rec, old in zip(records, before):
        by = rec.pop("questions_by", None)
        assert rec == old  # nothing else changed
        if not old["parsed"]:
            assert by["status"] == "fallback" and by["reason"] and by["revision"] == "tiny-random-v1"
    out = tmp_path / "x.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert len(read_prompt_records(out)) == len(records)


def test_unknown_generator_and_bad_local_path_are_clear_errors(tmp_path):
    with pytest.raises(AuditError, match=r"unknown question generator 'qwen3-8' \(cards/questioners.yaml\). Did you mean 'qwen3-8b'"):
        llm_questions.questioner_card("qwen3-8")
    with pytest.raises(AuditError, match="is not a folder"):
        llm_questions.questioner_card(f"qwen3-8b={tmp_path / 'nope'}")
    card = llm_questions.questioner_card(f"qwen3-8b={tmp_path}")
    assert card["model"]["id"] == str(tmp_path.resolve()) and card["model"]["revision"] == "local"
    real = llm_questions.load_cards()["qwen3-8b"]["model"]
    assert real["id"] == "Qwen/Qwen3-8B" and len(real["revision"]) == 40  # pinned to a commit
