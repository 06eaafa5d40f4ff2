"""The fidelity harness's per-family data: where each text encoder's states sit in what the denoiser
is actually given, read off the installed diffusers 0.42 pipelines:

* ``states``: encoder → (row slice, column slice) of the denoiser's ``encoder_hidden_states``
  (the conditional half under CFG). SD: the CLIP output; SDXL: both CLIP penultimate states
  concatenated on features (pipeline_stable_diffusion_xl.py ``torch.concat(prompt_embeds_list, -1)``);
  SD3: CLIP pair on rows 0–76 (zero-padded to the T5 width), then T5 on rows 77–332
  (pipeline_stable_diffusion_3.py ``encode_prompt``); FLUX / PixArt-Σ: the T5 output.
* ``pooled``: encoder → (denoiser kwarg, column slice) of the pooled vector the denoiser gets
  (SDXL ``added_cond_kwargs["text_embeds"]``; SD3 / FLUX ``pooled_projections``).

A new family plugs in with one entry here (and its tiny card in t2i_audit/tiny.py).
"""

from __future__ import annotations

ALL = slice(None)
TINY_CLIP = 32  # hidden size and projection of the tiny CLIP encoders (t2i_audit/tiny.py)

FAMILIES = {
    "tiny-sd": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    "tiny-sdxl": {
        "states": {"text_encoder": (ALL, slice(0, 32)), "text_encoder_2": (ALL, slice(32, 64))},
        "pooled": {"text_encoder_2": ("added_cond_kwargs.text_embeds", ALL)},
    },
    "tiny-sd3": {
        "states": {"text_encoder": (slice(0, 77), slice(0, 32)), "text_encoder_2": (slice(0, 77), slice(32, 64)),
                   "text_encoder_3": (slice(77, None), ALL)},
        "pooled": {"text_encoder": ("pooled_projections", slice(0, 32)),
                   "text_encoder_2": ("pooled_projections", slice(32, 64))},
    },
    "tiny-flux": {"states": {"text_encoder_2": (ALL, ALL)},
                  "pooled": {"text_encoder": ("pooled_projections", ALL)}},
    "tiny-pixart": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    # pipeline_qwenimage.py _get_qwen_prompt_embeds: rows 34.. of hidden_states[-1] (the template prefix
    # dropped), real tokens only, zero-padded: see as_denoiser_sees
    "tiny-qwen-image": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "drop_prefix": 34},
    # pipeline_sana.py encode_prompt: select_index = [0] + range(-max_sequence_length + 1, 0) of the Gemma 2
    # output (padding kept; the mask goes to the transformer): see as_denoiser_sees
    "tiny-sana": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "select_rows": (1, 300 - 1),
                  # SanaPipeline.check_inputs: height and width divisible by 32 (the real DC-AE's factor)
                  "run": {"size": 64}},
}

PROMPTS = ["a red cube to the left of a blue sphere", "Three GREEN dogs and a purple cup on a table"]


def as_denoiser_sees(family: str, call, states):
    """Our encoder states laid out as the denoiser receives them: unchanged, or (``drop_prefix``) without
    the template's first rows and with zeros where the tokenizer padded (Qwen-Image re-pads with zeros)."""
    spec = FAMILIES[family]
    if spec.get("select_rows"):  # Sana: the first rows and the last ones, padding included
        first, last = spec["select_rows"]
        return states[:, list(range(first)) + list(range(states.shape[1] - last, states.shape[1]))]
    k = spec.get("drop_prefix", 0)
    if not k:
        return states
    return states[:, k:] * call.real[:, k:].to(states.device, states.dtype)[..., None]


def denoiser_inputs(pipe, texts, call: dict | None = None) -> dict:
    """The conditioning the denoiser receives on its first call of a real ``pipe(...)``: the
    conditional half of ``encoder_hidden_states`` and of every pooled input (no encode_prompt of ours)."""
    import torch

    denoiser = getattr(pipe, "unet", None) or pipe.transformer
    got = {}

    def pre(_m, args, kwargs):
        if not got:
            got.update(kwargs)
            if args:
                got["_args"] = args

    h = denoiser.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        with torch.inference_mode():
            pipe(prompt=list(texts), num_inference_steps=1, height=32, width=32, output_type="latent",
                 generator=[torch.Generator("cpu").manual_seed(0) for _ in texts], **(call or {}))
    finally:
        h.remove()
    n = len(texts)
    half = lambda t: t[-n:]  # noqa: E731  CFG batches [uncond, cond]: the conditional half is last
    out = {"encoder_hidden_states": half(got["encoder_hidden_states"])}
    if "pooled_projections" in got:
        out["pooled_projections"] = half(got["pooled_projections"])
    if (got.get("added_cond_kwargs") or {}).get("text_embeds") is not None:  # SDXL (PixArt passes others)
        out["added_cond_kwargs.text_embeds"] = half(got["added_cond_kwargs"]["text_embeds"])
    return out
