"""Tiny random scorer models built from configs, saved to folders (offline, CPU, milliseconds).

For tests, CI and the quickstart: the ``tiny-*`` scorer cards name models ``tiny:<kind>``,
which :func:`materialize` builds once into ``$T2I_AUDIT_TINY_DIR`` (default
``~/.cache/t2i_audit/tiny-scorers``) and the scorers then load through the same code as real
checkpoints (``from_pretrained`` on a local folder, ``create_model_and_transforms``).
Their weights are random: the numbers they produce mean nothing.
"""


from __future__ import annotations

import json
from pathlib import Path

WORDS = ("a photo of an the is are there exactly to left right above below on top next chasing "
         "and red blue green yellow orange purple pink brown black white gray square circle "
         "triangle cube sphere apple cat dog car cup round one two three four five six yes no "
         "does this figure show please answer or yes no ? . , \"").split()


def clip_tokenizer(merges_n: int = 500):
    from transformers import CLIPTokenizer

    from ..tiny import clip_vocab_merges

    vocab, merges = clip_vocab_merges(merges_n)
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77,
                         pad_token="<|endoftext|>")


def bert_tokenizer(extra=()):
    from transformers import BertTokenizer

    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(dict.fromkeys(WORDS + list(extra)))
    return BertTokenizer(vocab={t: i for i, t in enumerate(toks)})


def open_clip_model(folder: Path, name: str = "tiny-oc") -> dict:
    """A 32-px open_clip ViT from a custom config + a safetensors checkpoint."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"embed_dim": 32,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
           "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (folder / "config.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(_stem_dir(folder, name, cfg))
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return {"backend": "open_clip", "id": name, "local": True, "revision": "tiny",
            "config": str(folder / "config.json"), "pretrained": str(folder / "model.safetensors")}


def _stem_dir(folder: Path, name: str, cfg: dict) -> Path:
    d = folder / "_cfg"
    d.mkdir(exist_ok=True)
    (d / f"{name}.json").write_text(json.dumps(cfg))
    return d


def hf_clip_model(folder: Path) -> dict:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tok = clip_tokenizer()
    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_attention_heads=2,
                         num_hidden_layers=1, max_position_embeddings=77, projection_dim=24,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37,
                           num_attention_heads=2, num_hidden_layers=1, projection_dim=24),
        projection_dim=24)  # != hidden size: unprojected features would not match the model's logits
    CLIPModel(cfg).save_pretrained(folder)
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=ip, tokenizer=tok).save_pretrained(folder)
    return {"backend": "transformers", "id": str(folder), "local": True, "revision": "tiny"}


def blip_vqa_model(folder: Path) -> dict:
    import torch
    from transformers import (BlipConfig, BlipForQuestionAnswering, BlipImageProcessor,
                              BlipProcessor)

    tok = bert_tokenizer()
    torch.manual_seed(0)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_attention_heads=2,
                num_hidden_layers=1, encoder_hidden_size=32, max_position_embeddings=64,
                bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)
    vision = dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37,
                  num_attention_heads=2, num_hidden_layers=1)
    BlipForQuestionAnswering(BlipConfig(text_config=text, vision_config=vision)).save_pretrained(folder)
    BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                  tokenizer=tok).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


def llava_model(folder: Path) -> dict:
    import torch
    from transformers import (CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration,
                              LlavaProcessor)

    tok = bert_tokenizer()
    tok.add_tokens(["<image>"], special_tokens=True)
    image_id = tok.convert_tokens_to_ids("<image>")
    torch.manual_seed(0)
    cfg = LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", image_size=32, patch_size=8, hidden_size=32,
                           intermediate_size=37, num_attention_heads=2, num_hidden_layers=2),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32, intermediate_size=37,
                         num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=1,
                         max_position_embeddings=128, pad_token_id=tok.pad_token_id),
        image_token_index=image_id, vision_feature_layer=-1, vision_feature_select_strategy="default")
    LlavaForConditionalGeneration(cfg).save_pretrained(folder)
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=8, num_additional_image_tokens=1,
                   vision_feature_select_strategy="default").save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


def owlv2_model(folder: Path) -> dict:
    import torch
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    tok = clip_tokenizer()
    torch.manual_seed(0)
    cfg = Owlv2Config(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_attention_heads=2,
                         num_hidden_layers=1, max_position_embeddings=16, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=37,
                           num_attention_heads=2, num_hidden_layers=1),
        projection_dim=32)
    Owlv2ForObjectDetection(cfg).save_pretrained(folder)
    tok.model_max_length = 16
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 32, "width": 32}),
                   tokenizer=tok).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


def grounding_dino_model(folder: Path) -> dict:
    import torch
    from transformers import (GroundingDinoConfig, GroundingDinoForObjectDetection,
                              GroundingDinoImageProcessor, GroundingDinoProcessor)

    tok = bert_tokenizer()
    torch.manual_seed(0)
    cfg = GroundingDinoConfig(
        backbone_config=dict(model_type="swin", image_size=32, patch_size=4, embed_dim=8, depths=[1, 1],
                             num_heads=[1, 1], window_size=2, out_features=["stage1", "stage2"], out_indices=[1, 2]),
        text_config=dict(model_type="bert", vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=37, max_position_embeddings=64),
        d_model=32, encoder_layers=1, decoder_layers=2,  # 1 decoder layer breaks bbox_embed weight tying
        encoder_ffn_dim=32, decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2,
        num_queries=10, num_feature_levels=2, encoder_n_points=1, decoder_n_points=1, max_text_len=32,
        use_timm_backbone=False, use_pretrained_backbone=False)
    GroundingDinoForObjectDetection(cfg).save_pretrained(folder)
    ip = GroundingDinoImageProcessor(size={"shortest_edge": 32, "longest_edge": 32})
    GroundingDinoProcessor(image_processor=ip, tokenizer=tok).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


KINDS = {"open_clip": open_clip_model, "clip": hf_clip_model, "blip": blip_vqa_model,
         "llava": llava_model, "owlv2": owlv2_model, "grounding_dino": grounding_dino_model}
VERSION = "v1"


def tiny_root() -> Path:
    import os

    return Path(os.environ.get("T2I_AUDIT_TINY_DIR") or Path.home() / ".cache" / "t2i_audit" / "tiny-scorers")


def materialize(kind: str, root: Path | None = None) -> dict:
    """Build (once) and return the card ``model`` section of tiny model ``kind``."""
    import os
    import shutil
    import tempfile

    from ..errors import AuditError, did_you_mean

    if kind not in KINDS:
        raise AuditError(f"unknown tiny scorer model {kind!r}.{did_you_mean(kind, KINDS)}")
    root = Path(root or tiny_root())
    folder = root / f"{kind}-{VERSION}"
    done = folder / "model.json"
    if done.exists():
        return json.loads(done.read_text())
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}.", dir=root))
    try:
        KINDS[kind](tmp / "m", **({"name": "tiny-open-clip"} if kind == "open_clip" else {}))
        try:
            os.replace(tmp / "m", folder)
        except OSError:  # built concurrently by another process: use theirs
            if not done.exists():
                raise
        cfg = _model_cfg(kind, folder)
        (folder / "model.json").write_text(json.dumps(cfg))
        return cfg
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _model_cfg(kind: str, folder: Path) -> dict:
    if kind == "open_clip":
        return {"backend": "open_clip", "id": "tiny-open-clip", "local": True, "revision": f"tiny-random-{VERSION}",
                "config": str(folder / "config.json"), "pretrained": str(folder / "model.safetensors")}
    cfg = {"id": str(folder), "local": True, "revision": f"tiny-random-{VERSION}"}
    if kind == "clip":
        cfg["backend"] = "transformers"
    return cfg
