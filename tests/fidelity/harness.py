"""The fidelity harness's per-family data: where each text encoder's states sit in what the denoiser
is actually given, read off the installed diffusers 0.42 pipelines:

* ``states``: encoder → (row slice, column slice) of the denoiser's ``encoder_hidden_states``
  (the conditional half under CFG). SD: the CLIP output; SDXL: both CLIP penultimate states
  concatenated on features (pipeline_stable_diffusion_xl.py ``torch.concat(prompt_embeds_list, -1)``);
  SD3: CLIP pair on rows 0–76 (zero-padded to the T5 width), then T5 on rows 77–332
  (pipeline_stable_diffusion_3.py ``encode_prompt``); FLUX / PixArt-Σ: the T5 output.
* ``pooled``: encoder → (denoiser kwarg, column slice) of the pooled vector the denoiser gets
  (SDXL ``added_cond_kwargs["text_embeds"]``; SD3 / FLUX ``pooled_projections``).
* ``streams``: encoder → (denoiser kwarg, row slice, column slice) for per-token states the denoiser gets in
  another kwarg than ``encoder_hidden_states`` (HunyuanImage's ByT5: ``encoder_hidden_states_2``).
* ``drop_prefix`` / ``drop_rows`` / ``select_rows``: per encoder, as the pipeline cuts only that encoder's rows.

A new family plugs in with one entry here (and its tiny card in t2i_audit/tiny/).
"""

from __future__ import annotations

ALL = slice(None)
TINY_CLIP = 32  # hidden size and projection of the tiny CLIP encoders (t2i_audit/tiny/)

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
    "tiny-qwen-image": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "drop_prefix": {"text_encoder": 34}},
    # pipeline_sana.py encode_prompt: select_index = [0] + range(-max_sequence_length + 1, 0) of the Gemma 2
    # output (padding kept; the mask goes to the transformer): see as_denoiser_sees
    "tiny-sana": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "select_rows": {"text_encoder": (1, 300 - 1)},
                  # SanaPipeline.check_inputs: height and width divisible by 32 (the real DC-AE's factor)
                  "run": {"size": 64}},
    # pipeline_sana_sprint.py encode_prompt: Sana's select_index (copied from SanaPipeline); one transformer call a
    # step, no CFG halves; check_inputs: height and width divisible by 32
    "tiny-sana-sprint": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {},
                         "select_rows": {"text_encoder": (1, 300 - 1)},
                         "run": {"size": 64},
                         # __call__ loops over timesteps[:-1]: SCMScheduler's schedule ends with the terminal 0
                         "loop_timesteps": -1},
    # pipeline_hunyuanimage.py _get_qwen_prompt_embeds: hidden_states[-3][:, 34:] of all tokenizer_max_length (1000)
    # rows, padding rows kept (the mask goes beside them); the guider calls the transformer with the cond batch first.
    # _get_byt5_prompt_embeds: ByT5's 128 rows (zeros for a prompt without quoted text) -> encoder_hidden_states_2
    "tiny-hunyuan-image": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "drop_rows": {"text_encoder": 34},
                           "streams": {"text_encoder_2": ("encoder_hidden_states_2", ALL, ALL)}},
    # pipeline_cogview4.py _get_glm_embeds: hidden_states[-2] of every row, left padding (the tokenizer's and the
    # pipeline's own, to a multiple of 16) included, no mask
    "tiny-cogview4": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    # pipeline_lumina2.py _get_gemma_prompt_embeds: hidden_states[-2] of all 256 rows (system prompt included, right
    # padding), the mask passed beside it
    "tiny-lumina2": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    # pipeline_z_image.py _encode_prompt: hidden_states[-2] of the REAL tokens only, one tensor per prompt (a list,
    # zero-padded here to compare); __call__ batches CFG as [cond, uncond] in one transformer call
    "tiny-z-image": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}, "real_only": True, "cond_first": True},
    # pipeline_flux2.py / pipeline_flux2_klein.py: hidden_states[10,20,30] / [9,18,27] side by side per token
    # (the layer `cond`), all max_sequence_length (512) rows, no mask
    "tiny-flux2": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    "tiny-flux2-klein": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    # pipeline_chroma.py _get_t5_prompt_embeds: T5 (masked) output of all 512 rows
    "tiny-chroma": {"states": {"text_encoder": (ALL, ALL)}, "pooled": {}},
    # pipeline_hidream_image.py: the transformer's own text stream is [T5 (128 rows), Llama stack[llama_layers[-1]]
    # (128 rows)] (transformer_hidream_image.py initial_encoder_hidden_states, before caption_projection): see
    # denoiser_inputs; pooled_embeds = both CLIPs' text_embeds side by side
    "tiny-hidream": {"states": {"text_encoder_3": (slice(0, 128), ALL), "text_encoder_4": (slice(128, 256), ALL)},
                     "pooled": {"text_encoder": ("pooled_embeds", slice(0, 32)),
                                "text_encoder_2": ("pooled_embeds", slice(32, 64))}},
    # pipeline_kandinsky_t2i.py _encode_prompt_qwen: hidden_states[-1] from row 40 on, padding rows KEPT (no mask);
    # CLIP pooler_output = pooled_projections
    "tiny-kandinsky5": {"states": {"text_encoder": (ALL, ALL)}, "drop_rows": {"text_encoder": 40},
                        "pooled": {"text_encoder_2": ("pooled_projections", ALL)}},
}

PROMPTS = ["a red cube to the left of a blue sphere", "Three GREEN dogs and a purple cup on a table"]


def as_denoiser_sees(family: str, call, states):
    """Our encoder states laid out as the denoiser receives them: unchanged, or (``drop_prefix``) without
    the template's first rows and with zeros where the tokenizer padded (Qwen-Image re-pads with zeros)."""
    spec, enc = FAMILIES[family], call.encoder
    if spec.get("real_only"):  # Z-Image: each prompt's real rows, zero-padded to the longest
        from torch.nn.utils.rnn import pad_sequence

        return pad_sequence([s[r.to(s.device)] for s, r in zip(states, call.real)], batch_first=True)
    if enc in spec.get("drop_rows", {}):  # Kandinsky 5: the template's first rows dropped, padding rows kept
        return states[:, spec["drop_rows"][enc]:]
    if enc in spec.get("select_rows", {}):  # Sana: the first rows and the last ones, padding included
        first, last = spec["select_rows"][enc]
        return states[:, list(range(first)) + list(range(states.shape[1] - last, states.shape[1]))]
    k = spec.get("drop_prefix", {}).get(enc, 0)
    if not k:
        return states
    return states[:, k:] * call.real[:, k:].to(states.device, states.dtype)[..., None]


def real_rows(family: str, call):
    """(B, rows) bool: which rows of what the denoiser receives are the real tokens (padding may be on the left)."""
    return as_denoiser_sees(family, call, call.real[..., None].float())[..., 0].bool()


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
    states = got.get("encoder_hidden_states")
    if states is None and "encoder_hidden_states_t5" in got:  # HiDream: T5 and a stack of Llama layers (L, 2B, …)
        llama = got["encoder_hidden_states_llama3"][:, -n:]
        out_ = {"encoder_hidden_states_llama3": llama, "pooled_embeds": half(got["pooled_embeds"])}
        last = pipe.transformer.config.llama_layers[-1]  # the Llama entry in the text stream every block sees
        states = torch.cat([got["encoder_hidden_states_t5"], got["encoder_hidden_states_llama3"][last]], dim=1)
        return {"encoder_hidden_states": half(states), **out_}
    if states is None:  # Z-Image: transformer(x, t, cap_feats) positionally, cap_feats a list [cond..., uncond...]
        from torch.nn.utils.rnn import pad_sequence

        states = pad_sequence(list(got["_args"][2][:n]), batch_first=True)
    out = {"encoder_hidden_states": half(states)}
    if "encoder_hidden_states_2" in got:  # HunyuanImage: ByT5's states
        out["encoder_hidden_states_2"] = half(got["encoder_hidden_states_2"])
    if "pooled_projections" in got:
        out["pooled_projections"] = half(got["pooled_projections"])
    if (got.get("added_cond_kwargs") or {}).get("text_embeds") is not None:  # SDXL (PixArt passes others)
        out["added_cond_kwargs.text_embeds"] = half(got["added_cond_kwargs"]["text_embeds"])
    return out
