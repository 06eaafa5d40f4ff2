"""Text-encoder states exactly as the pipeline computes them: its own ``encode_prompt``, intercepted.

A pipeline is loaded with its tokenizers and text encoders only (every other component
``None``), and its own ``encode_prompt`` runs on a batch of prompts. Two interceptions record
what it does, so the template, caption cleaning, max length, padding and whether a mask is
passed are the pipeline's *by construction*, not our re-implementation of them:

* each tokenizer is wrapped in a recording proxy: the exact text it saw (after a chat template
  or ``clean_caption``), its ids and its attention mask (which tokens are real, even where the
  pipeline then runs the encoder without a mask, as SD3/FLUX do with T5);
* each text encoder gets a forward pre-hook that asks for ``output_hidden_states`` (harmless to
  the pipeline: it indexes ``[0]`` or ``.hidden_states``) and a forward hook that keeps the output.

Which stored layer the denoiser is conditioned on comes from families.yaml, per pipeline class;
tests/fidelity/ checks it against ``encode_prompt``'s own return values.
"""

from __future__ import annotations

import difflib
import inspect
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ...errors import AuditError
from ...families import conditioning_layer, pipeline_family, stacked_layers
from ...models import read_model_index

# encode_prompt parameters that we set ourselves (the prompt, devices, no CFG, no precomputed embeds)
_OURS = {"device", "num_images_per_prompt", "do_classifier_free_guidance", "lora_scale", "self"}


@dataclass
class EncoderCall:
    """One text-encoder forward inside ``encode_prompt``."""

    encoder: str
    seen_texts: list            # what the tokenizer was given (template / cleaning applied)
    input_ids: "object"         # (B, L) on CPU
    real: "object"              # (B, L) bool: the tokenizer's attention mask
    mask_passed: bool           # did the pipeline hand the encoder an attention mask?
    output: "object" = None     # the encoder's ModelOutput (hidden_states requested)
    offsets: Optional[list] = None
    untruncated_lengths: Optional[list] = None
    notes: list = field(default_factory=list)
    stacked: Optional[list] = None  # hidden-state indices the pipeline stacks per token (FLUX.2): 'cond'
    encoded: Optional["object"] = None  # (B,) bool: prompts this encoder ran on (None: all; HunyuanImage's ByT5)


class _RecordingTokenizer:
    """Proxy that records every ``__call__`` (text, kwargs, output); everything else passes through."""

    def __init__(self, tokenizer):
        object.__setattr__(self, "_tok", tokenizer)
        object.__setattr__(self, "calls", [])

    def __call__(self, *args, **kwargs):
        # forwarded exactly as called: a processor (Kandinsky 5's Qwen2VLProcessor) takes images first, text by name
        out = self._tok(*args, **kwargs)
        if "text" in kwargs:
            text = kwargs.pop("text")
        else:
            text, args = (args[0] if args else None), args[1:]
        self.calls.append((text, args, {k: v for k, v in kwargs.items() if k not in ("images", "videos")}, out))
        return out

    def apply_chat_template(self, conversation, *args, **kwargs):
        """A chat template that tokenizes (FLUX.2: a PixtralProcessor's ``apply_chat_template(tokenize=True)``)
        is recorded as the equivalent tokenizer call on the rendered text, so ``_describe`` finds its ids, mask
        and offsets as for ``__call__``; a template rendered as text only (``tokenize=False``) records nothing
        (the pipeline then calls the tokenizer on that text, recorded by ``__call__``)."""
        out = self._tok.apply_chat_template(conversation, *args, **kwargs)
        as_lists = lambda ids: ids.tolist() if hasattr(ids, "tolist") else list(ids)  # noqa: E731  (ragged ok)
        if kwargs.get("tokenize", True) and hasattr(out, "keys") and "input_ids" in out:  # ids, as a dict
            rendered = self._tok.apply_chat_template(conversation, *args,
                                                     **{**kwargs, "tokenize": False, "return_dict": False})
            tok = getattr(self._tok, "tokenizer", self._tok)  # a processor's own tokenizer
            kw = {k: kwargs[k] for k in ("padding", "truncation", "max_length", "return_tensors") if k in kwargs}
            for special in (False, True):  # transformers adds no specials to a rendered template, unless told
                again = tok(rendered, **kw, add_special_tokens=special)["input_ids"]
                if as_lists(again) == as_lists(out["input_ids"]):
                    self.calls.append((rendered, (), {**kw, "add_special_tokens": special}, out))
                    break
        return out

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __setattr__(self, name, value):  # Sana sets tokenizer.padding_side = "right": it must reach the tokenizer
        setattr(self._tok, name, value)

    def __len__(self):
        return len(self._tok)


def text_components(pipe) -> list[str]:
    """Names of the pipeline's loaded text encoders (``text_encoder``, ``text_encoder_2`` …)."""
    return sorted(k for k, v in pipe.components.items() if k.startswith("text_encoder") and v is not None)


def tokenizer_for(encoder: str) -> str:
    return "tokenizer" + encoder[len("text_encoder"):]


def encode_kwargs(pipe, call: dict | None) -> dict:
    """The ``encode_prompt`` arguments a generation call would use: the run's call kwargs, else the
    defaults of ``__call__`` (PixArt: ``clean_caption`` is True in ``__call__`` but False in
    ``encode_prompt``; ``max_sequence_length`` is 256 or 512 depending on the call)."""
    call = dict(call or {})
    enc = inspect.signature(pipe.encode_prompt).parameters
    gen = inspect.signature(pipe.__call__).parameters
    out = {}
    for name, p in enc.items():
        if name in _OURS or "prompt" in name or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if name in call:
            out[name] = call[name]
        elif name in gen and gen[name].default is not inspect.Parameter.empty:
            out[name] = gen[name].default
    return out


def load_text_pipeline(path: str, *, revision: str | None = None, variant: str | None = None,
                       device: str = "cpu", dtype: str = "float32", components: dict | None = None, card=None):
    """The pipeline with only its tokenizers and text encoders loaded (UNet/transformer/VAE = None);
    ``components``: loaded objects for what the repo does not ship (``ModelCard.load_components``); ``card``:
    the model card whose variant (``card.adapted``: replaced text encoders, LoRAs) applies, as in
    generate.load_pipeline."""
    from ...reuse import active

    session = active()
    if session is not None and card is not None:  # t2i-audit track: the text encoders of the held pipeline
        return session.text_pipeline(card, device, dtype, lambda base: load_text_pipeline(
            path, revision=revision, variant=variant, device=device, dtype=dtype, components=components, card=base))
    import torch
    from diffusers import DiffusionPipeline

    from ...generate import silence_loading_bars

    silence_loading_bars()
    index = read_model_index(path, revision)
    skip = {k: None for k, v in index.items()
            if not k.startswith("_") and isinstance(v, list)
            and not k.startswith(("text_encoder", "tokenizer", "scheduler"))}
    adapted = card.adapted if card is not None else None
    if adapted:
        from ...variants.load import load_replacements

        components = {**(components or {}), **load_replacements(card, dtype, text_only=True)}
    kw = {"revision": revision, "dtype": getattr(torch, dtype), **skip, **(components or {})}
    if variant and dtype != "float32":  # as generate.load_pipeline: fp16 files only for a half-precision run
        kw["variant"] = variant
    try:
        pipe = DiffusionPipeline.from_pretrained(path, **kw)
    except (OSError, ValueError) as e:
        raise AuditError(f"{path}: cannot load the pipeline's text encoders: {e}") from None
    if adapted and adapted.loras:  # the text-encoder part of load_lora_weights (variants/load.py)
        from ...variants.load import apply_loras

        apply_loras(pipe, adapted, text_only=True)
    for name in text_components(pipe):
        getattr(pipe, name).to(device).eval()
    return pipe


def capture_encoder_calls(pipe, texts: Sequence[str], call: dict | None = None, *,
                          offsets: bool = True) -> tuple[list[EncoderCall], tuple]:
    """Run ``pipe.encode_prompt(texts)`` as a generation call would; return one EncoderCall per encoder over
    ``texts`` (see ``_assemble``) and what ``encode_prompt`` returned."""
    import torch

    encoders = text_components(pipe)
    if not encoders:
        raise AuditError(f"{type(pipe).__name__}: no text encoders loaded")
    proxies, handles, pending, calls = {}, [], {}, {}
    for enc in encoders:
        tname = tokenizer_for(enc)
        tok = getattr(pipe, tname, None)
        if tok is not None:
            proxies[tname] = _RecordingTokenizer(tok)
            object.__setattr__(pipe, tname, proxies[tname])  # bypass DiffusionPipeline's config update

        def pre(_m, args, kwargs, enc=enc):
            kwargs = dict(kwargs)
            kwargs["output_hidden_states"] = True
            ids = kwargs.get("input_ids", args[0] if args else None)
            pending[enc] = (ids, kwargs.get("attention_mask") is not None)
            return args, kwargs

        def post(_m, _args, _kwargs, output, enc=enc):  # every call: _assemble picks the prompt's
            ids, mask_passed = pending[enc]
            calls.setdefault(enc, []).append((ids.detach().cpu(), mask_passed, output))

        module = getattr(pipe, enc)
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    kwargs = encode_kwargs(pipe, call)
    params = inspect.signature(pipe.encode_prompt).parameters
    # batch_size: HunyuanImagePipeline.encode_prompt .view()s its output to it (default 1); __call__ passes len(prompt)
    ours = {"device": pipe._execution_device, "num_images_per_prompt": 1, "do_classifier_free_guidance": False,
            "batch_size": len(texts)}
    kwargs.update({k: v for k, v in ours.items() if k in params})
    # SD3 requires prompt_2 / prompt_3 without defaults; None = "use prompt", as in __call__
    kwargs.update({k: None for k, p in params.items()
                   if k.startswith("prompt_") and k[7:].isdigit() and p.default is inspect.Parameter.empty})
    try:
        with torch.inference_mode():
            returned = pipe.encode_prompt(prompt=list(texts), **kwargs)
    finally:
        for h in handles:
            h.remove()
        for tname, proxy in proxies.items():
            object.__setattr__(pipe, tname, proxy._tok)
    out = []
    for enc in encoders:
        c = _assemble(pipe, enc, calls.get(enc, []), proxies.get(tokenizer_for(enc)), texts, offsets=offsets)
        if c is not None:  # None: a pipeline that skips an encoder for this call
            out.append(c)
    for c in out:  # the layers the pipeline stacks, as this call runs it (encode_prompt's kwarg or default)
        c.stacked = stacked_layers(type(pipe).__name__, c.encoder, kwargs)
    _rows_the_denoiser_sees(pipe, out, kwargs)
    return out, returned


def _rows_the_denoiser_sees(pipe, calls: list[EncoderCall], kwargs: dict) -> None:
    """Rows the pipeline drops before the denoiser are not real tokens for eos / mean / slot pooling
    (families.yaml, per encoder: only the encoder the pipeline cuts): ``drop_prefix`` (Qwen-Image: ``e[drop_idx:]``,
    its chat template's system prefix; Kandinsky 5 / HunyuanImage cut their Qwen output only — their CLIP / ByT5 rows
    all reach the denoiser) and ``select_rows`` (Sana: ``[0] + range(-max_sequence_length + 1, 0)``, most of its
    instruction prefix)."""
    fam = pipeline_family(type(pipe).__name__) or {}
    for call in calls:
        attr = (fam.get("drop_prefix") or {}).get(call.encoder)
        sel = (fam.get("select_rows") or {}).get(call.encoder)
        before = call.real.sum(1)
        if attr:
            k = int(getattr(pipe, attr))
            call.real[:, :k] = False
            call.notes.append(f"the first {k} tokens ({attr}: the template prefix) are dropped by the pipeline")
        if sel:
            length = call.real.shape[1]
            last = int(kwargs[sel["last"]]) + int(sel.get("last_offset", 0))
            keep = call.real.new_zeros(length)
            keep[: sel["first"]] = True
            keep[max(length - last, 0):] = True
            call.real &= keep
            call.notes.append(f"the pipeline keeps rows [:{sel['first']}] and the last {last} ({sel['last']} "
                              f"{sel.get('last_offset', 0):+d}): the rest of the instruction prefix is dropped")
        if (attr or sel) and call.untruncated_lengths is not None:  # counted like `real`, or all read as truncated
            dropped = (before - call.real.sum(1)).tolist()
            call.untruncated_lengths = [n - d for n, d in zip(call.untruncated_lengths, dropped)]


def _assemble(pipe, enc: str, got: list, proxy, texts: Sequence[str], *, offsets: bool) -> Optional[EncoderCall]:
    """One EncoderCall over all ``texts`` from an encoder's forward calls inside ``encode_prompt``.

    Usually the first call encodes the whole batch (later ones, if any, encode negatives). Some pipelines run an
    encoder prompt by prompt: pipeline_hunyuanimage.py ``encode_prompt`` runs ByT5 once per prompt whose
    ``extract_glyph_text`` is not None (quoted text; apostrophes count as quotes) and gives the denoiser zeros for
    the others. families.yaml ``per_prompt`` names that function of the pipeline's module, so each call is
    assigned to its prompt; a pipeline without it whose first call does not cover the batch is refused."""
    n = len(texts)
    fn = _per_prompt_fn(pipe, enc)
    if fn is None:
        if got and got[0][0].shape[0] != n:
            raise AuditError(f"{type(pipe).__name__}.encode_prompt ran {enc} on {got[0][0].shape[0]} rows for {n} "
                             "prompts: which rows are whose is unknown (families.yaml per_prompt names the "
                             "pipeline's function that gives each prompt's text for it)")
        return _describe(enc, *got[0], proxy, offsets=offsets) if got else None
    rows = [b for b, t in enumerate(texts) if fn(t) is not None]
    if len(got) != len(rows) or any(c[0].shape[0] != 1 for c in got):
        raise AuditError(f"{type(pipe).__name__}.encode_prompt ran {enc} {len(got)} times for the {len(rows)} "
                         f"prompts {fn.__name__} gives a text (families.yaml per_prompt)")
    note = (f"{enc} runs once per prompt on {fn.__name__}(prompt); prompts it returns None for are not encoded: "
            "the denoiser gets zeros for them, and so are their stored arrays")
    parts = [_describe(enc, *c, proxy, offsets=offsets) for c in got]
    return _merge(enc, parts, rows, n, parts[0] if parts else _shape_probe(pipe, enc, proxy), note)


def _per_prompt_fn(pipe, enc: str):
    name = ((pipeline_family(type(pipe).__name__) or {}).get("per_prompt") or {}).get(enc)
    if name is None:
        return None
    fn = getattr(sys.modules[type(pipe).__module__], name, None)
    if fn is None:
        raise AuditError(f"families.yaml {type(pipe).__name__}.per_prompt.{enc}: no {name} in {type(pipe).__module__}")
    return fn


def _shape_probe(pipe, enc: str, proxy) -> EncoderCall:
    """The encoder on an empty text: only its output's layers and widths are used (a batch where the pipeline ran
    it on no prompt still stores every layer, all zeros as the denoiser gets); its values are never stored."""
    import torch

    tok = proxy._tok if proxy is not None else getattr(pipe, tokenizer_for(enc))
    tok = getattr(tok, "tokenizer", tok)
    ids = torch.as_tensor(tok("", return_tensors="pt")["input_ids"])
    if ids.shape[-1] == 0:
        ids = torch.tensor([[tok.pad_token_id or 0]])
    module = getattr(pipe, enc)
    with torch.inference_mode():
        output = module(input_ids=ids.to(module.device), output_hidden_states=True)
    return EncoderCall(enc, [None], ids, torch.zeros_like(ids, dtype=torch.bool), False, output)


def _merge(enc: str, parts: list[EncoderCall], rows: list[int], n: int, template: EncoderCall,
           note: str) -> EncoderCall:
    """One-prompt EncoderCalls laid out as one batch of ``n``: part i is prompt ``rows[i]``; the other prompts get
    zero states and no real token (``encoded`` False), as the pipeline gives their denoiser rows zeros."""
    import torch

    length = template.input_ids.shape[1]
    if any(p.input_ids.shape[1] != length for p in parts):
        raise AuditError(f"{enc}: per-prompt calls of different lengths {[p.input_ids.shape[1] for p in parts]}")
    ids = template.input_ids.new_zeros(n, length)
    real = torch.zeros(n, length, dtype=torch.bool)
    encoded = torch.zeros(n, dtype=torch.bool)
    seen, offs, untruncated, notes = [None] * n, [[(0, 0)] * length for _ in range(n)], [0] * n, []
    for b, p in zip(rows, parts):
        ids[b], real[b], encoded[b], seen[b] = p.input_ids[0], p.real[0], True, p.seen_texts[0]
        untruncated[b] = p.untruncated_lengths[0] if p.untruncated_lengths is not None else 0
        if p.offsets is not None:
            offs[b] = p.offsets[0]
        notes += [x for x in p.notes if x not in notes]
    with torch.inference_mode():
        output = _stack_outputs([p.output for p in parts], rows, n, template.output)
    has_offsets = bool(parts) and all(p.offsets is not None for p in parts)
    return EncoderCall(enc, seen, ids, real, template.mask_passed, output, offsets=offs if has_offsets else None,
                       untruncated_lengths=untruncated, notes=notes + [note], encoded=encoded)


def _stack_outputs(outputs: list, rows: list[int], n: int, template):
    """One-prompt encoder outputs as one ModelOutput of ``n`` rows (zeros where the encoder did not run)."""
    import torch

    def fill(like, values):
        out = like.new_zeros((n, *like.shape[1:]))
        if values:
            out[rows] = torch.cat(values)
        return out

    fields = {}
    for key, like in template.items():
        values = [o[key] for o in outputs]
        if isinstance(like, torch.Tensor):
            fields[key] = fill(like, values)
        elif isinstance(like, tuple) and all(isinstance(t, torch.Tensor) for t in like):
            fields[key] = tuple(fill(t, [v[i] for v in values]) for i, t in enumerate(like))
    return type(template)(**fields)


def _per_prompt_calls(calls: list, ids):
    """One-prompt tokenizer calls whose rows, stacked, are ``ids`` (Flux2Klein ``_get_qwen3_prompt_embeds``
    tokenizes prompt by prompt and concatenates), as one call: (texts, args, kwargs, {input_ids, attention_mask})."""
    import torch

    n = ids.shape[0]
    for end in range(len(calls), n - 1, -1):
        window = calls[end - n:end]
        if not all(isinstance(c[0], str) and torch.as_tensor(c[3]["input_ids"]).shape == (1, ids.shape[1])
                   for c in window):
            continue
        got = torch.cat([torch.as_tensor(c[3]["input_ids"]) for c in window]).cpu()
        if torch.equal(got, ids):
            masks = [c[3].get("attention_mask") for c in window]
            res = {"input_ids": got}
            if all(m is not None for m in masks):
                res["attention_mask"] = torch.cat([torch.as_tensor(m) for m in masks])
            return [c[0] for c in window], window[0][1], window[0][2], res
    return None


def _describe(enc: str, ids, mask_passed: bool, output, proxy, *, offsets: bool) -> EncoderCall:
    """Find the tokenizer call that produced ``ids``: its text, real-token mask and offsets."""
    import torch

    match, left = None, 0
    for text, args, kw, res in reversed(proxy.calls if proxy is not None else []):
        got = res["input_ids"]
        got = got if isinstance(got, torch.Tensor) else torch.tensor(got)
        if got.shape == ids.shape and torch.equal(got.cpu(), ids):
            match = (text, args, kw, res)
            break
        # the pipeline padded the tokenizer's ids further on the left (CogView4: to a multiple of 16)
        extra = ids.shape[-1] - got.shape[-1]
        if got.ndim == 2 and extra > 0 and got.shape[0] == ids.shape[0] and torch.equal(got.cpu(), ids[:, extra:]):
            match, left = (text, args, kw, res), extra
            break
    if match is None and proxy is not None:
        match = _per_prompt_calls(proxy.calls, ids)
    if match is None:
        real = ids.new_ones(ids.shape, dtype=torch.bool)
        return EncoderCall(enc, [None] * len(ids), ids, real, mask_passed, output,
                           notes=["no tokenizer call produced these ids: spans unavailable, all tokens real"])
    text, args, kw, res = match
    texts = [text] if isinstance(text, str) else list(text)
    mask = res.get("attention_mask")
    real = (torch.as_tensor(mask).bool() if mask is not None else ids.new_ones(ids.shape, dtype=torch.bool)).cpu()
    if left:
        real = torch.cat([real.new_zeros(real.shape[0], left), real], dim=1)
    call = EncoderCall(enc, texts, ids, real, mask_passed, output)
    if left:
        call.notes.append(f"the pipeline left-pads the tokenizer's ids with {left} more pad tokens (not real)")
    tok = getattr(proxy._tok, "tokenizer", proxy._tok)  # a processor (FLUX.2's Pixtral): its own tokenizer
    if offsets:
        try:
            again = tok(text, *args, **{**kw, "return_offsets_mapping": True})
            call.offsets = [[(0, 0)] * left + [tuple(o) for o in row]
                            for row in torch.as_tensor(again["offset_mapping"]).tolist()]
        except (NotImplementedError, TypeError, ValueError, KeyError):
            call.notes.append("tokenizer gives no offsets: slot spans unavailable")
    full = tok(texts, add_special_tokens=kw.get("add_special_tokens", True), truncation=False)["input_ids"]
    call.untruncated_lengths = [len(x) for x in full]
    return call


def map_spans(prompt: str, seen: Optional[str], spans: dict) -> dict:
    """Character spans of ``prompt`` moved into the text the tokenizer saw (a template around it,
    lower-casing, cleaning); a span whose characters cannot be found is dropped."""
    if seen is None:
        return {}
    if seen == prompt:
        return dict(spans)
    start = seen.find(prompt)
    if start >= 0:
        return {k: (s + start, e + start) for k, (s, e) in spans.items()}
    sm = difflib.SequenceMatcher(None, prompt.lower(), seen.lower(), autojunk=False)
    where = {}
    for a, b, size in sm.get_matching_blocks():
        for k in range(size):
            where[a + k] = b + k
    out = {}
    for name, (s, e) in spans.items():
        hit = [where[i] for i in range(s, e) if i in where]
        if hit and len(hit) >= (e - s) / 2:
            out[name] = (min(hit), max(hit) + 1)
    return out


def token_slots(offsets, spans: dict, slot_names: Sequence[str], real) -> dict[str, list[int]]:
    """Real token positions whose character offsets overlap each slot's ``[start, end)`` span."""
    out = {}
    for name in slot_names:
        span = spans.get(name)
        if not span:
            continue
        s, e = span
        idx = [i for i, (a, b) in enumerate(offsets) if b > a and a < e and b > s and bool(real[i])]
        if idx:
            out[name] = idx
    return out


def layer_tensors(call: EncoderCall) -> dict[str, "object"]:
    """Stored layer name → tensor: ``h00``… (hidden_states), ``final`` (last_hidden_state where it
    differs from the last hidden state: CLIP's final norm), ``pooled`` (text_embeds / pooler_output),
    ``cond`` (several hidden states side by side per token, where the pipeline stacks them: FLUX.2)."""
    import torch

    out_ = call.output
    hidden = list(out_.hidden_states)
    layers = {f"h{i:02d}": h for i, h in enumerate(hidden)}
    # a causal-LM head (Qwen2.5-VL) has no last_hidden_state and its [0] is the logits
    last = out_.last_hidden_state if hasattr(out_, "last_hidden_state") else (
        None if hasattr(out_, "logits") else out_[0])
    if last is not None and not torch.equal(last, hidden[-1]):
        layers["final"] = last
    pooled = getattr(out_, "text_embeds", None)
    if pooled is None:
        pooled = getattr(out_, "pooler_output", None)
    if pooled is not None:
        layers["pooled"] = pooled
    if call.stacked:  # pipeline_flux2*.py: torch.stack(hidden_states[k] ...).permute(0, 2, 1, 3).reshape(B, L, -1)
        layers["cond"] = torch.cat([hidden[k] for k in call.stacked], dim=-1)
    return layers


def select_layers(spec, names: Sequence[str], conditioning: Optional[str]) -> list[str]:
    """``all``, ``last``, ``conditioning`` or a comma list of indices (negative ok), names, ``final``."""
    hidden = [n for n in names if n.startswith("h")]
    if spec in ("all", None):
        return list(names)
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in (str(i).strip() for i in items):
        if item == "last":
            out.append("final" if "final" in names else hidden[-1])
        elif item == "conditioning":
            if conditioning is None:
                continue  # this encoder conditions nothing as one stored layer (meta says why)
            out.append(conditioning)
        elif item in names:
            out.append(item)
        elif item == "final":  # no separate final norm: the encoder's output is its last block
            out.append(hidden[-1])
        else:
            try:
                out.append(hidden[int(item)])
            except (ValueError, IndexError):
                raise AuditError(f"--layers: {item!r} is not a layer (have {hidden[0]}…{hidden[-1]}, "
                                 f"indices 0..{len(hidden) - 1}, negative ok, 'final', 'pooled', "
                                 "'last' or 'conditioning')") from None
    return list(dict.fromkeys(out))


class PipelineTextEncoder:
    """Pooled text-encoder states of a pipeline, in its own mode; one ``encode_prompt`` per batch."""

    def __init__(self, pipe, call: dict | None = None):
        self.pipe, self.call = pipe, dict(call or {})
        self.pipeline_class = type(pipe).__name__
        self.encoders = text_components(pipe)
        self.mode = encode_kwargs(pipe, self.call)

    def describe(self, enc: str, call: EncoderCall) -> dict:
        """What meta.json records about how this encoder was run."""
        layers = layer_tensors(call)
        n_hidden = sum(1 for n in layers if n.startswith("h"))
        cond, how = conditioning_layer(self.pipeline_class, enc, n_hidden, "final" in layers, self.call)
        fam = pipeline_family(self.pipeline_class) or {}
        info = {"pipeline": self.pipeline_class, "encode_kwargs": self.mode,
                "sequence_length": int(call.input_ids.shape[1]), "mask_passed": call.mask_passed,
                "conditioning_layer": cond, "conditioning": how,
                "pooled_used": enc in (fam.get("pooled") or []),
                "eos": "the last real token (the tokenizer's attention mask)",
                "notes": call.notes}
        if call.encoded is not None and not bool(call.encoded.any()):  # a shape probe: nothing known of its run
            info.update(sequence_length=None, mask_passed=None)
        per_block = (fam.get("per_block_layers") or {}).get(enc)
        if per_block:  # HiDream: each denoiser block also gets its own layer of this encoder
            info["per_block_layers"] = (f"denoiser block i also gets hidden_states[1:][{per_block}[i]] "
                                        f"(transformer config {per_block!r}): stored layer h(k+1) for entry k")
        return info

    def encode(self, texts: Sequence[str], spans: Sequence[dict], *, layers="all",
               poolings: Sequence[str] = ("eos", "mean", "slot"), slot_names: Sequence[str] = ()) -> dict:
        """``{encoder: {"<layer>__<pooling>": (B, D) float32, "_truncated": bool (B,), "_info": dict}}``.

        A ``batch_dependent`` family (families.yaml) is encoded one prompt at a time, as generate makes its images:
        its states depend on the batch (Kandinsky 5: unmasked padding; and ``_encode_prompt_qwen``'s truncation
        decodes the pad tokens of a batch with a long prompt as text and cuts them off the SHORT prompts' text)."""
        if len(texts) > 1 and (pipeline_family(self.pipeline_class) or {}).get("batch_dependent"):
            kw = dict(layers=layers, poolings=poolings, slot_names=slot_names)
            parts = [self.encode([t], [sp], **kw) for t, sp in zip(texts, spans)]
            return {enc: {k: (v if k.startswith("_") and k != "_truncated" else
                              np.concatenate([p[enc][k] for p in parts])) for k, v in first.items()}
                    for enc, first in parts[0].items()}
        calls, _ = capture_encoder_calls(self.pipe, texts, self.call, offsets="slot" in poolings)
        return {c.encoder: self._pool(c, texts, spans, layers, poolings, slot_names) for c in calls}

    def _pool(self, call: EncoderCall, texts, spans, layers, poolings, slot_names) -> dict:
        import torch

        tensors = layer_tensors(call)
        info = self.describe(call.encoder, call)
        names = select_layers(layers, list(tensors), info["conditioning_layer"])
        real = call.real.to(next(iter(tensors.values())).device)
        m = real.float()
        last = real.shape[1] - 1 - torch.flip(real.long(), dims=[1]).argmax(dim=1)
        rows = torch.arange(len(texts), device=real.device)
        n_real = real.sum(1).tolist()
        truncated = np.array([u > r for u, r in zip(call.untruncated_lengths or n_real, n_real)])
        slots = []
        if "slot" in poolings and call.offsets is not None:
            for b, (text, sp) in enumerate(zip(texts, spans)):
                moved = map_spans(text, call.seen_texts[b], sp or {})
                slots.append(token_slots(call.offsets[b], moved, slot_names, call.real[b]))
        b0 = next((b for b, seen in enumerate(call.seen_texts) if seen is not None), None)
        if b0 is not None and call.seen_texts[b0] != texts[b0]:  # a chat template or caption cleaning: record it
            info["seen_text_example"] = {"prompt": texts[b0], "tokenizer_saw": call.seen_texts[b0]}
        result: dict = {"_truncated": truncated, "_info": info, "_layers": names}
        for name in names:
            h = tensors[name].float()
            if name == "pooled":
                result["pooled__prompt"] = h.cpu().numpy()
                continue
            if "eos" in poolings:
                result[f"{name}__eos"] = h[rows, last].cpu().numpy()
            if "mean" in poolings:
                result[f"{name}__mean"] = ((h * m[..., None]).sum(1) / m.sum(1, keepdim=True)).cpu().numpy()
            for slot in slot_names if "slot" in poolings else ():
                arr = np.full((len(texts), h.shape[-1]), np.nan, dtype=np.float32)
                for b, ts in enumerate(slots):
                    if slot in ts:
                        arr[b] = h[b, ts[slot]].mean(0).cpu().numpy()
                result[f"{name}__slot-{slot}"] = arr
        if call.encoded is not None:  # prompts the pipeline never ran this encoder on: the denoiser gets zeros
            absent = ~call.encoded.numpy()
            truncated[absent] = False
            for k, v in result.items():
                if not k.startswith("_") and "__slot-" not in k:  # a slot never found stays NaN, as anywhere
                    v[absent] = 0.0
        return result
