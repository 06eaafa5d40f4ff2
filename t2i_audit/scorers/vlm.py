"""A modern VLM judge: P(answer) from the next-token logits of any transformers image-text-to-text
model (Qwen2.5-VL, Qwen3-VL, InternVL 3, Gemma 3, LLaVA-OneVision, LLaVA-1.5 …), driven by the
model's own processor and chat template.

For each query (a DSG question, a probe, or the whole prompt) the user turn is an image plus the
query text, rendered by ``processor.apply_chat_template(..., add_generation_prompt=True)``; the
batch is left-padded so the last position of every row is the assistant prefix's last token, and
one forward (``logits_to_keep=1``, no KV cache) gives the next-token distribution there.
P(yes) / P(no) are the softmax mass on the answer-word variants, each of which must be ONE token right after
the assistant prefix (:func:`answer_token_ids`; checked at load on the real template, raising otherwise), or,
for the upstream protocols, the first token of each word as their code reads it (:func:`first_token_ids`).

Which questions are asked, which answer words are summed and how the metrics aggregate is the card's judge
*protocol* (``protocol:``; :mod:`.protocols`, data in ``t2i_audit/cards/protocols.yaml``): ``t2i-audit`` (ours,
the default), ``geneval2`` (GenEval 2's Soft-TIFA and VQAScore, facebookresearch/GenEval2 evaluation.py) or
``vqascore`` (t2v_metrics' VQAScore). Records (the usual schema; every one with ``extra.max_pixels``,
``extra.protocol`` and ``extra.protocol_hash``; the revision is ``scorer_revision``):

* ``question``: value ``P(yes)/(P(yes)+P(no))`` (a "How many" count of ``geneval2``: P(number variants)),
  verdict ``value >= thresholds.p_yes``, ``extra.p_yes`` / ``extra.p_no`` raw;
* ``metric: vqascore``: raw P(yes) for the whole prompt;
* ``metric: soft_tifa_am`` / ``soft_tifa_gm``: arithmetic / geometric mean over the prompt's atoms of
  P(correct answer) — GenEval 2's Soft-TIFA (Kamath et al. 2025, arXiv 2512.16853).

A chat template whose generation prompt opens a reasoning block (``<think>``) is rendered with
``enable_thinking=False`` where it supports that, else refused at load: P(yes) would be read where the model
starts to reason, not where it answers.

Speed: bf16 on CUDA (card ``model.dtype``), ``options.batch_size`` queries per forward, Qwen's
image budget ``options.max_pixels`` (recorded), and the image encoder run once per distinct
image of a batch where the processor's outputs allow it (:func:`_encoder_answers`).
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Sequence

from ..errors import AuditError
from . import protocols
from .base import Answer, ScoreItem, card_hash
from .vqa import YesNoScorer

# a card's default answer words (protocol t2i-audit reads options.yes_tokens / no_tokens)
YES_VARIANTS = ("Yes", "yes", " Yes", " yes")
NO_VARIANTS = ("No", "no", " No", " no")
GM_FLOOR = 1e-12
REASONING_OPEN = ("<think>",)  # reasoning-block openers of Qwen3 / QwQ / DeepSeek-R1-style chat templates


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


def first_token_ids(tokenizer, words: Sequence[str]) -> list[int]:
    """The upstream reading of answer words (t2v_metrics ``tokenizer.encode(answer, add_special_tokens=False)``,
    GenEval 2 ``tokenizer.encode(answer)[0]``; Qwen adds no special token, so the two agree): the first id of
    each word encoded alone, duplicates kept (the upstream code sums over its list as written)."""
    ids = []
    for w in words:
        enc = list(tokenizer.encode(w, add_special_tokens=False))
        if enc:
            ids.append(enc[0])
    return ids


def generation_kwargs(render, model: str = "") -> dict:
    """Template kwargs that make the generation prompt end where the answer starts. ``render(**kw)`` renders
    a one-turn chat with the generation prompt. A prompt ending in an open reasoning block would have P(yes) read
    at the first reasoning token: render it with ``enable_thinking=False`` (Qwen3's switch; t2v_metrics does the
    same for Qwen3.5, qwen3vl_model.py _build_inputs) if that closes it, else refuse."""
    def opens(text: str) -> bool:
        return text.rstrip().endswith(REASONING_OPEN)

    if not opens(render()):
        return {}
    try:
        off = render(enable_thinking=False)
    except Exception:  # noqa: BLE001 - a template that rejects the switch does not support it
        off = None
    if off is not None and not opens(off):
        return {"enable_thinking": False}
    raise AuditError(f"model {model!r}: its chat template's generation prompt opens a reasoning block "
                     f"({'/'.join(REASONING_OPEN)}) and cannot be rendered with thinking disabled; P(yes) would be "
                     "read at the first reasoning token, not at the answer. Use the model's instruct (non-thinking) "
                     "checkpoint, or give the card a templates.raw prompt that ends where the answer starts")


def soft_tifa(p_correct: Sequence[float], floor: float | None = GM_FLOOR) -> tuple[float | None, float | None]:
    """(arithmetic mean, geometric mean) of the atoms' P(correct); see :func:`.protocols.soft_tifa`."""
    return protocols.soft_tifa(p_correct, floor)


class VlmJudge(YesNoScorer):
    """See the module docstring. Card keys: ``templates.question`` / ``templates.prompt`` (the
    user text; ``{question}`` / ``{text}``), ``templates.system`` (optional system turn),
    ``templates.raw`` (a whole prompt string with ``{query}``, for a processor without a chat
    template, e.g. the tiny LLaVA); ``protocol`` (default ``t2i-audit``; its templates and answer words rule,
    a card's ``templates.question`` / ``templates.prompt`` must match them); ``options``: ``yes_tokens``,
    ``no_tokens`` (protocol t2i-audit), ``batch_size`` (16), ``max_pixels`` (Qwen-style processors),
    ``share_image_encoding`` (true), ``model_class`` (AutoModelForImageTextToText)."""

    family = "vqa"
    _chat_kwargs: dict = {}

    @property
    def protocol(self) -> dict:
        if getattr(self, "_protocol", None) is None:
            self._protocol = protocols.get_protocol(self.card.get("protocol"), scorer=self.name)
        return self._protocol

    @property
    def fingerprint(self) -> str:
        """The card's hash with the protocol's folded in: a changed protocol entry rescores."""
        return card_hash({**self.card, "protocol": f"{self.protocol['name']}@{self.protocol['hash']}"})

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
        self._check_templates()
        if not self.templates.get("raw"):
            self._chat_kwargs = generation_kwargs(lambda **kw: self._chat(self._messages("Q?"), **kw), self.model_id)
        prefix = self.render("Is there a cat? Please answer yes or no.")
        self.answers = {part: self._answer_ids(part, prefix) for part in ("question", "prompt")}
        self.yes_ids, self.no_ids = self.answers["question"]
        for yes, no in self.answers.values():
            if set(yes) & set(no):
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

    def _check_templates(self) -> None:
        """The protocol owns the question wording: a card (or --set) that words it otherwise would score
        under the protocol's name what the protocol does not ask."""
        for part in ("question", "prompt"):
            mine, theirs = self.templates.get(part), self.protocol[part]["template"]
            if mine is not None and mine.replace("{%s}" % ("question" if part == "question" else "text"), "{}") \
                    != theirs.replace("{question}", "{}").replace("{text}", "{}"):
                raise AuditError(f"scorer {self.name}: templates.{part} {mine!r} is not protocol "
                                 f"{self.protocol['name']!r}'s {theirs!r}; drop it from the card, or add a protocol "
                                 "to t2i_audit/cards/protocols.yaml")

    def _words(self, part: str, side: str) -> list[str]:
        words = self.protocol[part][f"{side}_words"]
        if words == "card":
            words = self.options.get(f"{side}_tokens", YES_VARIANTS if side == "yes" else NO_VARIANTS)
        return list(words)

    def _answer_ids(self, part: str, prefix: str) -> tuple[list[int], list[int]]:
        if self.protocol["match"] == "first_token":
            return tuple(first_token_ids(self.tokenizer, self._words(part, side)) for side in ("yes", "no"))
        return tuple(answer_token_ids(self.tokenizer, prefix, self._words(part, side), self.model_id)
                     for side in ("yes", "no"))

    # --- prompts ----------------------------------------------------------------------------
    def _messages(self, query: str) -> list[dict]:
        msgs = []
        if self.templates.get("system"):
            msgs.append({"role": "system", "content": [{"type": "text", "text": self.templates["system"]}]})
        msgs.append({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": query}]})
        return msgs

    def _chat(self, msgs: list[dict], **kw) -> str:
        return self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kw)

    def render(self, query: str) -> str:
        """The model's prompt text for one image + ``query``, ending with the assistant prefix."""
        raw = self.templates.get("raw")
        if raw:
            return raw.format(query=query)
        return self._chat(self._messages(query), **self._chat_kwargs)

    def question_text(self, question: str) -> str:
        return self.protocol["question"]["template"].format(question=question)

    def prompt_text(self, text: str) -> str:
        return self.protocol["prompt"]["template"].format(text=text)

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

    def yes_no(self, pairs, batch_size: int | None = None, answers: Sequence[tuple] | None = None):
        """(P(yes), P(no), truncated) per (image, query text) — the query text goes in the user
        turn as is (templates applied by the caller). ``answers``: (yes ids, no ids) per row (default the
        question's); ids sum as listed, so a repeated id counts twice, as upstream."""
        import torch

        bs = int(batch_size or self.options.get("batch_size", 16))
        out = []
        for s in range(0, len(pairs), bs):
            part = pairs[s:s + bs]
            ids = list(answers[s:s + bs]) if answers is not None else [(self.yes_ids, self.no_ids)] * len(part)
            kw = dict(self.encode(part))
            shared = None
            if self.options.get("share_image_encoding", True):
                shared = self._shared_image_features(kw, [id(im) for im, _ in part])
            with torch.inference_mode(), _encoder_answers(self.model, shared):
                logits = self.model(**kw, **self._forward_kw).logits[:, -1].float()
            # one device-to-host copy of the answer columns a batch, not two syncs a row
            cols = sorted({i for yes, no in ids for i in (*yes, *no)})
            where = {c: j for j, c in enumerate(cols)}
            probs = logits.softmax(-1)[:, cols].cpu() if cols else None
            for row, (yes, no) in zip(probs if probs is not None else [None] * len(ids), ids):
                out.append((row[[where[i] for i in yes]].sum().item() if yes else 0.0,
                            row[[where[i] for i in no]].sum().item() if no else 0.0, False))
        return out

    def _shared_image_features(self, kw: dict, keys: Sequence[int]):
        """The image encoder's outputs (``get_image_features``) for the distinct images of a batch, repeated
        per row, or None where they cannot be: when the per-image inputs can be cut out of the processor
        output — ``pixel_values`` stacked one per image, or Qwen's flat patches with ``image_grid_thw``
        (t·h·w patches an image) — and the model has a multimodal core that encodes images by its own
        ``get_image_features``."""
        import torch

        first: dict[int, int] = {}
        for row, k in enumerate(keys):
            first.setdefault(k, row)
        if len(first) == len(keys) or "pixel_values" not in kw:
            return None
        get = getattr(self.model, "get_image_features", None)
        if get is None or not hasattr(getattr(self.model, "model", None), "get_image_features"):
            return None
        px, rows, n = kw["pixel_values"], list(first.values()), len(keys)
        per_image = {k: v for k, v in kw.items() if k in ("image_grid_thw", "image_sizes")}
        if "image_grid_thw" in kw:
            counts = kw["image_grid_thw"].prod(-1).tolist()
            chunks = torch.split(px, counts)
            px_u = torch.cat([chunks[r] for r in rows])
        elif px.shape[0] == n:
            px_u = px[rows]
        else:
            return None
        params = inspect.signature(self.model.model.get_image_features).parameters
        extra = {k: v[rows] for k, v in per_image.items() if k in params}
        feats = get(pixel_values=px_u, return_dict=True, **extra)
        return _per_row(feats, [list(first).index(k) for k in keys])

    # --- records ----------------------------------------------------------------------------
    def _count_ask(self, prompt: dict, q: dict) -> tuple[str, list[int]] | None:
        """GenEval 2 asks a count "How many X are in the image?" and reads P(its number words)."""
        c = self.protocol.get("count") or {}
        if c.get("ask") != "how_many" or q.get("kind") != "count" or q.get("probe"):
            return None
        o = next((o for o in prompt.get("objects") or [] if o["id"] == q.get("object")), None)
        if o is None or q.get("number") is None:
            return None
        words = protocols.count_answers(protocols.number_word(int(q["number"])))
        return c["template"].format(plural=o["plural"]), first_token_ids(self.tokenizer, words)

    def score(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        thr = float(self.thresholds.get("p_yes", 0.5))
        proto = self.protocol
        qs = [self.queries(it.prompt) for it in items]
        pairs, ids, index = [], [], {}

        def ask(image, text, yes_no) -> int:
            """Row of (image, text, answer ids), each asked once per batch (atoms repeat questions)."""
            key = (id(image), text, tuple(yes_no[0]), tuple(yes_no[1]))
            if key not in index:
                index[key] = len(pairs)
                pairs.append((image, text))
                ids.append(yes_no)
            return index[key]

        plan = []  # per item: ({qid: (row, how_many)}, prompt row, [atom rows])
        for it, ql in zip(items, qs):  # one image's queries stay adjacent
            rows = {}
            for q in ql:
                count = self._count_ask(it.prompt, q)
                rows[q["id"]] = ((ask(it.image, self.question_text(count[0]), (count[1], [])), True) if count else
                                 (ask(it.image, self.question_text(q["text"]), self.answers["question"]), False))
            whole = ask(it.image, self.prompt_text(it.prompt["text"]), self.answers["prompt"])
            atoms = None
            if proto["atoms"] == "geneval2":
                atoms = [ask(it.image, self.question_text(a["text"]),
                             (first_token_ids(self.tokenizer, a["answers"]), []) if a["answers"]
                             else self.answers["question"]) for a in protocols.geneval2_atoms(it.prompt)]
            plan.append((rows, whole, atoms))
        res = self.yes_no(pairs, answers=ids)
        out = []
        for it, ql, (rows, whole, atom_rows) in zip(items, qs, plan):
            ans = {}
            for qid, (row, how_many) in rows.items():
                py, pn, trunc = res[row]
                v = py if how_many else (py / (py + pn) if (py + pn) > 0 else 0.5)
                ex = {"p_yes": py, "p_no": None if how_many else pn, "threshold": thr}
                if how_many:
                    ex["asked"] = pairs[row][1]
                ans[qid] = Answer(value=v, passed=v >= thr, truncated=trunc, extra=ex)
            recs = self.records_from_answers(it, ql, ans)
            if atom_rows is None:  # ours: the prompt's own questions, P(yes) (their correct answer)
                atoms = [ans[q["id"]].extra["p_yes"] for q in ql if not q.get("probe") and q["id"] in ans]
            else:
                atoms = [res[r][0] for r in atom_rows]
            am, gm = soft_tifa(atoms, proto.get("gm_floor"))
            py, pn, trunc = res[whole]
            norm = py / (py + pn) if (py + pn) > 0 else 0.5
            mets = {"vqascore": self.record(it, "metric", metric="vqascore", value=py, verdict=norm >= thr,
                                            truncated=trunc, extra={"p_no": pn, "normalised": norm, "threshold": thr}),
                    "soft_tifa_am": self.record(it, "metric", metric="soft_tifa_am", value=am,
                                                extra={"atoms": len(atoms)}),
                    "soft_tifa_gm": self.record(it, "metric", metric="soft_tifa_gm", value=gm,
                                                extra={"atoms": len(atoms)})}
            out.append(self._stamp(recs[:-1] + [mets[m] for m in proto["metrics"]] + recs[-1:]))
        return out

    def excluded_records(self, item: ScoreItem) -> list[dict]:
        return self._stamp(super().excluded_records(item))

    def _stamp(self, recs: list[dict]) -> list[dict]:
        mp = getattr(self, "max_pixels", self.options.get("max_pixels"))
        for r in recs:
            r["extra"].update(max_pixels=mp, protocol=self.protocol["name"], protocol_hash=self.protocol["hash"])
        return recs


@contextmanager
def _encoder_answers(model, features):
    """While ``model`` runs, its multimodal core's ``get_image_features`` answers with ``features`` (the
    distinct images' outputs, repeated per row) instead of encoding every row's image again; None: as is.

    Set on the core instance, the one place every transformers 5 release goes through: 5.17's
    ``Qwen3VLModel.forward`` (as Qwen2.5-VL's, Gemma 3's, LLaVA-OneVision's) calls
    ``self.get_image_features(pixel_values, …)`` and takes no precomputed outputs; 5.24's takes
    ``mm_encoder_outputs`` but calls the same method when none are given (modeling_qwen3_vl.py,
    ``Qwen3VLModel.forward``)."""
    if features is None:
        yield
        return
    core = model.model
    core.get_image_features = lambda *args, **kwargs: features
    try:
        yield
    finally:
        del core.get_image_features  # the class's method again


def _per_row(feats, where: list[int]):
    """``get_image_features`` outputs of the distinct images → of the batch rows (``where[row]`` = its image).

    ``pooler_output`` is a tensor with one row an image (Gemma 3) or one tensor an image (Qwen-VL,
    LLaVA-OneVision). Qwen3-VL's ``deepstack_features`` hold, per layer, one tensor an image
    (transformers 5.24: ``torch.split`` in ``Qwen3VLModel.get_image_features``) or the images' tokens
    concatenated in order (5.17, which splits only ``pooler_output``): cut by the pooled lengths."""
    import torch

    pooled = feats.pooler_output
    if isinstance(pooled, torch.Tensor):
        feats.pooler_output = pooled[where]
        return feats
    feats.pooler_output = type(pooled)(pooled[i] for i in where)
    deep = feats.get("deepstack_features")
    if deep is not None:
        sizes = [t.shape[0] for t in pooled]

        def rows(layer):
            per_image = torch.split(layer, sizes) if isinstance(layer, torch.Tensor) else layer
            picked = [per_image[i] for i in where]
            return torch.cat(picked) if isinstance(layer, torch.Tensor) else type(layer)(picked)

        feats.deepstack_features = [rows(layer) for layer in deep]
    return feats
