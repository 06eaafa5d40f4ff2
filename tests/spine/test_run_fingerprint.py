"""The run fingerprint hashes the settings a run resolves (the card's defaults filled in), so the
manifest of a fresh run and of its `run --config RUN/run.yaml` resume name one fingerprint."""

import json

from t2i_audit import api
from t2i_audit.models import resolve_model


def _cfg(repo_root, **kw):
    return api.make_config({"model": "tiny-sd", "prompts": [str(repo_root / "prompts/colors.yaml")], "limit": 3,
                            "stages": ["prompts"], "device": "cpu", **kw})


def test_resume_from_run_yaml_keeps_the_fingerprint(repo_root, tmp_path):
    fresh = _cfg(repo_root, out=str(tmp_path / "run"))  # steps, guidance, size, dtype: the card's
    root = api.run_audit(fresh, progress=False)
    first = json.loads((root / "manifest.json").read_text())["fingerprint"]
    resumed = api.load_config(root / "run.yaml")  # holds the resolved settings
    assert resumed.steps is not None and resumed.fingerprint() == first == fresh.fingerprint()
    api.run_audit(resumed, progress=False)
    assert json.loads((root / "manifest.json").read_text())["fingerprint"] == first


def test_explicit_card_defaults_name_the_same_run(repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = resolve_model("tiny-sd").defaults
    plain = _cfg(repo_root)
    spelled = _cfg(repo_root, steps=d["steps"], guidance=d["guidance"], size=d["size"], dtype=d["dtype"])
    assert api.default_run_dir(plain) == api.default_run_dir(spelled)
    assert plain.fingerprint() != _cfg(repo_root, steps=d["steps"] + 1).fingerprint()


def test_a_run_named_by_the_old_fingerprint_is_still_found(repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _cfg(repo_root)
    new = api.default_run_dir(cfg)
    old = new.with_name(new.name.rsplit("_", 1)[0] + "_" + cfg._hash())  # the name before resolving
    assert old != new
    old.mkdir(parents=True)
    assert api.default_run_dir(cfg) == old  # rerunning the same command resumes the old run
    new.mkdir()
    assert api.default_run_dir(cfg) == new
