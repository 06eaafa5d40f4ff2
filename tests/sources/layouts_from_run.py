"""A run's images laid out as other tools lay theirs (GenEval, T2I-CompBench, ImageFolder, a saved Hugging Face
dataset, a CSV manifest): what `run --images` reads back. Bytes are copied as they are, so an ingested run's
images are the run's own, image for image."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from t2i_audit.rundir import RunDir


def run_images(run_root: Path) -> tuple[list[dict], list[dict]]:
    rd = RunDir(run_root)
    return rd.read_prompts(), rd.read_images()


def make_layout(run_root: Path, layout: str, dest: Path) -> Path:
    """``dest`` holding the run's images in ``layout``; returns what to give ``--images`` (the folder, or the
    manifest file)."""
    prompts, images = run_images(run_root)
    index = {p["id"]: i for i, p in enumerate(prompts)}
    text = {p["id"]: p["text"] for p in prompts}
    n = max(r["sample"] for r in images) + 1
    dest.mkdir(parents=True)
    src = {(r["prompt_id"], r["sample"]): Path(run_root) / r["path"] for r in images}
    if layout == "geneval":
        for p in prompts:
            folder = dest / f"{index[p['id']]:05d}"
            (folder / "samples").mkdir(parents=True)
            (folder / "metadata.jsonl").write_text(json.dumps({"tag": p["category"], "prompt": p["text"]}) + "\n")
        for (pid, k), f in src.items():
            shutil.copyfile(f, dest / f"{index[pid]:05d}" / "samples" / f"{k:04d}.png")
        return dest
    if layout == "t2i-compbench":
        (dest / "samples").mkdir()
        for (pid, k), f in src.items():
            shutil.copyfile(f, dest / "samples" / f"{text[pid]}_{index[pid] * n + k:06d}.png")
        return dest
    rows = [{"file_name": f"img{index[pid]}_{k}.png", "prompt": text[pid], "sample": k} for (pid, k) in src]
    if layout == "imagefolder":
        for (pid, k), f in src.items():
            shutil.copyfile(f, dest / f"img{index[pid]}_{k}.png")
        (dest / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return dest
    if layout == "manifest":
        (dest / "pics").mkdir()
        for (pid, k), f in src.items():
            shutil.copyfile(f, dest / "pics" / f"img{index[pid]}_{k}.png")
        with open(dest / "manifest.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, ["path", "prompt", "sample"])
            w.writeheader()
            w.writerows({"path": f"pics/{r['file_name']}", "prompt": r["prompt"], "sample": r["sample"]} for r in rows)
        return dest / "manifest.csv"
    if layout in ("hf-dataset", "hf-parquet"):  # save_to_disk's folder, or Parquet files as the Hub keeps them
        from datasets import Dataset, Features, Image, Value

        feats = Features({"image": Image(), "prompt": Value("string"), "sample": Value("int64")})
        ds = Dataset.from_dict({"image": [{"bytes": f.read_bytes(), "path": None} for f in src.values()],
                                "prompt": [text[pid] for pid, _ in src], "sample": [k for _, k in src]},
                               features=feats)
        if layout == "hf-parquet":
            (dest / "data").mkdir()
            ds.to_parquet(str(dest / "data" / "train-00000-of-00001.parquet"))
            return dest
        ds.save_to_disk(str(dest / "ds"))
        return dest / "ds"
    raise ValueError(layout)
