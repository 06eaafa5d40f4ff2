"""Offline, CPU, deterministic: set before anything imports huggingface_hub or torch."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# tiny pipelines are built once per machine and reused by every test (and every subprocess)
os.environ.setdefault("T2I_AUDIT_CACHE", str(Path(tempfile.gettempdir()) / "t2i-audit-test-cache"))
os.environ.setdefault("T2I_AUDIT_TINY_DIR", str(Path(tempfile.gettempdir()) / "t2i-audit-test-cache" / "scorers"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(autouse=True, scope="session")
def _torch_threads():
    try:
        import torch
    except ImportError:
        yield
        return
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def variant_files(tmp_path_factory):
    """LoRAs and components users bring for tiny-sd, right and wrong ones (tests/variant_files.py), built once."""
    from tests.variant_files import build

    return build(tmp_path_factory.mktemp("variant-files"))


def built_once(tmp_path_factory, worker_id: str, name: str, build) -> Path:
    """``build(folder)`` once per test session, its folder shared by every xdist worker (pytest-xdist's documented
    pattern: the session's common temp folder, a lock file; the folder counts as built once ``build`` returned, so
    a worker whose build failed leaves the next one to start again). Without xdist: a temp folder of its own.
    Tests read the folder, never change it (copy it first)."""
    if worker_id == "master":
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    import fcntl
    import shutil

    root = tmp_path_factory.getbasetemp().parent  # this session's, common to its workers
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
