"""The two protocols hosted models speak, one class each: what a request sends, and what its answer means.

* :class:`Endpoint` — ``endpoint:URL``: the Hugging Face inference protocol of Inference Endpoints and the Hub's
  providers, the request ``huggingface_hub.InferenceClient(model=URL).text_to_image(...)`` sends (a test pins the
  two equal): POST JSON ``{"inputs": PROMPT, "parameters": {seed, num_inference_steps, guidance_scale, width,
  height}}`` with ``Accept: image/png``; the answer's body is the image. Sent through urllib3 with its ``Retry``
  (429 / 5xx / timeouts / dropped connections, exponential backoff, ``Retry-After`` honoured up to a bound):
  ``InferenceClient`` itself never retries, and its shared session refuses every URL under ``HF_HUB_OFFLINE=1``
  (which users of local models set), loopback ones included.
* :class:`OpenAIImages` — ``openai:MODEL [--base-url URL]``: the ``openai`` client's Images API
  (``images.generate``; OpenAI and compatible servers), its own retries (``max_retries``: 408/409/429/5xx,
  timeouts, connection errors; ``Retry-After`` honoured). The Images API takes no seed, steps or guidance.

Each ``fetch(req)`` returns a :class:`Reply` — image bytes, or a refusal (content filter; a body that is not an
image) — or raises AuditError: a rejected token (401/403, :class:`TokenRejected`) or an answer that no retry
mends. Tokens come from the environment (``HF_TOKEN``, ``OPENAI_API_KEY``), live in the client object only, and
are never written anywhere.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import Optional

from ..errors import AuditError

MAX_RETRIES = 5
RETRY_AFTER_MAX = 60  # a Retry-After above this many seconds is an error, not a minute-long silent wait
RETRY_STATUS = (408, 429, 500, 502, 503, 504)
BACKOFF = 0.5  # seconds: 0, 1, 2, 4, 8 between tries (urllib3: backoff_factor * 2 ** (n - 1), none before the 2nd)
REFUSAL_WORDS = ("content", "policy", "safety", "nsfw", "filter", "moderation", "inappropriate", "blocked")


def request_timeout() -> float:
    """Seconds one request may take before it is tried again ($T2I_AUDIT_REQUEST_TIMEOUT, default 300: a large
    model's queue can hold an image that long)."""
    raw = os.environ.get("T2I_AUDIT_REQUEST_TIMEOUT", "300")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise AuditError(f"T2I_AUDIT_REQUEST_TIMEOUT={raw!r}: expected a positive number of seconds")
    return value


@dataclass
class Reply:
    """One request's answer: ``image`` bytes, or a refusal ``reason`` (content_filter | not_an_image)."""

    image: Optional[bytes] = None
    reason: Optional[str] = None
    detail: str = ""
    status: Optional[int] = None


class TokenRejected(AuditError):
    """The provider answered 401/403: no image can come, so the run stops before recording anything more."""


def _token_error(where: str, status: int, env: str, had_token: bool, body: str = "") -> TokenRejected:
    said = f": {body.strip()[:200]}" if body.strip() else ""
    if not had_token:
        return TokenRejected(f"{where} answered {status} (unauthorised){said}; ${env} is not set — export your "
                             f"token as {env} and rerun")
    return TokenRejected(f"{where} answered {status} (the token in ${env} was refused){said}; check that it is "
                         "valid and may use this model")


def looks_refused(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in REFUSAL_WORDS)


class Endpoint:
    """The Hugging Face inference protocol (``InferenceClient.text_to_image``) against ``url``."""

    env = "HF_TOKEN"
    takes = {"seed": "seed", "steps": "num_inference_steps", "guidance": "guidance_scale", "size": "width/height"}

    def __init__(self, url: str, *, concurrency: int = 1):
        import urllib3
        from urllib3.util import Retry, Timeout

        from huggingface_hub import get_token

        self.url = url
        self._token = get_token()  # HF_TOKEN, else the token `hf auth login` stored; never written by us
        try:
            retry = Retry(total=MAX_RETRIES, connect=MAX_RETRIES, read=MAX_RETRIES, status=MAX_RETRIES, other=0,
                          allowed_methods=None,  # POST too: an image request has no side effect worth guarding
                          status_forcelist=RETRY_STATUS, backoff_factor=BACKOFF, backoff_max=8,
                          respect_retry_after_header=True, retry_after_max=RETRY_AFTER_MAX, raise_on_status=False)
        except TypeError:  # before urllib3 2.7 a server's Retry-After could hold a run for hours
            raise AuditError(f"endpoint:URL needs urllib3>=2.7 (installed: {urllib3.__version__}): "
                             "pip install 't2i-audit[hosted]'") from None
        timeout = request_timeout()
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=max(1, concurrency), block=False, retries=retry,
                                         timeout=Timeout(connect=min(30.0, timeout), read=timeout))

    def parameters(self, req) -> dict:
        """What the request sends besides the prompt: the per-image seed, and only the settings the user gave."""
        params = {"seed": req.seed, "num_inference_steps": req.steps, "guidance_scale": req.guidance,
                  "width": req.size, "height": req.size}
        return {k: v for k, v in params.items() if v is not None}  # as InferenceClient's filter_none

    def fetch(self, req) -> Reply:
        import urllib3

        headers = {"Content-Type": "application/json", "Accept": "image/png"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        body = json.dumps({"inputs": req.text, "parameters": self.parameters(req)}).encode()
        try:
            r = self._pool.request("POST", self.url, body=body, headers=headers)
        except urllib3.exceptions.MaxRetryError as e:
            raise AuditError(f"{self.url}: no answer after {MAX_RETRIES + 1} tries ({_reason(e.reason)}); finished "
                             "images are recorded — rerun the same command to resume") from None
        except urllib3.exceptions.HTTPError as e:
            raise AuditError(f"{self.url}: {_reason(e)}; finished images are recorded — rerun to resume") from None
        text = lambda: r.data[:2000].decode("utf-8", "replace")  # noqa: E731
        if r.status in (401, 403):
            raise _token_error(self.url, r.status, self.env, bool(self._token), text())
        if r.status in RETRY_STATUS:
            raise AuditError(f"{self.url}: answered {r.status} {MAX_RETRIES + 1} times ({text()[:200]!r}); finished "
                             "images are recorded — rerun the same command to resume")
        if r.status in (400, 422) and looks_refused(text()):
            return Reply(reason="content_filter", detail=_message(text()), status=r.status)
        if r.status >= 300:
            raise AuditError(f"{self.url}: answered {r.status} to {req.prompt_id!r} ({_message(text())[:300]}); "
                             "check the URL and the settings it takes")
        return Reply(image=r.data, status=r.status)


class OpenAIImages:
    """The OpenAI Images API (``client.images.generate``) of ``model``, at ``base_url`` (None: OpenAI's)."""

    env = "OPENAI_API_KEY"
    takes = {"size": "size"}

    def __init__(self, model: str, base_url: Optional[str] = None):
        from ..extras import require

        openai = require("openai")  # missing: "openai is not installed: pip install 't2i-audit[hosted]'"
        self.model, self.where = model, base_url or "https://api.openai.com/v1"
        key = os.environ.get(self.env)
        self._had_key = bool(key)
        if not key and base_url is None:
            raise AuditError(f"openai:{model}: ${self.env} is not set; export your OpenAI key as {self.env} "
                             "(or give --base-url for a compatible server that needs none)")
        self._openai = openai  # its default pool (1,000 connections) holds every request in flight
        self._client = openai.OpenAI(api_key=key or "none", base_url=base_url, max_retries=MAX_RETRIES,
                                     timeout=request_timeout())

    def parameters(self, req) -> dict:
        out = {"model": self.model, "n": 1}
        if req.size is not None:
            out["size"] = f"{req.size}x{req.size}"
        if self.model.startswith("dall-e"):  # gpt-image models always answer base64 and refuse the parameter
            out["response_format"] = "b64_json"
        return out

    def fetch(self, req) -> Reply:
        openai = self._openai
        try:
            res = self._client.images.generate(prompt=req.text, **self.parameters(req))
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise _token_error(self.where, e.status_code, self.env, self._had_key, _message(str(e))) from None
        except openai.BadRequestError as e:
            code = str(getattr(e, "code", "") or "")
            if code in ("content_policy_violation", "moderation_blocked") or looks_refused(str(e)):
                return Reply(reason="content_filter", detail=_message(str(e)), status=e.status_code)
            raise AuditError(f"{self.where}: refused the request for {req.prompt_id!r}: {_message(str(e))[:300]}") \
                from None
        except openai.APIStatusError as e:
            raise AuditError(f"{self.where}: answered {e.status_code} after {MAX_RETRIES} retries "
                             f"({_message(str(e))[:200]}); finished images are recorded — rerun to resume") from None
        except (openai.APIConnectionError, openai.APITimeoutError) as e:
            raise AuditError(f"{self.where}: no answer after {MAX_RETRIES} retries ({type(e).__name__}); finished "
                             "images are recorded — rerun the same command to resume") from None
        data = (res.data or [None])[0]
        b64 = getattr(data, "b64_json", None)
        if not b64:
            what = "a URL" if getattr(data, "url", None) else "no image"
            return Reply(reason="not_an_image", detail=f"the answer held {what}, not base64 image bytes")
        try:
            return Reply(image=base64.b64decode(b64, validate=True))
        except ValueError as e:
            return Reply(reason="not_an_image", detail=f"b64_json is not base64 ({e})")


def _message(text: str) -> str:
    """The server's own message from a JSON error body ({"error": "…"} or {"error": {"message": "…"}}), else the text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message", err)
    return str(err).strip()


def _reason(e) -> str:
    text = str(e)
    return text.split(": ", 1)[-1][:200] if "Connection" in type(e).__name__ else f"{type(e).__name__}: {text[:200]}"
