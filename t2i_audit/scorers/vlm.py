"""A modern VLM judge: P(answer) from the next-token logits of any transformers image-text-to-text
model (Qwen2.5-VL, Qwen3-VL, InternVL 3, Gemma 3, LLaVA-OneVision, LLaVA-1.5 …), driven by the
model's own processor and chat template.

For each query (a DSG question, a probe, or the whole prompt) the user turn is an image plus the
query text, rendered by ``processor.apply_chat_template(..., add_generation_prompt=True)``; the
batch is left-padded so the last position of every row is the assistant prefix's last token, and
one forward (``logits_to_keep=1``, no KV cache) gives the next-token distribution there.
P(yes) / P(no) are the softmax mass on the answer-word variants (``options.yes_tokens`` /
``options.no_tokens``), each of which must be ONE token right after the assistant prefix
(:func:`answer_token_ids`; checked at load on the real template, raising otherwise).

Records (all in the usual schema, every one with ``extra.max_pixels``; the revision is
``scorer_revision``):

* ``question``: value ``P(yes)/(P(yes)+P(no))``, verdict ``value >= thresholds.p_yes``,
  ``extra.p_yes`` / ``extra.p_no`` raw;
* ``metric: vqascore``: raw P(yes) for ``templates.prompt`` (VQAScore, Lin et al. 2024;
  t2v_metrics' default question 'Does this figure show "{}"? Please answer yes or no.',
  t2v_metrics/models/vqascore_models/llava_model.py);
* ``metric: soft_tifa_am`` / ``soft_tifa_gm``: arithmetic / geometric mean over the prompt's
  atoms (its DSG questions, whose correct answer is yes) of P(correct answer) — GenEval 2's
  Soft-TIFA (Kamath et al. 2025, arXiv 2512.16853; README of facebookresearch/GenEval2: "the
  arithmetic mean of the soft scores per prompt ... (Soft-TIFA AM) ... the geometric mean ...
  (Soft-TIFA GM)"; the evaluation.py read here — a public fork of that repo, Meta header kept —
  sums the softmax over the variants "Yes", "yes", " Yes", " yes" and takes scipy's gmean of the
  scores clipped at 1e-12, as here).

Speed: bf16 on CUDA (card ``model.dtype``), ``options.batch_size`` queries per forward, Qwen's
image budget ``options.max_pixels`` (recorded), and the image encoder run once per distinct
image of a batch (``mm_encoder_outputs``, transformers 5: ``Qwen3VLModel.forward`` takes
precomputed ``get_image_features`` outputs) where the processor's outputs allow it.
"""

from __future__ import annotations

import inspect
import math
from typing import Sequence

from ..errors import AuditError
from .base import Answer, ScoreItem
from .vqa import YesNoScorer

# GenEval 2's answer variants (benchmark_schema.YES_VARIANTS / NO_VARIANTS in its evaluation code)
YES_VARIANTS = ("Yes", "yes", " Yes", " yes")
NO_VARIANTS = ("No", "no", " No", " no")
QUESTION_TEMPLATE = "{question} Please answer yes or no."
PROMPT_TEMPLATE = 'Does this figure show "{text}"? Please answer yes or no.'
GM_FLOOR = 1e-12


def answer_token_ids(tokenizer, prefix: str, words: Sequence[str], model: str = "") -> list[int]:
    """The id of each answer word as the token that follows ``prefix`` (the rendered prompt up to
    the assistant turn), duplicates dropped.

    Encoding ``prefix + word`` and keeping what follows ``prefix``'s own tokens is what the model
    would read had it answered ``word``: with Qwen's byte-level BPE the answer starts a line after
    ``<|im_start|>assistant\\n``, so "Yes" is the token ``Yes`` and " Yes" is ``ĠYes``; after
    LLaVA-1.5's "ASSISTANT:" the answer is " Yes" (``▁Yes``). A word that is not exactly one
    token there (or merges with the prefix) raises, naming the model and the word."""
    base = list(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    unk = getattr(tokenizer, "unk_token_id", None)
    ids: list[int] = []
    for w in words:
        full = list(tokenizer(prefix + w, add_special_tokens=False)["input_ids"])
        new = full[len(base):]
        if full[:len(base)] != base or len(new) != 1 or new[0] == unk:
            pieces = tokenizer.convert_ids_to_tokens(new) if new else []
            why = ("merges with the end of the prompt" if full[:len(base)] != base
                   else "unknown to the vocabulary" if len(new) == 1 else f"{len(new)} tokens {pieces}")
            raise AuditError(f"model {model or getattr(tokenizer, 'name_or_path', '')!r}: answer word {w!r} "
                             f"after the assistant prefix is {why}, not one token; P(answer) needs one "
                             "token per word - change options.yes_tokens / options.no_tokens in the card")
        if new[0] not in ids:
            ids.append(new[0])
    return ids


def soft_tifa(p_correct: Sequence[float]) -> tuple[float | None, float | None]:
    """(arithmetic mean, geometric mean) of the atoms' P(correct); GM floors each at 1e-12."""
    if not p_correct:
        return None, None
    am = sum(p_correct) / len(p_correct)
    gm = math.exp(sum(math.log(max(float(p), GM_FLOOR)) for p in p_correct) / len(p_correct))
    return am, gm


class VlmJudge(YesNoScorer):
    """See the module docstring. Card keys: ``templates.question`` / ``templates.prompt`` (the
    user text; ``{question}`` / ``{text}``), ``templates.system`` (optional system turn),
    ``templates.raw`` (a whole prompt string with ``{query}``, for a processor without a chat
    template, e.g. the tiny LLaVA); ``options``: ``yes_tokens``, ``no_tokens``, ``batch_size``
    (16), ``max_pixels`` (Qwen-style processors), ``share_image_encoding`` (true),
    ``model_class`` (AutoModelForImageTextToText)."""

    family = "vqa"

    @property
    def options(self) -> dict:
        return dict(self.card.get("options") or {})

    @property
    def templates(self) -> dict:
        return dict(self.card.get("templates") or {})

    # --- loading ----------------------------------------------------------------------------
    def load_model(self) -> None:
        import transformers

        from .clip_models import torch_dtype

        m = self.resolved_model()
        kw = {} if m.get("local") else {"revision": m.get("revision") or None}
        from ..extras import auto_processor  # AutoProcessor, naming the [vlm] extra if torchvision is needed

        self.processor = auto_processor(m["id"], **kw)
        cls = getattr(transformers, self.options.get("model_class", "AutoModelForImageTextToText"))
        self.model = cls.from_pretrained(m["id"], dtype=torch_dtype(m.get("dtype"), self.device),
                                         **kw).to(self.device).eval()
        self.tokenizer = self.processor.tokenizer
        self.tokenizer.padding_side = "left"  # every row's last position = the assistant prefix's end
        self.max_pixels = self._image_budget(self.options.get("max_pixels"))
        prefix = self.render("Is there a cat? Please answer yes or no.")
        opt = self.options
        self.yes_ids = answer_token_ids(self.tokenizer, prefix, opt.get("yes_tokens", YES_VARIANTS), self.model_id)
        self.no_ids = answer_token_ids(self.tokenizer, prefix, opt.get("no_tokens", NO_VARIANTS), self.model_id)
        if set(self.yes_ids) & set(self.no_ids):
            raise AuditError(f"scorer {self.name}: a yes and a no answer word share a token")
        fwd = inspect.signature(self.model.forward).parameters
        self._forward_kw = {"use_cache": False, **({"logits_to_keep": 1} if "logits_to_keep" in fwd else {})}

    def _image_budget(self, max_pixels) -> int | None:
        """Qwen-VL-style image processors (Qwen2VLImageProcessor: ``size.longest_edge`` is a pixel
        budget, ``smart_resize`` in image_processing_qwen2_vl.py) take ``max_pixels``; the
        effective budget is returned (and recorded). Other processors resize to a fixed size."""
        ip = getattr(self.processor, "image_processor", None)
        size = getattr(ip, "size", None)
        budget = hasattr(ip, "merge_size") and getattr(size, "longest_edge", None) is not None
        if max_pixels is None:
            self._image_kwargs = {}
            return int(size.longest_edge) if budget else None
        if not budget:
            raise AuditError(f"scorer {self.name}: options.max_pixels needs a Qwen-VL-style image "
                             f"processor; {type(ip).__name__} resizes to a fixed size")
        self._image_kwargs = {"size": {"shortest_edge": int(size.shortest_edge), "longest_edge": int(max_pixels)}}
        return int(max_pixels)

    # --- prompts ----------------------------------------------------------------------------
    def render(self, query: str) -> str:
        """The model's prompt text for one image + ``query``, ending with the assistant prefix."""
        raw = self.templates.get("raw")
        if raw:
            return raw.format(query=query)
        msgs = []
        if self.templates.get("system"):
            msgs.append({"role": "system", "content": [{"type": "text", "text": self.templates["system"]}]})
        msgs.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": query}]})
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)

    def question_text(self, question: str) -> str:
        return self.templates.get("question", QUESTION_TEMPLATE).format(question=question)

    def prompt_text(self, text: str) -> str:
        return self.templates.get("prompt", PROMPT_TEMPLATE).format(text=text)

    # --- the model call ---------------------------------------------------------------------
    def encode(self, pairs: Sequence[tuple]):
        """Processor outputs for (image, query) pairs: rendered prompts, left-padded, on device."""
        texts = [self.render(q) for _, q in pairs]
        # a template that writes <bos> itself (Gemma 3) must not get a second one: the rule of
        # ProcessorMixin.apply_chat_template (processing_utils.py: add_special_tokens=False when the prompt
        # starts with tokenizer.bos_token)
        bos = getattr(self.tokenizer, "bos_token", None)
        special = {"add_special_tokens": False} if bos and all(t.startswith(bos) for t in texts) else {}
        # images nested one list per row: the unambiguous batch form (Gemma3Processor refuses a flat list,
        # processing_gemma3.py validate_inputs; the others flatten it, image_utils.make_flat_list_of_images)
        enc = self.processor(text=texts, images=[[im] for im, _ in pairs], padding=True, return_tensors="pt",
                             **special, **self._image_kwargs).to(self.device)
        if "pixel_values" in enc and enc["pixel_values"].is_floating_point():
            enc["pixel_values"] = enc["pixel_values"].to(self.model.dtype)
        return enc

    def yes_no(self, pairs, batch_size: int | None = None):
        """(P(yes), P(no), truncated) per (image, query text) — the query text goes in the user
        turn as is (templates applied by the caller)."""
        import torch

        bs = int(batch_size or self.options.get("batch_size", 16))
        out = []
        for s in range(0, len(pairs), bs):
            part = pairs[s:s + bs]
            enc = self.encode(part)
            kw = dict(enc)
            if self.options.get("share_image_encoding", True):
                kw = self._shared_image_inputs(kw, [id(im) for im, _ in part])
            with torch.inference_mode():
                logits = self.model(**kw, **self._forward_kw).logits[:, -1].float()
            probs = logits.softmax(-1)
            py = probs[:, self.yes_ids].sum(-1).tolist()
            pn = probs[:, self.no_ids].sum(-1).tolist()
            out.extend((a, b, False) for a, b in zip(py, pn))
        return out

    def _shared_image_inputs(self, kw: dict, keys: Sequence[int]) -> dict:
        """Run the image encoder once per distinct image and pass its outputs, repeated per row,
        as ``mm_encoder_outputs`` (the model then skips its own encoder call). Applies when the
        per-image inputs can be cut out of the processor output: ``pixel_values`` stacked one per
        image, or Qwen's flat patches with ``image_grid_thw`` (t·h·w patches an image)."""
        import torch

        first: dict[int, int] = {}
        for row, k in enumerate(keys):
            first.setdefault(k, row)
        if len(first) == len(keys) or "pixel_values" not in kw:
            return kw
        fwd = inspect.signature(self.model.forward).parameters
        get = getattr(self.model, "get_image_features", None)
        if "mm_encoder_outputs" not in fwd or get is None:
            return kw
        px, rows, n = kw["pixel_values"], list(first.values()), len(keys)
        per_image = {k: v for k, v in kw.items() if k in ("image_grid_thw", "image_sizes")}
        if "image_grid_thw" in kw:
            counts = kw["image_grid_thw"].prod(-1).tolist()
            chunks = torch.split(px, counts)
            px_u = torch.cat([chunks[r] for r in rows])
        elif px.shape[0] == n:
            px_u = px[rows]
        else:
            return kw
        params = inspect.signature(getattr(self.model.model, "get_image_features", get)).parameters
        extra = {k: v[rows] for k, v in per_image.items() if k in params}
        feats = get(pixel_values=px_u, return_dict=True, **extra)
        where = [list(first).index(k) for k in keys]
        for name in ("pooler_output", "deepstack_features"):
            if feats.get(name) is not None:
                feats[name] = _take(feats[name], where, len(rows))
        out = {k: v for k, v in kw.items() if k != "pixel_values"}
        out["mm_encoder_outputs"] = {"image": feats}
        return out

    # --- records ----------------------------------------------------------------------------
    def score(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        thr = float(self.thresholds.get("p_yes", 0.5))
        qs = [self.queries(it.prompt) for it in items]
        pairs, where = [], []
        for i, (it, ql) in enumerate(zip(items, qs)):  # one image's queries stay adjacent
            for q in ql:
                pairs.append((it.image, self.question_text(q["text"])))
                where.append((i, q["id"]))
            pairs.append((it.image, self.prompt_text(it.prompt["text"])))
            where.append((i, None))
        answers: list[dict[str, Answer]] = [{} for _ in items]
        whole: list[tuple] = [()] * len(items)
        for (i, qid), (py, pn, trunc) in zip(where, self.yes_no(pairs)):
            v = py / (py + pn) if (py + pn) > 0 else 0.5
            if qid is None:
                whole[i] = (py, pn, v, trunc)
            else:
                answers[i][qid] = Answer(value=v, passed=v >= thr, truncated=trunc,
                                         extra={"p_yes": py, "p_no": pn, "threshold": thr})
        out = []
        for it, ql, ans, (py, pn, norm, trunc) in zip(items, qs, answers, whole):
            recs = self.records_from_answers(it, ql, ans)
            atoms = [ans[q["id"]].extra["p_yes"] for q in ql if not q.get("probe") and q["id"] in ans]
            am, gm = soft_tifa(atoms)
            mets = [self.record(it, "metric", metric="vqascore", value=py, verdict=norm >= thr, truncated=trunc,
                                extra={"p_no": pn, "normalised": norm, "threshold": thr}),
                    self.record(it, "metric", metric="soft_tifa_am", value=am, extra={"atoms": len(atoms)}),
                    self.record(it, "metric", metric="soft_tifa_gm", value=gm, extra={"atoms": len(atoms)})]
            out.append(self._stamp(recs[:-1] + mets + recs[-1:]))
        return out

    def excluded_records(self, item: ScoreItem) -> list[dict]:
        return self._stamp(super().excluded_records(item))

    def _stamp(self, recs: list[dict]) -> list[dict]:
        mp = getattr(self, "max_pixels", self.options.get("max_pixels"))
        for r in recs:
            r["extra"]["max_pixels"] = mp
        return recs


def _take(x, where: list[int], n: int):
    """Repeat per-image encoder outputs per row: a tensor with ``n`` rows, or a tuple/list of ``n``
    per-image tensors, or a list of those (Qwen3-VL's deepstack features, one per layer)."""
    import torch

    if isinstance(x, torch.Tensor):
        return x[where] if x.shape[0] == n else x
    if isinstance(x, (list, tuple)):
        if len(x) == n and all(isinstance(t, torch.Tensor) for t in x):
            return type(x)(x[i] for i in where)
        return type(x)(_take(t, where, n) for t in x)
    return x
