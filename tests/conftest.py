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
