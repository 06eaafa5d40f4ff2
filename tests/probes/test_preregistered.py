"""Pre-registrations are fixed before the data that test them exist: their bytes are pinned here (DESIGN.md, "Fix
the test before its data exist"). Changing a registered file after its run exists voids its test; a new
registration is a new file."""

import hashlib
from pathlib import Path

import pytest

STUDIES = Path(__file__).resolve().parents[2] / "t2i_audit" / "probes" / "studies"

PINNED = {
    # registered 2026-12-05 before the 280 x 8 run of base seed 0 was judged (its selection.json records this hash)
    "preregistered.py": "a41ed9146aed686e867c1c46274845050c062c2797e867a1b84080cdbf08dae4",
    # registered 2026-12-06 before the run of base seed 20261206 existed (issue 35)
    "preregistered_replication.py": "0fc7e13b395edff50dc0ecda8f4b730f13a7fd0992275013ec0c5e9e12924ec1",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_registration_is_unchanged(name):
    assert hashlib.sha256((STUDIES / name).read_bytes()).hexdigest() == PINNED[name]


def test_the_replication_registers_the_headline_and_both_leads_on_a_seed_no_run_used():
    from t2i_audit.probes.studies import preregistered, preregistered_replication as reg

    assert set(reg.POLICIES) == {"headline", "lead_rawmaps", "lead_x0_fitted"}
    head = reg.POLICIES["headline"]
    old = preregistered.HEADLINE
    assert (head["family"], head["fraction"], head["n_of"], head["keep"]) == (
        old["family"], old["fraction"], old["policy"]["n_of"], old["policy"]["keep"])
    assert {p["family"] for p in reg.POLICIES.values()} == {"probe", "rawmaps", "x0-fitted"}
    assert reg.BASE_SEED not in (0, 1) and reg.RUN["images_per_prompt"] == 8
