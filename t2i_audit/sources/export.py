"""``prompts export --layout``: a suite handed to another generator, in the files it reads, with the list of
files it is expected to write back — which ``run --images`` then reads (:mod:`.layouts`).

* ``geneval`` — ``evaluation_metadata.jsonl`` (GenEval's generation/diffusers_generate.py reads it; each line
  keeps a GenEval import's own object, else one built from the record, plus ``t2i_audit_id``); the generator
  writes ``OUTDIR/<index:05d>/metadata.jsonl`` and ``OUTDIR/<index:05d>/samples/<k:04d>.png``;
* ``t2i-compbench`` — ``prompts.txt``, one prompt a line (T2I-CompBench's sampling scripts); expected back
  ``OUTDIR/samples/<prompt>_<line*n + k:06d>.png``;
* ``imagefolder`` — ``metadata.jsonl`` (``file_name``, ``prompt``, ``prompt_id``, ``sample``, ``seed``: the seed
  t2i-audit's own pipeline would use); a lab's sampler writes each ``file_name`` beside it.

Every layout also gets ``prompts.jsonl`` (the records: ``run --prompts``) and ``expected.txt`` (every file expected
back, one a line, relative to the folder ``run --images`` is given).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AuditError
from ..rundir import atomic_write_jsonl, atomic_write_text

EXPORT_LAYOUTS = ("geneval", "t2i-compbench", "imagefolder")


def export_layout(records: list[dict], layout: str, out: Path, images_per_prompt: int = 1, seed: int = 0) -> str:
    """Write ``records`` for ``layout`` into the folder ``out``; return what to tell the user (the files to give the
    generator, the files expected back, the command that reads them)."""
    if layout not in EXPORT_LAYOUTS:
        raise AuditError(f"--layout {layout!r}: prompts export writes {', '.join(EXPORT_LAYOUTS)}")
    n = images_per_prompt
    atomic_write_jsonl(out / "prompts.jsonl", records)
    if layout == "geneval":
        atomic_write_jsonl(out / "evaluation_metadata.jsonl", [_geneval_line(r) for r in records])
        expected = [f"{i:05d}/samples/{k:04d}.png" for i in range(len(records)) for k in range(n)]
        give, back = out / "evaluation_metadata.jsonl", "OUTDIR (GenEval's --outdir)"
        how = f"python generation/diffusers_generate.py {give} --outdir OUTDIR --n_samples {n}"
    elif layout == "t2i-compbench":
        for r in records:
            if "/" in r["text"] or "\n" in r["text"] or "\x00" in r["text"]:
                raise AuditError(f"prompt {r['id']} ({r['text']!r}): T2I-CompBench names each image by its "
                                 "prompt, and a file name cannot hold '/' or a line break; use --layout imagefolder")
        atomic_write_text(out / "prompts.txt", "".join(r["text"] + "\n" for r in records))
        expected = [f"samples/{r['text']}_{i * n + k:06d}.png" for i, r in enumerate(records) for k in range(n)]
        give, back = out / "prompts.txt", "OUTDIR (the folder holding samples/)"
        how = f"one image per line of {give} and sample, {n} a prompt, numbered by one running counter"
    else:
        from ..generate import image_seed

        rows = [{"file_name": f"{r['id']}_{k}.png", "prompt": r["text"], "prompt_id": r["id"], "sample": k,
                 "seed": image_seed(r["id"], k, seed)} for r in records for k in range(n)]
        atomic_write_jsonl(out / "metadata.jsonl", rows)
        expected = [row["file_name"] for row in rows]
        give, back = out / "metadata.jsonl", str(out)
        how = "each row's image (its prompt, seed) saved as its file_name beside metadata.jsonl"
    atomic_write_text(out / "expected.txt", "".join(e + "\n" for e in expected))
    return (f"wrote {len(records)} prompts for {layout} to {out}\n"
            f"  give the generator: {give}\n  it makes: {how}\n"
            f"  expected back: {len(expected)} images in {back}, listed in {out / 'expected.txt'} "
            f"(e.g. {expected[0]})\n"
            f"  then: t2i-audit run --images {back.split(' ')[0]} --prompts {out / 'prompts.jsonl'} -n {n} "
            f"--name NAME")


def _geneval_line(r: dict) -> dict:
    """A GenEval import keeps its own line; another record gets one built from its objects (GenEval's detector
    scores ``include``: class, count, color), with its id so the images come back to it."""
    if r.get("source") == "geneval" and isinstance(r.get("source_meta"), dict):
        return {**r["source_meta"], "t2i_audit_id": r["id"]}
    include = [{"class": o["name"], "count": int(o.get("count") or 1),
                **({"color": o["attributes"]["color"]} if (o.get("attributes") or {}).get("color") else {})}
               for o in r.get("objects") or []]
    return {"tag": r["category"], "include": include, "prompt": r["text"], "t2i_audit_id": r["id"]}
