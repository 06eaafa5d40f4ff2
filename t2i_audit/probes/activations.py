"""Text-encoder activations: every layer, pooled at the end-of-text token, over tokens, per slot.

Only the tokenizers and text encoders of a model are loaded (never the UNet or VAE), so this
runs on tens of thousands of prompts, generated or not. Batches are padded to their longest
prompt with the attention mask, not to 77: the states of real tokens are the same (CLIP's
attention is causal and masked; T5's is masked) and it is several times faster.

On disk, per encoder (``activations/<encoder>/``):

* ``<layer>__<pooling>.npy`` — float16, one row per prompt, rows aligned with
* ``index.jsonl`` — ``{"row": 0, "prompt_id": "…"}``;
* ``meta.json`` — layers, poolings, dims, the fingerprint the arrays were made from and the
  truncated prompts. It is written last, so its presence marks a finished extraction.

Layers: ``h00`` is the token embedding output, ``h01`` … the output of each block, ``final``
the encoder's last_hidden_state where it differs from the last block (CLIP's final layer norm).
Poolings: ``eos`` (the last real token: CLIP's and T5's end-of-text), ``mean`` (masked mean
over real tokens, specials included), ``slot-<name>`` (mean over the tokens inside the slot's
character span; NaN where the prompt has no such slot or it was truncated away).

Extraction is resumable: finished chunks are kept under ``.parts/<fingerprint>/`` and a rerun
with the same fingerprint picks up after the last one; a finished directory is not redone.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..errors import AuditError
from ..rundir import atomic_write_json, atomic_write_jsonl, read_jsonl

CHUNK = 256


# --- resolving a model to its text encoders ---------------------------------------------------
def discover_text_encoders(path: Path) -> list[dict]:
    """Text encoders in a diffusers pipeline folder: ``text_encoder*/`` with ``tokenizer*/``."""
    path = Path(path)
    found = []
    for enc in sorted(p for p in path.glob("text_encoder*") if (p / "config.json").exists()):
        tok = "tokenizer" + enc.name[len("text_encoder"):]
        if not (path / tok).is_dir():
            continue
        mtype = json.loads((enc / "config.json").read_text()).get("model_type", "")
        kind = "t5" if "t5" in mtype else "clip" if "clip" in mtype else mtype or "auto"
        found.append({"name": enc.name, "tokenizer": tok, "kind": kind})
    return found


def resolve_text_encoders(model: str) -> dict:
    """``{"model", "path", "revision", "text_encoders"}`` from a model card or a local folder."""
    card = None
    try:
        from ..models import resolve_model  # written by the lead; absent in early checkouts
    except ImportError:
        resolve_model = None
    if resolve_model is not None and not Path(model).is_dir():
        card = resolve_model(model)
    if card is not None:
        path, revision = card.pretrained_path(), card.revision
        encoders = list(card.text_encoders or [])
        if not encoders and Path(path).is_dir():
            encoders = discover_text_encoders(Path(path))
    elif Path(model).is_dir():
        path, revision, encoders = str(model), None, discover_text_encoders(Path(model))
    else:
        raise AuditError(f"--model {model!r}: no model card of that name and no such folder")
    if not encoders:
        raise AuditError(f"model {model!r} ({path}): no text encoders found (need text_encoder*/ "
                         "with tokenizer*/ subfolders)")
    return {"model": model, "path": str(path), "revision": revision, "text_encoders": encoders}


def load_text_encoder(path: str, enc: dict, *, revision: str | None = None, device: str = "cpu"):
    """(tokenizer, model) for one encoder entry; only that tokenizer and encoder are read."""
    import torch
    from transformers import AutoModel, AutoTokenizer, CLIPTextModel, T5EncoderModel

    tok = AutoTokenizer.from_pretrained(path, subfolder=enc["tokenizer"], revision=revision)
    cls = {"clip": CLIPTextModel, "t5": T5EncoderModel}.get(enc.get("kind"), AutoModel)
    model = cls.from_pretrained(path, subfolder=enc["name"], revision=revision,
                                torch_dtype=torch.float32)
    return tok, model.to(device).eval()


def encoder_fingerprint(path: str, enc: dict, revision: str | None) -> str:
    """Changes when the encoder's config, weights files or tokenizer change."""
    h = hashlib.sha1(json.dumps([enc, revision]).encode())
    for sub in (enc["name"], enc["tokenizer"]):
        folder = Path(path) / sub
        if folder.is_dir():
            for f in sorted(folder.iterdir()):
                if f.is_file():
                    h.update(f.name.encode())
                    h.update(f.read_bytes() if f.suffix == ".json" else str(f.stat().st_size).encode())
        else:
            h.update(f"{path}/{sub}".encode())  # a hub repo id: name + revision identify it
    return h.hexdigest()[:16]


# --- one batch --------------------------------------------------------------------------------
def select_layers(spec: str | Sequence, n_hidden: int, has_final: bool) -> list[str]:
    """``"all"``, ``"last"`` or a comma list of hidden-state indices (negative ok) / ``final``."""
    names = [f"h{i:02d}" for i in range(n_hidden)] + (["final"] if has_final else [])
    if spec in ("all", None):
        return names
    if spec == "last":
        return [names[-1]]
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for item in (str(i).strip() for i in items):
        if item in names:
            out.append(item)
            continue
        if item == "final":  # no separate final norm: the encoder's output is its last block
            out.append(names[-1])
            continue
        try:
            out.append(f"h{range(n_hidden)[int(item)]:02d}")
        except (ValueError, IndexError):
            raise AuditError(f"--layers: {item!r} is not a layer (have {names[0]}…{names[-1]}; "
                             f"indices 0..{n_hidden - 1}, negative ok, or 'final')") from None
    return list(dict.fromkeys(out))


def token_slots(offsets, spans: dict, slot_names: Sequence[str]) -> dict[str, list[int]]:
    """Token positions whose character offsets overlap each slot's ``[start, end)`` span."""
    out = {}
    for name in slot_names:
        span = spans.get(name)
        if not span:
            continue
        s, e = span
        idx = [i for i, (a, b) in enumerate(offsets) if b > a and a < e and b > s]
        if idx:
            out[name] = idx
    return out


def encode_batch(texts: Sequence[str], spans: Sequence[dict], tokenizer, model, *,
                 layers: str | Sequence = "all", poolings: Sequence[str] = ("eos", "mean", "slot"),
                 slot_names: Sequence[str] = (), pad_to: int | None = None) -> dict:
    """Pooled states of one batch: ``{"<layer>__<pooling>": float32 array (batch, dim)}``.

    ``pad_to=None`` pads to the longest prompt; an int pads to that length (the 77-token way,
    kept for comparison). Also returns ``"_truncated"``: a bool per prompt.
    """
    import torch

    max_len = tokenizer.model_max_length if tokenizer.model_max_length < 10**6 else 512
    enc = tokenizer(list(texts), padding="max_length" if pad_to else "longest",
                    max_length=pad_to or max_len, truncation=True,
                    return_offsets_mapping=True, return_tensors="pt")
    full = tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
    truncated = np.array([len(ids) > max_len for ids in full])
    offsets = enc.pop("offset_mapping").tolist()
    dev = next(model.parameters()).device
    ids, mask = enc["input_ids"].to(dev), enc["attention_mask"].to(dev)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    hidden = list(out.hidden_states)
    has_final = not torch.equal(out.last_hidden_state, hidden[-1])
    names = select_layers(layers, len(hidden), has_final)
    by_name = {f"h{i:02d}": h for i, h in enumerate(hidden)}
    by_name["final"] = out.last_hidden_state
    m = mask.float()
    last = mask.shape[1] - 1 - torch.flip(mask, dims=[1]).argmax(dim=1)  # last real token
    rows = torch.arange(len(texts), device=dev)
    want_slots = "slot" in poolings
    tok_slots = [token_slots(o, sp, slot_names) for o, sp in zip(offsets, spans)] if want_slots else []
    result: dict = {"_truncated": truncated, "_layers": names}
    for name in names:
        h = by_name[name].float()
        if "eos" in poolings:
            result[f"{name}__eos"] = h[rows, last].cpu().numpy()
        if "mean" in poolings:
            result[f"{name}__mean"] = ((h * m[..., None]).sum(1) / m.sum(1, keepdim=True)).cpu().numpy()
        for slot in slot_names if want_slots else ():
            arr = np.full((len(texts), h.shape[-1]), np.nan, dtype=np.float32)
            for b, ts in enumerate(tok_slots):
                if slot in ts:
                    arr[b] = h[b, ts[slot]].mean(0).cpu().numpy()
            result[f"{name}__slot-{slot}"] = arr
    return result


# --- a whole run, on disk ---------------------------------------------------------------------
def _slot_names(prompts: Iterable[dict]) -> list[str]:
    return sorted({s for p in prompts for s in (p.get("spans") or {})})


def estimate_bytes(n_prompts: int, model, n_layers: int, n_poolings: int) -> int:
    dim = int(getattr(model.config, "hidden_size", 0) or getattr(model.config, "d_model", 0))
    return n_prompts * dim * n_layers * n_poolings * 2


def extract_to_dir(prompts: list[dict], enc_dir: Path, tokenizer, model, *, fingerprint: str,
                   layers: str = "all", poolings: Sequence[str] = ("eos", "mean", "slot"),
                   batch_size: int = 32, progress: bool = True) -> dict:
    """Extract and store one encoder's activations for ``prompts``; returns the meta dict."""
    enc_dir = Path(enc_dir)
    bad = set(poolings) - {"eos", "mean", "slot"}
    if bad:
        raise AuditError(f"--poolings: unknown {sorted(bad)} (choose from eos, mean, slot)")
    ids = [p["id"] for p in prompts]
    slots = _slot_names(prompts) if "slot" in poolings else []
    key = hashlib.sha1(json.dumps([fingerprint, str(layers), list(poolings), ids]).encode()).hexdigest()[:16]
    meta_path = enc_dir / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key and all((enc_dir / f"{a}.npy").exists() for a in meta["arrays"]):
            return meta  # already done: idempotent
    parts = enc_dir / ".parts" / key
    parts.mkdir(parents=True, exist_ok=True)
    n_chunks = (len(ids) + CHUNK - 1) // CHUNK
    n_hidden = int(getattr(model.config, "num_hidden_layers", 0)) + 1
    n_layers = len(select_layers(layers, n_hidden, True)) if layers not in ("all", None) else n_hidden + 1
    n_pool = (("eos" in poolings) + ("mean" in poolings) + len(slots))
    size = estimate_bytes(len(ids), model, n_layers, n_pool)
    if progress:
        print(f"[probe] {enc_dir.name}: {len(ids)} prompts x {n_layers} layers x {n_pool} poolings "
              f"-> about {size / 2**20:.1f} MiB float16 in {enc_dir}", file=sys.stderr)
    for c in range(n_chunks):
        part = parts / f"part_{c:05d}.npz"
        if part.exists():
            continue
        chunk = prompts[c * CHUNK:(c + 1) * CHUNK]
        acc: dict[str, list] = {}
        for b in range(0, len(chunk), batch_size):
            batch = chunk[b:b + batch_size]
            res = encode_batch([p["text"] for p in batch], [p.get("spans") or {} for p in batch],
                               tokenizer, model, layers=layers, poolings=poolings, slot_names=slots)
            res.pop("_layers")
            for k, v in res.items():
                acc.setdefault(k, []).append(v)
        arrays = {k: np.concatenate(v).astype(np.float16 if k != "_truncated" else bool)
                  for k, v in acc.items()}
        tmp = part.with_name(part.stem + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(part)
        if progress:
            print(f"[probe] {enc_dir.name}: {min((c + 1) * CHUNK, len(ids))}/{len(ids)}", file=sys.stderr)
    names, trunc = merge_parts(enc_dir, parts, n_chunks, len(ids))
    layer_names = [name.split("__")[0] for name in names]
    atomic_write_jsonl(enc_dir / "index.jsonl", ({"row": i, "prompt_id": pid} for i, pid in enumerate(ids)))
    meta = {
        "key": key, "fingerprint": fingerprint, "n": len(ids),
        "layers": list(dict.fromkeys(layer_names)),
        "poolings": list(dict.fromkeys(n.split("__")[1] for n in names)),
        "arrays": names, "dim": int(np.load(enc_dir / f"{names[0]}.npy", mmap_mode="r").shape[1]) if names else 0,
        "truncated": [pid for pid, t in zip(ids, trunc) if t],
        "bytes": sum((enc_dir / f"{n}.npy").stat().st_size for n in names),
    }
    atomic_write_json(meta_path, meta)
    shutil.rmtree(enc_dir / ".parts", ignore_errors=True)
    if meta["truncated"] and progress:
        print(f"[probe] {enc_dir.name}: {len(meta['truncated'])} prompts truncated at "
              f"{tokenizer.model_max_length} tokens (listed in {meta_path})", file=sys.stderr)
    return meta


def merge_parts(enc_dir: Path, parts: Path, n_chunks: int, n_rows: int) -> tuple[list[str], list]:
    """Concatenate ``part_*.npz`` chunks into one float16 ``.npy`` per array (atomic renames).

    Returns the array names and the per-row ``_truncated`` flags (empty when not stored).
    """
    files = [np.load(parts / f"part_{c:05d}.npz") for c in range(n_chunks)]
    names = [k for k in files[0].files if not k.startswith("_")] if files else []
    for name in names:
        tmp = enc_dir / f".{name}.tmp.npy"
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16,
                                        shape=(n_rows, files[0][name].shape[1]))
        row = 0
        for f in files:
            a = f[name]
            out[row:row + len(a)] = a
            row += len(a)
        out.flush()
        del out
        tmp.replace(enc_dir / f"{name}.npy")
    trunc = (np.concatenate([f["_truncated"] for f in files]).tolist()
             if files and "_truncated" in files[0].files else [])
    return names, trunc


def extract_text_activations(prompts: list[dict], out_dir: Path, model: str, *, layers: str = "all",
                             poolings: Sequence[str] = ("eos", "mean", "slot"), device: str = "cpu",
                             batch_size: int = 32, progress: bool = True) -> dict[str, dict]:
    """Every text encoder of ``model`` → ``out_dir/<encoder>/``; returns ``{encoder: meta}``."""
    info = resolve_text_encoders(model)
    metas = {}
    for enc in info["text_encoders"]:
        fp = encoder_fingerprint(info["path"], enc, info["revision"])
        enc_dir = Path(out_dir) / enc["name"]
        meta_path = enc_dir / "meta.json"
        if meta_path.exists():  # skip loading the model when nothing changed
            meta = json.loads(meta_path.read_text())
            ids = [p["id"] for p in prompts]
            key = hashlib.sha1(json.dumps([fp, str(layers), list(poolings), ids]).encode()).hexdigest()[:16]
            if meta.get("key") == key:
                metas[enc["name"]] = meta
                continue
        tok, mdl = load_text_encoder(info["path"], enc, revision=info["revision"], device=device)
        meta = extract_to_dir(prompts, enc_dir, tok, mdl, fingerprint=fp, layers=layers,
                              poolings=poolings, batch_size=batch_size, progress=progress)
        meta.update(kind=enc.get("kind"), model=model)
        atomic_write_json(meta_path, meta)
        metas[enc["name"]] = meta
    return metas


def load_activations(enc_dir: Path) -> tuple[dict, list[str]]:
    """(meta, prompt ids by row) of a finished encoder directory."""
    enc_dir = Path(enc_dir)
    if not (enc_dir / "meta.json").exists():
        raise AuditError(f"{enc_dir}: no finished extraction (meta.json missing); run `t2i-audit probe`")
    meta = json.loads((enc_dir / "meta.json").read_text())
    ids = [r["prompt_id"] for r in read_jsonl(enc_dir / "index.jsonl")]
    return meta, ids


def load_array(enc_dir: Path, array: str) -> np.ndarray:
    path = Path(enc_dir) / f"{array}.npy"
    if not path.exists():
        raise AuditError(f"{path}: activation array missing")
    return np.load(path, mmap_mode="r")
