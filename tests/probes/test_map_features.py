"""Composition statistics of cross-attention maps (probes/features/map_features.py) on synthetic maps, and the
exported per-image probe (probes/fit/per_image.py) pinned to the scikit-learn pipeline it was fitted as.

The maps are built the way probes/capture/attention.py hands them over: ``(H, W, keys)`` probabilities that sum
to 1 over the keys at every pixel, the start token (key 0) holding most of the mass, padding keys after
the words. Each word token gets a gaussian blob placed where the test says, so every statistic has a
known right answer (which side, which object, how many blobs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from t2i_audit.probes.features import map_features as mf
from t2i_audit.probes.fit import per_image

H = W = 16
# keys: 0 start token, 1 c1, 2 o1, 3 relation, 4 c2, 5 o2, 6-7 padding
SLOT_KEYS = {"c1": [1], "o1": [2], "r": [3], "c2": [4], "o2": [5]}
WORDS = [1, 2, 3, 4, 5]
N_KEYS = 8
# where a blob sits, in pixels (row, column)
LEFT, RIGHT, TOP, BOTTOM = (8, 3), (8, 12), (3, 8), (12, 8)


def blob(center, sigma=1.5, h=H, w=W) -> np.ndarray:
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    return np.exp(-((ys - center[0]) ** 2 + (xs - center[1]) ** 2) / (2 * sigma ** 2))


def attention_map(token_weights: dict[int, np.ndarray], start_share: float = 0.7) -> np.ndarray:
    """(H, W, N_KEYS): words share ``1 − start_share`` of every pixel in proportion to ``0.01 + weight``;
    padding keys get a little, the start token the rest."""
    raw = np.full((H, W, len(WORDS)), 0.01)
    for k, wgt in token_weights.items():
        raw[..., WORDS.index(k)] += wgt
    m = np.zeros((H, W, N_KEYS))
    m[..., WORDS] = (1 - start_share) * raw / raw.sum(-1, keepdims=True)
    m[..., 6:] = 0.005
    m[..., 0] = 1 - m[..., 1:].sum(-1)
    assert np.allclose(m.sum(-1), 1) and (m >= 0).all()
    return m


def record(relation: str | None = "left of", objects=("o1", "o2"), attributes=True) -> dict:
    """The parts of a PromptRecord (t2i_audit/prompts.py build_structure) that the features read."""
    attr = {"o1": "c1", "o2": "c2"}
    objs = [{"id": o, "name": o, "attribute_slots": {"color": attr[o]} if attributes else {}} for o in objects]
    rels = [{"slot": "r", "name": relation, "subject": "o1", "object": "o2"}] if relation else []
    return {"objects": objs, "relations": rels}


def features(m, prompt, slot_keys=SLOT_KEYS, **kw) -> dict[str, float]:
    vec = mf.image_features(m, slot_keys, WORDS, prompt, **kw)
    names = mf.feature_names(**kw)
    assert vec.shape == (len(names),)
    return dict(zip(names, vec.tolist()))


# the subject's (o1) blob where the relation puts it, the object's (o2) on the other side
PLACED = {"left of": (LEFT, RIGHT), "to the left of": (LEFT, RIGHT), "right of": (RIGHT, LEFT),
          "above": (TOP, BOTTOM), "on top of": (TOP, BOTTOM), "below": (BOTTOM, TOP), "under": (BOTTOM, TOP)}


@pytest.mark.parametrize("relation", sorted(PLACED))
def test_relation_order_is_positive_as_the_prompt_says_and_negative_reversed(relation):
    at_subject, at_object = PLACED[relation]
    right = features(attention_map({2: 3 * blob(at_subject), 5: 3 * blob(at_object)}), record(relation))
    wrong = features(attention_map({2: 3 * blob(at_object), 5: 3 * blob(at_subject)}), record(relation))
    assert right["rel1.order"] > 0.3 and right["rel1.side"] > 0.3
    assert wrong["rel1.order"] < -0.3 and wrong["rel1.side"] < -0.3
    # swapping the two blobs mirrors the statistic exactly (the maps are mirror images)
    assert wrong["rel1.order"] == pytest.approx(-right["rel1.order"], abs=1e-6)


def test_relation_order_follows_the_axis_not_the_other_one():
    """'left of' reads the x axis only: o1 above o2 (same column) is neither left nor right."""
    f = features(attention_map({2: 3 * blob(TOP), 5: 3 * blob(BOTTOM)}), record("left of"))
    assert abs(f["rel1.order"]) < 1e-6
    g = features(attention_map({2: 3 * blob(TOP), 5: 3 * blob(BOTTOM)}), record("above"))
    assert g["rel1.order"] > 0.3


def test_unknown_relation_name_is_nan():
    f = features(attention_map({2: 3 * blob(LEFT), 5: 3 * blob(RIGHT)}), record("next to"))
    assert math.isnan(f["rel1.order"]) and math.isnan(f["rel1.side"])
    assert math.isfinite(f["pair.overlap"])


def test_binding_margin_positive_when_attribute_looks_at_its_own_object():
    own = attention_map({1: 3 * blob(LEFT), 2: 3 * blob(LEFT), 4: 3 * blob(RIGHT), 5: 3 * blob(RIGHT)})
    swapped = attention_map({1: 3 * blob(RIGHT), 2: 3 * blob(LEFT), 4: 3 * blob(LEFT), 5: 3 * blob(RIGHT)})
    f, g = features(own, record()), features(swapped, record())
    for tag in ("obj1", "obj2"):
        assert f[f"{tag}.bind_own"] > 0.5 > f[f"{tag}.bind_other"]
        assert f[f"{tag}.bind_margin"] > 0.5
        assert g[f"{tag}.bind_margin"] < -0.5
        assert f[f"{tag}.bind_margin"] == pytest.approx(f[f"{tag}.bind_own"] - f[f"{tag}.bind_other"], abs=1e-6)


def test_overlap_of_the_two_objects():
    apart = features(attention_map({2: 3 * blob(LEFT), 5: 3 * blob(RIGHT)}), record())
    together = features(attention_map({2: 3 * blob(LEFT), 5: 3 * blob(LEFT)}), record())
    assert together["pair.overlap"] > 0.9  # the same distribution: Σ min(q, q) = 1
    assert apart["pair.overlap"] < 0.6


def test_entropy_and_spread_larger_for_a_diffuse_map():
    flat = np.ones((H, W))  # the relation word takes a steady share: o1's map has little floor
    tight = features(attention_map({2: 3 * blob(LEFT, sigma=1.0), 3: flat}), record(None))
    diffuse = features(attention_map({2: 3 * blob(LEFT, sigma=5.0), 3: flat}), record(None))
    assert diffuse["obj1.entropy"] > tight["obj1.entropy"] + 0.2
    assert diffuse["obj1.spread"] > tight["obj1.spread"] + 0.05
    assert 0 < tight["obj1.entropy"] < diffuse["obj1.entropy"] <= 1 + 1e-6  # normalised by log(H·W)
    assert tight["obj1.peak"] > diffuse["obj1.peak"] * 0.99 and tight["obj1.mass"] < diffuse["obj1.mass"]


def test_flat_map_has_entropy_one():
    f = features(attention_map({}), record(None))
    assert f["obj1.entropy"] == pytest.approx(1.0, abs=1e-5)
    assert f["obj1.mass"] == pytest.approx(1 / len(WORDS), abs=1e-5)  # each word an equal share per pixel


def test_regions_locate_the_blob():
    f = features(attention_map({2: 3 * blob((3, 3)), 5: 3 * blob((12, 12))}), record(None))
    assert f["obj1.r00"] > 0.6 and f["obj1.r00"] > max(f["obj1.r01"], f["obj1.r10"], f["obj1.r11"])
    assert f["obj2.r11"] > 0.6
    assert sum(f[f"obj1.r{i}{j}"] for i in "01" for j in "01") == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_blobs_counts_separated_blobs(n):
    centers = [(3, 3), (12, 12), (3, 12)][:n]
    f = features(attention_map({2: sum(3 * blob(c) for c in centers), 3: np.ones((H, W))}), record(None))
    assert f["obj1.blobs"] == n


def test_slots_the_prompt_lacks_are_nan():
    m = attention_map({2: 3 * blob(LEFT)})
    f = features(m, record(None, objects=("o1",), attributes=False))
    for s in mf.PER_SLOT:
        assert math.isfinite(f[f"obj1.{s}"])
        assert math.isnan(f[f"obj1.attr.{s}"]) and math.isnan(f[f"obj2.{s}"]) and math.isnan(f[f"obj2.attr.{s}"])
    for k in ("obj1.bind_own", "obj1.bind_other", "obj1.bind_margin", "pair.overlap", "rel1.order", "rel1.side"):
        assert math.isnan(f[k]), k
    # an object the record names but whose span found no tokens (not in slot_keys): NaN too, the rest kept
    g = features(m, record(), slot_keys={k: v for k, v in SLOT_KEYS.items() if k != "o2"})
    assert math.isnan(g["obj2.mass"]) and math.isnan(g["rel1.order"]) and math.isnan(g["pair.overlap"])
    assert math.isfinite(g["obj2.attr.mass"]) and math.isfinite(g["obj1.mass"])
    # no word tokens at all: every feature NaN
    assert np.isnan(mf.image_features(m, SLOT_KEYS, [], record())).all()


@pytest.mark.parametrize("max_objects,max_relations", [(2, 1), (1, 0), (3, 2)])
def test_feature_names_match_the_vector(max_objects, max_relations):
    names = mf.feature_names(max_objects, max_relations)
    assert len(set(names)) == len(names)
    vec = mf.image_features(attention_map({2: blob(LEFT)}), SLOT_KEYS, WORDS, record(),
                            max_objects=max_objects, max_relations=max_relations)
    assert vec.shape == (len(names),) and vec.dtype == np.float32


def test_slot_map_is_renormalised_over_the_words():
    """The start token's share varies per pixel; A_s does not see it."""
    m = attention_map({2: 3 * blob(LEFT)}, start_share=0.7)
    m2 = attention_map({2: 3 * blob(LEFT)}, start_share=0.2)
    np.testing.assert_allclose(mf.slot_map(m, [2], WORDS), mf.slot_map(m2, [2], WORDS), rtol=1e-9)
    # a multi-token slot is its tokens' mean
    np.testing.assert_allclose(mf.slot_map(m, [2, 5], WORDS),
                               (mf.slot_map(m, [2], WORDS) + mf.slot_map(m, [5], WORDS)) / 2, rtol=1e-9)


# --- the exported probe -------------------------------------------------------------------------


def _data(seed=0, n=120, d=6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1, 10, 0.1, 1, 1, 1] + [0, 5, -2, 0, 0, 0]
    y = (X[:, 0] + 0.3 * X[:, 1] / 10 + rng.normal(scale=0.7, size=n) > 0).astype(int)
    X[rng.random((n, d)) < 0.15] = np.nan  # missing features (slots a prompt lacks)
    X[:, 3] = np.nan                       # a feature no training row has
    X[:, 4] = 2.5                          # and a constant one (zero variance)
    groups = np.arange(n) % 12
    return X, y, groups


def test_apply_probe_equals_the_sklearn_pipeline():
    from t2i_audit.probes.fit.pipeline import sklearn_pipeline

    X, y, groups = _data()
    probe = per_image.export_probe(X, y, groups, seed=0)
    assert probe["C"] in per_image.CS
    ref = sklearn_pipeline(probe["C"], impute=True).fit(X, y)  # the reference, converged
    np.testing.assert_allclose(probe["median"], ref[0].statistics_)
    X_new, _, _ = _data(seed=1, n=50)
    assert np.isnan(X_new).any(axis=1).sum() > 10  # the imputation is exercised
    for Z in (X, X_new):  # both converged to max|grad| <= 1e-7: equal within 1e-4 (measured 1.2e-7)
        np.testing.assert_allclose(per_image.apply_probe(probe, Z), ref.predict_proba(Z)[:, 1], rtol=0, atol=1e-4)
    # plain arrays: the probe survives JSON
    import json

    again = json.loads(json.dumps(probe))
    np.testing.assert_array_equal(per_image.apply_probe(again, X_new), per_image.apply_probe(probe, X_new))


def test_apply_probe_checks_the_width():
    from t2i_audit.errors import AuditError

    X, y, groups = _data()
    probe = per_image.export_probe(X, y, groups)
    with pytest.raises(AuditError, match="expects 6 features"):
        per_image.apply_probe(probe, X[:, :5])
