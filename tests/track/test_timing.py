"""When things happen over training: the crossing step and the pre-registered half-rise lead, on curves whose
answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from t2i_audit.track.timing import crossing, decide, half_rise, rise_lead

STEPS = [0, 200, 400, 600, 800, 1000]


def items(curve, groups=6, per=8, noise=0.0, seed=0, binary=False):
    """Items × checkpoints whose cluster means follow ``curve``."""
    rng = np.random.default_rng(seed)
    c = np.asarray(curve, float)
    if binary:
        return (rng.random((groups * per, len(c))) < c).astype(float), np.repeat(np.arange(groups), per)
    return np.clip(c + rng.normal(0, noise, (groups * per, len(c))), 0, 1), np.repeat(np.arange(groups), per)


def test_half_rise_step():
    assert half_rise([0.1, 0.1, 0.3, 0.5, 0.5, 0.5], STEPS) == 400  # 0.1 + (0.5 - 0.1) / 2 = 0.3 first at 400
    assert half_rise([0.5, 0.4, 0.3, 0.3, 0.2, 0.1], STEPS) is None  # never above the base


def test_decodability_rising_first_is_called_before_and_the_reverse_after():
    s, g = items([0.0, 0.0, 0.05, 0.6, 0.9, 0.95], binary=True)
    d_early, _ = items([0.2, 0.55, 0.6, 0.62, 0.62, 0.62], noise=0.05)
    d_late, _ = items([0.2, 0.2, 0.2, 0.21, 0.4, 0.62], noise=0.05)
    before = rise_lead(s, g, d_early, g, STEPS, n_boot=500)
    assert before["decision"] == "before" and before["lead"]["steps"] == 400 and before["lead"]["ci"][0] > 0
    after = rise_lead(s, g, d_late, g, STEPS, n_boot=500)
    assert after["decision"] == "after" and after["lead"]["steps"] < 0
    flat_s, _ = items([0.0] * 6, binary=True)
    assert rise_lead(flat_s, g, d_early, g, STEPS, n_boot=500)["decision"] == "not testable"
    flat_d, _ = items([0.3] * 6, noise=0.05)
    assert rise_lead(s, g, flat_d, g, STEPS, n_boot=500)["decision"] == "after"  # decodability does not rise
    with pytest.raises(ValueError, match="same clusters"):
        rise_lead(s, g, d_early, g + 100, STEPS, n_boot=50)


def test_decision_rule_as_registered():
    res = {"success": {"rises": True}, "decodability": {"rises": True}, "lead": {"ci": [-200.0, 400.0]}}
    assert decide(res) == "not distinguishable"
    assert decide({**res, "lead": {"ci": [200.0, 400.0]}}) == "before"
    assert decide({**res, "lead": {"ci": [-400.0, -200.0]}}) == "after"
    assert decide({**res, "success": {"rises": False}}) == "not testable"


def test_crossing_step_and_its_interval():
    s, g = items([0.0, 0.0, 0.02, 0.5, 0.9, 1.0], binary=True)
    res = crossing(s, g, STEPS, 1 / 24, n_boot=500, n_nested=60)
    assert res["step"] == 600 and res["ci"][0] > 1 / 24  # the first CI above chance
    lo, hi = res["step_ci"]
    assert lo <= 600 <= hi and res["crossing_share"] == 1.0
    never = crossing(items([0.0] * 6, binary=True)[0], g, STEPS, 1 / 24, n_boot=200, n_nested=20)
    assert never["step"] is None and never["step_ci"] == [None, None] and never["crossing_share"] == 0.0
