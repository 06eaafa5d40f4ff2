"""`run --prompts` from several sources: a prompt given twice is refused before anything is written (it would be
generated and scored twice, and the run's own prompts.jsonl reader refuses the repeated id after the work)."""

from t2i_audit import api

from .test_command_properties import invoke


def test_a_suite_and_its_own_export_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    exported = tmp_path / "mini.jsonl"
    api.export_prompts(["mini"], exported, limit=4)
    code, out = invoke(["run", "--model", "mini", "--prompts", "mini", "--prompts", str(exported), "--limit", "4",
                        "--stages", "prompts", "--out", str(tmp_path / "run")], tmp_path, monkeypatch, capsys)
    assert code == 2, out
    assert "is given twice (the same suite named twice, or a suite and a .jsonl exported from it)" in out
    assert not (tmp_path / "run").exists()


def test_the_export_alone_runs(tmp_path, monkeypatch, capsys):
    exported = tmp_path / "mini.jsonl"
    api.export_prompts(["mini"], exported, limit=4)
    code, out = invoke(["run", "--model", "mini", "--prompts", str(exported), "--stages", "prompts", "--out",
                        str(tmp_path / "run")], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    assert len((tmp_path / "run" / "prompts.jsonl").read_text().splitlines()) == 4
