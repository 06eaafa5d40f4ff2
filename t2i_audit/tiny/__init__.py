"""The offline test twins, in one room: tiny random-weight pipelines and scorer models built from configs.

Layout: this module (the first five pipeline families, shared component helpers, the registry and
``materialize``); ``families/`` (one module per further pipeline family); ``tokenizers.py`` (LLM
tokenizers of the right *kind*, built in memory); ``scorers.py`` (tiny CLIP / BLIP / VLM / detector
scorer models). Product code imports from here only to build a ``tiny-*`` card; nothing here is
imported by the real-model paths.

Each card in ``TINY_MODELS`` mirrors the *shape* of a real family (SD 1.5, SDXL, SD3, FLUX, PixArt-Σ):
the same pipeline class, the same text encoders and tokenizers, the same loading path. The
component configs follow the ``get_dummy_components`` of diffusers' own pipeline tests, sized so
that the default image is 32 px and a 2-step image takes milliseconds on a CPU.

``materialize(name)`` builds the components with fixed seeds, ``save_pretrained``s the pipeline into
``<root>/<name>-<fingerprint>/`` (atomically: built in a temporary folder, then ``os.replace``d into
place) and returns that folder; ``diffusers.DiffusionPipeline.from_pretrained(folder)`` reloads it
offline into the right class, exactly as it would a downloaded model.

Tokenizers are built offline too: CLIP from ``bpe_simple_vocab_16e6.txt.gz`` (vendored, t2i_audit/clip_bpe.py)
(first ``CLIP_MERGES`` merges: common English words are single tokens); T5 as an in-memory
Unigram model whose pieces are the ASCII tokens of that same BPE vocabulary.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path

from t2i_audit.errors import AuditError, did_you_mean

CLIP_MERGES = 2000  # 2,514-token vocabulary; "red", "blue", "left", "right", "three" are single tokens
T5_MODEL_MAX_LENGTH = 512

_CLIP = "clip"
_T5 = "t5"

TINY_MODELS: dict[str, dict] = {
    "tiny-sd": {
        "pipeline": "StableDiffusionPipeline",
        "family": "sd",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": _CLIP}],
        "defaults": {"steps": 2, "guidance": 5.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
    "tiny-sdxl": {
        "pipeline": "StableDiffusionXLPipeline",
        "family": "sdxl",
        "text_encoders": [
            {"name": "text_encoder", "tokenizer": "tokenizer", "kind": _CLIP},
            {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": _CLIP},
        ],
        "defaults": {"steps": 2, "guidance": 5.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
    "tiny-sd3": {
        "pipeline": "StableDiffusion3Pipeline",
        "family": "sd3",
        "text_encoders": [
            {"name": "text_encoder", "tokenizer": "tokenizer", "kind": _CLIP},
            {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": _CLIP},
            {"name": "text_encoder_3", "tokenizer": "tokenizer_3", "kind": _T5},
        ],
        "defaults": {"steps": 2, "guidance": 5.0, "size": 32, "dtype": "float32"},
        "call": {},
    },
    "tiny-flux": {
        "pipeline": "FluxPipeline",
        "family": "flux",
        "text_encoders": [
            {"name": "text_encoder", "tokenizer": "tokenizer", "kind": _CLIP},
            {"name": "text_encoder_2", "tokenizer": "tokenizer_2", "kind": _T5},
        ],
        # guidance-distilled like FLUX.1-dev: guidance goes in as an embedding, no CFG batch doubling
        "defaults": {"steps": 2, "guidance": 3.5, "size": 32, "dtype": "float32"},
        "call": {},
    },
    "tiny-pixart": {
        "pipeline": "PixArtSigmaPipeline",
        "family": "pixart",
        "text_encoders": [{"name": "text_encoder", "tokenizer": "tokenizer", "kind": _T5}],
        "defaults": {"steps": 2, "guidance": 5.0, "size": 32, "dtype": "float32"},
        # PixArt bins resolutions by transformer.sample_size and only knows 32/64/128/256 (256-2048 px):
        # a tiny transformer must be called without binning, or the pipeline raises "Invalid sample size".
        "call": {"use_resolution_binning": False, "clean_caption": False},
        "vae_dtype": "float32",  # as the real pixart-sigma card: its pipeline never upcasts the VAE
    },
}


def default_root() -> Path:
    """Cache root: ``$T2I_AUDIT_CACHE`` if set, else ``~/.cache/t2i-audit/tiny``."""
    env = os.environ.get("T2I_AUDIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "t2i-audit" / "tiny"


def fingerprint(name: str) -> str:
    """Short hash of this builder's source and the card: any change to either builds a new folder."""
    card = _card(name)
    h = hashlib.sha256(Path(__file__).read_bytes())
    if card["family"] in _SOURCES:  # family modules share helpers (sana.gemma2_config, tokenizers.py): hash all
        for src in sorted({*_SOURCES.values(), Path(__file__).with_name("tokenizers.py")}):
            h.update(src.read_bytes())
    h.update(json.dumps({"name": name, **card}, sort_keys=True).encode())
    return h.hexdigest()[:10]


def materialize(name: str, root: Path | None = None) -> Path:
    """Build (once) and return the folder of tiny pipeline ``name``; later calls return it at once."""
    card = _card(name)
    root = Path(root) if root is not None else default_root()
    target = root / f"{name}-{fingerprint(name)}"
    if (target / "model_index.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", suffix=".tmp", dir=root))
    try:
        t0 = time.perf_counter()
        pipe = _build_pipeline(name, card)
        pipe.save_pretrained(tmp, safe_serialization=True)
        _write_info(tmp, name, card, time.perf_counter() - t0)
        try:
            os.replace(tmp, target)
        except OSError:
            # another process finished first: its folder is complete (it was renamed in whole)
            if not (target / "model_index.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _card(name: str) -> dict:
    if name not in TINY_MODELS:
        raise AuditError(f"Unknown tiny model {name!r}.{did_you_mean(name, TINY_MODELS)}")
    return TINY_MODELS[name]


def _write_info(folder: Path, name: str, card: dict, seconds: float) -> None:
    import diffusers
    import torch
    import transformers

    info = {
        "name": name,
        "fingerprint": fingerprint(name),
        "pipeline": card["pipeline"],
        "random_weights": True,
        "build_seconds": round(seconds, 4),
        "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__,
                     "transformers": transformers.__version__},
    }
    (folder / "tiny.json").write_text(json.dumps(info, indent=1) + "\n")


# ---------------------------------------------------------------- tokenizers


def clip_vocab_merges(n_merges: int = CLIP_MERGES) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The CLIP BPE vocabulary truncated to the first ``n_merges`` merges (ids as in SD's tokenizer)."""
    from ..clip_bpe import BPE_PATH as bpe, bytes_to_unicode  # vendored: no open_clip needed

    lines = gzip.open(bpe).read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 1 + n_merges]]
    chars = list(bytes_to_unicode().values())
    tokens = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(tokens)}, merges


def clip_tokenizer(pad_token: str = "<|endoftext|>"):
    """CLIPTokenizer over the truncated BPE. ``pad_token="!"`` mirrors SDXL/SD3's second tokenizer."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocab_merges()
    # transformers 5: vocab=/merges= objects (vocab_file= silently builds an empty tokenizer), and an
    # explicit model_max_length (without it the pipelines overflow).
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77, pad_token=pad_token)


def _t5_pieces() -> list[tuple[str, float]]:
    """Unigram pieces for T5: specials, then every ASCII BPE token as word-start and continuation."""
    vocab, _ = clip_vocab_merges()
    pieces: dict[str, float] = {}
    for rank, token in enumerate(vocab):
        text = token[:-4] if token.endswith("</w>") else token
        if not text or token.startswith("<|") or not all("!" <= ch <= "~" for ch in text):
            continue
        score = -1.0 - 0.001 * rank  # merged tokens come later in the list but save pieces: prefer them
        for piece, s in (("\u2581" + text, score), (text, score - 0.5)):
            pieces.setdefault(piece, s)
        if text.isalpha() and len(text) > 1:  # sentence-initial capitals: "A", "The", "Red"
            pieces.setdefault("\u2581" + text.capitalize(), score - 0.25)
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        pieces.setdefault("\u2581" + ch, -3.0)
        pieces.setdefault(ch, -3.5)
    pieces.setdefault("\u2581", -4.0)
    return [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + list(pieces.items())


def t5_tokenizer():
    """T5Tokenizer (Unigram, built in memory): <pad>=0, </s>=1, <unk>=2, no <extra_id_*> tokens."""
    from transformers import T5Tokenizer

    return T5Tokenizer(vocab=_t5_pieces(), extra_ids=0, model_max_length=T5_MODEL_MAX_LENGTH)


# Qwen2 byte-level BPE: the pre-tokenizer regex of transformers' Qwen2Tokenizer, merges trained in-process on
# ---------------------------------------------------------------- text encoders


def _clip_config(tokenizer, hidden: int = 32, projection: int = 32):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=37,
        projection_dim=projection,
        num_attention_heads=4,
        num_hidden_layers=5,
        layer_norm_eps=1e-5,
        hidden_act="gelu",
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,  # not 2: the pooled state is taken at the first EOS
        pad_token_id=tokenizer.pad_token_id,
    )


def _t5_encoder(tokenizer, d_model: int):
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_kv=8,
        d_ff=37,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        dropout_rate=0.0,
        feed_forward_proj="gated-gelu",  # T5 v1.1 / T5-XXL, as the real pipelines use
        is_encoder_decoder=False,
        use_cache=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return T5EncoderModel(config)


def _seeded(name: str, component: str, make):
    """Run ``make()`` under a seed fixed by (model, component), leaving the caller's RNG untouched."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(zlib.crc32(f"{name}/{component}".encode()))
        return make()


def _vae(latent_channels: int = 4, blocks=(32, 64), **kw):
    from diffusers import AutoencoderKL

    n = len(blocks)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=tuple(blocks),
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=min(blocks),
        sample_size=32,
        **kw,
    )


# ---------------------------------------------------------------- families
# Latent side 16 (VAE scale factor 2) everywhere, so each pipeline's own default size is 32 px.


def _sd(name: str) -> dict:
    from diffusers import DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel

    tok = clip_tokenizer()
    return {
        "unet": _seeded(name, "unet", lambda: UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
            attention_head_dim=8)),
        "vae": _seeded(name, "vae", lambda: _vae()),
        "text_encoder": _seeded(name, "text_encoder", lambda: CLIPTextModel(_clip_config(tok))),
        "tokenizer": tok,
        "scheduler": DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                   clip_sample=False, set_alpha_to_one=False, steps_offset=1),
        "safety_checker": None,
        "feature_extractor": None,
        "image_encoder": None,
        "requires_safety_checker": False,
    }


def _sdxl(name: str) -> dict:
    from diffusers import EulerDiscreteScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    tok, tok2 = clip_tokenizer(), clip_tokenizer(pad_token="!")
    return {
        "unet": _seeded(name, "unet", lambda: UNet2DConditionModel(
            sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4),
            use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
            transformer_layers_per_block=(1, 2), cross_attention_dim=64,  # 32 + 32 concatenated
            projection_class_embeddings_input_dim=6 * 8 + 32)),  # 6 time ids x 8 + pooled text_embeds
        "vae": _seeded(name, "vae", lambda: _vae(scaling_factor=0.13025)),
        "text_encoder": _seeded(name, "text_encoder", lambda: CLIPTextModel(_clip_config(tok))),
        "tokenizer": tok,
        "text_encoder_2": _seeded(name, "text_encoder_2",
                                  lambda: CLIPTextModelWithProjection(_clip_config(tok2))),
        "tokenizer_2": tok2,
        "scheduler": EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, steps_offset=1,
                                            beta_schedule="scaled_linear", timestep_spacing="leading"),
        "image_encoder": None,
        "feature_extractor": None,
    }


def _sd3(name: str) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import CLIPTextModelWithProjection

    tok, tok2, tok3 = clip_tokenizer(), clip_tokenizer(pad_token="!"), t5_tokenizer()
    return {
        # joint_attention_dim = T5 width = 2 x CLIP width (the CLIP states are concatenated, then
        # zero-padded to the T5 width); pooled_projection_dim = 2 x CLIP projection — as in SD3.
        "transformer": _seeded(name, "transformer", lambda: SD3Transformer2DModel(
            sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=1,
            attention_head_dim=8, num_attention_heads=4, caption_projection_dim=32,
            joint_attention_dim=64, pooled_projection_dim=64, pos_embed_max_size=16)),
        "vae": _seeded(name, "vae", lambda: _vae(blocks=(8, 16), use_quant_conv=False,
                                                 use_post_quant_conv=False, shift_factor=0.0609,
                                                 scaling_factor=1.5035)),
        "text_encoder": _seeded(name, "text_encoder",
                                lambda: CLIPTextModelWithProjection(_clip_config(tok))),
        "tokenizer": tok,
        "text_encoder_2": _seeded(name, "text_encoder_2",
                                  lambda: CLIPTextModelWithProjection(_clip_config(tok2))),
        "tokenizer_2": tok2,
        "text_encoder_3": _seeded(name, "text_encoder_3", lambda: _t5_encoder(tok3, d_model=64)),
        "tokenizer_3": tok3,
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0),
        "image_encoder": None,
        "feature_extractor": None,
    }


def _flux(name: str) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextModel

    tok, tok2 = clip_tokenizer(), t5_tokenizer()
    return {
        # 4 latent channels packed 2x2 -> 16 transformer channels (FLUX: 16 -> 64)
        "transformer": _seeded(name, "transformer", lambda: FluxTransformer2DModel(
            patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
            guidance_embeds=True, axes_dims_rope=(4, 4, 8))),
        "vae": _seeded(name, "vae", lambda: _vae(blocks=(8, 16), use_quant_conv=False,
                                                 use_post_quant_conv=False, shift_factor=0.1159,
                                                 scaling_factor=0.3611)),
        "text_encoder": _seeded(name, "text_encoder", lambda: CLIPTextModel(_clip_config(tok))),
        "tokenizer": tok,
        "text_encoder_2": _seeded(name, "text_encoder_2", lambda: _t5_encoder(tok2, d_model=32)),
        "tokenizer_2": tok2,
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0),
        "image_encoder": None,
        "feature_extractor": None,
    }


def _pixart(name: str) -> dict:
    from diffusers import DDIMScheduler, PixArtTransformer2DModel

    tok = t5_tokenizer()
    return {
        "transformer": _seeded(name, "transformer", lambda: PixArtTransformer2DModel(
            sample_size=16, num_layers=2, patch_size=2, attention_head_dim=8, num_attention_heads=3,
            caption_channels=32, in_channels=4, cross_attention_dim=24, out_channels=8,
            attention_bias=True, activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
            norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6)),
        "vae": _seeded(name, "vae", lambda: _vae()),
        "text_encoder": _seeded(name, "text_encoder", lambda: _t5_encoder(tok, d_model=32)),
        "tokenizer": tok,
        "scheduler": DDIMScheduler(),
    }


_BUILDERS = {"sd": _sd, "sdxl": _sdxl, "sd3": _sd3, "flux": _flux, "pixart": _pixart}
_SOURCES: dict[str, Path] = {}  # family -> the module that builds it (part of the fingerprint)


def _register_family_modules() -> None:
    """Families of t2i_audit/tiny/families/*.py: each module has ``CARDS`` (tiny cards) and
    ``BUILDERS`` (family -> builder), so a new family is a new file, never an edit here."""
    import importlib
    import pkgutil

    from . import families as tiny_families

    for info in sorted(pkgutil.iter_modules(tiny_families.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{tiny_families.__name__}.{info.name}")
        TINY_MODELS.update(mod.CARDS)
        _BUILDERS.update(mod.BUILDERS)
        for family in mod.BUILDERS:
            _SOURCES[family] = Path(mod.__file__)


_register_family_modules()


def build_components(name: str) -> dict:
    """The components of tiny pipeline ``name`` (fresh, seeded), as keyword arguments of its class."""
    card = _card(name)
    components = _BUILDERS[card["family"]](name)
    for module in components.values():
        if hasattr(module, "eval"):
            module.eval()
    return components


def _build_pipeline(name: str, card: dict):
    import diffusers

    cls = getattr(diffusers, card["pipeline"])
    pipe = cls(**build_components(name))
    pipe.set_progress_bar_config(disable=True)
    return pipe
