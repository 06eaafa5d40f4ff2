"""A resumed file is reused only when every setting that made it matches (issue 26, items 2 and 5): `select`'s
scan risks in a folder made before settings were recorded are scanned again at the new step, never reused;
`predict --early --out F --force` replaces F, whatever F held; `probe --early` with nothing to learn from
keeps the fitted probes it has. On the session's ``probed_mini`` (mini generator, 2 steps)."""

from __future__ import annotations

import json
import shutil

from t2i_audit.rundir import read_jsonl

from .test_folder_identity import _cli, _refused, _select
from .test_malformed_corpus import _snapshot


def _risks(path):
    return {(r["prompt_id"], r["sample"]): r["risk"] for r in read_jsonl(path)}


def test_select_rescans_a_folder_whose_risks_were_made_at_another_step(tmp_path, monkeypatch, capsys, repo_root,
                                                                      probed_mini):
    # before: the rerun at --at 1.0 kept the risks scanned at 0.5 while selection.json said loop step 1
    suite = str(repo_root / "prompts/mini.yaml")
    out, fresh = tmp_path / "sel", tmp_path / "fresh"
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5", "--out", out), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    at_half = _risks(out / "selection.jsonl")
    # as an older version left it: a marker naming its kind only, risks without the settings that made them
    (out / ".t2i-audit.json").write_text(json.dumps({"tool": "t2i-audit", "kind": "run", "version": 1}))
    rows = [{k: v for k, v in r.items() if k != "made_with"} for r in read_jsonl(out / "selection.jsonl")]
    (out / "selection.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = _cli(_select(suite, probed_mini, "--at", "1.0", "--out", out), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    code, _, err = _cli(_select(suite, probed_mini, "--at", "1.0", "--out", fresh), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert _risks(out / "selection.jsonl") == _risks(fresh / "selection.jsonl") != at_half
    assert json.loads((out / "selection.json").read_text())["loop_step"] == 1


def _predict(probed, prompts, out, at, *extra):
    return ["predict", "--model", "mini", "--prompts", prompts, "--from", probed, "--early", "--of", "2",
            "--at", at, "--out", out, "--device", "cpu", *extra]


def test_predict_early_force_replaces_the_file(tmp_path, monkeypatch, capsys, probed_mini):
    # before: a foreign JSONL at --out gave KeyError 'prompt_id' (a traceback); a previous ranking made at
    # another --at was resumed from, not replaced
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in list(read_jsonl(probed_mini / "prompts.jsonl"))[:2]))
    out = tmp_path / "risk.jsonl"
    out.write_text('{"my": "notes"}\n')
    code, _, err = _cli(_predict(probed_mini, prompts, out, "0.5", "--force"), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    rows = list(read_jsonl(out))
    assert len(rows) == 4 and all(set(r) >= {"prompt_id", "sample", "seed", "risk"} for r in rows)
    code, _, err = _cli(_predict(probed_mini, prompts, out, "1.0", "--force"), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    code, _, err = _cli(_predict(probed_mini, prompts, tmp_path / "fresh.jsonl", "1.0"), tmp_path, monkeypatch,
                        capsys)
    assert code == 0, err
    assert _risks(out) == _risks(tmp_path / "fresh.jsonl") != {(r["prompt_id"], r["sample"]): r["risk"] for r in rows}


def test_probe_early_without_scores_keeps_the_fitted_probes(tmp_path, monkeypatch, capsys, probed_mini):
    # before: early_probes.json replaced by one with no categories, exit 0
    run = tmp_path / "run"
    shutil.copytree(probed_mini, run)
    before = _snapshot(run)
    code, _, err = _cli(["probe", run, "--early", "--at", "0.5", "--quiet"], tmp_path, monkeypatch, capsys)
    _refused(code, err, [f"{run / 'scores'}: no scores", f"t2i-audit score {run}",
                         f"{run / 'probes' / 'early_probes.json'} is left as it was"])
    assert _snapshot(run) == before


def test_reusable_records_are_only_those_made_with_the_same_settings(tmp_path):
    from t2i_audit.resume import reusable_records, stamped

    path = tmp_path / "f.jsonl"
    mine = stamped([{"prompt_id": "p", "sample": 0, "risk": 0.1}], {"at": 0.5, "steps": 2})
    other = stamped([{"prompt_id": "p", "sample": 1, "risk": 0.2}], {"at": 1.0, "steps": 2})
    lines = [*mine, *other, {"prompt_id": "p", "sample": 2, "risk": 0.3}, {"my": "notes", "made_with": mine[0]["made_with"]},
             [1, 2]]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    key = lambda r: (r["prompt_id"], r["sample"])  # noqa: E731
    assert reusable_records(path, {"steps": 2, "at": 0.5}, key) == {("p", 0): mine[0]}  # key order is no setting
    assert reusable_records(path, {"at": 0.5, "steps": 3}, key) == {}
    assert reusable_records(tmp_path / "missing.jsonl", {"at": 0.5}, key) == {}
