"""Checks made before the first image: what a run will need later is found missing now, not after generating.

* every judge the run will score with can load: its weights are on this machine (a local path, the Hugging Face
  cache) or the Hub can be reached, and the extras its backend imports (open_clip) are installed;
* the dtype suits the device (float16 on CPU runs as float32: said, not silent);
* the judges a run on CPU will download are named up front, with their size.

A problem stops the command (AuditError, exit 2) before anything is written, with the fixes in the options the
command takes. Nothing here loads a model; the Hub is asked only about weights that are not cached.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import AuditError


@dataclass(frozen=True)
class Weights:
    """One set of weights a judge loads: a Hub repo (``files``: any one of them cached is enough), or a path."""

    scorer: str
    repo: Optional[str] = None
    revision: Optional[str] = None
    files: tuple = ("config.json",)
    path: Optional[str] = None
    backend: str = "transformers"


def judge_weights(card: dict) -> list[Weights]:
    """Every set of weights ``card`` loads (its model, and an ``options.attribute_model``); tiny random models
    (built on this machine) and judges without weights (``mini-pixel``) need none."""
    sections = [card.get("model") or {}, (card.get("options") or {}).get("attribute_model") or {}]
    out = []
    for m in sections:
        mid, backend = str(m.get("id") or ""), str(m.get("backend") or "transformers")
        if not mid or mid.startswith("tiny:"):
            continue
        if backend == "open_clip":
            pre = str(m.get("pretrained") or "")
            if m.get("local") or Path(pre).suffix in (".safetensors", ".pt", ".pth", ".bin"):
                out.append(Weights(card["name"], path=pre, backend=backend))
            elif pre:
                out.append(_open_clip_weights(card["name"], mid, pre))
        elif m.get("local") or mid.startswith(("/", "./", "../", "~")) or Path(mid).exists():
            out.append(Weights(card["name"], path=mid, backend=backend))
        elif "/" in mid:  # an org/name Hub repo; a bare label without one names no download
            out.append(Weights(card["name"], repo=mid, revision=str(m.get("revision") or "main"), backend=backend))
    return out


def _open_clip_weights(scorer: str, arch: str, tag: str) -> Weights:
    """open_clip's pretrained tag as the Hub repo its weights come from (``timm/vit_large_patch14_clip_224.openai``)."""
    repo = None
    if importlib.util.find_spec("open_clip") is not None:
        import open_clip

        repo = (open_clip.get_pretrained_cfg(arch, tag) or {}).get("hf_hub", "").strip("/") or None
    return Weights(scorer, repo=repo, revision="main", backend="open_clip",
                   files=("open_clip_model.safetensors", "open_clip_pytorch_model.bin"))


def _cached(w: Weights) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(w.repo, f, revision=w.revision), str) for f in w.files)


def _unreachable(w: Weights) -> Optional[str]:
    """Why the Hub cannot give ``w`` now (None: it can)."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if constants.is_offline_mode():
        return "HF_HUB_OFFLINE is set"
    try:
        HfApi().model_info(w.repo, revision=w.revision, timeout=10)
    except GatedRepoError:
        return "the repo is gated: accept its terms on the Hub and log in (hf auth login)"
    except RepositoryNotFoundError:
        return "no such repo on the Hub (or it is private: log in with hf auth login)"
    except Exception as e:  # noqa: BLE001 — httpx/requests/OS errors alike: the network is what failed
        return f"the Hub cannot be reached ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
    return None


def scored_already(run, name: str, planned: set) -> bool:
    """Every planned image of ``run`` (``(prompt id, sample)``) exists and ``name`` finished scoring it with its
    current card: rerunning the command (offline, on another machine) loads no judge, so none is checked."""
    if not run.images.is_file() or not run.scores(name).is_file():
        return False
    from .scorers.registry import create_scorer
    from .scorers.stage import finished_keys

    try:
        by_key = {(r["prompt_id"], int(r.get("sample", 0))): r for r in run.read_images()}
        if not planned <= set(by_key):
            return False
        return planned <= finished_keys(run.scores(name), create_scorer(name), by_key)
    except AuditError:  # a damaged file: the score stage names it; the judge is checked meanwhile
        return False


def size_text(card: dict) -> str:
    gb = card.get("download_gb")
    return f"about {gb:g} GB" if isinstance(gb, (int, float)) else "size not stated on its card"


def check_judges(names: list[str], *, device: str, command: str = "run", say=None) -> None:
    """Refuse (AuditError naming each judge and the fixes) when a judge in ``names`` cannot load; ``say`` (a
    progress printer, None under -q) names the judges that will be downloaded on a CPU machine."""
    from .scorers.registry import get_card, load_cards

    cards = load_cards()
    problems, downloads = [], []
    for name in names:
        card = get_card(name, cards=cards)  # an unknown name: refused here, with the names it may have meant
        weights = judge_weights(card)
        if any(w.backend == "open_clip" for w in weights) and importlib.util.find_spec("open_clip") is None:
            from .extras import install_hint

            problems.append(f"{name}: {install_hint('open_clip_torch', 'open-clip')}")
            continue
        absent = [w.path for w in weights if w.path is not None and not Path(w.path).expanduser().exists()]
        if absent:
            problems.append(f"{name}: its weights {', '.join(absent)} are not on this machine")
        fetch = [w for w in weights if w.path is None and w.repo and not _cached(w)]
        why = next(filter(None, map(_unreachable, fetch)), None)
        if why:
            problems.append(f"{name} needs {' + '.join(w.repo for w in fetch)} ({size_text(card)}), not in the "
                            f"Hugging Face cache, and {why}")
        elif fetch:
            downloads.append((name, card, fetch))
    if problems:
        raise AuditError(f"{command}: a judge it scores with cannot load, so nothing was generated:\n  "
                         + "\n  ".join(problems) + "\n" + _fixes(command))
    if downloads and say is not None and device == "cpu":
        said = ", ".join(f"{n} ({size_text(c)}: {' + '.join(w.repo for w in f)})" for n, c, f in downloads)
        say(f"judges to download before scoring: {said}; a large judge is slow on CPU: "
            f"--scorer NAME picks others (t2i-audit scorers lists them)")


def _fixes(command: str) -> str:
    return ("fix: go online once (the weights are cached for later runs); or choose judges whose weights are here "
            f"with --scorer NAME (t2i-audit scorers lists them); or leave scoring out now (--stages prompts,generate) "
            "and score later with t2i-audit score RUN --model SCORER=PATH (a local copy of its weights)"
            if command == "run" else "fix: go online once (the weights are cached for later runs), or choose judges "
            "whose weights are here with --scorer NAME (t2i-audit scorers lists them)")


def dtype_notice(dtype: str, device: str) -> Optional[str]:
    """What the run will do instead of the dtype asked for on this device (None: as asked)."""
    from .generate import effective_dtype

    return effective_dtype(dtype, device)[1]


def printer(progress: bool, tag: str = "run"):
    """``say(msg)`` on stderr as the stages' progress lines are, or None under -q."""
    if not progress:
        return None
    return lambda msg: print(f"[{tag}] {msg}", file=sys.stderr, flush=True)
