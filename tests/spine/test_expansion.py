"""What every expanded prompt carries: ids, spans, questions, twins, splits, sampling."""

import functools
import glob
import subprocess
import sys

import pytest

from t2i_audit.prompts import expand, load_suite, sample_records

from .test_suite_validation import GOOD, write


@functools.lru_cache(maxsize=None)
def expanded(path) -> tuple:
    """Each shipped suite is expanded once per session (records are not mutated by the tests)."""
    return tuple(expand(load_suite(path)))


@pytest.fixture
def demo(tmp_path):
    return expand(load_suite(write(tmp_path, GOOD)))


def test_spans_point_at_slot_words(repo_root):
    for path in glob.glob(str(repo_root / "prompts/*.yaml")):
        for r in expanded(path)[:200]:
            for slot, (a, b) in r["spans"].items():
                value = r["slots"][slot]
                word = r["text"][a:b]
                # a relation slot shows its phrase, a count its word, an object maybe its plural
                assert value in word or word.startswith(value[:3]) or r["families"][slot] in ("spatial", "count"), (r["text"], slot, word)


def test_ids_stable_across_processes(repo_root):
    code = ("from t2i_audit.prompts import expand, load_suite; "
            f"print(','.join(r['id'] for r in expand(load_suite(r'{repo_root / 'prompts/spatial.yaml'}'))[:5]))")
    a = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": "1", "PATH": ""}).stdout
    b = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": "2", "PATH": ""}).stdout
    assert a == b and a.count(",") == 4


def test_ids_are_the_documented_hashes(tmp_path):
    """docs/records.md: "p" + 12 hex of sha1 over suite, version, template and the slots sorted by name; a twin
    pair's id over its two ids. Pinned on a suite with a constraint, a literal, twins, a one-slot template and
    sampling, each id recomputed here from its record."""
    import hashlib

    suite = write(tmp_path, GOOD.replace('constraints: ["o1 != o2"]', 'constraints: ["o1 != o2", "c2 != \'green\'"]')
                  .replace("values: [red, blue]", "values: [red, blue, green]")
                  .replace("    twins: [[c1, c2]]\n", "    twins: [[c1, c2]]\n    sample: {max: 10, seed: 3}\n")
                  + '  - name: one\n    category: color\n    text: "{c1.a} {o1}"\n    slots: {o1: objects, c1: colors}\n'
                  "    expect:\n      objects:\n        - {id: o1, color: c1}\n")
    recs = expand(load_suite(suite))
    sha = lambda text: hashlib.sha1(text.encode()).hexdigest()[:12]  # noqa: E731
    by_id = {r["id"]: r for r in recs}
    assert [r["template"] for r in recs] == ["two"] * 10 + ["one"] * 6 and all(r["slots"]["c2"] != "green" for r in recs[:10])
    for r in recs:
        key = "\x1f".join(["demo", "1", r["template"], *(f"{k}={v}" for k, v in sorted(r["slots"].items()))])
        assert r["id"] == "p" + sha(key), r
        if r["twin"]:
            assert by_id[r["twin"]]["twin"] == r["id"] and r["twin_id"] == "t" + sha("|".join(sorted([r["id"], r["twin"]])))
    assert sum(r["twin"] is not None for r in recs) >= 2


def test_questions_and_dependencies(demo):
    r = next(x for x in demo if x["slots"] == {"c1": "red", "o1": "cube", "c2": "blue", "o2": "sphere"})
    assert r["text"] == "a red cube and a blue sphere"
    assert [q["text"] for q in r["questions"]] == ["Is there a cube?", "Is the cube red?", "Is there a sphere?", "Is the sphere blue?"]
    assert r["questions"][1]["depends_on"] == ["q0"] and r["questions"][3]["depends_on"] == ["q2"]
    assert r["bindings"] == [["color", "red", "cube"], ["color", "blue", "sphere"]]


def test_twins_are_mutual_swaps(demo):
    by_id = {r["id"]: r for r in demo}
    for r in demo:
        if r["slots"]["c1"] == r["slots"]["c2"]:  # swapping equal colours gives the prompt itself
            assert r["twin"] is None
            continue
        t = by_id[r["twin"]]
        assert t["twin"] == r["id"] and t["twin_id"] == r["twin_id"]
        assert (t["slots"]["c1"], t["slots"]["c2"]) == (r["slots"]["c2"], r["slots"]["c1"])
        assert t["slots"]["o1"] == r["slots"]["o1"]


def test_relation_question_and_reversal_twin(repo_root):
    recs = expand(load_suite(repo_root / "prompts/spatial.yaml"))
    r = recs[0]
    rel = r["relations"][0]
    assert rel["subject"] == "o1" and rel["inverse"]
    q = [q for q in r["questions"] if q["kind"] == "relation"][0]
    assert q["depends_on"] == ["q0", "q1"] and rel["text"] in q["text"]
    twin = next(x for x in recs if x["id"] == r["twin"])
    assert (twin["slots"]["o1"], twin["slots"]["o2"]) == (r["slots"]["o2"], r["slots"]["o1"])


def test_counts_make_count_questions(repo_root):
    r = expand(load_suite(repo_root / "prompts/counting.yaml"))[0]
    q = [q for q in r["questions"] if q["kind"] == "count"][0]
    assert q["number"] == r["objects"][0]["count"] and str(q["number"]) in q["text"]


def test_heldout_by_binding(tmp_path):
    text = GOOD + "heldout:\n  bind: [color, object]\n  compositions: [[red, cube]]\n"
    recs = expand(load_suite(write(tmp_path, text)))
    for r in recs:
        has = ["color", "red", "cube"] in r["bindings"]
        assert (r["split"] == "heldout") == has


def test_heldout_fraction_keeps_every_concept_seen(tmp_path):
    text = GOOD + "heldout:\n  bind: [color, object]\n  fraction: 0.5\n  seed: 3\n"
    recs = expand(load_suite(write(tmp_path, text)))
    train = [b for r in recs if r["split"] == "train" for b in r["bindings"]]
    assert {b[1] for b in train} == {"red", "blue"} and {b[2] for b in train} == {"cube", "sphere"}
    assert any(r["split"] == "heldout" for r in recs)


def test_sampling_is_balanced_deterministic_and_keeps_twins(repo_root):
    recs = expanded(str(repo_root / "prompts/colors.yaml"))
    two = [r for r in recs if r["template"] == "two_objects"]
    assert len(two) == 1200
    ids = {r["id"] for r in two}
    assert all(r["twin"] in ids for r in two)  # twins sampled together
    from collections import Counter
    c = Counter(r["slots"]["c1"] for r in two)
    assert max(c.values()) - min(c.values()) <= 0.1 * 120, c
    again = expand(load_suite(repo_root / "prompts/colors.yaml"))
    assert [r["id"] for r in again] == [r["id"] for r in recs]


def test_limit_is_strict(demo):
    assert len(sample_records(demo, 3, seed=0)) == 3
    assert sample_records(demo, 3, seed=0) == sample_records(demo, 3, seed=0)


def test_shipped_suites_sizes(repo_root):
    sizes = {p.split("/")[-1]: len(expanded(p)) for p in glob.glob(str(repo_root / "prompts/*.yaml"))}
    for name, n in sizes.items():
        if name != "mini.yaml":
            assert 300 <= n <= 2000, (name, n)
