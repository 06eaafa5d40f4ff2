"""``t2i-audit verify RUN``: check a run directory against its own records, read-only.

What a run records about its files is checked, category by category:

* ``json``: every ``*.json`` parses and every ``*.jsonl`` line parses (a torn last line is a
  kill's unfinished append: the next run of that stage drops it, but until then it is reported);
* ``fields``: every record of the run's own files holds what its readers rely on — the schemas every
  command reads them with (:mod:`t2i_audit.records`: types, ranges, finite numbers, known values);
* ``images``: every record of images.jsonl has its PNG, with the recorded sha256. A file whose
  hash differs is then decoded to say how it is damaged (truncated, or a valid image with other
  bytes); a file whose hash matches holds the bytes we encoded, so decoding it again proves nothing.
  Bytes depend on the machine (CPU/GPU kernels round differently), so a decodable file of the
  recorded size whose pixel digest (8×8 block means, recorded at generation) is within
  ``CLOSE_LEVELS`` of the record's is the same picture made elsewhere: listed as *regenerated
  elsewhere*, not as damage (its scores, keyed to the old bytes, still show as stale);
* ``scores``: every score record's ``image_sha256`` is the hash of the image file now on disk
  (a stale record scored other pixels);
* ``activations``: every array ``activations/<enc>/meta.json`` lists is a loadable ``.npy`` with
  ``meta["n"]`` rows and the sha256 meta.json recorded, and index.jsonl has ``n`` rows;
* ``records``: no key twice in a file of a kind that names each record once (:attr:`RecordKind.key`: a prompt
  id in prompts.jsonl, an image in images.jsonl, an (image, question or metric) in a score file) — a reader
  refuses the file, and before readers did, a prompt's images moved category or an image counted twice;
* ``stray``: score files no score stage of this run wrote or started, PNGs no image record lists —
  neither images.jsonl nor the shards a resume reads (a PNG recorded only in a shard is a finished image
  a kill kept from being merged: the next run merges it, so it is a note, never advice to move it);
* ``stages``: every stage the manifest records finished (a killed run says ``running``);
* ``complete``: every file a stage finished holds the lines that stage recorded (manifest.json ``finished``): a
  file cut short after it was written is named as such — not as images a kill kept from being merged.

No torch here (``verify`` must be instant); numpy and PIL are enough.
"""

from __future__ import annotations

import fcntl
import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from .errors import AuditError
from .ownership import resume_command
from .finished_files import FINISHED, complete_lines
from .records import RECORD_KINDS, kind_of, problems_of, repeats_in
from .rundir import RunDir, file_sha256
from .safeload import loads_json

# every category verify checks, with what it checks: ``verify --json`` lists them all, clean or not
CATEGORIES = {
    "json": "every *.json parses; every *.jsonl line parses (bounded reader: depth, size, file:line)",
    "fields": "every record of the run's own files has the types, ranges and values its readers need",
    "images": "every image images.jsonl lists is on disk with its recorded sha256",
    "scores": "every score record's image_sha256 is the hash of the image now on disk",
    "activations": "every array meta.json lists loads, has meta's n rows and its recorded sha256",
    "records": "no record key twice in a file (a prompt id in prompts.jsonl, an image in images.jsonl, an image's "
               "question or metric in a score file …)",
    "stray": "no score file or PNG that this run's stages did not write (images.jsonl and shards/ are read)",
    "stages": "every stage the manifest records has finished",
    "complete": "every file a finished stage wrote holds the lines the manifest recorded (none cut short)",
}
CLOSE_LEVELS = 4  # 8-bit levels of an 8×8 block mean: rounding elsewhere moves them by 0-2, damage far more


@dataclass
class Problem:
    category: str
    path: str  # relative to the run directory
    problem: str


class _Verifier:
    def __init__(self, rd: RunDir):
        self.rd = rd
        self.problems: list[Problem] = []
        self.checked = dict.fromkeys(CATEGORIES, 0)
        self.records: dict[Path, list[dict]] = {}  # parsed JSONL files, good lines only
        self.numbered: dict[Path, list[tuple[int, dict]]] = {}  # the same, with their line numbers
        self.regenerated: list[dict] = []  # other bytes, same picture: made on another machine
        self.unsound: set[Path] = set()  # JSON documents whose fields its readers refuse
        self.unmerged: list[str] = []  # PNGs recorded only in shards/: finished, merged by the next run

    def bad(self, category: str, path: Path, problem: str) -> None:
        self.problems.append(Problem(category, self.rd.rel(path), problem))

    # --- json ---------------------------------------------------------------------------
    def check_json_files(self) -> None:
        for path in sorted(self._files("*.json")):
            self.checked["json"] += 1
            try:
                value = loads_json(path.read_bytes(), self.rd.rel(path), finite=False)  # fields: NaN named by key
            except AuditError as e:
                self.bad("json", path, f"does not parse ({e})")
                continue
            kind = kind_of(self.rd.rel(path))
            if kind is not None:
                self.checked["fields"] += 1
                found = problems_of(kind, value)
                if found:
                    self.unsound.add(path)
                    self.bad("fields", path, f"{'; '.join(found[:3])} — {RECORD_KINDS[kind].advice(path)}")
        for path in sorted(self._files("*.jsonl")):
            self.checked["json"] += 1
            self.records[path] = self._sound(path, self._parse_jsonl(path))

    def _sound(self, path: Path, numbered: list[tuple[int, dict]]) -> list[dict]:
        """The records of a registered kind that its readers accept (the others are named under ``fields``
        and left out of the checks below, which read them as the commands do)."""
        kind = kind_of(self.rd.rel(path))
        if kind is None:
            return [r for _, r in numbered]
        self.checked["fields"] += 1
        good, bad = [], {}
        self.numbered[path] = []
        for i, rec in numbered:
            found = problems_of(kind, rec)
            if found:
                bad[i] = found[0]
            else:
                good.append(rec)
                self.numbered[path].append((i, rec))
        if bad:
            first = next(iter(bad))
            self.bad("fields", path, f"{len(bad)} record(s) its readers refuse: line(s) "
                                     + ", ".join(map(str, list(bad)[:5])) + (" …" if len(bad) > 5 else "")
                                     + f" (first, line {first}: {bad[first]}) — {RECORD_KINDS[kind].advice(path)}")
        return good

    def _files(self, pattern: str):
        # hidden names are temp files of writes in flight (``.x.png.abc.tmp``) or locks
        return (p for p in self.rd.root.rglob(pattern)
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.rd.root).parts))

    def _parse_jsonl(self, path: Path) -> list[tuple[int, dict]]:
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        out, broken = [], {}  # line number -> why it is corrupted
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{self.rd.rel(path)}:{i}"
            try:
                rec = loads_json(line, where, finite=False)
            except AuditError as e:
                broken[i] = str(e)
                continue
            if isinstance(rec, dict):
                out.append((i, rec))
            else:
                broken[i] = f"{where}: not a JSON object"
        torn = len(lines) in broken and not raw.endswith(b"\n")
        if torn:
            del broken[len(lines)]
            self.bad("json", path, f"torn last line {len(lines)} (an append cut short by a kill; "
                                   "the next run of that stage drops it)")
        if broken:
            shown = ", ".join(map(str, list(broken)[:5])) + (" …" if len(broken) > 5 else "")
            self.bad("json", path, f"{len(broken)} corrupted line(s): {shown} (first: {next(iter(broken.values()))})")
        return out

    # --- images -------------------------------------------------------------------------
    def check_images(self) -> dict[tuple, Optional[str]]:
        """Hash every recorded image; return (prompt id, sample) → sha256 now on disk (None: missing)."""
        now: dict[tuple, Optional[str]] = {}
        for rec in self.records.get(self.rd.images, []):
            self.checked["images"] += 1
            key = (rec.get("prompt_id"), int(rec.get("sample", 0)))
            path = self.rd.root / str(rec.get("path", ""))
            try:
                digest = file_sha256(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                now[key] = None
                self.bad("images", path, "missing (listed in images.jsonl)")
                continue
            now[key] = digest
            if digest == rec.get("sha256"):
                continue
            levels = _pixel_distance(path, rec)
            if levels is not None and levels <= CLOSE_LEVELS:
                self.regenerated.append({"path": self.rd.rel(path), "levels": levels})
                continue
            self.bad("images", path, f"sha256 {digest[:12]}… differs from the record's "
                                     f"{str(rec.get('sha256'))[:12]}…: {_describe_png(path, rec)}"
                                     + (f"; its pixels differ by {levels} levels" if levels is not None else ""))
        return now

    # --- scores -------------------------------------------------------------------------
    def check_scores(self, now: dict[tuple, Optional[str]]) -> None:
        paths = {key: rec.get("path") for key, rec in
                 (((r.get("prompt_id"), int(r.get("sample", 0))), r) for r in self.records.get(self.rd.images, []))}
        for path in sorted(p for p in self.records if p.parent == self.rd.scores_dir):
            self.checked["scores"] += 1
            stale: dict[tuple, list[dict]] = defaultdict(list)
            for r in self.records[path]:
                if "image_sha256" not in r:
                    continue
                key = (r.get("prompt_id"), int(r.get("sample", 0)))
                if key not in now or r["image_sha256"] != now[key]:
                    stale[key].append(r)
            for key, recs in stale.items():
                shas = sorted({str(r["image_sha256"])[:12] for r in recs})
                if key not in now:
                    what = "an image that images.jsonl does not list"
                elif now[key] is None:
                    what = f"{paths[key]}, which is missing"
                else:
                    what = f"{paths[key]} as sha256 {'/'.join(shas)}…, but the file now hashes {now[key][:12]}…"
                self.bad("scores", path, f"{len(recs)} record(s) of {key[0]} sample {key[1]} are stale: "
                                         f"they scored {what}")

    # --- activations --------------------------------------------------------------------
    def check_activations(self) -> None:
        import numpy as np

        if not self.rd.activations_dir.is_dir():
            return
        for meta_path in sorted(self.rd.activations_dir.glob("*/meta.json")):
            self.checked["activations"] += 1
            enc_dir = meta_path.parent
            try:
                meta = loads_json(meta_path.read_bytes(), self.rd.rel(meta_path), finite=False)
                n, arrays = int(meta["n"]), list(meta["arrays"])
            except (AuditError, KeyError, TypeError, ValueError):
                self.bad("activations", meta_path, "meta.json lacks a readable \"n\" and \"arrays\"")
                continue
            for name in arrays:
                path = enc_dir / f"{name}.npy"
                if not path.is_file():
                    self.bad("activations", path, "missing (listed in meta.json)")
                    continue
                try:
                    rows = np.load(path, mmap_mode="r").shape[0]
                except (ValueError, OSError, EOFError, IndexError) as e:
                    self.bad("activations", path, f"cannot load ({e})")
                    continue
                if rows != n:
                    self.bad("activations", path, f"{rows} rows, meta.json says n = {n}")
                    continue
                want = (meta.get("sha256") or {}).get(name)
                if want and file_sha256(path) != want:
                    self.bad("activations", path, "sha256 differs from the one meta.json recorded (altered bytes)")
            index = enc_dir / "index.jsonl"
            if index in self.records and len(self.records[index]) != n:
                self.bad("activations", index, f"{len(self.records[index])} rows, meta.json says n = {n}")


    # --- records, stray files, stages ---------------------------------------------------------
    def check_duplicates(self) -> None:
        """Every file of a record kind that names each record once (records.RECORD_KINDS[kind].key)."""
        for path in sorted(self.numbered):
            kind = kind_of(self.rd.rel(path))
            spec = RECORD_KINDS[kind]
            if not (spec.key and spec.unique):
                continue
            self.checked["records"] += 1
            twice = repeats_in(kind, self.numbered[path])
            if twice:
                line, earlier, rec = twice[0]
                named = ", ".join(f"{f} {rec.get(f)}" for f in spec.key if rec.get(f) is not None)
                self.bad("records", path, f"{len(twice)} record(s) repeat the key of an earlier line (first: line "
                                          f"{line}, {named}, as line {earlier}): readers refuse the file — keep one "
                                          f"of each, or {spec.advice(path)}")

    def check_stray(self, manifest: dict) -> None:
        score = (manifest.get("stages") or {}).get("score") or {}
        scorers = set(score.get("scorers") or {}) | set(score.get("running") or [])  # finished or started
        if self.rd.scores_dir.is_dir():
            for path in sorted(self.rd.scores_dir.glob("*.jsonl")):
                self.checked["stray"] += 1
                if path.stem not in scorers:
                    self.bad("stray", path, "no score stage of this run wrote it or started it (manifest.json lists "
                                            f"{', '.join(sorted(scorers)) or 'no scorer'}): move it out of scores/")
        listed = {str(r.get("path")) for r in self.records.get(self.rd.images, [])}
        # what the resume reads besides images.jsonl (generate._done_items): the shards of every process
        sharded = {str(r["path"]): r for p in sorted((self.rd.root / "shards").glob("images.rank*.jsonl"))
                   for r in self.records.get(p, [])}
        images_dir = self.rd.root / "images"
        if images_dir.is_dir():
            # any file, of any format: a run's images may be PNG, JPEG or WebP (sources/), so what makes a file
            # stray is that no record lists it, never its extension
            for path in sorted(p for p in images_dir.rglob("*") if p.is_file()):
                rel = self.rd.rel(path)
                self.checked["stray"] += 1
                if rel in listed or any(part.startswith(".") for part in path.relative_to(images_dir).parts):
                    continue
                rec = sharded.get(rel)
                if rec is None:
                    self.bad("stray", path, "a file no image record lists (neither images.jsonl nor shards/): "
                                            "not written by this run's stages")
                elif file_sha256(path) == rec.get("sha256"):
                    self.unmerged.append(rel)
                else:
                    self.bad("images", path, "recorded in shards/ with another sha256 (altered since): the next "
                                             "run of the command that made the run makes it again")

    def check_complete(self, manifest: dict) -> set[str]:
        """Files cut short (or grown) since their stage finished them; returns their run-relative paths."""
        damaged = set()
        table = manifest.get(FINISHED) or {}
        for rel, want in sorted(table.items()):
            path = self.rd.root / rel
            self.checked["complete"] += 1
            if not path.is_file():
                self.bad("complete", path, f"missing: its stage finished it with {want} line(s)")
                damaged.add(rel)
                continue
            have = complete_lines(path.read_bytes())
            if have != want:
                damaged.add(rel)
                self.bad("complete", path, (f"cut short (truncated): {have} complete line(s) of the {want} its stage "
                                            "wrote when it finished" if have < want else
                                            f"{have} lines, but its stage finished it with {want} (lines added since)"))
        return damaged

    def check_stages(self, manifest: dict) -> None:
        for stage, info in (manifest.get("stages") or {}).items():
            self.checked["stages"] += 1
            status = (info or {}).get("status")
            if status in ("running", "incomplete", "done_with_errors"):
                detail = ""
                if stage == "generate":
                    detail = f": {len(self.records.get(self.rd.images, []))} of {info.get('requested', '?')} images"
                self.bad("stages", self.rd.manifest, f"stage {stage} is unfinished (status {status}{detail}): "
                                                     "the run was stopped or failed before it ended")


def _pixel_distance(path: Path, rec: dict) -> Optional[int]:
    """Levels between the file's pixel digest and the record's; None where either cannot be had
    (a run made before digests were recorded, a file that does not decode, another size)."""
    from PIL import Image

    from .generate import digest_distance, pixel_digest

    if not isinstance(rec.get("pixel_digest"), str):
        return None
    try:
        with Image.open(path) as im:
            im.load()
            if list(im.size) != [rec.get("width"), rec.get("height")]:
                return None
            return digest_distance(pixel_digest(im), rec["pixel_digest"])
    except Exception:  # noqa: BLE001 - any decoder or digest error: no distance to give
        return None


def _describe_png(path: Path, rec: dict) -> str:
    from PIL import Image

    size = path.stat().st_size
    try:
        with Image.open(path) as im:
            im.load()
            w, h = im.size
    except Exception as e:  # noqa: BLE001 - any decoder error means the same: not a usable image
        return f"{size} bytes, not a decodable PNG ({type(e).__name__}: {e})"
    return (f"a valid {w}×{h} image with other bytes ({size} bytes; altered, or replaced without "
            f"its record; recorded {rec.get('width')}×{rec.get('height')})")


def _run_in_progress(rd: RunDir) -> bool:
    """True when a run holds the writer lock (read-only probe: never creates the lock file)."""
    for lock in rd.root.glob(".lock*"):
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


def verify_run(run_dir: Path | str | RunDir) -> dict:
    """Check ``run_dir``; returns ``{"run", "ok", "checks": {category: what it checks},
    "summary": {category: {"checked", "damaged"}} (every category, clean ones too),
    "problems": [{"category", "path", "problem"}], "notes"}``."""
    rd = RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    if not rd.prompts.is_file():
        raise AuditError(f"{rd.root}: not a run directory (no prompts.jsonl)")
    notes = []
    if _run_in_progress(rd):
        notes.append("a run is writing this directory now: work in flight may show as damage")
    v = _Verifier(rd)
    v.check_json_files()
    now = v.check_images()
    v.check_scores(now)
    v.check_activations()
    manifest = rd.read_manifest() if rd.manifest.is_file() and not any(  # unsound: named under fields
        p.path == rd.rel(rd.manifest) for p in v.problems) else {}
    v.check_duplicates()
    v.check_stray(manifest)
    v.check_stages(manifest)
    cut = v.check_complete(manifest)
    if rd.rel(rd.images) in cut and v.unmerged:  # the cut lines, not images a kill kept from the merge
        v.bad("complete", rd.images, f"{len(v.unmerged)} of the images it lost are recorded in shards/ and on disk "
                                     "(the rerun merges them back): " + ", ".join(v.unmerged[:5])
                                     + (" …" if len(v.unmerged) > 5 else ""))
        v.unmerged = []
    damaged = {c: sum(p.category == c for p in v.problems) for c in CATEGORIES}
    if v.unmerged:
        notes.append(f"{len(v.unmerged)} finished image(s) are recorded only in shards/ (the run stopped before it "
                     "merged them into images.jsonl; they are the run's own — keep them): the command that continues "
                     "the run merges them without making them again: " + ", ".join(v.unmerged[:5])
                     + (" …" if len(v.unmerged) > 5 else ""))
    if v.regenerated:
        notes.append(f"{len(v.regenerated)} image(s) hold other bytes than recorded but the same picture "
                     f"(pixel digest within {CLOSE_LEVELS} levels): regenerated elsewhere, not damaged: "
                     + ", ".join(r["path"] for r in v.regenerated[:5]) + (" …" if len(v.regenerated) > 5 else ""))
    summary = {c: {"checked": v.checked[c], "damaged": damaged[c]} for c in CATEGORIES}
    summary["images"]["regenerated_elsewhere"] = len(v.regenerated)
    return {"run": str(rd.root), "ok": not v.problems, "resume": resume_command(rd.root),
            "checks": dict(CATEGORIES), "summary": summary,
            "problems": [asdict(p) for p in v.problems], "regenerated_elsewhere": v.regenerated, "notes": notes}


UNITS = {"json": "files", "fields": "files", "images": "images", "scores": "score files", "activations": "encoders",
         "records": "files", "stray": "files", "stages": "stages", "complete": "files"}


def format_result(result: dict) -> str:
    lines = [f"verify {result['run']}"]
    for c, s in result["summary"].items():
        # "stray 282 files ok" read as 282 stray files: each line says what was checked, then what was found
        found = STATES.get(c, ("ok", "{n} damaged"))[1 if s["damaged"] else 0].format(n=s["damaged"])
        lines.append(f"  {c:<12} {s['checked']:>6} {UNITS[c] + ' checked:':<21} {found}")
    lines += [f"note: {n}" for n in result["notes"]]
    if result["ok"]:
        lines.append("clean: every recorded file is intact")
        return "\n".join(lines)
    lines.append("damaged:")
    lines += [f"  {p['path']}: {p['problem']}" for p in result["problems"]]
    lines.append(f"{len(result['problems'])} problem(s). To repair:")
    resume = result.get("resume") or f"t2i-audit run --config {Path(result['run']) / 'run.yaml'} --out {result['run']}"
    resume = f"`{resume}`" if resume.startswith("t2i-audit ") else resume  # else: a description (an older select run)
    lines += [f"  {c}: {REPAIR[c].format(run=result['run'], resume=resume)}"
              for c, s in result["summary"].items() if s["damaged"]]
    return "\n".join(lines)


STATES = {"stray": ("none stray", "{n} stray"), "complete": ("none cut short", "{n} cut short"),
          "records": ("no key twice", "{n} with a key twice")}  # (clean, damaged) where "ok"/"damaged" misleads

REPAIR = {
    "json": "a torn last line goes on the next run of its stage; a corrupted line elsewhere stops "
            "the stage that reads it: remove that line (or the file, to redo the stage)",
    "fields": "a record its readers refuse was edited or damaged after t2i-audit wrote it: restore the file from a "
              "copy of the run, or do what the line above says for that file (the stage that writes it redoes it)",
    "images": "rerun the command that made the run ({resume}): damaged images are regenerated and their "
              "scores redone",
    "scores": "rerun `t2i-audit score {run}` (after regenerating damaged images): stale records are rescored",
    "activations": "rerun `t2i-audit probe {run}`: arrays whose bytes differ from the recorded hash are extracted again",
    "records": "remove the duplicated lines (keep the first), then rerun the stage",
    "stray": "move the files listed as stray (no stage of this run wrote them) out of the run directory",
    "stages": "rerun the command that made the run to finish it ({resume})",
    "complete": "a file cut short after its stage finished: for images.jsonl rerun the command that made the run "
                "({resume}) — it merges the records back from shards/ and makes what is gone again; for a score file, "
                "remove it and rerun `t2i-audit score {run}`",
}
