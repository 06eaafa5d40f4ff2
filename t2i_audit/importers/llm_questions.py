"""DSG questions by an LLM for the prompts the grammar declines (``parsed: false``), once, at import
time (``t2i-audit prompts import FILE --questions-by CARD``): the questions, their dependencies and
the generator's name and revision are written into the PromptRecords, so runs are reproducible and
no scorer ever calls the LLM.

Cards: ``cards/questioners.yaml``. The text side (prompts, parsing) is :mod:`.dsg`; records come out
of :func:`.dpg.dsg_record` like an imported DPG-Bench item (objects from ``entity - whole`` tuples,
typed attribute/count/spatial questions, the rest kind ``other``). A record whose LLM output does not
parse keeps its whole-prompt question and says why in ``questions_by.reason`` (never a crash).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from ..errors import AuditError, did_you_mean
from ..safeload import load_yaml
from . import dsg
from .dpg import dsg_record

CARD_FILE = Path(__file__).resolve().parents[1] / "cards" / "questioners.yaml"
# the keys a question generator rewrites; id, text, category, source … stay the importer's
STRUCTURE = ("slots", "families", "spans", "objects", "relations", "questions", "composition", "bindings")
MAX_NOTES = 20


def load_cards() -> dict[str, dict]:
    return {c["name"]: c for c in (load_yaml(CARD_FILE) or {}).get("questioners") or []}


def questioner_card(spec: str) -> dict:
    """``NAME`` (a card) or ``NAME=PATH`` (that card on a local copy of its model, e.g. offline)."""
    name, eq, path = spec.partition("=")
    if eq and not path.strip():  # "NAME=" would otherwise fall back to the hub model, unasked
        raise AuditError(f"--questions-by {spec!r}: empty path after '='; give NAME=PATH (a local copy of the "
                         f"model) or NAME alone for the card's own model")
    cards = load_cards()
    if name not in cards:
        raise AuditError(f"unknown question generator {name!r} (cards/{CARD_FILE.name}).{did_you_mean(name, cards)}")
    card = json.loads(json.dumps(cards[name]))
    if path:
        if not Path(path).is_dir():
            raise AuditError(f"--questions-by {spec}: {path} is not a folder")
        card["model"].update(id=str(Path(path).resolve()), revision="local", local=True)
    return card


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


class LlmQuestioner:
    """A text LLM behind one call, :meth:`complete` (user messages → replies); tests may replace
    the model's ``generate`` and nothing else."""

    def __init__(self, card: dict, device: Optional[str] = None):
        self.card, self.device = card, device
        self.options = dict(card.get("options") or {})
        self.batch_size = int(self.options.get("batch_size", 8))
        self.model = self.tokenizer = None

    @property
    def identity(self) -> dict:
        m = self.card["model"]
        return {"generator": self.card["name"], "method": self.card.get("method", "dsg"), "model": m["id"],
                "revision": str(m.get("revision") or "main"), "card_hash": _hash(self.card),
                "prompt_hash": _hash([dsg.build_prompt(s, "{text}", "{tuples}") for s in dsg.STEPS])}

    def load(self) -> "LlmQuestioner":
        if self.model is not None:
            return self
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        m = dict(self.card["model"])
        if str(m["id"]).startswith("tiny:"):
            from ..tiny.llm import materialize

            m.update(materialize())
        self.device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = getattr(torch, m.get("dtype", "bfloat16")) if self.device != "cpu" else torch.float32
        kw = {} if m.get("local") else {"revision": m.get("revision") or "main"}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(m["id"], **kw)
            self.model = AutoModelForCausalLM.from_pretrained(m["id"], dtype=dtype, **kw).to(self.device).eval()
        except (OSError, ValueError) as e:
            raise AuditError(f"question generator {self.card['name']!r}: cannot load {m['id']!r}: "
                             f"{type(e).__name__}: {str(e).strip()[:300]}. Offline? Use "
                             f"--questions-by {self.card['name']}=PATH (a local copy of the model)") from e
        self.tokenizer.padding_side = "left"  # decoder-only batches: prompts end where generation starts
        return self

    def complete(self, messages: list[str]) -> list[str]:
        """Greedy replies to single-turn user messages, in batches of ``options.batch_size``."""
        import torch
        from transformers import GenerationConfig

        tok, model = self.tokenizer, self.model
        gen_cfg = GenerationConfig(max_new_tokens=int(self.options.get("max_new_tokens", 512)), do_sample=False,
                                   eos_token_id=model.generation_config.eos_token_id,
                                   pad_token_id=tok.pad_token_id)
        out = []
        for i in range(0, len(messages), self.batch_size):
            texts = [tok.apply_chat_template([{"role": "user", "content": m}], tokenize=False,
                                             add_generation_prompt=True,
                                             enable_thinking=bool(self.options.get("enable_thinking", False)))
                     for m in messages[i:i + self.batch_size]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            with torch.inference_mode():
                ids = model.generate(**enc, generation_config=gen_cfg)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out


def generate_questions(records: list[dict], questioner: LlmQuestioner, *, progress: bool = False) -> dict:
    """Give every ``parsed: false`` record DSG questions (in place). Returns counts:
    ``{"asked", "generated", "fallback", "reasons": {reason: n}}``."""
    from tqdm.auto import tqdm

    todo = [r for r in records if not r.get("parsed")]
    stats: dict = {"asked": len(todo), "generated": 0, "fallback": 0, "reasons": {}}
    if not todo:
        return stats
    questioner.load()
    who = questioner.identity
    chunk = max(1, questioner.batch_size)
    with tqdm(total=len(todo), desc=f"questions by {who['generator']}", unit="prompt", disable=not progress) as bar:
        for start in range(0, len(todo), chunk):
            batch = todo[start:start + chunk]
            _ask(batch, questioner)
            for rec in batch:
                by = rec["questions_by"]
                stats[by["status"]] += 1
                if by["status"] == "fallback":
                    stats["reasons"][by["reason"]] = stats["reasons"].get(by["reason"], 0) + 1
            bar.update(len(batch))
    return stats


def _ask(batch: list[dict], q: LlmQuestioner) -> None:
    """DSG's three steps for a batch of records: tuples first, then questions and dependencies of
    the tuples that parsed (DSG ``generate_dsg``)."""
    who, notes = q.identity, [[] for _ in batch]
    outs1 = q.complete([dsg.build_prompt("tuple", r["text"]) for r in batch])
    tuples: list = []
    for k, (rec, out) in enumerate(zip(batch, outs1)):
        try:
            tuples.append(dsg.parse_tuples(out, notes[k]))
        except dsg.DsgError as e:
            tuples.append(None)
            _fallback(rec, who, str(e), notes[k], out)
    live = [k for k, t in enumerate(tuples) if t]
    listed = {k: "\n".join(f"{i} | {t}" for i, t in tuples[k].items()) for k in live}
    outs = q.complete([dsg.build_prompt(step, batch[k]["text"], listed[k])
                       for step in ("question", "dependency") for k in live])
    for n, k in enumerate(live):
        q_out, d_out = outs[n], outs[n + len(live)]
        try:
            rows = dsg.assemble(tuples[k], q_out, d_out, notes[k])
        except dsg.DsgError as e:
            _fallback(batch[k], who, str(e), notes[k], q_out)
            continue
        rec = batch[k]
        new = dsg_record(rec["source"], rec["category"], rec["text"], rows, template=rec["template"],
                         where=(rec.get("source_file", ""), rec.get("source_line", 0)))
        rec.update({key: new[key] for key in STRUCTURE})
        rec["questions_by"] = {**who, "status": "generated", "notes": notes[k][:MAX_NOTES]}


def _fallback(rec: dict, who: dict, reason: str, notes: list[str], output: str) -> None:
    """Keep the importer's whole-prompt question; say why and show the start of what the LLM wrote."""
    rec["questions_by"] = {**who, "status": "fallback", "reason": reason, "notes": notes[:MAX_NOTES],
                           "output_head": output[:200]}
