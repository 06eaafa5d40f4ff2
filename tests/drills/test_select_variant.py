"""`select --from RUN` on a run made with a LoRA scans and finishes with that LoRA: the kept images are the
images `run --lora` makes for their seeds, and the select run records the LoRA as its own (mini world)."""

from __future__ import annotations

import json

from t2i_audit import api
from t2i_audit.rundir import RunDir

from ..spine.test_command_properties import invoke
from .conftest import make_probed
from .test_select_continued import _pngs

N_PROMPTS = 4  # prompts probed and scanned: 4 kept images to compare with and without the LoRA


def test_select_on_a_lora_run_continues_with_its_lora(tmp_path_factory, tmp_path, repo_root, monkeypatch, capsys):
    from t2i_audit.tiny.lora import build_lora

    lora = f"{build_lora('mini', tmp_path_factory.mktemp('mini-lora'))}:0.7"
    probed = make_probed(tmp_path_factory.mktemp("probed-lora") / "run", repo_root, loras=[lora], limit=N_PROMPTS)
    suite = str(repo_root / "prompts/mini.yaml")
    code, said = invoke(["select", "--from", str(probed), "--prompts", suite, "--limit", str(N_PROMPTS), "--of", "2",
                         "--keep", "1", "--at", "0.5", "--no-baseline", "--seed", "1", "--batch-size", "1",
                         "--device", "cpu", "--out", str(tmp_path / "sel"), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 0, said
    sel = RunDir(tmp_path / "sel")
    assert api.load_config(sel.config).loras == api.load_config(RunDir(probed).config).loras == [lora]
    assert json.loads((sel.root / ".t2i-audit.json").read_text())["settings"]["loras"][0]["scale"] == 0.7

    def plain(out, **kw):  # on the select run's own prompts: select --limit takes run --limit's subset (seed 0)
        return RunDir(api.run_audit(api.make_config(dict(
            model="mini", prompts=[str(sel.prompts)], images_per_prompt=2, steps=2, seed=1, batch_size=1,
            stages=["prompts", "generate"], out=str(tmp_path / out), device="cpu", **kw)), progress=False))

    kept = _pngs(sel.root)
    assert kept and kept == {k: v for k, v in _pngs(plain("with", loras=[lora]).root).items() if k in kept}
    assert kept != {k: v for k, v in _pngs(plain("without").root).items() if k in kept}
