import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import make_run  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture(scope="session")
def all_pages(tmp_path_factory) -> dict:
    """kind → one small page of every kind (allpages.py), built once per session."""
    from allpages import build_pages

    return build_pages(tmp_path_factory.mktemp("pages"))


@pytest.fixture(scope="module")
def rendered(run_dir):
    from t2i_audit.report import render_report

    return render_report(run_dir, progress=False)
