"""Text-encoder activations: every layer, pooled at the end-of-text token, over tokens, per slot.

Only the tokenizers and text encoders of a model are loaded (never the UNet or VAE), so this
runs on tens of thousands of prompts, generated or not. The states are the ones the denoiser
is conditioned on: the pipeline's own ``encode_prompt`` runs and is intercepted
(pipeline_text.py), so template, caption cleaning, max length, padding and mask-or-not are the
pipeline's (SD3/FLUX run T5 unmasked on prompts padded to ``max_sequence_length``; PixArt-Σ masks
at 300 tokens; CLIP pads to 77). tests/fidelity/ pins the stored numbers to ``encode_prompt``.

On disk, per encoder (``activations/<encoder>/``):

* ``<layer>__<pooling>.npy`` — float16, one row per prompt, rows aligned with
* ``index.jsonl`` — ``{"row": 0, "prompt_id": "…"}``;
* ``meta.json`` — layers, poolings, dims, the encoder's fingerprint, the truncated prompts, and
  how the pipeline ran it: ``conditioning_layer`` (the stored layer the denoiser sees, or null
  with the reason), ``encode_kwargs``, ``sequence_length``, ``mask_passed``, ``pooled_used``.
  It is written last, so its presence marks a finished extraction.

Layers: ``h00`` is the token embedding output, ``h01`` … the output of each block, ``final``
the encoder's last_hidden_state where it differs from the last block (CLIP's final layer norm),
``pooled`` the pooled vector (CLIP's text_embeds / pooler_output; pooling ``prompt``).
``--layers conditioning`` selects the layer the pipeline conditions on.
Poolings: ``eos`` (the last real token by the tokenizer's attention mask: CLIP's and T5's
end-of-text), ``mean`` (mean over real tokens, specials included), ``slot-<name>`` (mean over
the tokens inside the slot's character span, mapped through any template; NaN where the prompt
has no such slot or it was truncated away).

Extraction is resumable: finished chunks are kept under ``.parts/<key>/`` and a rerun with the
same key picks up after the last one; a finished directory is not redone. Under ``accelerate
launch`` the chunks are shared between processes (each writes its own part files) and only the
main process merges and writes ``index.jsonl`` and ``meta.json``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ...errors import AuditError
from ...records import read_records
from ...rundir import atomic_write_json, atomic_write_jsonl, content_id, file_sha256
from ...safeload import read_cache_json, read_json

CHUNK = 256
MODE_VERSION = 2  # 2: the pipeline's own encode_prompt (1: our own padding/masking)


# --- resolving a model to its text encoders ---------------------------------------------------
def discover_text_encoders(path: Path) -> list[dict]:
    """Text encoders in a diffusers pipeline folder: ``text_encoder*/`` with ``tokenizer*/``."""
    path = Path(path)
    found = []
    for enc in sorted(p for p in path.glob("text_encoder*") if (p / "config.json").exists()):
        tok = "tokenizer" + enc.name[len("text_encoder"):]
        if not (path / tok).is_dir():
            continue
        config = read_json(enc / "config.json", finite=False)  # the user's model folder: a located error
        mtype = str(config.get("model_type", "")) if isinstance(config, dict) else ""
        kind = "t5" if "t5" in mtype else "clip" if "clip" in mtype else mtype or "auto"
        found.append({"name": enc.name, "tokenizer": tok, "kind": kind})
    return found


def resolve_text_encoders(model: str) -> dict:
    """``{"model", "path", "revision", "text_encoders"}`` from a model card or a local folder."""
    card = None
    try:
        from ...models import resolve_model  # written by the lead; absent in early checkouts
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


def encoder_fingerprint(path: str, enc: dict, revision: str | None, variant=None) -> str:
    """Changes when the encoder's config, weights files or tokenizer change, or the run's variant
    (``variant``: LoRAs, replaced components; t2i_audit.variants) does."""
    h = hashlib.sha1(json.dumps([enc, revision]).encode())
    if variant:
        h.update(f"variant {variant.key()}".encode())
    for sub in (enc["name"], enc["tokenizer"]):
        folder = Path(path) / sub
        if folder.is_dir():
            for f in sorted(folder.iterdir()):
                if f.is_file():
                    h.update(f.name.encode())
                    # by content: weights replaced by others of the same size were the same fingerprint
                    h.update(f.read_bytes() if f.suffix == ".json" else content_id(f).encode())
        else:
            h.update(f"{path}/{sub}".encode())  # a hub repo id: name + revision identify it
    return h.hexdigest()[:16]


# --- a whole run, on disk ---------------------------------------------------------------------
def _slot_names(prompts: Iterable[dict]) -> list[str]:
    return sorted({s for p in prompts for s in (p.get("spans") or {})})


def save_part(part: Path, arrays: dict) -> None:
    """One chunk's arrays as ``part_XXXXX.npz``, renamed into place (a kill never leaves half a part)."""
    tmp = part.with_name(part.stem + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(part)


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


def _encoder_key(fingerprint: str, layers, poolings, ids, mode: dict) -> str:
    return hashlib.sha1(json.dumps([fingerprint, str(layers), list(poolings), ids, mode, MODE_VERSION],
                                   sort_keys=True, default=str).encode()).hexdigest()[:16]


def _finished(enc_dir: Path, key: str) -> dict | None:
    meta = read_cache_json(enc_dir / "meta.json")  # missing or damaged: extracted again
    if meta is not None and meta.get("key") == key and arrays_intact(enc_dir, meta):
        return meta
    return None


def array_hashes(enc_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """sha256 of each stored ``<name>.npy``: meta.json records them, so a flipped byte is seen."""
    return {n: file_sha256(Path(enc_dir) / f"{n}.npy") for n in names}


def arrays_intact(enc_dir: Path, meta: dict) -> bool:
    """Every array meta.json lists is on disk with its recorded hash (a damaged one is extracted again).
    Extractions made before hashes were recorded are checked for presence only."""
    recorded = meta.get("sha256") or {}
    for name in meta.get("arrays", []):
        path = Path(enc_dir) / f"{name}.npy"
        if not path.is_file() or (name in recorded and file_sha256(path) != recorded[name]):
            return False
    return True


def extract_text_activations(prompts: list[dict], out_dir: Path, model: str, *, layers: str = "all",
                             poolings: Sequence[str] = ("eos", "mean", "slot"), device: str = "cpu",
                             dtype: str | None = None, batch_size: int = 32,
                             progress: bool = True, state=None, variant=None) -> dict[str, dict]:
    """Every text encoder of ``model`` → ``out_dir/<encoder>/``, in the pipeline's own mode
    (see pipeline_text.py); returns ``{encoder: meta}`` (``{}`` on a non-main process).
    Finished encoders are not redone. ``variant``: LoRAs / replaced components applied (t2i_audit.variants).

    Under ``accelerate launch`` each process encodes a contiguous share of the chunks into their
    own part files (``device`` is this process's); the main process merges once all are there.
    Chunks are ``CHUNK`` rows whatever the process count, so batches — and the numbers — are the
    ones a single process computes, and a resume with another process count reuses every part.
    """
    from ...families import pipeline_family
    from ...generate import effective_dtype
    from ...models import resolve_model
    from ...processes import process_state
    from .pipeline_text import PipelineTextEncoder, load_text_pipeline

    bad = set(poolings) - {"eos", "mean", "slot"}
    if bad:
        raise AuditError(f"--poolings: unknown {sorted(bad)} (choose from eos, mean, slot)")
    card = resolve_model(model).with_variant(variant)
    path = card.pretrained_path()
    encoders = card.text_encoders
    if not encoders:
        raise AuditError(f"model {model!r} ({path}): no text encoders found (need text_encoder*/ "
                         "with tokenizer*/ subfolders)")
    # T5-XXL in float32 is ~19 GB: load in the run's dtype on an accelerator (float32 on CPU)
    dtype, _ = effective_dtype(dtype or card.defaults.get("dtype", "float32"), device)
    if device == "cpu":
        dtype = "float32"
    ids = [p["id"] for p in prompts]
    mode = {"call": card.call, "dtype": dtype}
    if (pipeline_family(card.pipeline or "") or {}).get("batch_dependent"):
        # PipelineTextEncoder.encode makes these one prompt at a time (their states depend on the batch):
        # not the arrays a batched extraction of an older version cached
        mode["one_prompt_at_a_time"] = True
    state = state or process_state(device)
    state.wait_for_everyone()  # no process reads what the main one is still merging
    fps = {e["name"]: encoder_fingerprint(path, e, card.revision, card.adapted) for e in encoders}
    keys = {name: _encoder_key(fp, layers, poolings, ids, mode) for name, fp in fps.items()}
    metas = {name: m for name in keys if (m := _finished(Path(out_dir) / name, keys[name])) is not None}
    todo = [name for name in keys if name not in metas]
    if not todo:
        return metas
    main = state.is_main_process
    parts = {name: Path(out_dir) / name / ".parts" / keys[name] for name in todo}
    for folder in parts.values():
        folder.mkdir(parents=True, exist_ok=True)
    n_chunks = (len(ids) + CHUNK - 1) // CHUNK
    # parts whose info.json (how the encoder ran) is lost or damaged are encoded again, rewriting it
    has_info = {n: read_cache_json(parts[n] / "info.json") is not None for n in todo}
    with state.split_between_processes(list(range(n_chunks))) as share:
        missing = [c for c in share
                   if not all(has_info[n] and (parts[n] / f"part_{c:05d}.npz").exists() for n in todo)]
    if missing:  # a process whose chunks are all on disk loads nothing
        pipe = load_text_pipeline(path, revision=card.revision, variant=card.variant, device=device, dtype=dtype,
                                  components=card.load_components(dtype, text_only=True), card=card)
        encoder = PipelineTextEncoder(pipe, card.call)
        if progress and main:
            print(f"[probe] text encoders {', '.join(todo)}: {len(ids)} prompts through "
                  f"{encoder.pipeline_class}.encode_prompt {encoder.mode}"
                  + (f", {state.num_processes} processes" if state.num_processes > 1 else ""), file=sys.stderr)
    slots = _slot_names(prompts) if "slot" in poolings else []
    for c in missing:
        chunk = prompts[c * CHUNK:(c + 1) * CHUNK]
        acc: dict[str, dict[str, list]] = {n: {} for n in todo}
        for b in range(0, len(chunk), batch_size):
            batch = chunk[b:b + batch_size]
            res = encoder.encode([p["text"] for p in batch], [p.get("spans") or {} for p in batch],
                                 layers=layers, poolings=poolings, slot_names=slots)
            for name in todo:
                if name not in res:
                    raise AuditError(f"{encoder.pipeline_class}.encode_prompt did not run {name}")
                info = res[name].pop("_info")
                if not has_info[name]:  # how the encoder ran, for meta.json
                    atomic_write_json(parts[name] / "info.json", info)
                    has_info[name] = True
                res[name].pop("_layers")
                for k, v in res[name].items():
                    acc[name].setdefault(k, []).append(v)
        for name in todo:
            arrays = {k: np.concatenate(v).astype(np.float16 if k != "_truncated" else bool)
                      for k, v in acc[name].items()}
            save_part(parts[name] / f"part_{c:05d}.npz", arrays)
        if progress and main:
            print(f"[probe] text encoders: {min((c + 1) * CHUNK, len(ids))}/{len(ids)}", file=sys.stderr)
    state.wait_for_everyone()  # every part is on disk
    if not main:
        return {}
    for name in todo:
        enc_dir = Path(out_dir) / name
        metas[name] = _finish_encoder(enc_dir, parts[name], n_chunks, ids, key=keys[name], fingerprint=fps[name],
                                      info=read_json(parts[name] / "info.json", finite=False),
                                      kind=next(e.get("kind") for e in encoders if e["name"] == name),
                                      model=model, progress=progress)
    return metas


def _finish_encoder(enc_dir: Path, parts: Path, n_chunks: int, ids: list[str], *, key: str, fingerprint: str,
                    info: dict, kind: str | None, model: str, progress: bool) -> dict:
    names, trunc = merge_parts(enc_dir, parts, n_chunks, len(ids))
    atomic_write_jsonl(enc_dir / "index.jsonl", ({"row": i, "prompt_id": pid} for i, pid in enumerate(ids)))
    meta = {
        "key": key, "fingerprint": fingerprint, "n": len(ids), "kind": kind, "model": model,
        "layers": list(dict.fromkeys(n.split("__")[0] for n in names)),
        "poolings": list(dict.fromkeys(n.split("__")[1] for n in names)),
        "arrays": names, "dim": int(np.load(enc_dir / f"{names[0]}.npy", mmap_mode="r").shape[1]) if names else 0,
        "truncated": [pid for pid, t in zip(ids, trunc) if t],
        "bytes": sum((enc_dir / f"{n}.npy").stat().st_size for n in names),
        "parts": n_chunks,  # CHUNK rows each; the process count is left out (the fit key hashes meta.json)
        "sha256": array_hashes(enc_dir, names),
        **info,
    }
    atomic_write_json(enc_dir / "meta.json", meta)
    shutil.rmtree(enc_dir / ".parts", ignore_errors=True)
    if meta["truncated"] and progress:
        print(f"[probe] {enc_dir.name}: {len(meta['truncated'])} prompts truncated at "
              f"{meta.get('sequence_length')} tokens (listed in {enc_dir / 'meta.json'})", file=sys.stderr)
    return meta


def load_activations(enc_dir: Path) -> tuple[dict, list[str]]:
    """(meta, prompt ids by row) of a finished encoder directory."""
    enc_dir = Path(enc_dir)
    if not (enc_dir / "meta.json").exists():
        raise AuditError(f"{enc_dir}: no finished extraction (meta.json missing); run `t2i-audit probe`")
    try:  # damaged: `probe` extracts it again (its _finished reads it as not done)
        meta = read_json(enc_dir / "meta.json", finite=False)
    except AuditError as e:
        raise AuditError(f"{e}; rerun `t2i-audit probe` to extract it again") from None
    if not isinstance(meta, dict):
        raise AuditError(f"{enc_dir / 'meta.json'}: not a JSON object; rerun `t2i-audit probe` to extract it again")
    ids = [r["prompt_id"] for r in read_records(enc_dir / "index.jsonl", "activation-index")]
    return meta, ids


def load_array(enc_dir: Path, array: str) -> np.ndarray:
    path = Path(enc_dir) / f"{array}.npy"
    if not path.exists():
        raise AuditError(f"{path}: activation array missing")
    try:
        return np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as e:  # truncated or overwritten bytes
        raise AuditError(f"{path}: corrupt activation array ({e}); delete it and rerun `t2i-audit probe`") from None
