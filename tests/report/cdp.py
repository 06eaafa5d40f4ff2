"""One headless Chromium page driven through the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(fd 3 in, fd 4 out, NUL-terminated JSON; no extra Python package), and the layout check of what a person sees
(layout_check.js). Every wait waits for the condition it checks, never for a time, so a loaded machine only
makes it slower. Tests skip without a Chromium binary (``needs_chromium``)."""

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM = os.environ.get("T2I_AUDIT_CHROMIUM") or next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt-get install chromium)")
LAYOUT_JS = (Path(__file__).parent / "layout_check.js").read_text()
WIDTHS = (1280, 2000)  # a laptop and a wide monitor, CSS px


HANG = 300  # seconds: only a hung browser ever waits this long; every wait ends on its condition
KEYCODES = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowDown": 40, "ArrowUp": 38, "Backspace": 8}


class Browser:
    """One headless Chromium page driven over the DevTools pipe."""

    def __init__(self, profile: Path):
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()

        def fds():  # dup2 from other numbers onto 3/4 clears close-on-exec
            a, b = os.dup(r_in), os.dup(w_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--disable-default-apps", f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = os.fdopen(w_in, "wb", buffering=0), os.fdopen(r_out, "rb", buffering=0)
        self.buf, self.n, self.events = b"", 0, []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.send(f"{domain}.enable", page=True)

    def _message(self, deadline: float) -> dict:
        """The next message from Chromium; TimeoutError past ``deadline`` (a hang guard, not a wait)."""
        while b"\0" not in self.buf:
            if not select.select([self.r], [], [], max(0.0, deadline - time.time()))[0]:
                raise TimeoutError("no message from Chromium")
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise RuntimeError("Chromium exited: " + self.proc.stderr.read().decode()[-2000:])
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, page: bool = False) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self.session
        self.w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + HANG
        while True:
            m = self._message(deadline)
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def event(self, method: str, match=lambda params: True) -> dict:
        """The params of the first ``method`` event (already received or to come) that ``match`` accepts."""
        seen = 0
        deadline = time.time() + HANG
        while True:
            for e in self.events[seen:]:
                if e.get("method") == method and match(e.get("params", {})):
                    return e["params"]
            seen = len(self.events)
            self.events.append(self._message(deadline))

    def eval(self, expr: str):
        res = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, page=True)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def load(self, url: str, ready: str = "true") -> None:
        """Navigate and return once the NEW document has loaded and ``ready`` (a JS expression) holds (the old
        document, still answering until the navigation commits, is marked so that it is never taken for the new one)."""
        self.eval("window.__replaced = true")
        self.send("Page.navigate", {"url": url}, page=True)
        ready = f"window.__replaced === undefined && document.readyState === 'complete' && ({ready})"
        deadline = time.time() + HANG
        while not self._eval_or_none(ready):
            if time.time() > deadline:
                raise TimeoutError(url)
            time.sleep(0.02)  # polls the condition itself

    def _eval_or_none(self, expr: str):
        try:
            return self.eval(expr)
        except RuntimeError:  # the context was destroyed by the navigation between two messages
            return None

    def press(self, *keys: str) -> None:
        for k in keys:
            down = {"type": "keyDown", "key": k, "windowsVirtualKeyCode": KEYCODES.get(k, ord(k.upper()[0]))}
            if len(k) == 1:
                down["text"] = k
            self.send("Input.dispatchKeyEvent", down, page=True)
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": k}, page=True)

    def problems(self) -> list:
        """Console errors, page exceptions and network requests other than file:/data:/blob:."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown" or (m == "Runtime.consoleAPICalled" and p.get("type") == "error"):
                out.append(p)
            if m == "Network.requestWillBeSent" and not p["request"]["url"].startswith(("file:", "data:", "blob:")):
                out.append(p["request"]["url"])
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def layout_problems(self, width: int, height: int = 900) -> list[str]:
        """layout_check.js's findings on the loaded page laid out in a window ``width`` CSS px wide."""
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, page=True)
        self.eval("document.body.offsetWidth")  # forces the layout at the new width before measuring
        return self.eval(LAYOUT_JS)
