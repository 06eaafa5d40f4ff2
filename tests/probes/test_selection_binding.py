"""The binding study's features: pure-numpy reductions on hand-made maps, and the capture on the mini
generator pinned to the early study's own attention maps (per-head maps averaged over heads and modules are
the head-mean maps) and to the CFG gap's definition (zero when the conditional and unconditional inputs agree)."""

from __future__ import annotations

import numpy as np
import pytest

from t2i_audit.probes.studies import binding_features as bf

PROMPT = {"objects": [{"id": "o1", "attributes": {"color": "red"}, "attribute_slots": {"color": "c1"}},
                      {"id": "o2", "attributes": {"color": "blue"}, "attribute_slots": {"color": "c2"}}],
          "relations": [{"name": "left of", "subject": "o1", "object": "o2"}]}


def _maps(h=8, w=8):
    """keys: 0 start, 1 c1, 2 o1, 3 c2, 4 o2; o1 and c1 on the left half, o2 and c2 on the right."""
    m = np.zeros((h, w, 5))
    m[..., 0] = 0.5  # the start token soaks up mass everywhere (renormalised away over the word tokens)
    m[:, : w // 2, 1] = m[:, : w // 2, 2] = 1.0
    m[:, w // 2:, 3] = m[:, w // 2:, 4] = 1.0
    return m


KEYS = {"c1": [1], "o1": [2], "c2": [3], "o2": [4]}
WORDS = [1, 2, 3, 4]


def test_relation_frame_turns_every_relation_into_left_of():
    q = np.zeros((4, 4))
    q[0, :] = 1.0  # mass on the top row: "subject above object" in the prompt's frame
    assert bf.canonical(q, (0, -1.0))[:, 0].sum() == 4  # above → the subject's mass on the left column
    q = np.zeros((4, 4))
    q[:, 3] = 1.0  # right column: "subject right of object"
    assert bf.canonical(q, (1, 1.0))[:, 0].sum() == 4
    assert bf.canonical(q, None) is q
    assert np.allclose(bf.cells(np.arange(64.0).reshape(8, 8), 4), np.arange(64.0).reshape(8, 8).reshape(
        4, 2, 4, 2).mean((1, 3)))


def test_overlap_and_raw_maps_read_binding_from_the_maps():
    sk = bf.slot_keys(PROMPT, KEYS)
    assert sk == {"o1": [2], "a1": [1], "o2": [4], "a2": [3]}
    m = _maps()
    ov = dict(zip(bf.OVERLAP, bf.overlap({"mod": m[None]}, sk, WORDS)))
    assert ov["a1_o1"] == pytest.approx(1.0) and ov["a1_o2"] == pytest.approx(0.0, abs=1e-9)
    assert ov["margin1"] == pytest.approx(1.0) and ov["o1_o2"] == pytest.approx(0.0, abs=1e-9)
    raw = bf.rawmaps({"8x8": m}, sk, WORDS, PROMPT).reshape(4, 4, 4)  # slots o1, a1, o2, a2; cell means
    assert raw[0][:, :2].min() > 0 and raw[0][:, 2:].max() == 0 and raw[2][:, :2].max() == 0
    right = {**PROMPT, "relations": [{"name": "right of", "subject": "o1", "object": "o2"}]}
    flipped = bf.rawmaps({"8x8": m}, sk, WORDS, right).reshape(4, 4, 4)  # o1 is left, the prompt says right
    assert flipped[0][:, 2:].min() > 0 and flipped[0][:, :2].max() == 0


def test_cfg_gap_per_slot_and_x0_colours_inside_attention_regions():
    sk = bf.slot_keys(PROMPT, KEYS)
    m = _maps()
    gap = np.zeros((16, 16))
    gap[:, :8] = 3.0  # guidance pushes on the left, where o1 and "red" look
    v = dict(zip(bf.CFG, bf.cfg(gap, 1e-4, 3e-4, m, sk, WORDS)))
    assert v["log10_asd"] == pytest.approx(-4) and v["log10_asd_cum"] == pytest.approx(np.log10(3e-4))
    assert v["gap_o1"] == pytest.approx(2.0) and v["gap_o2"] == pytest.approx(0.0, abs=1e-9)
    pal = bf.palette()
    img = np.zeros((32, 32, 3))
    img[:, :16] = pal["red"]
    img[:, 16:] = pal["red"]  # both objects red: object 2 has the wrong colour
    c = dict(zip(bf.X0COLOUR, bf.x0colour(img, m, sk, WORDS, PROMPT)))
    assert c["o1.d_own"] == pytest.approx(0.0) and c["o1.margin"] > 0 and c["o1.own_share"] == pytest.approx(1.0)
    assert c["o2.margin"] < 0 and c["o2.other_share"] == pytest.approx(1.0) and c["o2.own_share"] == 0.0


@pytest.fixture(scope="module")
def mini_pipe():
    from t2i_audit.generate import load_pipeline
    from t2i_audit.models import resolve_model

    card = resolve_model("mini")
    return load_pipeline(card, "cpu", "float32"), card


def test_per_head_maps_average_to_the_early_studys_maps(mini_pipe):
    from t2i_audit.probes.capture.attention import AttentionRecorder
    from t2i_audit.probes.capture.denoiser import run_hooked
    from t2i_audit.probes.studies.trajectory import HeadMaps

    pipe, card = mini_pipe
    texts = ["a red circle to the left of a blue square", "a green cross and a yellow triangle"]
    held = {}

    def heads(p, den, clock):
        held["h"] = HeadMaps(den, clock, [1], len(texts), type(p).__name__)
        return held["h"]

    def mean(p, den, clock):
        held["m"] = AttentionRecorder(den, clock, [1], len(texts), type(p).__name__)
        return held["m"]
    run_hooked(pipe, texts, [3, 4], steps=4, guidance=7.0, size=32, at_steps=[1], call_kwargs=card.call,
               attach=[heads, mean], stop_after=1)
    grids: dict = {}
    for (_mod, _step), a in held["h"].maps.items():  # (n, heads, H, W, keys)
        grids.setdefault(f"{a.shape[2]}x{a.shape[3]}", []).append(a.mean(1))
    assert grids and len(held["h"].maps) == 7  # the mini UNet's seven cross-attention modules
    for (grid, step), want in held["m"].maps().items():
        assert np.allclose(np.mean(grids[grid], axis=0), want, atol=1e-6)
        assert next(iter(held["h"].maps.values())).shape[1] == 2  # two heads, kept apart


def test_cfg_gap_is_zero_when_condition_and_unconditional_agree(mini_pipe):
    from t2i_audit.probes.capture.denoiser import run_hooked
    from t2i_audit.probes.studies.trajectory import CFGGap

    pipe, card = mini_pipe
    got = {}
    for text in ("", "a red circle above a blue cross"):  # "" is the pipeline's own unconditional prompt

        def gap(p, den, clock):
            got[text] = CFGGap(p, den, clock, [0, 1], 1)
            return got[text]
        run_hooked(pipe, [text], [5], steps=4, guidance=7.0, size=32, at_steps=[1], call_kwargs=card.call,
                   attach=[gap], stop_after=1)
    assert sorted(got[""].asd) == [0, 1] and all(float(v[0]) == 0.0 for v in got[""].asd.values())
    assert np.all(got[""].maps[1] == 0)
    real = got["a red circle above a blue cross"].asd
    # the mini scheduler has zero terminal SNR (rescale_betas_zero_snr): at the first step α_t = 0, so
    # ε = α_t v + σ_t x_t is x_t for either prompt and the ε gap is 0; from the second step on it is not
    assert float(real[0][0]) == 0.0 and float(real[1][0]) > 0
