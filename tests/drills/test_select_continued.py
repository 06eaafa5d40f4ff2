"""`select --of N --keep K --at F` continues the kept and random seeds from the scan's latents (issue 27, item 1),
through the same path as `select --budget` (t2i_audit/select/execute.py). A continued image is the uninterrupted
image of its seed when its scan batch and its finish batch are the batches a plain run makes it in; a select
killed in its scan or its finish, resumed, and a damaged image healed end with the bytes of an uninterrupted
select, redoing only the scan batches the unfinished finish batches need. On the session's ``probed_mini``
(mini generator, 2 steps: the scan runs loop index 0, the continuation index 1)."""

from __future__ import annotations

import json

import pytest

from t2i_audit import api
from t2i_audit.rundir import RunDir, read_jsonl

N_PROMPTS = 8


class Killed(BaseException):
    """A kill, simulated in-process: nothing below catches it."""


def _select(repo_root, probed, out, *, of, keep, baseline=True, batch=4):
    from t2i_audit.select.command import select_run

    cfg = api.make_config(dict(model="mini", prompts=[str(repo_root / "prompts/mini.yaml")], limit=N_PROMPTS,
                               out=str(out), device="cpu", seed=1, batch_size=batch))
    return select_run(cfg, probed, n_of=of, keep=keep, at=0.5, baseline=baseline, n_boot=20, progress=False)


def _pngs(root) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "images").rglob("*.png"))}


def _spent(root) -> dict:
    return json.loads((root / "manifest.json").read_text())["stages"]["generate"]["spent_now"]


@pytest.mark.parametrize("of,keep,baseline,batch", [(2, 1, False, 1), (2, 2, True, 2)])
def test_kept_images_are_the_uninterrupted_images_of_their_seeds(tmp_path, repo_root, probed_mini, of, keep,
                                                                 baseline, batch):
    # before: every kept seed was regenerated from noise (scan N·1 + finish K·2 iterations; no spent_now)
    res = _select(repo_root, probed_mini, tmp_path / "sel", of=of, keep=keep, baseline=baseline, batch=batch)
    plain = RunDir(api.run_audit(api.make_config(dict(
        model="mini", prompts=[str(tmp_path / "sel" / "prompts.jsonl")], images_per_prompt=of, steps=2,  # its prompts
        seed=1, batch_size=batch, stages=["prompts", "generate"], out=str(tmp_path / "plain"), device="cpu")),
        progress=False))
    sel = RunDir(tmp_path / "sel")
    chosen = list(read_jsonl(sel.root / "selection.jsonl"))
    finished = {(r["prompt_id"], r["sample"]) for r in chosen if r["kept"] or r["random"]}
    records = sel.read_images()
    assert {(r["prompt_id"], r["sample"]) for r in records} == finished
    assert sum(r["kept"] for r in chosen) == keep * N_PROMPTS
    # scan batch = finish batch = the plain run's batch (batch 1: alone; batch 2: both seeds of one prompt)
    for r in records:
        me = f"{r['prompt_id']}/{r['sample']}"
        assert r["continued_from_step"] == 0 and me in r["batch_members"] and me in r["scan_batch_members"]
        assert r["batch_members"] == r["scan_batch_members"]
    assert _pngs(sel.root) == {k: v for k, v in _pngs(plain.root).items() if k in _pngs(sel.root)}
    # what the denoiser ran: every scanned seed 1 iteration (to loop index 0), every finished one 1 more, not 2
    spent = _spent(sel.root)
    assert spent["loop_iterations"] == N_PROMPTS * of * 1 + len(finished) * 1
    assert spent["vae_decodes"] == len(finished)
    c = res["cost"]
    assert (c["scan"], c["finish"], c["selected_total"], c["decodes"], c["judge_calls"]) == \
        (of, keep, of + keep, keep, keep if keep > 1 else 0)
    assert c["regenerated_instead"] == of + 2 * keep and c["best_of_n_by_final_judge"] == 2 * of
    assert c["saved_fraction"] == pytest.approx(1 - (of + keep) / (2 * of))


def test_killed_resumed_and_healed_selects_end_with_the_uninterrupted_bytes(tmp_path, repo_root, probed_mini,
                                                                           monkeypatch):
    """Chunks of 3 prompts, batches of 3: scan batches straddle prompts and a finish batch draws on two scan
    batches. One select is killed mid-scan (chunk 2), resumed and killed mid-finish (chunk 2), then resumed to
    the end; another has an image damaged after it finished."""
    from t2i_audit.select import continuation
    from t2i_audit.select import execute as budget_exec
    from t2i_audit.select import scan as select_mod

    monkeypatch.setattr(budget_exec, "CHUNK_PROMPTS", 3)
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    _select(repo_root, probed_mini, clean, of=2, keep=1, batch=3)

    def fail_on(module, name, n):
        real, calls = getattr(module, name), []

        def wrapped(*a, **k):
            calls.append(1)
            if len(calls) == n:
                raise Killed(name)
            return real(*a, **k)
        monkeypatch.setattr(module, name, wrapped)

    fail_on(select_mod, "batch_risks", 4)  # chunk 1 scanned (2 batches) and finished; chunk 2's 2nd batch dies
    with pytest.raises(Killed):
        _select(repo_root, probed_mini, killed, of=2, keep=1, batch=3)
    assert len(list(read_jsonl(killed / "selection.jsonl"))) == 3 * 2 + 3  # whole scan batches only
    monkeypatch.undo()
    monkeypatch.setattr(budget_exec, "CHUNK_PROMPTS", 3)
    fail_on(continuation, "continue_batch", 2)  # resumed: chunk 1 skipped, chunk 2's 2nd finish batch dies
    with pytest.raises(Killed):
        _select(repo_root, probed_mini, killed, of=2, keep=1, batch=3)
    monkeypatch.undo()
    monkeypatch.setattr(budget_exec, "CHUNK_PROMPTS", 3)
    _select(repo_root, probed_mini, killed, of=2, keep=1, batch=3)
    assert _pngs(killed) == _pngs(clean)
    assert list(read_jsonl(killed / "selection.jsonl")) == list(read_jsonl(clean / "selection.jsonl"))
    assert RunDir(killed).read_images() == RunDir(clean).read_images()

    # a damaged image: healed with the same bytes, redoing only its finish batch and the scan batches it draws on
    records = {f"{r['prompt_id']}/{r['sample']}": r for r in RunDir(clean).read_images()}
    victim = next(r for r in records.values() if len({tuple(records[m]["scan_batch_members"])
                                                      for m in r["batch_members"]}) == 2)
    path = clean / victim["path"]
    original = path.read_bytes()
    path.write_bytes(original[:-9] + b"damaged!!")
    _select(repo_root, probed_mini, clean, of=2, keep=1, batch=3)
    assert path.read_bytes() == original and _pngs(clean) == _pngs(killed)
    scan_batches = {tuple(records[m]["scan_batch_members"]) for m in victim["batch_members"]}
    spent = _spent(clean)
    assert spent["loop_iterations"] == sum(len(b) for b in scan_batches) * 1 + len(victim["batch_members"]) * 1
    assert spent["vae_decodes"] == len(victim["batch_members"])
