"""``--push-to-hub REPO``: the board folder as a Hugging Face dataset repo, through huggingface_hub's
``create_repo`` and ``upload_folder`` (as lm-evaluation-harness pushes its details). ``--dry-run`` lists what
would be sent and sends nothing.

What is sent: the dataset card, the tables (``data/``), the images when the board holds them, the page with its
thumbnails and the per-model eval results. Not sent: ``board.json`` and the ownership marker, which hold this
machine's paths to the runs.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AuditError
from .store import REPO_ID

SENT = ("README.md", "index.html", "data", "images", "thumbs", "eval_results")


def check_repo(repo: str) -> str:
    if not REPO_ID.fullmatch(repo or "") or ".." in repo:
        raise AuditError(f"--push-to-hub {repo!r}: expected a Hub dataset id NAMESPACE/NAME")
    return repo


def check_push(repo: str, *, dry_run: bool = False) -> str:
    """Before the board is built: the repo id is valid, and (unless ``dry_run``) the push can be tried at all — a
    Hugging Face token exists and offline mode is off. What only the Hub can tell (a wrong token, no network) is
    said after the build by :func:`push`, with the board folder complete."""
    check_repo(repo)
    if dry_run:
        return repo
    from huggingface_hub import constants, get_token

    if constants.is_offline_mode():
        raise AuditError(f"--push-to-hub {repo}: HF_HUB_OFFLINE is set, so nothing was sent; unset it to push, or add "
                         "--dry-run to list what would be sent (nothing was built by this command)")
    if not get_token():
        raise AuditError(f"--push-to-hub {repo}: no Hugging Face token on this machine: log in with `hf auth login` "
                         "or set HF_TOKEN (a token with write access), then run the same command again "
                         "(nothing was built; --dry-run lists what would be sent)")
    return repo


def files_to_send(board: Path) -> list[tuple[str, int]]:
    """(path in the repo, bytes) of every file the push sends, sorted (a write's leftover ``.*.tmp`` is not)."""
    out = []
    for name in SENT:
        top = board / name
        found = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for p in found:
            if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp")):
                out.append((p.relative_to(board).as_posix(), p.stat().st_size))
    return sorted(out)


def push(board: Path, repo: str, *, private: bool = False, dry_run: bool = False) -> list[tuple[str, int]]:
    """Send the board (or, with ``dry_run``, only list it). Hub errors become an AuditError naming the repo."""
    files = files_to_send(board)
    if dry_run:
        return files
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
    except ImportError as e:  # huggingface_hub is a core dependency; a broken install is named, not traced
        raise AuditError(f"--push-to-hub: huggingface_hub cannot be imported ({e})") from None
    api = HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", private=private, exist_ok=True)
        api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=str(board),
                          allow_patterns=[f for f, _ in files], commit_message="t2i-audit board")
    except OfflineModeIsEnabled:
        raise AuditError(f"--push-to-hub {repo}: HF_HUB_OFFLINE is set, so nothing was sent; unset it to push "
                         "(the board folder is complete and unchanged)") from None
    except HfHubHTTPError as e:  # an answer: a wrong or read-only token, a name taken by someone else …
        raise AuditError(f"--push-to-hub {repo}: the Hub refused ({_first_line(e)}); check the token's write access "
                         "(hf auth whoami) and the repo name; the board folder is complete: push it again "
                         "later") from None
    except Exception as e:  # noqa: BLE001 — narrowed at once to the HTTP client's own errors
        if not _no_answer(e):
            raise
        raise AuditError(f"--push-to-hub {repo}: the Hub could not be reached ({type(e).__name__}: {_first_line(e)}): "
                         "check the network (or HF_ENDPOINT); nothing was sent and the board folder is complete: "
                         "push it again later with the same command") from None
    return files


# huggingface_hub's HTTP client has changed (requests, httpx, httpx2); its connection errors are not OSErrors
HTTP_CLIENTS = ("httpx", "httpx2", "httpcore", "requests", "urllib3", "h11", "h2")


def _no_answer(e: BaseException) -> bool:
    """The Hub gave no answer: a connection, timeout or TLS error of the HTTP client, or of the OS."""
    return isinstance(e, (OSError, ValueError)) or type(e).__module__.split(".")[0] in HTTP_CLIENTS


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else "no message"
