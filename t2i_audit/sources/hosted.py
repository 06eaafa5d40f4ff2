"""Hosted models: ``--model endpoint:URL`` (the Hugging Face inference protocol) and ``--model openai:MODEL
[--base-url URL]`` (the OpenAI Images API) — the protocols themselves live in providers.py.

Each image is one request that carries the per-image seed ``run`` gives that prompt and sample with a local model
(base.py ``plan_requests``), where the API takes one, and only the settings the user gave: a hosted model runs at
its own defaults, and run.yaml records them as that (null, with the card's ``sources`` saying "the provider's own
default"), never as our generic numbers. ``--concurrency N`` requests are in flight; each image is recorded the
moment it arrives (base.py ``write_image``: file first, then its line), so a killed run resumes without asking again
for anything recorded (recording.py). A refusal (content filter) or a body that is not an image is recorded in
refusals.jsonl and reported apart from composition failures. The first request goes alone: a missing or rejected
token, or a wrong URL, is a clear error before any image is recorded.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import Optional
from urllib.parse import urlsplit

from ..errors import AuditError
from ..models import ModelCard
from .base import main_process_only, plan_requests, write_image
from .recording import finish_stage, pending, record_refusal

# a hosted model's settings are its own: nothing of ours is filled in (models.GENERIC_DEFAULTS is for pipelines)
PROVIDER_DEFAULTS = {"steps": None, "guidance": None, "size": None, "dtype": None}
API_NAMES = {"endpoint": "the endpoint", "openai": "the Images API"}


def _url(text: str, what: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AuditError(f"{what} {text!r}: expected an http:// or https:// URL")
    if parts.username or parts.password:  # it would be written into run.yaml and the manifest
        raise AuditError(f"{what} {text!r}: credentials in the URL would be written into the run's files; "
                         "give the token in the environment (HF_TOKEN, OPENAI_API_KEY) instead")
    return text


def card_for(ref: str) -> ModelCard:
    """The card of ``endpoint:URL`` or ``openai:MODEL``: no pipeline, the provider's own defaults."""
    kind, _, target = ref.partition(":")
    target = target.strip()
    if kind == "endpoint":
        _url(target, "--model endpoint:")
        parts = urlsplit(target)
        name = "endpoint-" + re.sub(r"[^A-Za-z0-9._-]+", "-", f"{parts.netloc}{parts.path}").strip("-.")
    else:
        if not target or any(c.isspace() for c in target) or "@" in target:
            raise AuditError(f"--model {ref!r}: expected openai:MODEL (e.g. openai:gpt-image-1)")
        name = target
    default = f"the provider's own default ({API_NAMES[kind]} is not sent a value the user did not give)"
    return ModelCard(name=name, kind=kind, target=target, defaults=dict(PROVIDER_DEFAULTS),
                     sources={k: default for k in ("steps", "guidance", "size")},
                     notes=f"hosted model ({kind}); its images carry no activations to probe")


def with_base_url(card: ModelCard, base_url: Optional[str]) -> ModelCard:
    """``openai:MODEL`` at a compatible server: the URL is part of what the model is (``target`` MODEL@URL)."""
    if not base_url:
        return card
    if card.kind != "openai":
        raise AuditError(f"--base-url {base_url}: only for --model openai:MODEL (an endpoint's URL is its own)")
    return replace(card, target=f"{card.target.partition('@')[0]}@{_url(base_url, '--base-url')}")


def provider(card: ModelCard, concurrency: int = 1):
    from .providers import Endpoint, OpenAIImages

    if card.kind == "endpoint":
        return Endpoint(card.target, concurrency=concurrency)
    model, _, base_url = card.target.partition("@")
    return OpenAIImages(model, base_url or None)


def check_config(card: ModelCard, cfg) -> ModelCard:
    """The card at ``cfg.base_url``; settings the API cannot take are refused before anything is written (the
    Images API has no steps or guidance); the rest is sent as given."""
    if card.kind == "openai":
        given = [f"--{k}" for k in ("steps", "guidance") if getattr(cfg, k) is not None]
        if given:
            raise AuditError(f"{' and '.join(given)}: the OpenAI Images API takes no such setting; leave "
                             f"{'them' if len(given) > 1 else 'it'} out (only --size is sent)")
    return with_base_url(card, getattr(cfg, "base_url", None))


def sent_settings(card: ModelCard, settings) -> dict:
    """What every request of the run sends and what it leaves to the provider, as the manifest records it."""
    from .providers import Endpoint, OpenAIImages

    takes = (Endpoint if card.kind == "endpoint" else OpenAIImages).takes
    given = {"seed": "the per-image seed (as a local run's)", "steps": settings.steps, "guidance": settings.guidance,
             "size": settings.size}
    sent = {takes[k]: v for k, v in given.items() if k in takes and v is not None}
    return {"sent": sent,
            "provider_defaults": sorted(k for k, v in given.items() if k in takes and v is None),
            "not_sent": {k: f"{API_NAMES[card.kind]} takes no {k}" for k in given if k not in takes}}


def _make(run, prompts, card, settings, progress) -> dict:
    concurrency = max(1, int(getattr(settings, "concurrency", 1) or 1))
    client = provider(card, concurrency)  # a missing key is said here, before any request
    requests = plan_requests(prompts, settings)
    todo, n_done, n_refused = pending(run, requests)
    run.update_stage("generate", status="running", source=card.source, requested=len(requests), reused=n_done,
                     refused_before=n_refused, concurrency=concurrency, **sent_settings(card, settings))
    t0 = time.perf_counter()
    asked = _ask(run, card, client, todo, concurrency, progress)
    loop = time.perf_counter() - t0
    return finish_stage(run, prompts, settings.images_per_prompt, made_now=asked["images"],
                        requests_now=asked["requests"],
                        timing={"loop_seconds": round(loop, 3),
                                "images_per_second": round(asked["images"] / loop, 3) if loop > 0 else None})


# the main process asks for every image not yet recorded (requests need no accelerator); the others wait
make_images = main_process_only(_make)


def _ask(run, card: ModelCard, client, todo: list, concurrency: int, progress: bool) -> dict:
    """Every request of ``todo``, ``concurrency`` at a time; each answer recorded as it arrives."""
    from tqdm.auto import tqdm

    seen = {"requests": 0, "images": 0, "refused": 0}
    if not todo:
        return seen
    bar = tqdm(total=len(todo), desc=f"generate {card.label()}", unit="img", disable=not progress)

    def record(req, reply, seconds):
        seen["requests"] += 1
        if _record(run, card, client, req, reply, seconds):
            seen["images"] += 1
        else:
            seen["refused"] += 1
        bar.update(1)
        bar.set_postfix(requests=seen["requests"], refused=seen["refused"])

    try:
        record(todo[0], *_timed(client, todo[0]))  # alone: a rejected token stops the run before any image
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="t2i-request")
        futures = {pool.submit(_timed, client, req): req for req in todo[1:]}
        try:
            for fut in as_completed(futures):
                record(futures[fut], *fut.result())
        finally:  # an error or an interrupt: nothing more is sent; requests in flight end within their timeout
            pool.shutdown(wait=False, cancel_futures=True)
    finally:
        bar.close()
    return seen


def _timed(client, req):
    t0 = time.perf_counter()
    reply = client.fetch(req)
    return reply, time.perf_counter() - t0


def _record(run, card: ModelCard, client, req, reply, seconds: float) -> bool:
    """Write the image (True), or record why there is none (False)."""
    if reply.image is None:
        record_refusal(run, card.name, req, reply.reason, reply.detail, reply.status)
        return False
    try:
        write_image(run, card.name, req, reply.image, seconds=seconds,
                    where=f"{card.source}: the answer for {req.prompt_id} sample {req.sample}",
                    extra={"sent": {k: v for k, v in client.parameters(req).items() if k != "model"}})
    except AuditError as e:  # not an image (an HTML error page, JSON, a truncated body): recorded, not scored
        record_refusal(run, card.name, req, "not_an_image", str(e), reply.status)
        return False
    return True
