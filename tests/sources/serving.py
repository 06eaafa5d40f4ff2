"""Start and stop the hosted-model server process (hosted_server.py) for a test or the benchmark."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def hosted_model(folder: Path, protocol: str = "hf", **cfg):
    """Yield (base URL, read_log) of a server process on 127.0.0.1 with ``cfg`` (hosted_server.py); stopped after."""
    folder.mkdir(parents=True, exist_ok=True)
    log, port_file = folder / "requests.jsonl", folder / "port"
    log.unlink(missing_ok=True)
    port_file.unlink(missing_ok=True)
    config = folder / "server.json"
    config.write_text(json.dumps({"protocol": protocol, "log": str(log), "port_file": str(port_file), **cfg}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.sources.hosted_server", str(config)], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start (exit {proc.poll()})")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port_file.read_text()}"

        def read_log() -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        yield base, read_log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
