"""VQA scorers: P(yes) for each DSG question (and each probe used to type failures).

* :class:`BlipVqaScorer` — ``BlipForQuestionAnswering`` (T2I-CompBench's BLIP-VQA): the image
  is encoded once, each question attends to it, and the text decoder's first-token logits give
  P("yes") and P("no").
* :class:`VlmYesScorer` — VQAScore-style (Lin et al. 2024) P("Yes") of the next token from a
  transformers-native vision-language model (``AutoModelForImageTextToText``; the card default
  is LLaVA-1.5), plus a ``metric: vqascore`` record for the whole prompt
  ("Does this figure show '{text}'?").

``value`` of a question record is ``P(yes) / (P(yes) + P(no))``; the verdict is
``value >= thresholds.p_yes``; ``extra.p_yes`` / ``extra.p_no`` are the raw softmax
probabilities. The decision layer is :meth:`YesNoScorer.yes_no` — override it to inject.
"""

from __future__ import annotations

import re
from typing import Sequence

from ..errors import AuditError
from .base import Answer, QuestionScorer, ScoreItem


class YesNoScorer(QuestionScorer):
    family = "vqa"

    def yes_no(self, pairs: Sequence[tuple]) -> list[tuple[float, float, bool]]:
        """For each (PIL image, question text): (P(yes), P(no), truncated)."""
        raise NotImplementedError

    def answer(self, items: Sequence[ScoreItem], queries) -> list[dict[str, Answer]]:
        thr = float(self.thresholds.get("p_yes", 0.5))
        pairs, where = [], []
        for i, (it, qs) in enumerate(zip(items, queries)):
            for q in qs:
                pairs.append((it.image, q["text"]))
                where.append((i, q["id"]))
        out: list[dict[str, Answer]] = [{} for _ in items]
        for (i, qid), (py, pn, trunc) in zip(where, self.yes_no(pairs) if pairs else []):
            v = py / (py + pn) if (py + pn) > 0 else 0.5
            out[i][qid] = Answer(value=v, passed=v >= thr, truncated=trunc,
                                 extra={"p_yes": py, "p_no": pn, "threshold": thr})
        return out

    @staticmethod
    def _token_ids(tokenizer, words: Sequence[str]) -> list[int]:
        """The one vocabulary id of each answer word (duplicates dropped: BERT-uncased maps
        "Yes" and "yes" to one id). The word is encoded alone, without special tokens, which is
        the word-initial piece the model emits as its answer: "yes" in BLIP's WordPiece vocab,
        "▁Yes" in LLaVA-1.5's Llama SentencePiece vocab (the answer follows "ASSISTANT:", and
        the Metaspace pre-tokenizer prepends "▁" to the text's first word). A word that is
        several pieces or unknown raises: its first piece alone ("Y" of "Y"+"es") is another
        answer's probability."""
        ids: list[int] = []
        unk = getattr(tokenizer, "unk_token_id", None)
        for w in words:
            enc = list(tokenizer(w, add_special_tokens=False)["input_ids"])
            if len(enc) != 1 or enc[0] == unk:
                pieces = tokenizer.convert_ids_to_tokens(enc) if enc else []
                name = getattr(tokenizer, "name_or_path", "") or "in-memory"
                why = "unknown to the vocabulary" if len(enc) == 1 else f"{len(enc)} tokens {pieces}"
                raise AuditError(f"{type(tokenizer).__name__} ({name}): answer word {w!r} is {why}, "
                                 "not one token; P(yes)/P(no) needs one token per word - change "
                                 "options.yes_tokens / options.no_tokens in the scorer card")
            if enc[0] not in ids:
                ids.append(enc[0])
        return ids

    def _load_hf(self, model_cls_name: str):
        import transformers

        from .clip_models import model_dtype

        m = self.resolved_model()
        kw = {} if m.get("local") else {"revision": m.get("revision") or None}
        cls = getattr(transformers, model_cls_name)
        self.processor = transformers.AutoProcessor.from_pretrained(m["id"], **kw)
        self.model = cls.from_pretrained(m["id"], dtype=model_dtype(m, self.device),
                                         **kw).to(self.device).eval()
        self.tokenizer = self.processor.tokenizer


def blip_question(text: str, max_words: int = 50) -> str:
    """T2I-CompBench's ``pre_question`` (BLIPvqa_eval/data/utils.py): lower-cased, ``.!"()*#:;~``
    removed, trailing spaces stripped, at most 50 words."""
    q = re.sub(r'([.!"()*#:;~])', "", text.lower()).rstrip(" ")
    return " ".join(q.split(" ")[:max_words])


class BlipVqaScorer(YesNoScorer):
    """T2I-CompBench's BLIP-VQA (Karine-Huang/T2I-CompBench @1b70949, BLIPvqa_eval/models/blip_vqa.py,
    ``inference='vqa_prob'``; config BLIPvqa_eval/configs/vqa.yaml) on transformers' BLIP:

    * the question is tokenised with ``max_length=35`` (``options.max_question_tokens``) and its
      first token ([CLS]) replaced by ``[ENC]`` (``question.input_ids[:, 0] = enc_token_id``);
      transformers' ``BlipForQuestionAnswering`` feeds [CLS] unchanged;
    * the image is resized to ``image_size: 480`` (``options.image_size``; transformers'
      blip-vqa-base processor uses 384: its conversion loaded the 480-px VQA checkpoint at 384,
      interpolating the position embeddings, which are interpolated back here, bicubic as BLIP's
      ``interpolate_pos_embed``);
    * P(yes) / (P(yes) + P(no)) of the decoder's first token after [DEC], the question's own
      attention mask over the question states (as ``vqa_prob``).
    """

    def load_model(self) -> None:
        self._load_hf("BlipForQuestionAnswering")
        opt = self.card.get("options") or {}
        self.yes_ids = self._token_ids(self.tokenizer, opt.get("yes_tokens", ["yes"]))
        self.no_ids = self._token_ids(self.tokenizer, opt.get("no_tokens", ["no"]))
        self.enc_id = self._enc_token_id()

    def _enc_token_id(self) -> int:
        """BLIP's ``init_tokenizer`` (models/blip.py): bert-base-uncased + bos ``[DEC]`` + additional
        special ``[ENC]``; a checkpoint tokenizer without them gets them added in that order."""
        tok, vocab = self.tokenizer, self.tokenizer.get_vocab()
        if "[DEC]" not in vocab:
            tok.add_special_tokens({"bos_token": "[DEC]"})
        if "[ENC]" not in vocab:
            tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]}, replace_extra_special_tokens=False)
        enc = tok.convert_tokens_to_ids("[ENC]")
        if enc >= int(self.model.config.text_config.vocab_size):
            raise AuditError(f"scorer {self.name!r}: [ENC] (id {enc}) is outside the text model's vocabulary")
        return int(enc)

    def yes_no(self, pairs):
        import torch

        images = []
        index: dict[int, int] = {}
        for im, _ in pairs:  # encode each distinct image once
            if id(im) not in index:
                index[id(im)] = len(images)
                images.append(im)
        texts = [blip_question(t) for _, t in pairs]
        tok = self.tokenizer
        m = self.model
        opt = self.card.get("options") or {}
        max_len = min(int(opt.get("max_question_tokens", 35)), int(getattr(tok, "model_max_length", 512) or 512),
                      int(m.config.text_config.max_position_embeddings))
        trunc = [len(tok(t)["input_ids"]) > max_len for t in texts]
        size = opt.get("image_size")
        with torch.no_grad():
            px = self.processor.image_processor(images=images, return_tensors="pt",
                                                **({"size": {"height": size, "width": size}} if size else {}))
            px = px["pixel_values"].to(self.device, m.dtype)
            img = m.vision_model(pixel_values=px, interpolate_pos_encoding=True)[0]  # no-op at the trained size
            img = img[torch.tensor([index[id(im)] for im, _ in pairs], device=img.device)]
            enc = tok(texts, padding="longest", truncation=True, max_length=max_len,
                      return_tensors="pt").to(self.device)
            enc["input_ids"][:, 0] = self.enc_id
            img_mask = torch.ones(img.shape[:-1], dtype=torch.long, device=img.device)
            q = m.text_encoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                               encoder_hidden_states=img, encoder_attention_mask=img_mask,
                               return_dict=False)[0]
            bos = torch.full((len(texts), 1), m.decoder_start_token_id, device=q.device)
            logits = m.text_decoder(input_ids=bos, encoder_hidden_states=q,
                                    encoder_attention_mask=enc["attention_mask"]).logits[:, -1]
            probs = logits.float().softmax(-1)
        py = probs[:, self.yes_ids].sum(-1).tolist()
        pn = probs[:, self.no_ids].sum(-1).tolist()
        return list(zip(py, pn, trunc))


class VlmYesScorer(YesNoScorer):
    DEFAULT_TEMPLATE = "USER: <image>\n{question} Please answer yes or no. ASSISTANT:"

    def load_model(self) -> None:
        self._load_hf(self.card.get("options", {}).get("model_class", "AutoModelForImageTextToText"))
        self.tokenizer.padding_side = "left"  # the answer token is predicted at the last position
        opt = self.card.get("options") or {}
        self.yes_ids = self._token_ids(self.tokenizer, opt.get("yes_tokens", ["Yes", "yes"]))
        self.no_ids = self._token_ids(self.tokenizer, opt.get("no_tokens", ["No", "no"]))

    def _text(self, question: str) -> str:
        tpl = (self.card.get("templates") or {}).get("question")
        if tpl:
            return tpl.format(question=question)
        chat = [{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": f"{question} Please answer yes or no."}]}]
        return self.processor.apply_chat_template(chat, add_generation_prompt=True)

    def yes_no(self, pairs, chunk: int = 8):
        import torch

        out = []
        for s in range(0, len(pairs), chunk):
            part = pairs[s:s + chunk]
            texts = [self._text(t) for _, t in part]
            enc = self.processor(images=[im for im, _ in part], text=texts, padding=True,
                                 return_tensors="pt").to(self.device)
            if "pixel_values" in enc:
                enc["pixel_values"] = enc["pixel_values"].to(self.model.dtype)
            with torch.no_grad():
                probs = self.model(**enc).logits[:, -1].float().softmax(-1)
            py = probs[:, self.yes_ids].sum(-1).tolist()
            pn = probs[:, self.no_ids].sum(-1).tolist()
            out.extend((a, b, False) for a, b in zip(py, pn))
        return out

    def metrics(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        tpl = (self.card.get("templates") or {}).get("prompt", 'Does this figure show "{text}"?')
        res = self.yes_no([(it.image, tpl.format(text=it.prompt["text"])) for it in items])
        thr = float(self.thresholds.get("p_yes", 0.5))
        recs = []
        for it, (py, pn, trunc) in zip(items, res):
            norm = py / (py + pn) if (py + pn) > 0 else 0.5
            recs.append([self.record(it, "metric", metric="vqascore", value=py, verdict=norm >= thr,
                                     truncated=trunc, extra={"p_no": pn, "normalised": norm,
                                                             "threshold": thr})])
        return recs
