"""A question skipped because one it depends on failed (DSG dependencies, scorers/verdicts.py: verdict None,
``extra.skipped_by``) is shown as skipped, with what it waited on — not "–" beside the answer's value, which read
as a pass (issue 37 point 9) — on the report's gallery and on a compare page."""

from __future__ import annotations

import re

from synth import make_run

from t2i_audit.report import compare_runs, render_report
from t2i_audit.rundir import atomic_write_jsonl, read_jsonl


def _skip_one_dependant(root, scorer: str) -> tuple[str, int, str]:
    """Mark, in a failed image, a question that depends on another as the scorer records a skip: verdict None,
    its own answer's value kept (1.0), extra.skipped_by the failed dependency."""
    path = root / "scores" / f"{scorer}.jsonl"
    recs = list(read_jsonl(path))
    prompts = {p["id"]: p for p in read_jsonl(root / "prompts.jsonl")}
    failed = {(r["prompt_id"], r["sample"]) for r in recs if r["kind"] == "prompt" and r["verdict"] is False}
    for r in recs:
        q = next((q for q in prompts[r["prompt_id"]]["questions"] if q["id"] == r.get("question_id")), None)
        if (r["prompt_id"], r["sample"]) in failed and q and q["depends_on"]:
            r.update(verdict=None, value=1.0, extra={"skipped_by": q["depends_on"][:1]})
            atomic_write_jsonl(path, recs)
            return r["prompt_id"], r["sample"], q["depends_on"][0]
    raise AssertionError("the synthetic run has no failed image with a dependent question")


def test_a_skipped_question_reads_as_skipped(tmp_path):
    root = make_run(tmp_path / "run", scorers=("vqa-blip",), samples=1, probes=False, black=0)
    other = make_run(tmp_path / "other", scorers=("vqa-blip",), samples=1, probes=False, black=0, skill=0.3)
    pid, sample, dep = _skip_one_dependant(root, "vqa-blip")
    page = render_report(root, progress=False).read_text()
    skipped = re.findall(r'<li><span class="v vs" title="skipped: it depends on ([^"]+), which did not pass">skipped'
                         r'</span>([^<]*)(<span class="muted small">[^<]*</span>)?</li>', page)
    assert skipped and all(value == "" for _, _, value in skipped), skipped  # no answer value beside a skip
    assert any(dep in deps.split(", ") for deps, _, _ in skipped)
    # compare's cards read the question through the same ScorerData.question as the report's gallery
    from t2i_audit.report.tables import read_scorer

    sd = read_scorer(root / "scores" / "vqa-blip.jsonl", {})
    qid = next(k[2] for k in sd.skipped if k[:2] == (pid, sample))
    assert sd.question(pid, sample, qid) == {"verdict": None, "skipped_by": [dep], "value": None}
    compare_runs([root, other], tmp_path / "cmp", seed=0)  # renders with the skipped question
