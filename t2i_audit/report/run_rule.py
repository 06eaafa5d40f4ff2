"""The one rule of t2i_audit/board/settings.py applied to the run folders ``compare`` reads: what each run is
(its settings, model card, suites, judges), how each differs from the first (BASE), and the gate's refusal of
runs made at other settings. A board reads the same fields from its index entries."""

from __future__ import annotations

from ..errors import AuditError


def entries(runs, labels) -> list[dict]:
    """Each run as the one rule of board/settings.py reads it (its run.yaml or recorded generate settings, its
    model card, suites and judges); ``recorded`` False where the run records no settings."""
    from ..board import readers, settings

    out = []
    for r, lab in zip(runs, labels):
        try:
            config, recorded = dict(readers.run_config(r.rd, r.manifest)), True
        except AuditError:  # a run made before settings were recorded: they are unknown, said where it matters
            if r.rd.config.is_file():  # a damaged run.yaml is named, never read as "unknown"
                raise
            config, recorded = {}, False
        if config.get("images_per_prompt") is None:  # a protocol fact the images themselves tell
            samples = r.images_df.groupby("prompt_id")["sample"].nunique() if len(r.images_df) else []
            config["images_per_prompt"] = int(max(samples, default=0))
        judges = {name: dict(zip(("model", "revision", "protocol"), (x or None for x in next(iter(sd.identities)))))
                  for name, sd in sorted(r.scorers.items()) if len(sd.identities) == 1}
        e = settings.run_entry(lab, config, r.manifest, r.suites, judges)
        e["recorded"] = recorded
        out.append(e)
    return out


def differences(entries, runs, *, allow_different_suites: bool) -> dict:
    """{label of each run after the first: {"protocol": [...], "settings": [...]}} against the first run (BASE),
    by the board's rule (board/settings.py rule_differences); a run without recorded settings is named."""
    from ..board.settings import rule_differences

    out = {}
    for e, r in zip(entries[1:], runs[1:]):
        d = rule_differences(entries[0], e, allow_different_suites=allow_different_suites)
        for x, rr in ((entries[0], runs[0]), (e, r)):
            if not x["recorded"]:
                d["settings"].insert(0, f"{rr.rd.root}: no run.yaml and no recorded generate settings, so its "
                                        "settings are unknown")
        out[e["id"]] = d
    return out


def refuse_other_settings(diffs: dict, base: str) -> None:
    """The gate compares weights at fixed settings: any protocol or model-settings difference is refused, named."""
    for lab, d in diffs.items():
        if d["protocol"]:
            raise AuditError(f"{lab} was judged or sampled under another protocol than {base}: "
                             f"{'; '.join(d['protocol'])}; a gate compares like with like — rescore or "
                             "regenerate one run under the other's protocol")
        if d["settings"]:
            raise AuditError(f"{lab} was made at other settings than {base}: {'; '.join(d['settings'])}; "
                             "a gate compares weights at fixed settings (a leaderboard, `t2i-audit board`, "
                             "compares models at their own) — regenerate CANDIDATE at BASE's settings, or pass "
                             "--allow-different-settings to gate on the difference anyway")
