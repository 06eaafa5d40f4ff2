"""A hosted text-to-image model on 127.0.0.1 for the tests and the benchmark: a real HTTP server process (the
standard library's ThreadingHTTPServer on a real socket) speaking the Hugging Face inference protocol
(POST JSON {"inputs", "parameters"} -> image bytes) or the OpenAI Images API (POST /v1/images/generations ->
{"data": [{"b64_json"}]}), with faults injected on request.

    python -m tests.sources.hosted_server CONFIG.json

CONFIG: {"protocol": "hf" | "openai", "log": PATH (one JSON line per request: what was asked, never the token),
"port_file": PATH, "delay": seconds before every answer, "token": the token it accepts (absent: any or none),
"serve": {PROMPT TEXT + "|" + SEED: PATH} (those bytes for that request, e.g. a mini run's own PNGs),
"faults": [{"match": a prompt text, "kind": 429 | 503 | slow | drop | notimage | refuse, "times": N}]}
— the first N requests for that prompt get the fault (times absent: every one). Images otherwise are
the mini world's renders of the prompt (t2i_audit/mini/world.py), seeded by the request's seed: the judges give
them real verdicts.
"""

from __future__ import annotations

import base64
import io
import json
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def render_png(text: str, seed: int, size: int = 32) -> bytes:
    from t2i_audit.mini.world import parse_caption, render

    img = render(parse_caption(text, random.Random(seed)), size)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class Model:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.used: dict[int, int] = {}
        self.log = open(cfg["log"], "a", buffering=1) if cfg.get("log") else None
        self.serve = cfg.get("serve") or {}

    def fault(self, text: str):
        with self.lock:
            for i, f in enumerate(self.cfg.get("faults") or []):
                if f["match"] == text and (f.get("times") is None or self.used.get(i, 0) < f["times"]):
                    self.used[i] = self.used.get(i, 0) + 1
                    return str(f["kind"])
        return None

    def note(self, **rec) -> None:
        if self.log is not None:
            with self.lock:
                self.log.write(json.dumps({"t": time.time(), **rec}) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model: Model

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass

    def do_POST(self) -> None:
        m, cfg = self.model, self.model.cfg
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        openai = cfg.get("protocol") == "openai"
        text = body.get("prompt") if openai else body.get("inputs")
        params = {k: v for k, v in body.items() if k != "prompt"} if openai else body.get("parameters", {})
        auth = self.headers.get("Authorization")
        token_ok = cfg.get("token") is None or auth == f"Bearer {cfg['token']}"
        fault = m.fault(text or "") if token_ok else "401"
        m.note(path=self.path, text=text, parameters=params, accept=self.headers.get("Accept"),
               content_type=self.headers.get("Content-Type"), authorized=auth is not None, fault=fault)
        if cfg.get("delay"):
            time.sleep(float(cfg["delay"]))
        if fault == "401":
            return self._send(401, b'{"error": "Invalid credentials in Authorization header"}', "application/json")
        if fault in ("429", "503"):
            return self._send(int(fault), b'{"error": "busy, try again"}', "application/json",
                              {"Retry-After": "1"} if fault == "429" else {})
        if fault == "slow":
            time.sleep(float(cfg.get("slow", 2.5)))
        if fault == "drop":  # the connection dies before any answer
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "refuse":
            err = ({"error": {"message": "Your request was rejected as a result of our safety system.",
                              "type": "invalid_request_error", "code": "content_policy_violation"}} if openai
                   else {"error": "Input flagged by the content safety filter"})
            return self._send(400, json.dumps(err).encode(), "application/json")
        seed = params.get("seed")
        if fault == "notimage":
            png = b"<html><body>502 upstream gateway</body></html>"
        elif f"{text}|{seed}" in m.serve:
            png = Path(m.serve[f"{text}|{seed}"]).read_bytes()
        else:
            size = int(str(params.get("size", "32x32")).split("x")[0]) if openai else int(params.get("width", 32))
            png = render_png(text, int(seed) if seed is not None else 0, size)
        if openai:
            out = {"created": 0, "data": [{"b64_json": base64.b64encode(png).decode()}]}
            return self._send(200, json.dumps(out).encode(), "application/json")
        return self._send(200, png, "text/html" if fault == "notimage" else "image/png")


def main(config: str) -> None:
    cfg = json.loads(Path(config).read_text())
    Handler.model = Model(cfg)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    Path(cfg["port_file"]).write_text(str(server.server_port))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
