"""t2i-audit board: groups by the settings that change scores, per-category success and rank intervals pinned to
an independent count from each run's own results.parquet, paired tests, incremental adds, changed runs."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from boardkit import PROMPTS, SETTINGS, invoke, reported_run, snapshot
from t2i_audit import analysis


def _index(board: Path) -> dict:
    return json.loads((board / "board.json").read_text())


def _latest(board: Path, table: str) -> pd.DataFrame:
    return pd.read_parquet(board / _index(board)["snapshots"][-1]["files"][table]["path"])


@pytest.fixture(scope="module")
def board(runs, tmp_path_factory):
    from t2i_audit.board import build_board

    out = tmp_path_factory.mktemp("b") / "board"
    build_board(out, [runs["good"], runs["bad"], runs["seed1"], runs["g3"]])
    return out


def test_a_model_at_another_guidance_is_ranked_with_the_rest_and_flagged_as_a_settings_study(board, monkeypatch,
                                                                                               capsys):
    """A leaderboard ranks each model at its own settings (issue 44): guidance 3 does not set model-good's second
    run apart; the two runs of one model at two guidances form settings study S1, named on the page, in the
    printout and in the runs table, with each run's settings in its row."""
    r = _latest(board, "runs").set_index("folder")
    assert set(r["group"]) == {"G1"} and r["set_apart"].isna().all()
    assert r.loc["g3", "guidance"] == 3.0 and r.loc["good", "guidance"] == 7.0
    assert r.loc["g3", "settings"] == "steps 20 · guidance 3 · size 48 · dtype float32"
    assert r.loc["g3", "settings_study"] == r.loc["good", "settings_study"] == "S1: model-good at guidance"
    assert r[["settings_study"]].loc[["bad", "seed1"]].isna().all().all()  # other models: no study
    # the same model at two guidance scales is two entries, told apart by the setting
    assert r.loc["g3", "label"] == "model-good · guidance 3" and r.loc["good", "label"] == "model-good · guidance 7"
    assert r.loc["bad", "rank"] == 4 and 1 <= r.loc["g3", "rank"] <= 3  # ranked among the others
    html = (board / "index.html").read_text()
    assert html.index('class="rankchart"') < html.index('id="groups"')  # the chart opens the page
    assert "Settings study S1:</b> model-good at 2 settings (varied: guidance)" in html
    assert "Ranked together:</b> Runs are ranked together when their protocol is equal" in html
    assert html.count('data-study="S1"') == 2 and "Set apart from" not in html
    code, out, _ = invoke(["board", "--out", board], monkeypatch, capsys)  # a re-render prints the groups again
    assert code == 0 and "set apart" not in out
    assert "settings study S1: model-good at 2 settings (varied: guidance): model-good · guidance 7; " \
           "model-good · guidance 3" in out
    assert re.search(r"model-good · guidance 3: [\d.]+% .* — steps 20 · guidance 3 · size 48 · dtype float32 "
                     r"\[settings study S1\]", out)


def test_the_chart_draws_every_model_and_category_with_its_ci(board):
    """One dot and one CI line per (model, column) with verdicts, in rank order, in an inline SVG (no script)."""
    html = (board / "index.html").read_text()
    svg = html[html.index('<svg class="rankchart"'):]
    svg = svg[:svg.index("</svg>")]
    cats = _latest(board, "categories")
    with_verdicts = cats[cats["n"] > 0]
    assert svg.count("<circle") == len(with_verdicts) and "<script" not in svg
    for row in with_verdicts.itertuples():
        assert f"{row.label} · {row.category}: {row.rate:.1%} [{row.lo:.1%}, {row.hi:.1%}] of {row.n} images" in svg
    names = re.findall(r'<title>([^<]+)</title>[^<]*</text>', svg)  # the model names, top to bottom
    order = _latest(board, "runs").sort_values("rank", kind="stable")["label"].tolist()  # ties: board order
    assert [n.split(" · study")[0] for n in names] == order


def test_success_per_category_equals_a_count_from_each_runs_results_parquet(board, runs):
    cats = _latest(board, "categories")
    for folder in ("good", "bad", "seed1"):
        res = pd.read_parquet(Path(runs[folder]) / "report" / "results.parquet")
        mine = cats[cats["run_id"] == folder].set_index("category")
        for cat, row in mine.drop(index="overall").iterrows():
            judge = row["judge"]
            assert judge in ("clip-foil", "vqa-blip")
            per_image = res[res["category"] == cat].drop_duplicates(["prompt_id", "sample"])[f"{judge}.image_verdict"]
            scored = per_image.dropna()
            assert (row["n"], row["k"]) == (len(scored), int(scored.astype(bool).sum())), (folder, cat)
            rate, lo, hi = analysis.wilson(row["k"], row["n"])
            assert (row["rate"], row["lo"], row["hi"]) == pytest.approx((rate, lo, hi))
        overall = mine.loc["overall"]
        assert overall["n"] == mine.drop(index="overall")["n"].sum()


def test_rank_intervals_and_paired_tests(board):
    cats = _latest(board, "categories")
    o = cats[cats["category"] == "overall"].set_index("run_id")
    assert o.loc["good", "rank"] == 1 and o.loc["bad", "rank"] == 4
    assert o.loc["bad", "rank_lo"] >= 3 and o.loc["good", "rank_hi"] <= 2  # clearly apart at this skill gap
    assert (o["rank_lo"] <= o["rank"]).all() and (o["rank"] <= o["rank_hi"]).all()
    # the bootstrap unit is the prompt group: 6 binding twin pairs + 8 relation + 6 count prompts
    assert set(o["units"]) == {6 + 8 + 6}
    comp = _latest(board, "comparisons")
    assert set(comp["group"]) == {"G1"}  # one protocol: one group
    ov = comp[comp["category"] == "overall"].set_index(["a", "b"])
    assert ov.loc[("good", "bad"), "pairing"] == "prompt+seed"  # same seeds: images paired
    assert ov.loc[("good", "seed1"), "pairing"] == "prompt"  # other seeds: prompts paired
    assert ov.loc[("good", "bad"), "diff"] > 0 and ov.loc[("good", "bad"), "significant"]
    assert (comp["p_holm"] >= comp["p"] - 1e-12).all()
    adj = analysis.holm(comp["p"].to_numpy())
    assert np.allclose(comp["p_holm"], adj, equal_nan=True)  # one family: every comparison on the board


def test_the_bootstrap_unit_is_the_prompt_group_so_a_same_scene_paraphrase_is_not_a_unit_of_its_own(tmp_path):
    """"a blue sphere and a red cube", a prompt of its own (no twin), shows the picture of "a red cube and a blue
    sphere", which has a swap twin: the three are one prompt group (scenes.prompt_groups), though the paraphrase's
    own label (twin_group: its scene alone) differs from the pair's. The rank and paired bootstraps resample the
    group whole, as every other grouping site of the package does."""
    from synth import _binding

    from t2i_audit.board import build_board
    from t2i_audit.prompts import twin_group

    a = next(p for p in PROMPTS if p["category"] == "color_binding")
    s = a["slots"]
    para = _binding(a["suite"], s["c2"], s["o2"], s["c1"], s["o1"])  # the same picture, named the other way round
    assert twin_group(para) != twin_group(a)  # a label of the record alone does not join them
    runs = [reported_run(tmp_path / name, skill=skill, model=f"model-{name}", prompts=PROMPTS + [para])
            for name, skill in (("one", 1.0), ("two", 0.5))]
    out = tmp_path / "board"
    build_board(out, runs)
    o = _latest(out, "categories")
    assert set(o[o["category"] == "overall"]["units"]) == {6 + 8 + 6}  # 27 prompts; the paraphrase in a's unit
    assert set(o[o["category"] == "color_binding"]["units"]) == {6}
    for entry in _index(out)["runs"]:  # each run's stored tables carry the unit
        images = pd.read_parquet(out / entry["files"]["images"]["path"])
        units = images.drop_duplicates("prompt_id").set_index("prompt_id")["twin_group"]
        assert units[para["id"]] == units[a["id"]] == units[a["twin"]] and units.nunique() == 6 + 8 + 6


def test_rank_interval_of_equal_runs_spans_both_ranks():
    from t2i_audit.board.ranks import rank_intervals

    rng = np.random.default_rng(0)
    n = np.full((30, 1), 4.0)
    k = rng.integers(0, 5, (30, 1)).astype(float)
    same = rank_intervals(np.hstack([k, k]), np.hstack([n, n]), seed=0)
    assert same == [(1, 1, 1), (1, 1, 1)]  # ties share rank 1 in every resample
    apart = rank_intervals(np.hstack([np.full((30, 1), 4.0), np.zeros((30, 1))]), np.hstack([n, n]), seed=0)
    assert apart == [(1, 1, 1), (2, 2, 2)]
    close = rank_intervals(np.hstack([k, np.clip(k + rng.integers(-1, 2, (30, 1)), 0, 4)]), np.hstack([n, n]), seed=0)
    assert close[0][1:] == (1, 2) and close[1][1:] == (1, 2)


def test_adding_a_run_writes_only_its_files(runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "board"
    code, _, _ = invoke(["board", runs["good"], runs["bad"], "--out", out, "-q"], monkeypatch, capsys)
    assert code == 0
    first = _index(out)
    per_run = {p: (out / p).stat().st_mtime_ns for e in first["runs"] for p in
               (rec["path"] for rec in e["files"].values())}
    before = {p: (out / p).read_bytes() for p in per_run}
    snap1 = first["snapshots"][0]
    code, stdout, _ = invoke(["board", runs["seed1"], runs["good"], "--out", out], monkeypatch, capsys)
    assert code == 0 and "added seed1" in stdout and "already on the board: good" in stdout
    second = _index(out)
    assert second["runs"][:2] == first["runs"]  # the entries of the runs already there: untouched
    for p, data in before.items():  # their files: not rewritten
        assert (out / p).read_bytes() == data and (out / p).stat().st_mtime_ns == per_run[p]
    assert len(second["snapshots"]) == 2 and second["snapshots"][0] == snap1
    for rec in snap1["files"].values():  # the first snapshot's tables stay, for its split
        assert (out / rec["path"]).is_file()
    card = yaml.safe_load((out / "README.md").read_text().split("---")[1])
    q = next(c for c in card["configs"] if c["config_name"] == "questions")
    splits = {f["split"]: f["path"] for f in q["data_files"]}
    assert list(splits) == [snap1["split"], second["snapshots"][1]["split"], "latest"]
    assert len(splits[snap1["split"]]) == 2 and len(splits["latest"]) == 3
    assert splits["latest"] == splits[second["snapshots"][1]["split"]]


def test_a_changed_run_is_named_kept_and_read_again_with_refresh(own_runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "board"
    assert invoke(["board", own_runs["good"], own_runs["bad"], "--out", out, "-q"], monkeypatch, capsys)[0] == 0
    entry = _index(out)["runs"][1]
    scores = own_runs["bad"] / "scores" / "clip-foil.jsonl"
    lines = scores.read_text().split("\n")
    scores.write_text("\n".join(lines[1:] + lines[:1]))  # the same records in another order: other bytes
    code, stdout, _ = invoke(["board", "--out", out], monkeypatch, capsys)
    assert code == 0
    assert "changed since added: bad: scores/clip-foil.jsonl (changed)" in stdout
    html = (out / "index.html").read_text()
    assert "model-bad: files changed since it was added." in html and "scores/clip-foil.jsonl (changed)" in html
    assert _index(out)["runs"][1] == entry  # kept as it was read
    code, stdout, _ = invoke(["board", "--out", out, "--refresh"], monkeypatch, capsys)
    assert code == 0 and "read again bad" in stdout and "changed since added" not in stdout
    again = _index(out)["runs"][1]
    assert again["file_id"] != entry["file_id"] and again["added_utc"] == entry["added_utc"]
    assert again["hashes"]["scores/clip-foil.jsonl"] != entry["hashes"]["scores/clip-foil.jsonl"]
    for rec in entry["files"].values():  # the files read before stay, for the earlier snapshot's split
        assert (out / rec["path"]).is_file()


def test_settings_are_ranked_and_strict_settings_keeps_them_apart(tmp_path, monkeypatch, capsys):
    """A scheduler (a setting this version names) and a LoRA are ranked with the base model; the base and its
    scheduler run are a settings study (one weights, two settings), the LoRA is another subject. With
    --strict-settings, for ablations, the scheduler sets its run apart, the difference named."""
    base = reported_run(tmp_path / "base", skill=1.0, model="m")
    lora = reported_run(tmp_path / "lora", skill=0.9, model="m", loras=[{"path": "style.safetensors", "scale": 0.8}])
    sched = reported_run(tmp_path / "sched", skill=1.0, model="m", scheduler="EulerDiscreteScheduler")
    out = tmp_path / "board"
    code, stdout, _ = invoke(["board", base, lora, sched, "--out", out], monkeypatch, capsys)
    assert code == 0, stdout
    r = _latest(out, "runs").set_index("folder")
    assert set(r["group"]) == {"G1"} and r["set_apart"].isna().all()
    assert r.loc["sched", "scheduler"] == "EulerDiscreteScheduler"
    assert "scheduler EulerDiscreteScheduler" in r.loc["sched", "settings"]
    assert r.loc["base", "settings_study"] == r.loc["sched", "settings_study"] == "S1: m at scheduler"
    assert pd.isna(r.loc["lora", "settings_study"])  # other weights: not a study of m
    assert "style.safetensors" in r.loc["lora", "label"] and json.loads(r.loc["lora", "variant"])["loras"]
    strict = tmp_path / "strict"
    code, stdout, _ = invoke(["board", base, lora, sched, "--out", strict, "--strict-settings"], monkeypatch, capsys)
    assert code == 0, stdout
    r = _latest(strict, "runs").set_index("folder")
    assert r.loc["base", "group"] == r.loc["lora", "group"] == "G1" != r.loc["sched", "group"]
    assert r.loc["sched", "set_apart"] == "scheduler EulerDiscreteScheduler (G1: —)"
    assert _index(strict)["strict_settings"] is True
    assert "made with <code>--strict-settings</code>" in (strict / "index.html").read_text()
    code, stdout, _ = invoke(["board", "--out", strict], monkeypatch, capsys)  # kept once chosen
    assert code == 0 and "set apart from G1: scheduler EulerDiscreteScheduler (G1: —)" in stdout


def test_a_run_without_a_pipeline_ranks_like_any_other(tmp_path, monkeypatch, capsys):
    """Images from elsewhere (the manifest's model card records kind and target, t2i_audit/sources): ranked in
    the group of its protocol, its source shown among its settings, its target (a local folder) not published."""
    base = reported_run(tmp_path / "base", skill=1.0, model="m")
    ext = reported_run(tmp_path / "ext", skill=0.6, model="hosted-x")
    manifest = json.loads((ext / "manifest.json").read_text())
    manifest["model"].update(kind="folder", target="/home/someone/private/images")
    (ext / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "board"
    code, stdout, _ = invoke(["board", base, ext, "--out", out], monkeypatch, capsys)
    assert code == 0, stdout
    r = _latest(out, "runs").set_index("folder")
    assert set(r["group"]) == {"G1"} and r["rank"].notna().all()
    assert r.loc["ext", "settings"].endswith("· source folder")
    assert "/home/someone" not in (out / "board.json").read_text() + (out / "index.html").read_text()


def test_another_judge_revision_sets_a_run_apart(tmp_path, monkeypatch, capsys):
    from t2i_audit.report import render_report
    from t2i_audit.rundir import atomic_write_jsonl, read_jsonl

    a = reported_run(tmp_path / "a", skill=1.0, model="m1")
    b = reported_run(tmp_path / "b", skill=1.0, model="m2")
    for name in ("clip-foil", "vqa-blip"):
        path = b / "scores" / f"{name}.jsonl"
        atomic_write_jsonl(path, [{**r, "scorer_revision": "2"} for r in read_jsonl(path)])
    render_report(b, progress=False)
    out = tmp_path / "board"
    assert invoke(["board", a, b, "--out", out, "-q"], monkeypatch, capsys)[0] == 0
    r = _latest(out, "runs").set_index("folder")
    assert r.loc["a", "group"] != r.loc["b", "group"]
    assert "judge clip-foil: model clip-foil-tiny revision 2 (G1: model clip-foil-tiny revision 0)" in r.loc["b", "set_apart"]


def test_settings_stay_the_same_for_equal_values_written_differently():
    from t2i_audit.board.settings import conditions

    a = conditions({"config": {**SETTINGS, "guidance": 7}, "suites": ["x@1"]})
    b = conditions({"config": {**SETTINGS, "guidance": 7.0, "device": "cuda", "batch_size": 16}, "suites": ["x@1"]})
    assert a == b and list(a)[:4] == ["steps", "guidance", "size", "dtype"]


def test_a_rerender_gives_the_numbers_of_the_build(runs, tmp_path):
    """The rows of a run just added (in memory) and read back from the board give the same numbers."""
    from t2i_audit.board import build_board

    first = build_board(tmp_path / "b", [runs["good"], runs["bad"], runs["seed1"]])
    again = build_board(tmp_path / "b", [])
    assert first.new_snapshot and not again.new_snapshot and again.snapshot == first.snapshot

    def rows(res):
        return [(g["name"], r["run_id"], cat, c["n"], c["k"], c["rank"], c["rank_lo"], c["rank_hi"], c["failures"])
                for g in res.numbers["groups"] for r in g["rows"]
                for cat, c in [("overall", r["overall"]), *r["categories"].items()]]

    def comps(res):
        return [(c["a"], c["b"], c["category"], c["diff"], c["lo"], c["hi"], c["p"], c["pairing"])
                for c in res.numbers["comparisons"]]

    assert rows(first) == rows(again) and comps(first) == comps(again)
    assert any(f for row in rows(first) for f in row[-1])  # failure types are among what is compared


def test_a_moved_run_is_recognised_by_its_files(own_runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "board"
    assert invoke(["board", own_runs["good"], own_runs["bad"], "--out", out, "-q"], monkeypatch, capsys)[0] == 0
    moved = own_runs["bad"].rename(tmp_path / "elsewhere")
    code, stdout, _ = invoke(["board", "--out", out], monkeypatch, capsys)
    assert code == 0 and f"changed since added: bad: {own_runs['bad']} (folder not found)" in stdout
    code, stdout, _ = invoke(["board", moved, "--out", out], monkeypatch, capsys)
    assert code == 0 and "already on the board: bad" in stdout and "changed since" not in stdout
    index = _index(out)
    assert [e["id"] for e in index["runs"]] == ["good", "bad"]
    assert index["runs"][1]["path"] == "../elsewhere"  # kept relative to the board: they move together
    assert len(index["snapshots"]) == 1  # nothing new was read


def test_board_groups_and_compares_differences_are_one_rule():
    """Over every pair of a set of entries that differ in one thing each: the board ranks two runs together exactly
    when `compare` (rule_differences) finds no protocol difference — and, with --strict-settings, no difference at
    all. Settings never split the leaderboard; the protocol always does."""
    from itertools import combinations

    from t2i_audit.board.settings import groups, rule_differences

    judge = {"clip-foil": {"model": "c", "revision": "0", "protocol": "t2i-audit"}}
    base = {"config": {**SETTINGS, "images_per_prompt": 2}, "model": {"name": "m"}, "suites": ["colors@1"],
            "judges": judge}
    variants = {"base": base,
                "steps": {**base, "config": {**base["config"], "steps": 2}},
                "guidance": {**base, "config": {**base["config"], "guidance": 3}},
                "source": {**base, "model": {"name": "m2", "kind": "folder"}},
                "lora": {**base, "config": {**base["config"], "loras": [{"path": "x.safetensors", "scale": 1}]}},
                "n3": {**base, "config": {**base["config"], "images_per_prompt": 3}},
                "suite": {**base, "suites": ["spatial@1"]},
                "judge": {**base, "judges": {"clip-foil": {**judge["clip-foil"], "revision": "1"}}},
                "seed": {**base, "config": {**base["config"], "seed": 5, "device": "cuda"}}}
    entries = [{**e, "id": k} for k, e in variants.items()]
    for strict in (False, True):
        group_of = {e["id"]: g.name for g in groups(entries, strict_settings=strict) for e in g.entries}
        for a, b in combinations(entries, 2):
            d = rule_differences(a, b)
            apart = bool(d["protocol"] or (strict and d["settings"]))
            assert (group_of[a["id"]] != group_of[b["id"]]) == apart, (strict, a["id"], b["id"], d)
    loose = {e["id"]: g.name for g in groups(entries) for e in g.entries}
    assert len({loose[k] for k in ("base", "steps", "guidance", "source", "lora", "seed")}) == 1
    assert len({loose[k] for k in ("base", "n3", "suite", "judge")}) == 4
    assert rule_differences(variants["base"], variants["steps"])["settings"] == ["steps 2 (was 20)"]
