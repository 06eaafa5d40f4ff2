"""The mini generator behind an HTTP endpoint, as a hosted model is: the Hugging Face inference protocol (POST JSON
``{"inputs": PROMPT, "parameters": {seed, num_inference_steps, guidance_scale, width, height}}`` -> PNG bytes, what
``huggingface_hub.InferenceClient.text_to_image`` sends). reports/make_board.sh audits it with
``run --model endpoint:URL`` beside the same generator run locally. Each image is made from its request's seed
(a CPU generator, as ``run`` seeds each image) at the parameters sent, else at GUIDANCE and the mini card's others.

    python reports/serve_mini.py PORT_FILE [GUIDANCE]     # 127.0.0.1 only; writes the port it took to PORT_FILE
"""

from __future__ import annotations

import io
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(port_file: str, guidance: float) -> None:
    import torch
    from diffusers import DiffusionPipeline

    from t2i_audit.generate import silence_loading_bars
    from t2i_audit.models import resolve_model

    silence_loading_bars()
    card = resolve_model("mini")
    pipe = DiffusionPipeline.from_pretrained(card.pretrained_path())
    pipe.set_progress_bar_config(disable=True)
    d, lock = card.defaults, threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            p = body.get("parameters") or {}
            generator = torch.Generator("cpu").manual_seed(int(p.get("seed", 0)))
            with lock:  # one image at a time: the requests in flight wait their turn, as on a busy server
                image = pipe(body["inputs"], generator=generator, num_inference_steps=p.get("num_inference_steps", d["steps"]),
                             guidance_scale=p.get("guidance_scale", guidance), height=p.get("height", d["size"]),
                             width=p.get("width", d["size"]), **card.call).images[0]
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(buf.getvalue())))
            self.end_headers()
            self.wfile.write(buf.getvalue())

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file, "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 5.0)
