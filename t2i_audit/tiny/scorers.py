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

    from . import clip_vocab_merges

    vocab, merges = clip_vocab_merges(merges_n)
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77,
                         pad_token="<|endoftext|>")


def bert_tokenizer(extra=()):
    from transformers import BertTokenizer

    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(dict.fromkeys(WORDS + list(extra)))
    return BertTokenizer(vocab={t: i for i, t in enumerate(toks)})


def open_clip_model(folder: Path, name: str = "tiny-oc") -> dict:
    """A 32-px open_clip ViT from a custom config + a safetensors checkpoint."""
    import torch
    from safetensors.torch import save_file

    from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing
    from ..scorers.clip_models import register_open_clip_config

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"embed_dim": 32,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
           "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (folder / "config.json").write_text(json.dumps(cfg))
    register_open_clip_config(name, cfg)
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return {"backend": "open_clip", "id": name, "local": True, "revision": "tiny",
            "config": str(folder / "config.json"), "pretrained": str(folder / "model.safetensors")}


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

    tok = bert_tokenizer()  # + BLIP's init_tokenizer tokens: bos [DEC] (decoder start), [ENC] (question start)
    tok.add_special_tokens({"bos_token": "[DEC]"})
    tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]}, replace_extra_special_tokens=False)
    torch.manual_seed(0)
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_attention_heads=2,
                num_hidden_layers=1, encoder_hidden_size=32, max_position_embeddings=64,
                bos_token_id=tok.bos_token_id, sep_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)
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


QWEN_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>"]


def qwen_tokenizer():
    """A byte-level BPE tokenizer of Qwen's kind (Qwen2Tokenizer: Qwen's pre-tokenizer regex +
    ByteLevel), trained in memory on WORDS so every word is one token ("Yes", "ĠYes" …), with
    the chat and vision special tokens the Qwen-VL processors and chat templates use."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    words = list(dict.fromkeys(WORDS + ["Yes", "No", "Is", "Does", "Are", "system", "user", "assistant",
                                        "You", "helpful", "Answer", "word"]))
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    t.train_from_iterator([" ".join(words)] * 3 + [w for w in words for _ in range(3)], trainer)
    bpe = json.loads(t.to_str())["model"]
    tok = Qwen2Tokenizer(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]])
    tok.add_special_tokens({"additional_special_tokens": QWEN_SPECIALS})
    tok.eos_token = "<|im_end|>"
    return tok


def _qwen_vl(folder: Path, config_cls, model_cls, processor_cls, video_cls, template: str,
             text: dict, vision: dict) -> dict:
    import torch
    from transformers import Qwen2VLImageProcessor

    tok = qwen_tokenizer()
    ids = tok.convert_tokens_to_ids
    torch.manual_seed(0)
    cfg = config_cls(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=tok.pad_token_id, **text),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=37, num_heads=2, patch_size=8,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, **vision),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    model_cls(cfg).save_pretrained(folder)
    # 8-px patches merged 2x2: a 64x64 image is 16 visual tokens; budget 16²…64² px
    geom = dict(patch_size=8, merge_size=2, temporal_patch_size=2)
    ip = Qwen2VLImageProcessor(min_pixels=16 * 16, max_pixels=64 * 64, **geom)
    processor_cls(image_processor=ip, tokenizer=tok, video_processor=video_cls(**geom),
                  chat_template=template).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


def qwen3_vl_model(folder: Path) -> dict:
    """Qwen3-VL (deepstack, interleaved M-RoPE) with the Qwen3-VL-8B-Instruct chat template."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from ..scorers.chat_templates import QWEN3_VL

    return _qwen_vl(folder, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor,
                    Qwen3VLVideoProcessor, QWEN3_VL,
                    text=dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                            "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
                    vision=dict(num_position_embeddings=64, deepstack_visual_indexes=[0]))


def qwen2_5_vl_model(folder: Path) -> dict:
    """Qwen2.5-VL (window attention in the vision tower) with the Qwen2.5-VL-Instruct template."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    from ..scorers.chat_templates import QWEN2_VL

    return _qwen_vl(folder, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                    Qwen2VLVideoProcessor, QWEN2_VL,
                    text=dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                               "mrope_section": [2, 3, 3]}),
                    vision=dict(window_size=32, fullatt_block_indexes=[1]))


def _qwen_kind_with(specials: list[str], named: dict[str, str]):
    """:func:`qwen_tokenizer` plus a checkpoint's own special tokens, the named ones (``image_token`` …) set
    the way the -hf conversion scripts do: ``AutoTokenizer.from_pretrained(..., extra_special_tokens=named)``
    (convert_internvl_weights_to_hf.py write_tokenizer), which the processors read (``tokenizer.image_token``)."""
    import tempfile

    from transformers import Qwen2Tokenizer

    tok = qwen_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        return Qwen2Tokenizer.from_pretrained(d, extra_special_tokens=named)


# InternVL3's added tokens (convert_internvl_weights_to_hf.py write_tokenizer, Qwen2 LM branch)
INTERNVL_SPECIALS = ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>",
                     "<video>"]


def internvl_model(folder: Path) -> dict:
    """InternVL 3 (-hf, Qwen2 LM): a 32-px InternViT with 8-px patches, pixel-shuffled (scale 0.5) to 4 image
    tokens; tiny sizes after transformers' tests/models/internvl/test_modeling_internvl.py; the GotOcr2 image
    processor of the -hf conversion (448 px there, tiles off), the InternVL3 -hf chat template."""
    import torch
    from transformers import (GotOcr2ImageProcessor, InternVLConfig, InternVLForConditionalGeneration,
                              InternVLProcessor)
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    from ..scorers.chat_templates import INTERNVL3

    tok = _qwen_kind_with(INTERNVL_SPECIALS, {"start_image_token": "<img>", "end_image_token": "</img>",
                                              "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    ids = tok.convert_tokens_to_ids
    torch.manual_seed(0)
    cfg = InternVLConfig(
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=37,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, eos_token_id=ids("<|im_end|>"), pad_token_id=tok.pad_token_id),
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                           image_size=[32, 32], patch_size=[8, 8], hidden_act="quick_gelu",
                           use_absolute_position_embeddings=True),
        image_token_id=ids("<IMG_CONTEXT>"), image_seq_length=4, vision_feature_layer=-1)
    InternVLForConditionalGeneration(cfg).save_pretrained(folder)
    norm = dict(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])
    ip = GotOcr2ImageProcessor(size={"height": 32, "width": 32}, **norm)
    InternVLProcessor(image_processor=ip, tokenizer=tok, video_processor=InternVLVideoProcessor(
        size={"height": 32, "width": 32}, **norm), image_seq_length=4, chat_template=INTERNVL3).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # ids 0-4, as in Gemma's vocabulary
GEMMA3_SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]


def gemma3_tokenizer():
    """Gemma's kind (GemmaTokenizer: SentencePiece-style BPE, spaces as "▁", byte fallback, <bos> prepended) with
    merges trained here on WORDS (never across a space or newline, so "\\n" stays its own token and the answer
    after "<start_of_turn>model\\n" is "Yes" or "▁Yes"), plus Gemma 3's chat and image tokens named as
    tests/models/gemma3/test_processing_gemma3.py names them (image_token, boi_token, eoi_token)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer

    words = list(dict.fromkeys(WORDS + ["Yes", "No", "Is", "Does", "Are", "user", "model", "You", "helpful",
                                        "Answer", "word"]))
    bpe = Tokenizer(BPE(byte_fallback=True, unk_token="<unk>"))
    bpe.normalizer = normalizers.Replace(" ", "\u2581")
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    specials = GEMMA_SPECIALS + [f"<0x{i:02X}>" for i in range(256)] + GEMMA3_SPECIALS
    bpe.train_from_iterator([" ".join(words)] * 3 + [w for w in words for _ in range(3)] + ["\n"] * 3,
                            trainers.BpeTrainer(vocab_size=1000, min_frequency=1, special_tokens=specials,
                                                show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = GemmaTokenizer(vocab=model["vocab"], merges=merges, add_bos_token=True, extra_special_tokens={
        "image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"})
    tok.add_special_tokens({"additional_special_tokens": GEMMA3_SPECIALS}, replace_extra_special_tokens=False)
    return tok


def gemma3_model(folder: Path) -> dict:
    """Gemma 3 (SigLIP + Gemma 3 text): a 32-px SigLIP with 8-px patches pooled to 4 soft tokens an image; tiny
    sizes after transformers' tests/models/gemma3/test_modeling_gemma3.py (Gemma3Vision2TextModelTester); the
    Gemma3 image processor (fixed square resize, pan-and-scan off as in its default) and Gemma 3's chat template."""
    import torch
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor,
                              Gemma3Processor)

    from ..scorers.chat_templates import GEMMA3

    tok = gemma3_tokenizer()
    ids = tok.convert_tokens_to_ids
    torch.manual_seed(0)
    cfg = Gemma3Config(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                         sliding_window=512, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=[tok.eos_token_id, ids("<end_of_turn>")]),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37),
        image_token_index=ids("<image_soft_token>"), boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"), mm_tokens_per_image=4)
    Gemma3ForConditionalGeneration(cfg).save_pretrained(folder)
    ip = Gemma3ImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    Gemma3Processor(image_processor=ip, tokenizer=tok, image_seq_length=4, chat_template=GEMMA3).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


def llava_onevision_model(folder: Path) -> dict:
    """LLaVA-OneVision (SigLIP + Qwen2, anyres): a 16-px SigLIP tile with 8-px patches (4 tokens a tile), grid
    pinpoints up to 32 px; tiny sizes after transformers' tests/models/llava_onevision/
    test_modeling_llava_onevision.py; Qwen2's tokenizer + <image>/<video> and the -hf chat template
    (convert_llava_onevision_weights_to_hf.py)."""
    import torch
    from transformers import (LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration,
                              LlavaOnevisionImageProcessor, LlavaOnevisionProcessor)
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    from ..scorers.chat_templates import LLAVA_ONEVISION

    tok = _qwen_kind_with(["<image>", "<video>"], {"image_token": "<image>", "video_token": "<video>"})
    ids = tok.convert_tokens_to_ids
    pinpoints = [[16, 16], [16, 32], [32, 16], [32, 32]]
    torch.manual_seed(0)
    cfg = LlavaOnevisionConfig(
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=37,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=580, eos_token_id=ids("<|im_end|>"), pad_token_id=tok.pad_token_id),
        vision_config=dict(model_type="siglip_vision_model", image_size=16, patch_size=8, hidden_size=32,
                           num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vision_use_head=False),
        image_token_index=ids("<image>"), video_token_index=ids("<video>"), vision_feature_select_strategy="full",
        vision_feature_layer=-1, image_grid_pinpoints=pinpoints)
    LlavaOnevisionForConditionalGeneration(cfg).save_pretrained(folder)
    geom = dict(size={"height": 16, "width": 16}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    LlavaOnevisionProcessor(image_processor=LlavaOnevisionImageProcessor(image_grid_pinpoints=pinpoints, **geom),
                            tokenizer=tok, video_processor=LlavaOnevisionVideoProcessor(**geom), num_image_tokens=4,
                            vision_feature_select_strategy="full",
                            chat_template=LLAVA_ONEVISION).save_pretrained(folder)
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


def mask2former_model(folder: Path) -> dict:
    """Mask2Former (tiny Swin backbone) with GenEval's 80 COCO instance classes, 10 queries."""
    import torch
    from transformers import (Mask2FormerConfig, Mask2FormerForUniversalSegmentation,
                              Mask2FormerImageProcessor)

    from ..scorers.coco import COCO_CLASSES

    torch.manual_seed(0)
    stages = ["stage1", "stage2", "stage3", "stage4"]
    cfg = Mask2FormerConfig(
        backbone_config=dict(model_type="swin", image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1],
                             num_heads=[1, 1, 1, 1], window_size=2, out_features=stages),
        feature_size=32, mask_feature_size=32, hidden_dim=32,  # the pixel decoder's GroupNorm has 32 groups
        encoder_feedforward_dim=16, dim_feedforward=16, encoder_layers=1, decoder_layers=2,
        num_attention_heads=2, num_queries=10,
        id2label=dict(enumerate(COCO_CLASSES)), label2id={n: i for i, n in enumerate(COCO_CLASSES)})
    Mask2FormerForUniversalSegmentation(cfg).save_pretrained(folder)
    Mask2FormerImageProcessor(size={"shortest_edge": 64, "longest_edge": 64}).save_pretrained(folder)
    return {"id": str(folder), "local": True, "revision": "tiny"}


KINDS = {"open_clip": open_clip_model, "clip": hf_clip_model, "blip": blip_vqa_model,
         "llava": llava_model, "owlv2": owlv2_model, "grounding_dino": grounding_dino_model,
         "qwen3_vl": qwen3_vl_model, "qwen2_5_vl": qwen2_5_vl_model}
KINDS["mask2former"] = mask2former_model  # GenEval's detector (scorers/geneval.py)
KINDS.update(internvl=internvl_model, gemma3=gemma3_model, llava_onevision=llava_onevision_model)  # VLM judges
VERSION = "v1"
BUILDS = {"blip": 2}  # bumped when a twin changes within VERSION: older folders are rebuilt (2: BLIP's [DEC]/[ENC])


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
        cfg = json.loads(done.read_text())
        if cfg.pop("build", 1) == BUILDS.get(kind, 1):
            return cfg
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}.", dir=root))
    try:
        from ..quiet import library_logs, no_library_bars

        with no_library_bars(), library_logs():  # a first run builds these: no "Writing model shards" bars
            KINDS[kind](tmp / "m", **({"name": "tiny-open-clip"} if kind == "open_clip" else {}))
        if done.exists():  # an older build: set aside (removed with tmp)
            try:
                os.replace(folder, tmp / "stale")
            except OSError:  # already swapped by another process
                pass
        try:
            os.replace(tmp / "m", folder)
        except OSError:  # built concurrently by another process: use theirs
            if not done.exists():
                raise
        cfg = _model_cfg(kind, folder)
        (folder / "model.json").write_text(json.dumps({**cfg, "build": BUILDS.get(kind, 1)}))
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
