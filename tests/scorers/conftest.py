import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

from .scenes import make_run  # noqa: E402,F401


@pytest.fixture(autouse=True, scope="session")
def _threads():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_scorers")
