"""Features: captured tensors in, per-image feature vectors out (pure numpy, no model, no fitting).

``map_features`` reduces one image's cross-attention maps (``capture.attention``) to composition
statistics per slot — mass, peak, spread and regions of each object and attribute token, attribute–object
binding, relation order, blob counts — named so that one category's prompts share one layout; the
fitters (``fit/``) and the studies read them.
"""
