from pathlib import Path

import pytest

from .outputs import tiny_base


@pytest.fixture(scope="session")
def tiny_sd_base() -> Path:
    return tiny_base("tiny-sd")
