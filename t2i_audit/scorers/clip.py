"""CLIP scorer: CLIPScore, a foil test and zero-shot classification of each constituent.

Records per image (``scores/clip.jsonl``):

* ``metric: clipscore`` — ``2.5 * max(cos(image, prompt), 0)`` (Hessel et al. 2021);
* ``metric: foil:<name>`` — margin ``cos(image, prompt) - cos(image, foil)``; verdict
  ``margin > thresholds.margin``; a lost foil carries its failure (see :mod:`.foils`);
* ``question`` records — each prompt question answered by zero-shot classification:
  exists: the object ranks among the top *k* (k = objects in the prompt) of ``options.objects``
  ∪ the prompt's objects; attribute: argmax over ``options.values[family]`` ∪ the prompt's
  values; count: argmax over 1 … ``options.max_count``; relation: argmax over the relation
  phrases of ``options.relations[family]`` in both directions;
* ``prompt`` — verdict: every foil beaten and every judged question passed; failures are
  the union (each with ``source``); value: fraction of those checks passed.

``truncated`` is true when a text the record depends on exceeds the tokenizer's context
(77 for CLIP); ``extra.tokens`` gives the count. The decision layer is :meth:`similarities`.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .base import Answer, QuestionScorer, ScoreItem
from .foils import build_foils

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten"]
DEFAULT_TEMPLATES = {"object": "a photo of a {object}", "attribute": "a photo of a {value} {object}",
                     "count": "a photo of {number} {plural}",
                     "relation": "a photo of a {subject} {relation} a {object}"}


def softmax(xs: Sequence[float], scale: float) -> list[float]:
    m = max(xs)
    e = [math.exp(scale * (x - m)) for x in xs]
    s = sum(e)
    return [v / s for v in e]


class ClipScorer(QuestionScorer):
    family = "clip"

    def load_model(self) -> None:
        from .clip_models import load_clip

        self.clip = load_clip(self.resolved_model(), self.device)

    # --- decision layer input ---------------------------------------------------------------
    def similarities(self, images: Sequence, texts: Sequence[Sequence[str]]) -> list[list[float]]:
        """Cosine similarity of image i with each of ``texts[i]``."""
        uniq = sorted({t for ts in texts for t in ts})
        index = {t: k for k, t in enumerate(uniq)}
        img = self.clip.encode_images(images)
        txt = self.clip.encode_texts(uniq)
        sims = (img @ txt.T).tolist()
        return [[sims[i][index[t]] for t in ts] for i, ts in enumerate(texts)]

    def n_tokens(self, text: str) -> int:
        return self.clip.n_tokens(text)

    @property
    def context_length(self) -> int:
        return self.clip.context_length

    @property
    def logit_scale(self) -> float:
        return float((self.card.get("options") or {}).get("logit_scale") or self.clip.logit_scale)

    # --- candidates -------------------------------------------------------------------------
    @property
    def templates(self) -> dict:
        return {**DEFAULT_TEMPLATES, **(self.card.get("templates") or {})}

    @property
    def options(self) -> dict:
        return dict(self.card.get("options") or {})

    def candidates(self, prompt: Mapping, q: Mapping) -> tuple[list[str], list[int], int]:
        """Texts to classify among, the indices counted as a pass, and k (top-k)."""
        t, opt = self.templates, self.options
        objs = {o["id"]: o for o in prompt.get("objects", [])}
        kind = q.get("kind")
        if kind == "exists":
            names = list(dict.fromkeys([o["name"] for o in objs.values()] + list(opt.get("objects", []))))
            texts = [t["object"].format(object=n) for n in names]
            return texts, [names.index(objs[q["object"]]["name"])], len(objs)
        if kind == "attribute":
            o = objs[q["object"]]
            fam = q["family"]
            vals = list(dict.fromkeys([x["attributes"][fam] for x in objs.values() if fam in x.get("attributes", {})]
                                      + list((opt.get("values") or {}).get(fam, []))))
            if q["value"] not in vals:
                vals.insert(0, q["value"])
            return [t["attribute"].format(value=v, object=o["name"]) for v in vals], [vals.index(q["value"])], 1
        if kind == "count":
            o = objs[q["object"]]
            top = max(int(opt.get("max_count", 6)), int(q["number"]))
            texts = [t["count"].format(number=NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else n,
                                       plural=o["plural"] if n != 1 else o["name"]) for n in range(1, top + 1)]
            return texts, [int(q["number"]) - 1], 1
        if kind == "relation":
            s, o = objs[q["subject"]], objs[q["object"]]
            surface = next((r.get("text") or r["name"] for r in prompt.get("relations", [])
                            if r.get("name") == q.get("value")), q.get("value"))
            phrases = list(dict.fromkeys([surface] + list((opt.get("relations") or {}).get(q.get("family"), []))))
            texts = []
            for p in phrases:
                texts.append(t["relation"].format(subject=s["name"], relation=p, object=o["name"]))
                texts.append(t["relation"].format(subject=o["name"], relation=p, object=s["name"]))
            return texts, [0], 1
        return [], [], 0

    # --- scoring ----------------------------------------------------------------------------
    def score(self, items: Sequence[ScoreItem]) -> list[list[dict]]:
        distractors = self.options.get("objects", [])
        plans = []
        for it in items:
            queries = self.queries(it.prompt)
            foils = build_foils(it.prompt, distractors)
            cands = {q["id"]: self.candidates(it.prompt, q) for q in queries}
            texts = [it.prompt["text"]] + [f["text"] for f in foils]
            for c in cands.values():
                texts.extend(c[0])
            plans.append((queries, foils, cands, list(dict.fromkeys(texts))))
        sims = self.similarities([it.image for it in items], [p[3] for p in plans])
        out = []
        for it, (queries, foils, cands, texts), row in zip(items, plans, sims):
            sim = dict(zip(texts, row))
            out.append(self._records(it, queries, foils, cands, sim))
        return out

    def _trunc(self, *texts: str) -> tuple[bool, int]:
        n = max(self.n_tokens(t) for t in texts)
        return n > self.context_length, n

    def _records(self, it, queries, foils, cands, sim) -> list[dict]:
        scale = self.logit_scale
        answers: dict[str, Answer] = {}
        for q in queries:
            texts, good, k = cands[q["id"]]
            if not texts:
                continue
            probs = softmax([sim[t] for t in texts], scale)
            order = sorted(range(len(texts)), key=lambda i: -probs[i])
            trunc, n = self._trunc(*texts)
            answers[q["id"]] = Answer(
                value=sum(probs[i] for i in good), passed=any(i in order[:k] for i in good),
                extra={"predicted": texts[order[0]], "candidates": len(texts), "top_k": k, "tokens": n},
                truncated=trunc)
        recs = self.records_from_answers(it, queries, answers)
        prompt_rec = recs.pop()
        true_sim = sim[it.prompt["text"]]
        trunc_p, n_p = self._trunc(it.prompt["text"])
        metrics = [self.record(it, "metric", metric="clipscore", value=2.5 * max(true_sim, 0.0),
                               truncated=trunc_p, extra={"cosine": true_sim, "tokens": n_p})]
        margin_thr = float(self.thresholds.get("margin", 0.0))
        foil_failures = []
        for f in foils:
            margin = true_sim - sim[f["text"]]
            ok = margin > margin_thr
            fails = [] if ok else [dict(x, source=f"foil:{f['name']}") for x in f["failures"]]
            foil_failures.extend(fails)
            trunc, n = self._trunc(it.prompt["text"], f["text"])
            metrics.append(self.record(it, "metric", metric=f"foil:{f['name']}", value=margin,
                                       verdict=ok, failures=fails, truncated=trunc,
                                       extra={"foil": f["text"], "foil_cosine": sim[f["text"]],
                                              "cosine": true_sim, "threshold": margin_thr,
                                              "tokens": n}))
        checks = [m["verdict"] for m in metrics if m["verdict"] is not None]
        checks += [r["verdict"] is True for r in recs if r["verdict"] is not None or r["extra"].get("skipped_by")]
        q_fail = [dict(x, source=x.get("question_id")) for x in prompt_rec["failures"]]
        prompt_rec["failures"] = foil_failures + q_fail
        prompt_rec["verdict"] = all(checks) if checks else None
        prompt_rec["value"] = (sum(checks) / len(checks)) if checks else None
        prompt_rec["truncated"] = prompt_rec["truncated"] or any(m["truncated"] for m in metrics)
        prompt_rec["extra"].update({"foils_passed": sum(1 for m in metrics[1:] if m["verdict"]),
                                    "foils": len(metrics) - 1})
        return recs + metrics + [prompt_rec]
