"""``board --push-to-hub``: what can be known before the build is checked before it (a token, offline mode), and what
only the Hub can tell (no network) is one clear message after it, the board folder complete — never the HTTP
client's traceback."""

import subprocess
import sys

import pytest

from boardkit import invoke, snapshot


@pytest.fixture
def no_token(monkeypatch, tmp_path):
    import huggingface_hub.constants as hc

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(hc, "HF_TOKEN_PATH", str(tmp_path / "no-token"))  # a machine never logged in
    monkeypatch.setattr(hc, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)


def test_no_token_is_said_before_the_board_is_built(runs, tmp_path, no_token, monkeypatch, capsys):
    board = tmp_path / "board"
    code, out, err = invoke(["board", str(runs["good"]), "--out", str(board), "--push-to-hub", "me/t2i-board"],
                            monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "no Hugging Face token" in err and "hf auth login" in err and "HF_TOKEN" in err
    assert not board.exists(), "the board was built although it could not be sent"
    # a dry run needs no token
    code, out, err = invoke(["board", str(runs["good"]), "--out", str(board), "--push-to-hub", "me/t2i-board",
                             "--dry-run", "-q"], monkeypatch, capsys)
    assert code == 0, err


def test_offline_is_said_before_the_board_is_built(runs, tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    board = tmp_path / "board"
    code, _, err = invoke(["board", str(runs["good"]), "--out", str(board), "--push-to-hub", "me/t2i-board"],
                          monkeypatch, capsys)
    assert code == 2 and "HF_HUB_OFFLINE is set, so nothing was sent" in err, err
    assert not board.exists()


def test_no_network_is_one_message_and_the_board_stays(runs, tmp_path):
    """A real connection refused (an endpoint nobody listens on), in a process of its own: the Hub's endpoint is
    read when huggingface_hub is imported."""
    board = tmp_path / "board"
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_not_a_real_token",
           "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    import os

    p = subprocess.run([sys.executable, "-m", "t2i_audit", "board", str(runs["good"]), "--out", str(board),
                        "--push-to-hub", "me/t2i-board", "-q"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env})
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "the Hub could not be reached (ConnectError" in p.stderr and "check the network" in p.stderr
    assert (board / "index.html").is_file() and snapshot(board)  # built, complete, kept
