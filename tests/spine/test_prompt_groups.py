"""Prompts that show one picture are one unit: scene identity for every suite and importer, groups as the
connected components of scene identity and twinship, and every place that folds, splits, holds out or
resamples prompts grouping through ``scenes.prompt_groups`` (issue 35; DESIGN.md "Group by what is the same").

Written as properties over registries: every shipped suite, every importer, every grouping site found in the
package's source — a new suite, importer or grouping site is checked without a new test."""

import ast
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2i_audit import scenes
from t2i_audit.importers import IMPORTERS, import_prompts
from t2i_audit.importers.dpg import dsg_record
from t2i_audit.importers.records import INVERSE, make_record
from t2i_audit.prompts import expand_files, prompt_groups, twin_group
from t2i_audit.suite import resolve_suite_path

PACKAGE = Path(__file__).resolve().parents[2] / "t2i_audit"
SUITES = sorted(p.stem for p in (PACKAGE / "suites").glob("*.yaml"))


# ---------------------------------------------------------------- scene identity


def _components(records: list[dict]) -> list[frozenset]:
    """Brute force: connected components of "same scene_key", "same constituent bag" and "twin of" (the record's
    ``twin`` id)."""
    n = len(records)
    adj = {i: set() for i in range(n)}
    ids = {r["id"]: i for i, r in enumerate(records)}
    keys: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        keys.setdefault(scenes.scene_key(r), []).append(i)
        keys.setdefault(scenes.constituent_bag(r) or f"none{i}", []).append(i)
        if r.get("twin") in ids:
            adj[i].add(ids[r["twin"]])
            adj[ids[r["twin"]]].add(i)
    for members in keys.values():
        for i in members:
            adj[i] |= set(members) - {i}
    seen, out = set(), []
    for i in range(n):
        if i in seen:
            continue
        comp, todo = set(), [i]
        while todo:
            j = todo.pop()
            if j not in comp:
                comp.add(j)
                todo += adj[j] - comp
        seen |= comp
        out.append(frozenset(comp))
    return out


@pytest.mark.parametrize("suite", SUITES)
def test_every_shipped_suite_groups_by_scene_and_twin(suite):
    """Groups are exactly the connected components of scene identity, constituent bag and twinship; a prompt's
    twin scene read from its record is its twin's scene (so the label is a function of the record alone)."""
    records = expand_files([resolve_suite_path(suite)])
    labels = prompt_groups(records)
    by_label: dict[str, set] = {}
    for i, g in enumerate(labels):
        by_label.setdefault(g, set()).add(i)
    assert sorted(map(sorted, by_label.values())) == sorted(map(sorted, _components(records)))
    by_id = {r["id"]: r for r in records}
    for r in records:
        if r.get("twin") in by_id:
            assert scenes.twin_scene_key(r) == scenes.scene_key(by_id[r["twin"]]), r["text"]
            assert twin_group(r) == twin_group(by_id[r["twin"]])
    for members in by_label.values():  # a group is labelled by its smallest twin label: one of a pair, the pair's
        assert {labels[i] for i in members} == {min(twin_group(records[i]) for i in members)}


def test_the_mini_spatial_suite_has_same_scene_prompts_in_other_twin_groups():
    """The leak of issue 35: "B right of A" is the picture of "A left of B" but not its twin; and (issue 43) "a
    red square below a blue cross" rebinds the constituents of "a red cross above a blue square" without being
    its recorded twin. Each merged group is one constituent bag."""
    records = [r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "spatial"]
    old = {r["id"]: r["twin_id"] or r["composition"] for r in records}
    new = dict(zip((r["id"] for r in records), prompt_groups(records)))
    merged = [g for g in set(new.values()) if len({old[i] for i, x in new.items() if x == g}) > 1]
    assert len(set(new.values())) == 69 and len(set(old.values())) == 80
    for g in merged:
        members = [r for r in records if new[r["id"]] == g]
        assert len({scenes.constituent_bag(r) for r in members}) == 1, [r["text"] for r in members]
        assert len({scenes.scene_key(r) for r in members}) >= 2, [r["text"] for r in members]


def _compbench(tmp_path, name, lines):
    path = tmp_path / f"{name}_val.txt"
    path.write_text("\n".join(lines) + "\n")
    return import_prompts(path, "t2i-compbench")


def _geneval(tmp_path, metas):
    path = tmp_path / "evaluation_metadata.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in metas) + "\n")
    return import_prompts(path, "geneval")


def _dpg(tmp_path, items):
    rows = ["item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,"
            "question_natural_language"]
    for item, text, tuples in items:
        for k, (tup, q) in enumerate(tuples, 1):
            rows.append(f'{item},"{text}",,{k},0,x,y,"{tup}",{q}')
    path = tmp_path / "dpg_bench.csv"
    path.write_text("\n".join(rows) + "\n")
    return import_prompts(path, "dpg")


def _same(records):
    keys = [scenes.scene_key(r) for r in records]
    return all(k == keys[0] for k in keys) and len(set(prompt_groups(records))) == 1


PARAPHRASES = {  # importer → (records of one scene written two ways, records of another scene)
    "t2i-compbench": lambda t: [
        (_compbench(t, "color", ["a red cup and a blue bench", "a blue bench and a red cup"]), True),
        (_compbench(t, "spatial", ["a dog on the left of a bench", "a bench on the right of a dog"]), True),
        (_compbench(t, "spatial", ["a cat on the top of a table", "a table on the bottom of a cat"]), True),
        (_compbench(t, "spatial", ["a dog next to a bench", "a bench next to a dog"]), True),
        (_compbench(t, "numeracy", ["three apples and two dogs", "two dogs and three apples"]), True),
        (_compbench(t, "spatial", ["a dog on the left of a bench", "a dog on the right of a bench"]), False),
        (_compbench(t, "color", ["a red cup and a blue bench", "a blue cup and a red bench"]), False),
        (_compbench(t, "numeracy", ["three apples and two dogs", "two apples and three dogs"]), False)],
    "geneval": lambda t: [
        (_geneval(t, [{"tag": "position", "prompt": "a photo of a dog left of a cat",
                       "include": [{"class": "cat", "count": 1}, {"class": "dog", "count": 1, "position": ["left of", 0]}]},
                      {"tag": "position", "prompt": "a photo of a cat right of a dog",
                       "include": [{"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": ["right of", 0]}]}]),
         True),
        (_geneval(t, [{"tag": "color_attr", "prompt": "a photo of a red cup and a blue bench",
                       "include": [{"class": "cup", "count": 1, "color": "red"}, {"class": "bench", "count": 1, "color": "blue"}]},
                      {"tag": "color_attr", "prompt": "a photo of a blue bench and a red cup",
                       "include": [{"class": "bench", "count": 1, "color": "blue"}, {"class": "cup", "count": 1, "color": "red"}]}]),
         True),
        (_geneval(t, [{"tag": "counting", "prompt": "a photo of three apples", "include": [{"class": "apple", "count": 3}]},
                      {"tag": "counting", "prompt": "a photo of four apples", "include": [{"class": "apple", "count": 4}]}]),
         False)],
    "dpg": lambda t: [
        (_dpg(t, [("a", "A red kettle left of a bowl.", [("entity - whole (kettle)", "Is there a kettle?"),
                                                          ("entity - whole (bowl)", "Is there a bowl?"),
                                                          ("attribute - color (kettle, red)", "Is the kettle red?"),
                                                          ("relation - spatial (kettle, bowl, left of)", "Left?")]),
                  ("b", "A bowl right of a red kettle.", [("entity - whole (bowl)", "Is there a bowl?"),
                                                          ("entity - whole (kettle)", "Is there a kettle?"),
                                                          ("attribute - color (kettle, red)", "Is the kettle red?"),
                                                          ("relation - spatial (bowl, kettle, right of)", "Right?")])]),
         True)],
}


def test_every_importer_has_paraphrase_cases():
    assert set(PARAPHRASES) == set(IMPORTERS)  # a new importer needs its cases here


@pytest.mark.parametrize("importer", sorted(PARAPHRASES))
def test_importers_give_one_scene_to_paraphrases_and_two_to_other_pictures(importer, tmp_path):
    for records, same in PARAPHRASES[importer](tmp_path):
        assert len(records) == 2 and all(r.get("parsed", True) for r in records), [r["text"] for r in records]
        assert _same(records) is same, [r["text"] for r in records]


def test_dsg_records_from_an_llm_use_the_same_structure():
    """``prompts import --questions-by`` builds records through dsg_record: its relations get a scene too."""
    rows = lambda a, b, rel: [  # noqa: E731
        {"pid": 1, "deps": [], "tuple": f"entity - whole ({a})", "question": f"Is there a {a}?"},
        {"pid": 2, "deps": [], "tuple": f"entity - whole ({b})", "question": f"Is there a {b}?"},
        {"pid": 3, "deps": [1, 2], "tuple": f"relation - spatial ({a}, {b}, {rel})", "question": "?"}]
    one = dsg_record("dsg", "x", "a cat above a dog", rows("cat", "dog", "above"), template="dsg", where=("f", 1))
    two = dsg_record("dsg", "x", "a dog below a cat", rows("dog", "cat", "below"), template="dsg", where=("f", 2))
    other = dsg_record("dsg", "x", "a cat below a dog", rows("cat", "dog", "below"), template="dsg", where=("f", 3))
    assert _same([one, two]) and not _same([one, other])


def test_unparsed_text_is_its_normalised_words():
    a = make_record("x", "c", "A  Cat on a mat", [], [])
    b = make_record("x", "c", "a cat ON a mat", [], [])
    assert scenes.scene_key(a) == scenes.scene_key(b) and scenes.scene_key(a) != scenes.scene_key(
        make_record("x", "c", "a dog on a mat", [], []))


NAMES = ["cat", "dog", "cup", "bench", "apple"]
COLORS = ["red", "blue", "green", None]
RELS = ["left of", "right of", "above", "below", "next to", "chasing"]


@st.composite
def scene_and_paraphrase(draw):
    """Some distinct objects and relations; the same scene with objects reordered, relations written from
    the other end (with the inverse), and a count split over two identical objects."""
    n = draw(st.integers(1, 3))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=n, max_size=n, unique=True))
    objs = [{"name": nm, "count": draw(st.integers(1, 3)),
             "attributes": ({"color": c} if (c := draw(st.sampled_from(COLORS))) else {})} for nm in names]
    rels = []
    if n >= 2:
        for _ in range(draw(st.integers(0, 2))):
            i, j = draw(st.sampled_from([(a, b) for a in range(n) for b in range(n) if a != b]))
            rels.append({"subject": i, "object": j, "name": (r := draw(st.sampled_from(RELS))), "text": r})
    order = draw(st.permutations(range(n)))
    where = {old: new for new, old in enumerate(order)}
    objs2 = [dict(objs[i]) for i in order]
    rels2 = []
    for r in rels:
        s, o = where[r["subject"]], where[r["object"]]
        if r["name"] in INVERSE and draw(st.booleans()):
            rels2.append({"subject": o, "object": s, "name": INVERSE[r["name"]], "text": INVERSE[r["name"]]})
        else:
            rels2.append({**r, "subject": s, "object": o})
    draw(st.randoms()).shuffle(rels2)
    if not rels2 and objs2[0]["count"] >= 2:  # "two cats" ≡ "a cat and a cat" (no relation names either one)
        first = objs2[0]
        objs2 = [{**first, "count": 1}, {**first, "count": first["count"] - 1}] + objs2[1:]
    return objs, rels, objs2, rels2


@settings(max_examples=200, deadline=None)
@given(scene_and_paraphrase(), st.integers(0, 3))
def test_a_paraphrase_is_the_same_scene_and_a_changed_picture_is_not(case, which):
    objs, rels, objs2, rels2 = case
    a = make_record("t", "c", "one", objs, rels)
    b = make_record("t", "c", "two", objs2, rels2)
    assert scenes.scene_key(a) == scenes.scene_key(b)
    assert prompt_groups([a, b])[0] == prompt_groups([a, b])[1]
    changed = [dict(o) for o in objs]
    k = which % len(changed)
    changed[k]["attributes"] = {"color": "purple"}  # a colour none of the drawn objects has
    assert scenes.scene_key(make_record("t", "c", "three", changed, rels)) != scenes.scene_key(a)
    if rels and rels[0]["name"] in ("left of", "above", "chasing"):  # reversed: another picture
        flipped = [{**rels[0], "subject": rels[0]["object"], "object": rels[0]["subject"]}] + rels[1:]
        if objs[rels[0]["subject"]] != objs[rels[0]["object"]]:
            assert scenes.scene_key(make_record("t", "c", "four", objs, flipped)) != scenes.scene_key(a)


def test_shares_a_scene_sees_paraphrases_and_twins_across_prompt_sets():
    records = [r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "spatial"]
    a = records[0]
    twin = next(r for r in records if r["id"] == a["twin"])
    shares = scenes.shares_a_scene([a])
    assert shares(a) and shares(twin)
    paraphrase = [r for r in records if r["id"] not in (a["id"], twin["id"]) and scenes.scene_key(r) in
                  {scenes.scene_key(a), scenes.scene_key(twin)}]
    assert all(shares(r) for r in paraphrase)
    assert not all(shares(r) for r in records)


# ---------------------------------------------------------------- every grouping site


# Calls that fold, split, hold out or resample prompts (or images of prompts) by a group array.
PRIMITIVES = {"grouped_folds", "GroupKFold", "GroupBootstrap", "cluster_bootstrap_ci", "paired_bootstrap",
              "auroc_ci", "auroc_diff_ci", "auroc_or_too_few", "control_labels", "decodability_many",
              "failure_prediction_many", "decodability", "failure_prediction", "bootstrap_ci", "oof", "fit_predict",
              "export_probe", "decide", "nested", "stratified_spearman", "paired_bootstraps", "rank_intervals",
              "cluster_interval", "jackknife_t_interval", "pigeonhole_rows", "one_way_rows"}
MAKERS = {"prompt_groups", "groups_by_id", "shares_a_scene", "layout", "units"}  # what a site's groups come from
# MAKERS that are the package's own wrappers of scenes' functions, each checked to call them
WRAPPERS = {"probes/studies/risks.py:layout", "track/curves.py:units"}

# Every function of t2i_audit/ that calls one of PRIMITIVES, and where its groups come from:
#   "makes"    — it calls one of MAKERS itself (checked below);
#   "<reason>" — the groups reach it from its caller (a helper), or it groups no prompts (said why).
SITES = {
    "mini/sweep_eval.py:probe_arrays": "receives eval_groups (prompt_groups) from evaluate_model",
    "mini/sweep_link.py:link": "clusters = held-out compositions, each one prompt of eval_prompts (a single object: "
                               "its own scene, no twin)",
    "mini/sweep_stats.py:_within": "points are models (the sweep's unit), strata the other axis: no prompts",
    "probes/early_stage.py:study": "makes",
    "probes/early_stage.py:_by_type": "receives study's clusters",
    "probes/early_stage.py:_split_risk": "receives study's groups",
    "probes/fit/per_image.py:_nested": "inner CV on the caller's groups",
    "probes/fit/linear.py:grouped_folds": "the primitive itself: receives groups",
    "probes/fit/linear.py:decodability": "receives groups from its caller",
    "probes/fit/linear.py:decodability_many": "receives groups from its caller",
    "probes/fit/linear.py:failure_prediction": "receives groups from its caller",
    "probes/fit/linear.py:failure_prediction_many": "receives groups from its caller",
    "probes/fit/linear.py:_failure_result": "receives failure_prediction_many's groups",
    "probes/fit/per_image.py:compare.auroc": "receives compare's clusters",
    "probes/fit/per_image.py:compare": "receives the caller's clusters",
    "probes/fit/per_image.py:selection_lift": "receives the caller's groups",
    "probes/fit/pipeline.py:_inner_plan": "inner CV on the caller's groups",
    "probes/stage.py:fit_probes": "makes",
    "probes/studies/binding.py:study": "makes",
    "probes/studies/pareto.py:_auroc_table": "receives layout's image groups",
    "probes/studies/pareto.py:_diffs": "receives layout's image groups",
    "probes/studies/pareto.py:_permutation": "receives layout's image groups",
    "probes/studies/pareto.py:study": "receives refuse_unless_studiable's layouts (risks.layout, per category)",
    "probes/studies/pareto.py:scores_for": "receives layout's groups (through Risks)",
    "probes/studies/risks.py:layout": "makes",
    "probes/studies/risks.py:oof": "Risks: the layout's image groups",
    "probes/studies/risks.py:inner_oof.compute": "Risks: the layout's image groups",
    "probes/studies/risks.py:seed_split.compute": "Risks: the layout's image groups",
    "report/compare.py:compare_with_summary": "makes",
    "analysis.py:paired_bootstrap": "a statistic's helper: units given by the caller",
    "board/ranks.py:group_numbers": "units from the tables' twin_group column: scenes.groups_by_id over the run's "
                                    "prompts (board/tables.question_rows)",
    "track/curves.py:load_points": "calls the track's own decodability (a name match), grouped in _fit_sources",
    "track/curves.py:_fit_sources": "makes",
    "track/curves.py:fit_source": "receives _fit_sources' groups (units)",
    "track/timing.py:crossing": "receives summarize's groups (curves.units)",
    "track/timing.py:rise_lead": "receives summarize's groups (curves.units)",
    "report/probes_view.py:probes_section": "reads stored results (names only: no grouping)",
    "scorers/calibrate.py:_metrics.put": "receives calibrate's groups (groups_by_id)",
    "scorers/threshold.py:fit_and_save": "makes",
    "select/budget.py:choose_for_budget": "makes",
    "select/budget.py:refit_without": "makes",
    "select/budget.py:summarise": "makes",
    "select/choose.py:decide": "receives the caller's groups (layout's, or choose_for_budget's)",
    "select/choose.py:choose": "receives nested's groups (layout's)",
    "select/command.py:selection_summary": "makes",
    "stats.py:correlation": "a statistic's helper: points given by the caller",
    "stats.py:auroc_or_too_few": "a statistic's helper: groups given by the caller",
    "stratified.py:stratified_spearman": "a statistic's helper: clusters (and a crossed factor) given by the caller",
    "stratified.py:cluster_interval": "a statistic's helper: clusters given by stratified_spearman's caller",
}


def _calls(tree) -> dict[str, set]:
    """function (dotted for nested) → names it calls."""
    out: dict[str, set] = {}

    def visit(node, stack):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, stack + [child.name])
            elif isinstance(child, ast.ClassDef):
                visit(child, stack)
            else:
                if isinstance(child, ast.Call) and stack:
                    f = child.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    out.setdefault(".".join(stack), set()).add(name)
                visit(child, stack)
    visit(tree, [])
    return out


def grouping_sites() -> dict[str, set]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn, names in _calls(ast.parse(path.read_text())).items():
            if names & PRIMITIVES:
                found[f"{path.relative_to(PACKAGE).as_posix()}:{fn}"] = names
    return found


def test_every_grouping_site_is_known_and_groups_through_scenes():
    """A new function that folds, splits or resamples by groups fails here until it is listed with where its
    groups come from; one listed as making groups must call scenes' functions (not twin_id, composition or
    prompt ids of its own)."""
    found = grouping_sites()
    assert sorted(set(found) - set(SITES)) == [], "new grouping sites: group them with scenes.prompt_groups " \
                                                  "and list them in SITES"
    assert sorted(set(SITES) - set(found)) == [], "listed sites that no longer group: remove them from SITES"
    for site, how in SITES.items():
        if how == "makes":
            assert found[site] & MAKERS, f"{site} makes groups without scenes.prompt_groups"
    calls = {f"{path.relative_to(PACKAGE).as_posix()}:{fn}": names for path in sorted(PACKAGE.rglob("*.py"))
             for fn, names in _calls(ast.parse(path.read_text())).items()}
    for wrapper in WRAPPERS:
        assert calls[wrapper] & {"prompt_groups", "groups_by_id"}, f"{wrapper} groups without scenes' functions"


def test_the_enumeration_would_catch_a_site_of_its_own(tmp_path):
    tree = ast.parse("def split(records):\n    return grouped_folds([r['composition'] for r in records])\n")
    assert _calls(tree) == {"split": {"grouped_folds"}}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6))
def test_folds_and_bootstrap_clusters_never_separate_one_scene(seed, n_splits):
    """The primitives every site hands prompt_groups' labels to: no fold puts one scene (or a twin pair) on both
    sides; a bootstrap resample takes a group whole."""
    from t2i_audit.clusters import GroupBootstrap
    from t2i_audit.probes.fit.linear import grouped_folds

    records = [r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "spatial"]
    random.Random(seed).shuffle(records)
    records = records[:60]
    groups = np.array(prompt_groups(records))
    keys = [scenes.linked_scenes(r) for r in records]
    for train, test in grouped_folds(groups, n_splits, seed):
        train_scenes = set().union(*(keys[i] for i in train))
        assert not any(keys[i] & train_scenes for i in test)
    boot = GroupBootstrap(groups, 5, seed)
    member_counts = boot.counts[:, boot.member]  # per resample, how often each prompt's group was drawn
    for i in range(len(records)):
        for j in range(len(records)):
            if keys[i] & keys[j]:
                assert (member_counts[:, i] == member_counts[:, j]).all()


def test_the_selection_layout_folds_never_separate_one_scene():
    """risks.layout (the selection and binding studies' folds): with same-scene paraphrases in the prompts."""
    from t2i_audit.probes.studies.risks import layout

    prompts = [r for r in expand_files([resolve_suite_path("mini")]) if r["category"] == "spatial"]
    S = 2
    row_of = {(p["id"], k): i * S + k for i, p in enumerate(prompts) for k in range(S)}
    verdicts = {key: {"verdict": row % 3 == 0} for key, row in row_of.items()}
    lay = layout("spatial", prompts, row_of, verdicts, S, n_splits=5, seed=0)
    keys = [scenes.linked_scenes(p) for p in prompts]
    for f in range(5):
        test = np.flatnonzero(lay.fold_of_prompt == f)
        train = np.flatnonzero(lay.fold_of_prompt != f)
        train_scenes = set().union(*(keys[i] for i in train))
        assert not any(keys[i] & train_scenes for i in test)


def test_the_fresh_seed_split_keeps_paraphrases_on_one_side():
    """benchmarks/selection_half.py: the README's scored half and the choice's half share no scene."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("selection_half", PACKAGE.parent / "benchmarks" / "selection_half.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    records = expand_files([resolve_suite_path("mini")])
    half = mod.half_of_the_groups(records, ["spatial", "color_binding"])
    ids = {r["id"] for r in half}
    other = [r for r in records if r["category"] in ("spatial", "color_binding") and r["id"] not in ids]
    shares = scenes.shares_a_scene(half)
    assert half and other and not any(shares(r) for r in other)
