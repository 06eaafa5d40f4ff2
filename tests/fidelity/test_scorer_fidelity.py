"""Scorer fidelity: a scorer built from a checkpoint tag runs what the tag prescribes, and the
numbers it stores equal the libraries' own computation on the same tiny weights.

* open_clip tags: activation (QuickGELU for ``openai`` & co.) and preprocessing, checked on the
  model open_clip builds with ``pretrained=None`` and :func:`open_clip_build_kwargs` (meta device:
  real-size ViT-L in well under a second, no weights);
* every shipped card whose open_clip tag needs QuickGELU gets it, including the colour
  classifier of the detection scorers;
* the same tiny CLIP weights give the same image-text similarities through ``load_clip``'s
  open_clip and transformers backends (transformers CLIP runs ``hidden_act="quick_gelu"``);
* yes/no answer ids are single tokens of the real tokenizer kinds (BLIP: BERT WordPiece,
  LLaVA-1.5: Llama SentencePiece).
"""

import json
import warnings

import numpy as np
import pytest

from t2i_audit.errors import AuditError
from t2i_audit.scorers.clip_models import load_clip, open_clip_build_kwargs

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


# --- open_clip tags: activation and preprocessing ----------------------------------------------

def _built(arch, tag):
    import open_clip
    import torch

    with torch.device("meta"):  # no init cost, no weights: only the structure and transforms
        model, _, preprocess = open_clip.create_model_and_transforms(
            arch, pretrained=None, device="meta", **open_clip_build_kwargs(arch, tag))
    return model, preprocess


@pytest.mark.parametrize("arch, tag, act, mean", [
    ("ViT-L-14", "openai", "QuickGELU", OPENAI_MEAN),              # the `clip` card's default
    ("ViT-B-32", "openai", "QuickGELU", OPENAI_MEAN),
    ("ViT-L-14", "datacomp_xl_s13b_b90k", "GELU", OPENAI_MEAN),    # trained with plain GELU
    ("ViT-L-14", "laion2b_s32b_b82k", "GELU", (0.5, 0.5, 0.5)),    # its own normalisation
])
def test_tag_activation_and_preprocessing(arch, tag, act, mean):
    from open_clip.pretrained import get_pretrained_cfg
    from torchvision.transforms import InterpolationMode, Normalize, Resize

    from t2i_audit.scorers.clip_models import open_clip_applied

    model, preprocess = _built(arch, tag)
    # every MLP of both towers (open_clip/transformer.py ResidualAttentionBlock.mlp.gelu)
    acts = {type(m.mlp.gelu).__name__ for m in [*model.visual.transformer.resblocks,
                                                *model.transformer.resblocks]}
    assert acts == {act}
    tag_cfg = get_pretrained_cfg(arch, tag)
    norm = next(t for t in preprocess.transforms if isinstance(t, Normalize))
    assert tuple(norm.mean) == pytest.approx(mean) == tuple(tag_cfg["mean"])
    assert tuple(norm.std) == pytest.approx(tuple(tag_cfg["std"]))
    resize = next(t for t in preprocess.transforms if isinstance(t, Resize))
    assert resize.interpolation == InterpolationMode(tag_cfg["interpolation"])
    applied = open_clip_applied(model)
    assert applied["activation"] == act and applied["mean"] == pytest.approx(list(mean))


def test_every_card_with_a_tag_gets_the_tag_activation():
    """`clip`, and the colour classifier (options.attribute_model) of detect-owlv2/-gdino."""
    from open_clip.pretrained import get_pretrained_cfg

    from t2i_audit.scorers.registry import load_cards

    seen = {}
    for name, card in load_cards().items():
        for where, m in (("model", card.get("model") or {}),
                         ("attribute_model", (card.get("options") or {}).get("attribute_model") or {})):
            tag_cfg = get_pretrained_cfg(str(m.get("id")), str(m.get("pretrained")))
            if m.get("backend", "open_clip") != "open_clip" or not tag_cfg:
                continue
            kw = open_clip_build_kwargs(m["id"], m["pretrained"])
            assert kw["force_quick_gelu"] == bool(tag_cfg.get("quick_gelu")), (name, where)
            assert kw["image_mean"] == tuple(tag_cfg["mean"]), (name, where)
            seen[(name, where)] = kw["force_quick_gelu"]
    assert seen[("clip", "model")] is True
    assert seen[("detect-owlv2", "attribute_model")] is True
    assert seen[("detect-gdino", "attribute_model")] is True


def test_quickgelu_architecture_with_a_gelu_tag_raises(monkeypatch):
    from open_clip import pretrained

    monkeypatch.setitem(pretrained._PRETRAINED, "ViT-B-32-quickgelu",
                        {**pretrained._PRETRAINED["ViT-B-32-quickgelu"],
                         "gelu_tag": pretrained._pcfg(hf_hub="x/y/")})
    with pytest.raises(AuditError, match="QuickGELU but its tag 'gelu_tag' was trained with GELU"):
        open_clip_build_kwargs("ViT-B-32-quickgelu", "gelu_tag")
    assert open_clip_build_kwargs("ViT-B-32-quickgelu", "openai")["force_quick_gelu"] is True
    assert open_clip_build_kwargs("ViT-B-32", "/some/checkpoint.pt") == {}  # a file: no tag to read


# --- the same tiny weights through both backends -------------------------------------------------

ARCH, TAG = "fidelity-tiny-clip", "tiny_openai"
TINY_CFG = {"embed_dim": 24,
            "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
            "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}


def _to_transformers(sd: dict, folder):
    """open_clip CLIP state dict -> transformers CLIPModel folder (fused in_proj split into q/k/v,
    ln/mlp renamed, projections transposed: open_clip computes ``x @ proj``, a Linear ``x @ W.T``)."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    from t2i_audit.tiny import clip_vocab_merges

    vocab, merges = clip_vocab_merges(49408 - 512 - 2)  # the full BPE: ids equal open_clip's tokenizer
    tok = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77, pad_token="<|endoftext|>")
    width, inter, heads = 32, 128, 2
    cfg = CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=width, intermediate_size=inter, num_attention_heads=heads,
                         num_hidden_layers=2, max_position_embeddings=77, hidden_act="quick_gelu",
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=width, intermediate_size=inter,
                           num_attention_heads=heads, num_hidden_layers=2, hidden_act="quick_gelu"),
        projection_dim=24)
    new = {"logit_scale": sd["logit_scale"],
           "text_model.embeddings.token_embedding.weight": sd["token_embedding.weight"],
           "text_model.embeddings.position_embedding.weight": sd["positional_embedding"],
           "text_model.final_layer_norm.weight": sd["ln_final.weight"],
           "text_model.final_layer_norm.bias": sd["ln_final.bias"],
           "text_projection.weight": sd["text_projection"].T,
           "vision_model.embeddings.class_embedding": sd["visual.class_embedding"],
           "vision_model.embeddings.patch_embedding.weight": sd["visual.conv1.weight"],
           "vision_model.embeddings.position_embedding.weight": sd["visual.positional_embedding"],
           "vision_model.pre_layrnorm.weight": sd["visual.ln_pre.weight"],
           "vision_model.pre_layrnorm.bias": sd["visual.ln_pre.bias"],
           "vision_model.post_layernorm.weight": sd["visual.ln_post.weight"],
           "vision_model.post_layernorm.bias": sd["visual.ln_post.bias"],
           "visual_projection.weight": sd["visual.proj"].T}
    for src, dst in (("transformer", "text_model"), ("visual.transformer", "vision_model")):
        for i in range(2):
            s, d = f"{src}.resblocks.{i}.", f"{dst}.encoder.layers.{i}."
            for kind in ("weight", "bias"):
                q, k, v = sd[s + f"attn.in_proj_{kind}"].chunk(3)
                new |= {d + f"self_attn.q_proj.{kind}": q, d + f"self_attn.k_proj.{kind}": k,
                        d + f"self_attn.v_proj.{kind}": v,
                        d + f"self_attn.out_proj.{kind}": sd[s + f"attn.out_proj.{kind}"],
                        d + f"layer_norm1.{kind}": sd[s + f"ln_1.{kind}"],
                        d + f"layer_norm2.{kind}": sd[s + f"ln_2.{kind}"],
                        d + f"mlp.fc1.{kind}": sd[s + f"mlp.c_fc.{kind}"],
                        d + f"mlp.fc2.{kind}": sd[s + f"mlp.c_proj.{kind}"]}
    model = CLIPModel(cfg)
    missing, unexpected = model.load_state_dict({k: v.contiguous() for k, v in new.items()}, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    model.save_pretrained(folder)
    ip = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                            resample=3, image_mean=list(OPENAI_MEAN), image_std=list(OPENAI_STD))  # 3: bicubic
    CLIPProcessor(image_processor=ip, tokenizer=tok).save_pretrained(folder)


@pytest.fixture(scope="module")
def tagged_tiny_clip(tmp_path_factory):
    """A tiny open_clip architecture whose weights are published under a QuickGELU tag (as
    ``openai`` is for ViT-L-14), and the same weights as a transformers CLIPModel folder."""
    import open_clip
    import torch
    from open_clip import pretrained
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("fidelity_clip")
    (d / "cfg").mkdir()
    (d / "cfg" / f"{ARCH}.json").write_text(json.dumps(TINY_CFG))
    open_clip.add_model_config(d / "cfg")
    torch.manual_seed(0)
    model = open_clip.create_model(ARCH, pretrained=None, force_quick_gelu=True)
    with torch.no_grad():  # random biases/LN too, so a swapped q/k/v or LN would show
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(d / "model.safetensors"))
    _to_transformers(sd, d / "hf")
    tag_cfg = pretrained._pcfg(quick_gelu=True)
    tag_cfg["file"] = str(d / "model.safetensors")  # download_pretrained() returns cfg["file"] as is
    pretrained._PRETRAINED[ARCH] = {TAG: tag_cfg}
    yield {"open_clip": {"backend": "open_clip", "id": ARCH, "pretrained": TAG,
                         "config": str(d / "cfg" / f"{ARCH}.json")},
           "transformers": {"backend": "transformers", "id": str(d / "hf"), "local": True}}
    pretrained._PRETRAINED.pop(ARCH, None)


IMAGES_SEED = 1
TEXTS = ["a photo of a red cube", "a blue sphere to the left of a green cone",
         'Does this figure show "two cats"?', "a"]


def _images():
    from PIL import Image

    rng = np.random.default_rng(IMAGES_SEED)  # 48x40: both backends resize (bicubic) and crop
    return [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(3)]


def test_open_clip_and_transformers_give_the_same_similarities(tagged_tiny_clip):
    import open_clip
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        oc = load_clip(tagged_tiny_clip["open_clip"])
    hf = load_clip(tagged_tiny_clip["transformers"])

    t_oc, t_hf = oc.encode_texts(TEXTS), hf.encode_texts(TEXTS)
    assert (t_oc - t_hf).abs().max().item() < 1e-5  # text tower: exact conversion (measured 1.4e-7)
    # image tower on the same pixels (isolates the weights from the two preprocessing stacks)
    px = torch.stack([oc.preprocess(im) for im in _images()])
    with torch.no_grad():
        f_oc = oc.model.encode_image(px)
        f_hf = hf.model.get_image_features(pixel_values=px)
        f_hf = getattr(f_hf, "pooler_output", f_hf)
    assert (f_oc - f_hf).abs().max().item() < 1e-5
    # the two preprocessing stacks (torchvision on PIL / CLIPImageProcessor), both bicubic with the
    # tag's mean/std, differ by rounding only: at most one 8-bit grey level after the resize
    px_hf = hf.preprocess(images=_images(), return_tensors="pt")["pixel_values"]
    grey = ((px - px_hf).abs() * torch.tensor(OPENAI_STD).view(1, 3, 1, 1) * 255).max().item()
    assert grey <= 1.0 + 1e-3, grey
    # end to end, each backend with its own preprocessing of the same PIL images (measured 6.2e-5)
    sims_oc = oc.encode_images(_images()) @ t_oc.T
    sims_hf = hf.encode_images(_images()) @ t_hf.T
    assert (sims_oc - sims_hf).abs().max().item() < 1e-4, (sims_oc - sims_hf).abs().max().item()
    assert oc.logit_scale == pytest.approx(hf.logit_scale, rel=1e-6)
    assert not [w for w in caught if "QuickGELU mismatch" in str(w.message)]
    assert oc.applied["activation"] == "QuickGELU" and oc.applied["from_tag"] is True
    assert hf.applied["activation"] == {"text": "quick_gelu", "vision": "quick_gelu"}
    assert oc.applied["mean"] == pytest.approx(hf.applied["image_mean"])
    assert hf.applied["resample"] == 3 and hf.applied["crop_size"] == {"height": 32, "width": 32}
    json.dumps([oc.applied, hf.applied])  # goes into the manifest as is

    # the same weights under plain GELU (what open_clip builds for the tag when not told) differ
    with pytest.warns(UserWarning, match="QuickGELU mismatch"):  # open_clip only warns
        gelu = open_clip.create_model(ARCH, pretrained=tagged_tiny_clip["open_clip"]["pretrained"]).eval()
    assert {type(m.mlp.gelu).__name__ for m in gelu.transformer.resblocks} == {"GELU"}
    with torch.no_grad():
        t_gelu = gelu.encode_text(oc.tokenizer(TEXTS))
    t_gelu = t_gelu / t_gelu.norm(dim=-1, keepdim=True)
    assert (t_gelu - t_hf).abs().max().item() > 1e-3


def test_detect_colour_classifier_gets_the_tag_activation(tagged_tiny_clip):
    from t2i_audit.scorers.registry import create_scorer

    s = create_scorer("tiny-detect", overrides={"options": {
        "attribute_model": tagged_tiny_clip["open_clip"], "values": {"color": ["red", "blue"]}}})
    clip = s.load()._attribute_clip()
    assert clip.applied["activation"] == "QuickGELU"
    assert s.model_details()["_clip"]["activation"] == "QuickGELU"
    assert s.metadata()["applied"]["_clip"]["mean"] == pytest.approx(list(OPENAI_MEAN))


# --- yes/no answer ids on the real tokenizer kinds ---------------------------------------------

def test_yes_no_ids_bert_wordpiece():
    """BLIP-VQA: bert-base-uncased WordPiece; "Yes" lower-cases to the "yes" id (counted once)."""
    from t2i_audit.tiny.scorers import bert_tokenizer
    from t2i_audit.scorers.vqa import YesNoScorer

    tok = bert_tokenizer(extra=["##s"])
    vocab = tok.get_vocab()
    assert YesNoScorer._token_ids(tok, ["yes", "Yes"]) == [vocab["yes"]]
    assert YesNoScorer._token_ids(tok, ["no"]) == [vocab["no"]]
    with pytest.raises(AuditError, match=r"BertTokenizer .*'nos' is 2 tokens \['no', '##s'\], not one token"):
        YesNoScorer._token_ids(tok, ["yes", "nos"])
    with pytest.raises(AuditError, match=r"'maybe' is unknown to the vocabulary"):
        YesNoScorer._token_ids(tok, ["maybe"])


def _llama_tokenizer():
    """A Llama (SentencePiece-BPE, Metaspace "▁") tokenizer in memory, with both the
    word-initial "▁Yes" and the mid-word "Yes" pieces as in LLaVA-1.5's vocabulary."""
    from transformers import LlamaTokenizer

    chars = sorted(set("ASISTANTUSERYesNoyn:?. abcdefghijklmopqrstuvwxz").difference(" ")) + ["▁"]
    merges = [("▁", "Y"), ("e", "s"), ("▁Y", "es"), ("Y", "es"), ("▁", "N"), ("▁N", "o"), ("N", "o"),
              ("▁", "y"), ("▁y", "es"), ("▁", "n"), ("▁n", "o")]
    pieces = ["<unk>", "<s>", "</s>"] + chars + ["".join(m) for m in merges]
    return LlamaTokenizer(vocab={p: i for i, p in enumerate(dict.fromkeys(pieces))}, merges=merges)


def test_yes_no_ids_llama_sentencepiece():
    """LLaVA-1.5: the answer follows "ASSISTANT:", so the model emits "▁Yes" (word-initial)."""
    from t2i_audit.scorers.vqa import YesNoScorer

    tok = _llama_tokenizer()
    vocab = tok.get_vocab()
    ids = YesNoScorer._token_ids(tok, ["Yes", "yes"])
    assert ids == [vocab["▁Yes"], vocab["▁yes"]] and vocab["Yes"] not in ids
    # the very id the tokenizer gives the answer in LLaVA-1.5's conversation format
    assert tok("USER: Is it? ASSISTANT: Yes", add_special_tokens=False)["input_ids"][-1] == vocab["▁Yes"]
    assert YesNoScorer._token_ids(tok, ["No"]) == [vocab["▁No"]]
    with pytest.raises(AuditError, match=r"LlamaTokenizer .*'Yeah' is 4 tokens \['▁Y', 'e', 'a', 'h'\], not one token"):
        YesNoScorer._token_ids(tok, ["Yeah"])
