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


@pytest.fixture(scope="session")
def tiny_owlv2(model_dir):
    """The tiny OWLv2 and its colour open_clip, built once per session: ``{"owl": card model, "clip": …}``."""
    import json

    from . import tiny_models as tm

    done = model_dir / "owlv2" / "done"
    if not done.exists():
        done.parent.mkdir(parents=True, exist_ok=True)
        m = {"owl": tm.owlv2_model(done.parent / "owl"), "clip": tm.open_clip_model(done.parent / "oc")}
        done.write_text(json.dumps(m))
    return json.loads(done.read_text())
