"""A real full disk and a real read-only one (issue 36, class 6): a small tmpfs mounted for the test, where the
test runs as root and may mount (skipped otherwise, with the reason). The same faults are injected at the write
function for every writing command in tests/spine/test_command_safety.py; here the kernel raises them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from t2i_audit.rundir import RunDir

from ..spine.test_command_properties import invoke
from .test_drill_three import _files, _refused, _tiny


@pytest.fixture
def tmpfs(tmp_path):
    """An 8 MiB tmpfs of its own (unmounted after the test)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the fault-injection tests cover the same paths")
    mnt = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_a_disk_that_really_fills_mid_generate_is_said_and_resumes_byte_identical(tmpfs, clean_tiny, tmp_path,
                                                                                  monkeypatch, capsys):
    argv = {"--limit": "4"}
    # what the whole run takes on this tmpfs (it counts whole pages), and its images' share of that
    free = _free(tmpfs)
    shutil.copytree(clean_tiny, tmpfs / "measure")
    whole = free - _free(tmpfs)
    shutil.rmtree(tmpfs / "measure")
    page = os.statvfs(tmpfs).f_frsize
    images = sum(-(-p.stat().st_size // page) * page for p in (clean_tiny / "images").rglob("*.png"))
    # room for everything but half of the images: the disk fills between two batches of images
    filler = tmpfs / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, _free(tmpfs) - (whole - images // 2)))
    code, out = invoke(_tiny(tmpfs / "run", **argv), tmp_path, monkeypatch, capsys)
    _refused(code, out, "no space left")
    kept = RunDir(tmpfs / "run").read_image_shards()
    assert 0 < len(kept) < 8, "the disk filled between two batches of images"
    filler.unlink()  # space freed: the same command again
    code, out = invoke(_tiny(tmpfs / "run", **argv), tmp_path, monkeypatch, capsys)
    assert code == 0, out
    assert _files(tmpfs / "run" / "images") == _files(clean_tiny / "images")
    strip = lambda rd: [{k: v for k, v in r.items() if k != "seconds"} for r in rd.read_images()]  # noqa: E731
    assert strip(RunDir(tmpfs / "run")) == strip(RunDir(clean_tiny))


def test_a_run_on_a_read_only_disk_is_read_and_never_written(tmpfs, clean_tiny, tmp_path, monkeypatch, capsys):
    run = Path(shutil.copytree(clean_tiny, tmpfs / "run"))  # a finished run, on a disk then made read-only
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    before = _files(run)
    for cmd in (["report", str(run), "-q"], ["score", str(run), "-s", "tiny-clip", "--device", "cpu", "-q"],
                _tiny(run, **{"--limit": "4"})):  # `run` on the finished run: the same command that made it
        code, out = invoke(cmd, tmp_path, monkeypatch, capsys)
        _refused(code, out, "the file system is read-only (EROFS)", str(run))
    assert _files(run) == before
    code, out = invoke(["verify", str(run)], tmp_path, monkeypatch, capsys)  # a reader works there
    assert code == 0, out
