"""The tiny random scorer models live in the package (t2i_audit.tiny.scorers); re-exported here."""

from t2i_audit.tiny.scorers import (  # noqa: F401
    bert_tokenizer, blip_vqa_model, clip_tokenizer, grounding_dino_model, hf_clip_model, llava_model, materialize, open_clip_model,
    owlv2_model)
