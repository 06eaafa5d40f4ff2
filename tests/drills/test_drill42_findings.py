"""The drill of issue 42 (the newest features: LoRA and component variants, track, board, record validation), one
test per finding that did not hold, through the entry point a user meets where there is one. The properties
behind the record findings (every reader refuses a repeated key; a finished file cut short) are in
tests/drills/test_drill42_records.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.rundir import append_jsonl, atomic_write_jsonl, dumps_line

from ..spine.test_command_properties import invoke
from .test_output_folders import SUITE, _probed_run, _snapshot

REPO = Path(__file__).resolve().parents[2]


# --- predict --from a probe whose pooling the prompts cannot give ------------------------------------------------

def test_predict_refuses_a_probe_pooling_the_prompts_lack_at_its_line(tmp_path, monkeypatch, capsys):
    """Before: 280 NaN risks ranked, exit 0, ``"risk":NaN`` written into the JSONL. A ``slot-o9`` pooling on
    prompts with no slot o9 leaves every feature row NaN: refused at the probe file's line, nothing written."""
    (tmp_path / "suite.yaml").write_text(SUITE)
    probe = _probed_run(tmp_path / "probed") / "probes" / "failure_probe.json"
    data = json.loads(probe.read_text())
    probe.write_text(json.dumps({**data, "pooling": "slot-o9"}, indent=1))  # pretty: the pooling on its own line
    line = next(i for i, t in enumerate(probe.read_text().splitlines(), 1) if '"pooling"' in t)
    before = _snapshot(tmp_path)
    code, out = invoke(["predict", "--model", "tiny-sd", "--prompts", "suite.yaml", "--from", "probed",
                        "--out", "risk.jsonl"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in out, out
    assert f"failure_probe.json:{line}: pooling 'slot-o9' cannot be read from 2 of 2 prompts" in out, out
    assert "no slot 'o9'" in out and "--prompts" in out
    assert not (tmp_path / "risk.jsonl").exists() and _snapshot(tmp_path) == before


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_jsonl_writer_emits_nan_or_infinity(tmp_path, value):
    """The one JSONL writer (rundir.dumps_line, under atomic_write_jsonl and append_jsonl) writes strict JSON: a
    non-finite number is refused naming its key, and nothing reaches the file."""
    record = {"prompt_id": "p", "extra": {"risk": [0.5, value]}}
    for write in (atomic_write_jsonl, append_jsonl):
        path = tmp_path / f"{write.__name__}.jsonl"
        with pytest.raises(ValueError, match=r"extra\.risk\[1\] is not a finite number"):
            write(path, [{"prompt_id": "ok"}, record])
        assert not path.exists()
    assert json.loads(dumps_line({"a": 1.5})) == {"a": 1.5}


# --- the mini judge's open_clip config leaves no folder in the temp directory ------------------------------------

def test_mini_judge_scoring_leaves_no_folder_in_the_temp_directory(tmp_path):
    """Before: every scoring with the mini open_clip judge left a ``t2i_audit_oc_*`` folder in the temp directory.
    A real scoring in a fresh process (the registration happens once a process), TMPDIR pointed at an empty
    folder: nothing of ours is left in it."""
    from t2i_audit import api

    run = api.run_audit(api.make_config(dict(model="mini", prompts=[str(REPO / "prompts/mini.yaml")], limit=2,
                                             images_per_prompt=1, steps=1, stages=["prompts", "generate"],
                                             out=str(tmp_path / "run"), device="cpu")), progress=False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "t2i_audit", "score", str(run), "--scorer", "mini-judge", "-q"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (Path(run) / "scores" / "mini-judge.jsonl").is_file()
    assert [p.name for p in tmp.iterdir() if p.name.startswith("t2i_audit_oc_")] == []


def test_an_open_clip_config_stays_registered_after_its_folder_is_gone():
    """The folder is removed right after open_clip reads it: the architecture stays known through a later rescan
    (another registration), so removing the folder costs the judge nothing."""
    from t2i_audit.extras import open_clip
    from t2i_audit.scorers.clip_models import register_open_clip_config

    cfg = json.loads((REPO / "t2i_audit/mini/weights/judge/config.json").read_text())
    cfg = cfg.get("model_cfg", cfg)
    register_open_clip_config("t2i-audit-test-arch-a", cfg)
    register_open_clip_config("t2i-audit-test-arch-b", {**cfg, "embed_dim": cfg["embed_dim"] * 2})
    assert open_clip.get_model_config("t2i-audit-test-arch-a") == json.loads(json.dumps(cfg))
    assert open_clip.get_model_config("t2i-audit-test-arch-b")["embed_dim"] == cfg["embed_dim"] * 2
