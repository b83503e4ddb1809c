"""The metering pipeline shared by the four model operations.

    authenticate (the view) -> validate (the serializer) -> resolve model -> tier access
    -> rpm/rph limits -> charge credits -> call upstream, with fallbacks
    -> refund on any upstream failure -> record one usage event

``metered()`` is that pipeline from "resolve model" on; each operation below
only builds its upstream request and shapes its answer inside it. A request
refused before the upstream call costs nothing, and on the happy path the
database sees exactly one conditional UPDATE (the charge) and one INSERT (the
usage event, whose rollups are kept by triggers); a failure adds the refund.
"""
import base64
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from django.db import connection
from django.utils import timezone

from gateway import media, providers
from gateway.local_models import count_tokens
from gateway.providers import UpstreamRejected, content_text, prompt_text
from keys import credits, limits
from keys.models import ApiKey
from models_catalog import catalog
from models_catalog.models import AiModel, Provider, UsageEvent
from utils_app.errors import (
    AccessDenied,
    GatewayError,
    InsufficientCredits,
    InvalidRequest,
    NotFound,
    UpstreamError,
    as_gateway_error,
)

log = logging.getLogger("gateway.metering")
T = TypeVar("T")


@dataclass
class Outcome:
    """What a metered operation hands its view: one of a JSON body, raw bytes or an event stream."""

    headers: dict
    body: dict | None = None
    content: bytes | None = None
    content_type: str | None = None
    stream: Iterable[bytes] | None = None


class Meter:
    """One admitted request: its charge, and the settlement that follows the upstream call."""

    def __init__(self, *, key: ApiKey, model: AiModel, operation: str, charged: int,
                 limit_state: limits.LimitState, chain: list[Provider]):
        self.key = key
        self.model = model
        self.operation = operation
        self.charged = charged
        self.limit_state = limit_state
        self.chain = chain
        self.started = time.monotonic()
        self.provider = ""
        self.sent = False  # whether an upstream was asked: only those requests are recorded
        self.settled = False

    def headers(self) -> dict:
        # key.credits follows the charge and any refund (keys.credits updates it in place).
        return {"X-Remaining-Credits": str(self.key.credits), **self.limit_state.headers()}

    def call(self, operation: Callable[[providers.HttpProvider | providers.LocalProvider], T]) -> T:
        """Run an upstream call on the model's provider, then on each fallback while they fail.

        A refusal of the request itself (upstream 4xx) is final: another provider would
        refuse it too. Failures of the provider (5xx, unreachable, timeout, missing
        credentials, its own rate limit) move on; the last one is what the client sees.
        """
        self.sent = True
        failure = None
        for provider in self.chain:
            self.provider = provider.name
            try:
                return operation(providers.client_for(provider))
            except UpstreamRejected:
                raise
            except UpstreamError as exc:
                failure = exc
                log.info("provider %s failed for %s (%s); %s", provider.name, self.model.model_id, exc.code,
                         "trying the next one" if provider is not self.chain[-1] else "no fallback left")
        raise failure

    def succeed(self, *, input_tokens: int, output_tokens: int) -> None:
        if self.settled:
            return
        self.settled = True
        self._record(status=200, success=True, input_tokens=input_tokens, output_tokens=output_tokens,
                     credits_charged=self.charged)

    def fail(self, error: Exception) -> None:
        """Refund the charge, record the failure if an upstream was asked, and label the error."""
        if self.settled:
            return
        self.settled = True
        try:
            credits.refund(self.key, self.charged)
        except Exception:
            log.exception("refund of %s credit(s) to key %s failed", self.charged, self.key.prefix)
        status = error.status if isinstance(error, GatewayError) else 500
        if self.sent:
            try:
                self._record(status=status, success=False, input_tokens=0, output_tokens=0, credits_charged=0)
            except Exception:
                log.exception("usage of a failed request could not be recorded")
        if isinstance(error, GatewayError):
            error.headers = {**self.headers(), **error.headers}

    def _record(self, *, status: int, success: bool, input_tokens: int, output_tokens: int,
                credits_charged: int) -> None:
        UsageEvent.objects.record(
            key=self.key, model=self.model, operation=self.operation, status=status, success=success,
            input_tokens=max(0, int(input_tokens)), output_tokens=max(0, int(output_tokens)),
            credits_charged=credits_charged, latency_ms=int((time.monotonic() - self.started) * 1000),
            provider=self.provider, created_at=timezone.now())


def admit(*, request, key: ApiKey, operation: str, model_id: str, units: int = 1) -> Meter:
    """Resolve the model, check the tier, count the request, take the credits: in the contract's order."""
    snapshot = catalog.snapshot()
    model = snapshot.models.get(model_id)
    if model is None:
        raise NotFound(f"The model '{model_id}' does not exist or is not available.", code="model_not_found",
                       param="model")
    if model.type != operation:
        raise InvalidRequest(f"The model '{model_id}' is a {model.type} model; this operation needs a "
                             f"{operation} model.", code="model_type_mismatch", param="model")
    if not key.can_use(model):
        raise AccessDenied(f"Keys of the '{key.tier}' tier may not use the model '{model_id}'.", param="model")
    limit_state = limits.enforce(request, key)
    amount = model.cost * units
    try:
        credits.charge(key, amount)
    except InsufficientCredits as exc:
        exc.headers.update(limit_state.headers())
        raise
    return Meter(key=key, model=model, operation=operation, charged=amount, limit_state=limit_state,
                 chain=snapshot.providers_for(model))


@contextmanager
def metered(*, request, key: ApiKey, operation: str, model_id: str, units: int = 1) -> Iterator[Meter]:
    """Admit the request; if anything fails inside the block, refund and record the failure.

    The block must call ``meter.succeed()`` once its answer is ready, or hand the
    meter to something that will (a stream does it when it ends).
    """
    meter = admit(request=request, key=key, operation=operation, model_id=model_id, units=units)
    try:
        yield meter
    except Exception as exc:
        meter.fail(exc)
        raise


def _forwarded(params: dict, sent: set, *, model: AiModel) -> dict:
    """The upstream request: the members the client named, under the upstream's model name."""
    return {**{name: params[name] for name in sent if name in params}, "model": model.upstream_name}


def _token_count(usage: dict, name: str, estimate: Callable[[], int]) -> int:
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else estimate()


# ---------------------------------------------------------------- chat

def chat_completion(*, request, key: ApiKey, params: dict) -> Outcome:
    """POST /v1/chat/completions: a completion, or an event stream when ``stream`` is true."""
    with metered(request=request, key=key, operation="chat", model_id=params["model"]) as meter:
        payload = {**params, "model": meter.model.upstream_name}
        if params.get("stream"):
            client_wants_usage = bool((params.get("stream_options") or {}).get("include_usage"))
            # Always ask for the usage chunk: the tokens of a stream are recorded either way.
            payload["stream_options"] = {**(params.get("stream_options") or {}), "include_usage": True}
            upstream = meter.call(lambda client: client.chat_stream(payload))
            relay = ChatRelay(meter=meter, upstream=upstream, include_usage=client_wants_usage,
                              messages=params["messages"])
            return Outcome(headers=meter.headers(), stream=relay)
        completion = meter.call(lambda client: client.chat(payload))
        completion["model"] = meter.model.model_id
        usage = completion.get("usage") or {}
        reply = " ".join(content_text((choice.get("message") or {}).get("content"))
                         for choice in completion["choices"] if isinstance(choice, dict))
        meter.succeed(input_tokens=_token_count(usage, "prompt_tokens",
                                                lambda: count_tokens(prompt_text(params["messages"]))),
                      output_tokens=_token_count(usage, "completion_tokens", lambda: count_tokens(reply)))
    return Outcome(headers=meter.headers(), body=completion)


def _event(payload) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _release_database_connection() -> None:
    """Give the thread's PostgreSQL connection back to the pool while a stream runs.

    A stream can last minutes and needs the database only at its end (the usage
    row); holding a pooled connection meanwhile would let a few hundred open
    streams starve every other request. Inside a transaction (tests) nothing is
    released. SQLite has no server connections to spare, so it keeps its own.
    """
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        connection.close()


class ChatRelay:
    """The body of a streamed chat response: upstream chunks relayed one by one as they arrive.

    It settles the meter when the stream ends: success with the upstream's usage;
    on an upstream failure after the first byte, a refund and one error event
    followed by [DONE]. The WSGI server calls ``close()`` when the client goes
    away (or the response ends), which closes the upstream connection too.
    """

    def __init__(self, *, meter: Meter, upstream: providers.ChunkStream, include_usage: bool, messages: list):
        self._meter = meter
        self._upstream = upstream
        self._include_usage = include_usage
        self._messages = messages
        self._usage: dict = {}
        self._text: list[str] = []
        self._events = self._relay()

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    def _relay(self) -> Iterator[bytes]:
        model_id = self._meter.model.model_id
        _release_database_connection()
        try:
            for chunk in self._upstream:
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    self._usage = usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                        self._text.append(delta["content"])
                if not self._include_usage:
                    if usage and not chunk.get("choices"):
                        continue  # the usage-only chunk the gateway asked for on its own account
                    chunk.pop("usage", None)
                chunk["model"] = model_id
                yield _event(chunk)
        except Exception as exc:  # the client already has a 200: the error can only be an event now
            error = as_gateway_error(exc)
            self._upstream.close()
            self._meter.fail(error)
            yield _event(error.body())
            yield DONE
            return
        self._settle()
        yield DONE

    def _settle(self) -> None:
        reply = "".join(self._text)
        self._meter.succeed(
            input_tokens=_token_count(self._usage, "prompt_tokens", lambda: count_tokens(prompt_text(self._messages))),
            output_tokens=_token_count(self._usage, "completion_tokens", lambda: count_tokens(reply)))

    def close(self) -> None:
        try:
            self._events.close()  # GeneratorExit at the paused yield, if the stream was started
        finally:
            self._upstream.close()
            if not self._meter.settled:
                # The client left before the end. The upstream did the work up to here, so
                # the charge stands and the tokens relayed so far are recorded.
                try:
                    self._settle()
                except Exception:
                    log.exception("usage of an abandoned stream could not be recorded")


# ---------------------------------------------------------------- images

def generate_images(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/images/generations: ``cost * n`` credits; URLs point at this service's media."""
    with metered(request=request, key=key, operation="image", model_id=params["model"],
                 units=params["n"]) as meter:
        payload = _forwarded(params, sent, model=meter.model)
        images = meter.call(lambda client: client.images(payload))
        data = []
        for image in images:
            item = {"url": None, "b64_json": None}
            if params["response_format"] == "url":
                name = media.save(image.content, kind="images", extension=media.EXTENSIONS[image.content_type])
                item["url"] = media.url_for(name, request=request)
            else:
                item["b64_json"] = base64.b64encode(image.content).decode("ascii")
            if image.revised_prompt:
                item["revised_prompt"] = image.revised_prompt
            data.append(item)
        meter.succeed(input_tokens=count_tokens(params["prompt"]), output_tokens=0)
    return Outcome(headers=meter.headers(),
                   body={"created": int(time.time()), "data": data, "remaining_credits": key.credits})


# ---------------------------------------------------------------- speech

def synthesize_speech(*, request, key: ApiKey, params: dict, sent: set, raw: bool) -> Outcome:
    """POST /v1/audio/speech: the audio bytes when ``raw``, else JSON with the stored file's URL."""
    with metered(request=request, key=key, operation="speech", model_id=params["model"]) as meter:
        payload = _forwarded(params, sent, model=meter.model)
        audio = meter.call(lambda client: client.speech(payload))
        body = None
        if not raw:
            name = media.save(audio.content, kind="audio", extension=audio.format)
            body = {"object": "audio.speech", "model": meter.model.model_id,
                    "audio_url": media.url_for(name, request=request), "format": audio.format,
                    "content_type": audio.content_type, "created": int(time.time()),
                    "remaining_credits": key.credits}
        meter.succeed(input_tokens=count_tokens(params["input"]), output_tokens=0)
    if raw:
        return Outcome(headers=meter.headers(), content=audio.content, content_type=audio.content_type)
    return Outcome(headers=meter.headers(), body=body)


# ---------------------------------------------------------------- embeddings

def create_embeddings(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/embeddings: OpenAI's list shape plus the SPEC's ``embedding`` and ``remaining_credits``."""
    with metered(request=request, key=key, operation="embedding", model_id=params["model"]) as meter:
        payload = _forwarded(params, sent, model=meter.model)
        result = meter.call(lambda client: client.embeddings(payload))
        data = sorted(result["data"], key=lambda item: item.get("index", 0))
        texts = params["input"] if isinstance(params["input"], list) else [params["input"]]
        tokens = _token_count(result.get("usage") or {}, "prompt_tokens",
                              lambda: sum(count_tokens(text) for text in texts))
        meter.succeed(input_tokens=tokens, output_tokens=0)
    vectors = [item["embedding"] for item in data]
    return Outcome(headers=meter.headers(), body={
        "object": "list", "data": data, "model": meter.model.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "embedding": vectors[0] if isinstance(params["input"], str) else vectors,
        "remaining_credits": key.credits,
    })
