"""The metering pipeline shared by the four model operations.

    authenticate and count the request (the view: keys.auth, keys.limits)
    -> validate (the serializer) -> resolve model -> tier access
    -> charge credits with a pending ledger row (one statement)
    -> call upstream, with fallbacks, holding no database connection
    -> settle: complete the row and record usage (one statement),
       or refund it on any failure

``metered()`` is that pipeline from "resolve model" on; each operation below
only builds its upstream request and shapes its answer inside it. A request
refused before the charge costs nothing. gateway.metering holds the two
statements and why they cannot lose a credit.
"""
import base64
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction

from django.conf import settings

from gateway import idempotency, media, metering, metering_sql, routing, serializers, sweeper, upstream
from gateway.local_models import count_tokens
from gateway.metering import Idempotency
from gateway.notes import notes_of
from gateway.upstream.shapes import ChunkStream, content_text, prompt_text
from gateway.upstream.transport import Deadline
from keys import auth_cache
from keys.models import ApiKey
from keys.pricing import TokenPrices
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment
from utils_app import clock, metrics
from utils_app import logging as request_log
from utils_app.errors import (
    AccessDenied,
    GatewayError,
    InvalidRequest,
    NotFound,
    UnsupportedParameter,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    as_gateway_error,
)
from utils_app.db import release_connection, statements_wrapper
from utils_app.request_ids import request_id

log = logging.getLogger("gateway.metering")
T = TypeVar("T")
# An error code in the request's summary line keeps to letters, digits, _, . and -; the rest becomes _.
_NOT_IN_A_CODE = re.compile(r"[^\w.-]+")


@dataclass
class Outcome:
    """What a metered operation hands its view: one of a JSON body, raw bytes or an event stream."""

    headers: dict
    body: dict | None = None
    content: bytes | None = None
    content_type: str | None = None
    stream: Iterable[bytes] | None = None
    status: int = 200


class Meter:
    """One admitted request: its pending charge, its attempts over the model's pool, and the settlement."""

    def __init__(self, *, key: ApiKey, model: AiModel, operation: str, entry: int, limit_headers: dict,
                 attempts: routing.Attempts, claim: Idempotency | None, amount: int,
                 prices: TokenPrices | None = None, model_name: str | None = None):
        self.key = key
        self.model = model
        # The name the client sent for the model (its id or an alias): what the answer names it.
        self.model_name = model_name or model.model_id
        self.operation = operation
        self.entry = entry
        # What the charge held: the model's cost, or for a token-priced model (``prices``) the most the
        # request can cost (CONTRACT section 12). ``price()`` sets what the settlement keeps of it.
        self.amount = amount
        self.prices = prices
        self.charged: int | None = None  # credits the settlement keeps, once the price is known
        self.give = 0  # what of the hold goes back to the key
        self.uncovered = 0  # what the price passed the hold by: written on the ledger row, never taken
        self.tokens = 0  # the request's input and output tokens, for the key's tpm
        # The request's summary line (utils_app.logging), None outside a served request.
        self.line = request_log.current()
        self.limit_headers = limit_headers
        self.attempts = attempts
        self.claim = claim
        self.started = time.monotonic()
        # The whole request's budget: the longest timeout of the pool's providers, however many attempts.
        self.deadline = Deadline(max((d.provider.timeout for d in model.pool), default=60.0))
        self.deployment: Deployment | None = None  # the one that answered, or was tried last
        self.sent = False  # whether an upstream was asked: only those requests are recorded as usage
        self.settled = False
        # What the deployment that answered could not honour and left out (CONTRACT section 8), for the
        # X-Gateway-Ignored header and the summary line.
        self.ignored: list[str] = []

    @property
    def provider(self) -> str:
        return self.deployment.provider.name if self.deployment else ""

    def price(self, *, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> int:
        """The credits this request is charged, from the tokens the ledger keeps (the upstream's usage, else
        the gateway's count): an answer built before the settlement shows them, and the settlement keeps
        them. A per-request model costs what it held; a token-priced one its price, up to the hold."""
        price = self.amount if self.prices is None else self.prices.price(
            input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens)
        self.charged = min(price, self.amount)
        self.give, self.uncovered = self.amount - self.charged, max(0, price - self.amount)
        self.tokens = input_tokens + output_tokens
        return self.charged

    def balance(self) -> int:
        """The key's balance once the request is settled: after the hold, plus what its price gives back
        (never above maxCredits); after a refund, what the refund left."""
        if not self.give:
            return self.key.credits
        return min(self.key.credits + self.give, max(self.key.max_credits, self.key.credits))

    def headers(self) -> dict:
        # key.credits follows the charge and any refund; an answer whose price is known shows the balance
        # its settlement leaves and what it was charged (a stream's headers leave before: after the hold).
        headers = {"X-Remaining-Credits": str(self.balance()), **self.limit_headers}
        if self.charged is not None:
            headers["X-Credits-Charged"] = str(self.charged)
        if self.key.tpm is not None:
            used = self.key.tpm_used if self.key.tpm_minute == metering_sql.minute_of(clock.now()) else 0
            headers["X-RateLimit-Limit-Tokens"] = str(self.key.tpm)
            headers["X-RateLimit-Remaining-Tokens"] = str(max(0, self.key.tpm - used - self.tokens))
        if self.ignored:
            headers["X-Gateway-Ignored"] = ", ".join(self.ignored)
        return headers

    def latency_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def call(self, operation: Callable[[upstream.Adapter], T]) -> T:
        """Run an upstream call at a deployment of the model's pool, then at another while they fail.

        At most MAX_UPSTREAM_ATTEMPTS attempts, never past the request's deadline. Each error
        says whether the request moves on (utils_app.errors.UpstreamError); a refusal of the
        request itself (an upstream 4xx) is final, since another deployment would refuse it
        too. When every attempt failed, the last failure is what the client sees.
        """
        failure = None
        for _ in range(settings.MAX_UPSTREAM_ATTEMPTS):
            if self.deadline.left() <= 0:
                break
            deployment = self.attempts.next()
            if deployment is None:
                break
            self.deployment, self.sent = deployment, True
            deadline = Deadline(min(deployment.provider.timeout, self.deadline.left()))
            started = time.perf_counter()
            adapter = upstream.adapter_for(deployment, deadline)
            try:
                result = operation(adapter)
            except (UpstreamError, UpstreamRejected, UnsupportedParameter) as exc:
                self._upstream_took(deployment.provider.name, time.perf_counter() - started)
                metrics.upstream_failed(provider=deployment.provider.name, kind=failure_kind(exc))
                routing.failed(deployment, exc)
                self._note_attempt(deployment, exc)
                if not exc.retry:
                    raise
                failure = exc
                continue
            seconds = time.perf_counter() - started
            self._upstream_took(deployment.provider.name, seconds)
            routing.succeeded(deployment, seconds)
            self.ignored = list(dict.fromkeys(adapter.ignored))  # each name once, in the order first met
            if self.line is not None:
                self.line.ignored = self.ignored
            return result
        raise failure if failure is not None else self.attempts.none_left()

    def _note_attempt(self, deployment: Deployment, error: Exception) -> None:
        if self.line is not None:
            # An upstream's code is its text: one word here, as the summary line separates its fields by spaces.
            code = _NOT_IN_A_CODE.sub("_", str(getattr(error, "code", None) or "error"))
            self.line.attempts.append(f"{deployment.provider.name}#{deployment.pk}:{code}")

    def _upstream_took(self, provider: str, seconds: float) -> None:
        metrics.upstream_called(provider=provider, seconds=seconds)
        if self.line is not None:
            self.line.upstream_seconds += seconds

    def succeed(self, *, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
                answer: Outcome | bytes | None = None, status: int = 200, upstream_success: bool = True,
                also: metering.Also | None = None) -> None:
        """Complete the charge and record the usage; ``answer`` is kept for Idempotency-Key retries.

        The client gets its answer even when the database refuses this write (it just
        went away): the settlement is tried once more at once, then again in the
        background until the database is back (gateway.sweeper.settle_later), and a
        charge still pending once its request could no longer run is refunded by the sweeper. A
        fault can cost the service a request, never the client a credit.
        """
        if self.settled:
            return
        self.settled = True
        input_tokens, output_tokens = metering.clamp_tokens(input_tokens), metering.clamp_tokens(output_tokens)
        cached_tokens = min(metering.clamp_tokens(cached_tokens), input_tokens)  # part of the input, never more
        # The answer showed this price when it was built from the same counts; a stream learns it here.
        self.price(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens)
        if status != 200 and self.line is not None:
            self.line.status = status  # a stream that ended early: its summary says how

        def settle() -> None:
            if self._complete(input_tokens, output_tokens, cached_tokens, answer, status=status,
                              success=upstream_success, also=also):
                self._count_success(input_tokens, output_tokens, cached_tokens)

        self._settle(settle, what=f"completion of charge {self.entry} of key {self.key.prefix}")
        sweeper.maybe_sweep()

    def _settle(self, settle: Callable[[], None], *, what: str) -> None:
        """Run a settlement; if the database refuses it twice, leave it to the background retries."""
        for attempt in (1, 2):
            try:
                settle()
                return
            except DatabaseError:
                if connection.in_atomic_block:  # a test's transaction: nothing to retry on
                    log.error("%s failed", what, exc_info=True)
                    return
                connection.close()  # a connection the database closed: the next try takes a fresh one
        log.warning("%s failed twice; retrying in the background", what)
        sweeper.settle_later(settle, what=what)

    def _complete(self, input_tokens: int, output_tokens: int, cached_tokens: int, answer, *, status: int,
                  success: bool, also: metering.Also | None = None) -> bool:
        settle: dict[str, Any]  # metering.complete's keyword arguments
        settle = dict(entry=self.entry, key=self.key, model=self.model, operation=self.operation,
                      provider=self.provider, deployment=self.deployment.pk if self.deployment else None,
                      input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens,
                      latency_ms=self.latency_ms(), status=status, success=success, also=also, give=self.give,
                      uncovered=self.uncovered)
        if self.claim is None:
            return metering.complete(**settle)
        with transaction.atomic():
            completed = metering.complete(**settle)
            if completed and answer is not None:
                idempotency.keep_answer(entry=self.entry, **_stored(answer, self.headers()))
            elif completed and status == CLIENT_CLOSED:
                # Charged but never finished: a retry is told so rather than replayed (docs/ledger.md).
                idempotency.note_cut_by_client(entry=self.entry)
        return completed

    def _count_success(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> None:
        charged = self.charged if self.charged is not None else self.amount
        metrics.settled(model=self.model.model_id, credits=charged, input_tokens=input_tokens,
                        output_tokens=output_tokens, cached_tokens=cached_tokens, given_back=self.give,
                        uncovered=self.uncovered)
        if self.give:  # what a refusal before this key's next charge reports
            auth_cache.note_credits(self.key.digest, self.balance())
        if self.line is not None:
            self.line.credits, self.line.input_tokens, self.line.output_tokens = (charged, input_tokens,
                                                                                  output_tokens)

    def fail(self, error: Exception) -> None:
        """Refund the charge, record the failure if an upstream was asked, and label the error."""
        if self.settled:
            return
        self.settled = True
        self.charged, self.give, self.uncovered, self.tokens = None, 0, 0, 0  # the whole hold goes back
        status = error.status if isinstance(error, GatewayError) else 500
        if self.line is not None:
            self.line.status = status  # a stream already answered 200: its summary says how it ended
        usage = None
        deployment = self.deployment.pk if self.deployment else None
        if self.sent:
            usage = dict(model_id=self.model.pk, operation=self.operation, status=status, success=False,
                         input_tokens=0, output_tokens=0, credits_charged=0, latency_ms=self.latency_ms(),
                         provider=self.provider, deployment_id=deployment)
        latency_ms = self.latency_ms()

        def refund() -> None:
            balance = metering.refund(entry=self.entry, usage=usage, latency_ms=latency_ms, provider=self.provider,
                                      deployment=deployment)
            if balance is not None:
                self.key.credits = balance

        self._settle(refund, what=f"refund of charge {self.entry} of key {self.key.prefix}")
        if isinstance(error, GatewayError):
            error.headers = {**self.headers(), **error.headers}
        sweeper.maybe_sweep()


def failure_kind(error: Exception) -> str:
    """The upstream-errors metric's kind of a failure: a fixed word, never the upstream's own code."""
    if isinstance(error, (UpstreamRejected, UnsupportedParameter)):
        return "rejected"
    if isinstance(error, UpstreamTimeout):
        return "timeout"
    if isinstance(error, UpstreamRateLimited):
        return "rate_limited"
    if isinstance(error, UpstreamError):
        return "unavailable"
    return "internal"


def _stored(answer, headers: dict) -> dict:
    """What an Idempotency-Key retry is answered with: headers (with the content type) and body bytes."""
    if isinstance(answer, bytes):
        return {"headers": {**headers, "Content-Type": "text/event-stream; charset=utf-8"}, "body": answer}
    if answer.content is not None:
        return {"headers": {**headers, "Content-Type": answer.content_type}, "body": answer.content}
    return {"headers": {**headers, "Content-Type": "application/json"}, "body": idempotency.rendered(answer.body)}


def previous_answer(*, request, key: ApiKey) -> Outcome | None:
    """The stored answer of an earlier request with this request's Idempotency-Key, if there is one."""
    claim = idempotency.from_request(request)
    found = idempotency.previous_answer(key=key, claim=claim) if claim else None
    if found is None:
        return None
    status, headers, body = found
    content_type = headers.pop("Content-Type", "application/json")
    if content_type.startswith("text/event-stream"):
        return Outcome(headers=headers, stream=iter([body]), status=status)
    return Outcome(headers=headers, content=body, content_type=content_type, status=status)


def resolve_model(*, key: ApiKey, operation: str, model_id: str) -> AiModel:
    """The model a request names, if it exists, is of the operation's type and the key's tier may use it."""
    model = catalog.get_model(model_id)
    if model is None:
        raise NotFound(f"The model '{model_id}' does not exist or is not available.", code="model_not_found",
                       param="model")
    line = request_log.current()
    if line is not None:
        line.model = model.model_id  # from the catalog, never the client's text: a bounded metric label
    if model.type != operation:
        raise InvalidRequest(f"The model '{model_id}' serves {model.type}, not {operation}: choose a "
                             f"{operation} model (GET /v1/models lists each model's type).",
                             code="model_type_mismatch", param="model")
    if not key.can_use(model):
        raise AccessDenied(f"Keys of the '{key.tier}' tier may not use the model '{model_id}'.", param="model")
    return model


def token_prices(model: AiModel, *, units: int = 1) -> TokenPrices | None:
    """A chat or embedding model's token prices with its request fee (``cost`` per choice), or None for a
    model priced by its cost alone (images and speech always are; embeddings price input only)."""
    if model.type not in ("chat", "embedding") or (model.pricing_input is None and model.pricing_output is None):
        return None
    return _prices(model.cost * units, model.pricing_input or 0, model.pricing_cached_input,
                   model.pricing_output if model.type == "chat" else 0)


@functools.lru_cache(maxsize=256)
def _prices(fee: int, input: Decimal | int, cached_input: Decimal | None, output: Decimal | int | None) -> TokenPrices:
    # The catalog has a few sets of terms; each is made once, not per request.
    return TokenPrices.of(request_fee=fee, input=input, cached_input=cached_input, output=output)


@dataclass(frozen=True)
class Hold:
    """What a token-priced request may use, for its hold: the gateway's count of its input (counted only for
    such a model) and the output cap the request named (max_tokens and its kin), if any."""

    input_tokens: Callable[[], int]
    output_cap: int | None = None


def held_amount(model: AiModel, prices: TokenPrices, hold: Hold | None, *, units: int = 1) -> int:
    """The most a token-priced request can cost (CONTRACT section 12): its fee, its counted input and its
    output cap for each choice: the cap it named, else the model's max_output_tokens. A cap above the
    model's is held as named: an upstream whose real limit is higher than the catalog says may use it."""
    if hold is None:
        return prices.price(input_tokens=0, output_tokens=0)
    cap = 0
    if model.type == "chat":
        cap = hold.output_cap or model.max_output_tokens or 0
    return prices.price(input_tokens=hold.input_tokens(), output_tokens=cap * units)


def admit(*, request, key: ApiKey, operation: str, model_id: str, units: int = 1, record_as: str | None = None,
          hold: Hold | None = None) -> Meter:
    """Resolve the model, check the tier, take the credits: in the contract's order. ``operation`` is the
    model type the request needs; ``record_as`` the operation its ledger and usage rows name, when it is
    another (the Responses API's ``responses``, the Gemini ingress's ``gemini``). ``hold``: what the
    request may use, should its model be priced by the token."""
    model = resolve_model(key=key, operation=operation, model_id=model_id)
    operation = record_as or operation
    claim = idempotency.from_request(request)
    prices = token_prices(model, units=units)
    amount = model.cost * units if prices is None else held_amount(model, prices, hold, units=units)
    # Looked up once for the charge and the release. Without an Idempotency-Key the charge is one statement
    # alone, for which a context without a wrapper of its own need not build one (utils_app.db).
    db = statements_wrapper() if claim is None else connections[DEFAULT_DB_ALIAS]
    entry = metering.charge(key=key, model=model, operation=operation, amount=amount,
                            request_id=request_id(request), idempotency=claim, db=db, prices=prices)
    release_connection(db)  # the upstream call needs no database
    # The key's windows and the pool's health as the request's limits round trip read them (gateway.views).
    notes = notes_of(request)
    return Meter(key=key, model=model, operation=operation, entry=entry,
                 limit_headers=notes.limit_headers(), attempts=routing.Attempts(model, notes.health),
                 claim=claim, amount=amount, prices=prices, model_name=model_id)


@contextmanager
def metered(*, request, key: ApiKey, operation: str, model_id: str, units: int = 1,
            record_as: str | None = None, hold: Hold | None = None) -> Iterator[Meter]:
    """Admit the request; if anything fails inside the block, refund and record the failure.

    The block must call ``meter.succeed()`` once its answer is ready, or hand the
    meter to something that will (a stream does it when it ends).
    """
    meter = admit(request=request, key=key, operation=operation, model_id=model_id, units=units, record_as=record_as,
                  hold=hold)
    try:
        yield meter
    except Exception as exc:
        meter.fail(exc)
        raise


def _forwarded(params: dict, sent: set) -> dict:
    """The upstream request: the members the client named (each adapter sends it under its deployment's name)."""
    return {name: params[name] for name in sent if name in params}


def _token_count(usage: dict, name: str, estimate: Callable[[], int]) -> int:
    """The count the ledger keeps: the upstream's when it is a non-negative integer, else the gateway's
    estimate; either clamped (metering.clamp_tokens), so that the answer can show what was recorded."""
    value = usage.get(name) if isinstance(usage, dict) else None
    usable = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return metering.clamp_tokens(value if usable else estimate())


def cached_tokens(usage: dict) -> int:
    """The cached part of the prompt in OpenAI's usage (``prompt_tokens_details.cached_tokens``); 0 when absent."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    return _token_count(details, "cached_tokens", lambda: 0) if isinstance(details, dict) else 0


def metered_usage(usage: dict, *, input_tokens: int, output_tokens: int, cached: int, cost: int | None = None) -> dict:
    """OpenAI's usage object of an answer or a stream's usage chunk, showing the counts the ledger keeps
    (clamped, or estimated where the upstream's could not be used) instead of the upstream's, and for a
    token-priced model ``cost``, the credits charged (CONTRACT section 12)."""
    shown = {**usage, "prompt_tokens": input_tokens, "completion_tokens": output_tokens,
             "total_tokens": input_tokens + output_tokens}
    if cost is not None:
        shown["cost"] = cost
    for name, part, most in (("prompt_tokens_details", "cached_tokens", cached),
                             ("completion_tokens_details", "reasoning_tokens", output_tokens)):
        details = usage.get(name)
        if isinstance(details, dict) and part in details:
            shown[name] = {**details, part: min(_token_count(details, part, lambda: 0), most)}
    return shown


# ---------------------------------------------------------------- chat

class OpenAIEvents:
    """How a streamed chat reaches the client on /v1/chat/completions: each chunk as a ``data:`` event,
    an error as one more, then ``[DONE]``. gateway.messages has Anthropic's for /v1/messages."""

    def chunk(self, chunk: dict) -> bytes:
        return _event(chunk)

    def error(self, error: GatewayError) -> bytes:
        return _event(error.body()) + DONE

    def end(self) -> bytes:
        return DONE

    def kept(self) -> metering.Also | None:
        """A row the stream's settlement also writes (the Responses API's stored response); none here."""
        return None


class ChatDialect:
    """The client's side of a chat: OpenAI's answer as it is, and OpenAI's events (the default)."""

    # The operation the ledger and usage rows name (an inbound API of its own may name itself there).
    records_as = "chat"

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        """The answer's body; the token counts are the ones metered (the upstream's, else the estimates)."""
        if isinstance(completion.get("usage"), dict):
            completion["usage"] = metered_usage(completion["usage"], input_tokens=input_tokens,
                                                output_tokens=output_tokens, cached=cached)
        return completion

    def events(self) -> OpenAIEvents:
        return OpenAIEvents()

    def admitted(self, meter: Meter) -> None:
        """The request was charged and is about to be sent (the Responses API steers its routing here)."""

    def kept(self) -> metering.Also | None:
        """A row the answer's settlement also writes (the Responses API's stored response); none here."""
        return None

    def complete(self, client, payload: dict) -> dict:
        """One attempt at a deployment (``client`` its adapter): a chat.completion."""
        return client.chat(payload)

    def stream(self, client, payload: dict):
        """One attempt at a deployment: its chunks, up to the commit point."""
        return client.chat_stream(payload)


def chat_completion(*, request, key: ApiKey, params: dict, dialect: ChatDialect | None = None) -> Outcome:
    """POST /v1/chat/completions (and /v1/messages, through its dialect): a completion, or an event stream
    when ``stream`` is true. ``params`` are OpenAI's, validated."""
    dialect = dialect or ChatDialect()
    hold = Hold(input_tokens=lambda: prompt_tokens_held(params), output_cap=output_cap(params))
    with metered(request=request, key=key, operation="chat", model_id=params["model"],
                 units=params.get("n") or 1, record_as=dialect.records_as, hold=hold) as meter:
        dialect.admitted(meter)
        payload = dict(params)
        if params.get("stream"):
            client_wants_usage = bool((params.get("stream_options") or {}).get("include_usage"))
            # Always ask for the usage chunk: the tokens of a stream are recorded either way.
            payload["stream_options"] = {**(params.get("stream_options") or {}), "include_usage": True}
            chunks = meter.call(lambda client: dialect.stream(client, payload))
            relay = ChatRelay(meter=meter, upstream=chunks, include_usage=client_wants_usage,
                              messages=params["messages"], events=dialect.events())
            return Outcome(headers=meter.headers(), stream=relay)
        completion = meter.call(lambda client: dialect.complete(client, payload))
        completion["model"] = meter.model_name
        usage = completion.get("usage") or {}
        reply = " ".join(content_text((choice.get("message") or {}).get("content"))
                         for choice in completion["choices"] if isinstance(choice, dict))
        input_tokens = _token_count(usage, "prompt_tokens", lambda: count_tokens(prompt_text(params["messages"])))
        output_tokens = _token_count(usage, "completion_tokens", lambda: count_tokens(reply))
        cached = min(cached_tokens(usage), input_tokens)  # part of the input, as the ledger keeps it
        cost = meter.price(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached)
        # What it cost, in the usage the answer shows, whatever the model's pricing (CONTRACT section 12); a
        # dialect of another API copies it into its own.
        completion["usage"] = {**(usage if isinstance(usage, dict) else {}), "cost": cost}
        outcome = Outcome(headers=meter.headers(), body=dialect.answer(
            completion, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached))
        meter.succeed(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached, answer=outcome,
                      also=dialect.kept())
    return outcome


# Tokens an upstream bills beyond each message's text (its role and separators) and for priming the reply
# (OpenAI's published accounting: 3 and 3). Counted into a hold, never into usage (docs/pricing.md).
MESSAGE_OVERHEAD, REPLY_OVERHEAD = 3, 3
_OUTPUT_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def prompt_tokens_held(params: dict) -> int:
    """The input a chat request is held for: the gateway's count of its messages and tools, with the
    tokens an upstream adds around each message."""
    messages, tools = params["messages"], params.get("tools")
    return (count_tokens(prompt_text(messages)) + (count_tokens(json.dumps(tools)) if tools else 0)
            + MESSAGE_OVERHEAD * len(messages) + REPLY_OVERHEAD)


def output_cap(params: dict) -> int | None:
    """The output cap a chat request names (OpenAI's max_completion_tokens or max_tokens, the Responses
    API's max_output_tokens: the least of those given), None when it names none."""
    caps = [value for value in (params.get(name) for name in _OUTPUT_CAPS)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0]
    return min(caps) if caps else None


def estimate_chat_tokens(*, key: ApiKey, params: dict) -> int:
    """The gateway's own estimate of a chat request's input tokens (what usage falls back to), for a model
    the key may use: free, nothing is charged or sent upstream."""
    resolve_model(key=key, operation="chat", model_id=params["model"])
    tools = params.get("tools")
    return count_tokens(prompt_text(params["messages"])) + (count_tokens(json.dumps(tools)) if tools else 0)


# The usage status of a stream the client left after output reached it (nginx's "client closed request").
CLIENT_CLOSED = idempotency.CUT_BY_CLIENT


class ClientClosed(GatewayError):
    """The client went away before anything was sent to it: nothing delivered, nothing charged."""

    status = CLIENT_CLOSED
    type = "invalid_request_error"
    code = "client_closed_request"


def _event(payload) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class ReplyTokens:
    """The token count (local_models.count_tokens) of a streamed reply's text, counted as it arrives.

    Text is counted in pieces of about FLUSH_CHARS, each cut just after a character that is no
    part of a word (a space or a punctuation mark, which no token crosses), so the sum is the count
    of the whole text; only the unfinished end is held. A piece without any such character (one
    endless "word") is counted as it is.
    """

    FLUSH_CHARS = 16384
    _LAST_BREAK = re.compile(r"\W\w*\Z")

    def __init__(self):
        self.counted = 0
        self.pending: list[str] = []
        self.size = 0
        self.seen = False  # any text at all: a text of only spaces still counts one token

    def add(self, text: str) -> None:
        if not text:
            return
        self.seen = True
        self.pending.append(text)
        self.size += len(text)
        if self.size >= self.FLUSH_CHARS:
            held = "".join(self.pending)
            found = self._LAST_BREAK.search(held)
            cut = found.start() + 1 if found else len(held)
            self.counted += self._count(held[:cut])
            self.pending = [held[cut:]] if cut < len(held) else []
            self.size = len(held) - cut

    @staticmethod
    def _count(text: str) -> int:
        return count_tokens(text) if text and not text.isspace() else 0

    def tokens(self) -> int:
        total = self.counted + self._count("".join(self.pending))
        return total or (1 if self.seen else 0)


class ChatRelay:
    """The body of a streamed chat response: upstream chunks relayed one by one as they arrive.

    It settles the meter when the stream ends: success with the upstream's usage;
    on an upstream failure after the first byte, a refund and one error event
    followed by [DONE]. The WSGI server calls ``close()`` when the client goes
    away (or the response ends), which closes the upstream connection too.
    With an Idempotency-Key the relayed events are kept, so a retry is answered with the
    very same stream, until they pass IDEMPOTENCY_MAX_BODY_BYTES: then none is kept (a
    retry is told the answer was too large to keep). Of the text only a running token
    count is kept (``ReplyTokens``): a stream of any length holds a bounded amount.
    """

    def __init__(self, *, meter: Meter, upstream: ChunkStream, include_usage: bool, messages: list,
                 events: OpenAIEvents | None = None):
        self._meter = meter
        self._events_out = events or OpenAIEvents()
        self._ended = False  # the stream's last event was written: its end, or an error
        self._upstream = upstream
        self._include_usage = include_usage
        self._messages = messages
        self._usage: dict = {}
        self._reply = ReplyTokens()  # the estimate of the output, should the upstream report no usage
        self._sent: list[bytes] | None = [] if meter.claim else None
        self._sent_bytes = 0
        self._delivered = False  # whether an event was handed to the server for the client
        self._events = self._counted(self._relay())

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    @staticmethod
    def _counted(events: Iterator[bytes]) -> Generator[bytes, None, None]:
        # Open from its first event until it ends or is closed (a stream never started was never open).
        metrics.OPEN_STREAMS.inc()
        try:
            yield from events
        finally:
            metrics.OPEN_STREAMS.dec()

    def _relay(self) -> Iterator[bytes]:
        model_id = self._meter.model_name
        try:
            for chunk in self._upstream:
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                        self._reply.add(delta["content"])
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    self._usage = usage
                    # Shown with the counts the settlement records (the usage chunk comes last).
                    usage = chunk["usage"] = self._metered(usage)
                if not self._include_usage:
                    if usage and not chunk.get("choices"):
                        continue  # the usage-only chunk the gateway asked for on its own account
                    chunk.pop("usage", None)
                chunk["model"] = model_id
                self._delivered = True
                event = self._events_out.chunk(chunk)
                if event:
                    yield self._keep(event)
        except Exception as exc:  # the client already has a 200: the error can only be an event now
            error = as_gateway_error(exc)
            metrics.upstream_failed(provider=self._meter.provider, kind=failure_kind(exc))
            if self._meter.deployment is not None:
                routing.failed(self._meter.deployment, exc)  # after the commit point it still counts against it
            self._upstream.close()
            # The stream passed its commit point before the gateway answered (upstream.ChunkStream),
            # so the client has output: the charge stands, and the usage row says how it ended.
            ending = self._keep(self._events_out.error(error))
            self._ended = True
            self._settle(status=error.status, complete=False)
            yield ending
            return
        ending = self._keep(self._events_out.end())
        self._ended = True
        self._settle()
        yield ending

    def _keep(self, event: bytes) -> bytes:
        if self._sent is not None:
            self._sent_bytes += len(event)
            if self._sent_bytes > settings.IDEMPOTENCY_MAX_BODY_BYTES:
                self._sent = None  # too large to be stored for a replay: not held any longer either
            else:
                self._sent.append(event)
        return event

    def _counts(self, usage: dict) -> tuple[int, int, int]:
        """(input, output, cached) as the ledger keeps them: the upstream's usage, else the estimates."""
        input_tokens = _token_count(usage, "prompt_tokens", lambda: count_tokens(prompt_text(self._messages)))
        return (input_tokens, _token_count(usage, "completion_tokens", self._reply.tokens),
                min(cached_tokens(usage), input_tokens))

    def _metered(self, usage: dict) -> dict:
        input_tokens, output_tokens, cached = self._counts(usage)
        cost = self._meter.price(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached)
        return metered_usage(usage, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached, cost=cost)

    def _settle(self, *, status: int = 200, complete: bool = True) -> None:
        """Charge the stream: ``complete`` when the upstream finished it, else ``status`` says how it ended."""
        input_tokens, output_tokens, cached = self._counts(self._usage)
        self._meter.succeed(
            input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached,
            answer=b"".join(self._sent) if self._sent and self._ended else None,
            status=status, upstream_success=complete, also=self._events_out.kept())

    def close(self) -> None:
        try:
            self._events.close()  # GeneratorExit at the paused yield, if the stream was started
        finally:
            self._upstream.close()
            if not self._meter.settled:
                if self._delivered:
                    # The client left after output reached it. The upstream did the work up to here,
                    # so the charge stands and the tokens relayed so far are recorded.
                    self._settle(status=CLIENT_CLOSED)
                else:
                    self._meter.fail(ClientClosed("The client closed the connection before the stream began."))


# ---------------------------------------------------------------- images

def generate_images(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/images/generations: ``cost * n`` credits; URLs point at this service's media."""
    with metered(request=request, key=key, operation="image", model_id=params["model"],
                 units=params["n"]) as meter:
        payload = _forwarded(params, sent)
        images = meter.call(lambda client: client.images(payload))
        data = []
        for image in images:
            item: dict[str, str | None] = {"url": None, "b64_json": None}
            if params["response_format"] == "url":
                name = media.save(image.content, kind="images", extension=media.EXTENSIONS[image.content_type])
                item["url"] = media.url_for(name, request=request)
            else:
                item["b64_json"] = base64.b64encode(image.content).decode("ascii")
            if image.revised_prompt:
                item["revised_prompt"] = image.revised_prompt
            data.append(item)
        prompt_tokens = count_tokens(params["prompt"])
        meter.price(input_tokens=prompt_tokens, output_tokens=0)  # cost * n: what X-Credits-Charged says
        result = {"created": int(time.time()), "data": data, "remaining_credits": meter.balance()}
        outcome = Outcome(headers=meter.headers(), body=serializers.ImageGenerationResult(result).data)
        meter.succeed(input_tokens=prompt_tokens, output_tokens=0, answer=outcome)
    return outcome


# ---------------------------------------------------------------- speech

def synthesize_speech(*, request, key: ApiKey, params: dict, sent: set, raw: bool) -> Outcome:
    """POST /v1/audio/speech: the audio bytes when ``raw``, else JSON with the stored file's URL."""
    with metered(request=request, key=key, operation="speech", model_id=params["model"]) as meter:
        payload = _forwarded(params, sent)
        audio = meter.call(lambda client: client.speech(payload))
        input_tokens = count_tokens(params["input"])
        meter.price(input_tokens=input_tokens, output_tokens=0)  # its cost: what X-Credits-Charged says
        if raw:
            outcome = Outcome(headers=meter.headers(), content=audio.content, content_type=audio.content_type)
        else:
            name = media.save(audio.content, kind="audio", extension=audio.format)
            result = {"object": "audio.speech", "model": meter.model_name,
                      "audio_url": media.url_for(name, request=request), "format": audio.format,
                      "content_type": audio.content_type, "created": int(time.time()),
                      "remaining_credits": meter.balance()}
            outcome = Outcome(headers=meter.headers(), body=serializers.SpeechResult(result).data)
        meter.succeed(input_tokens=input_tokens, output_tokens=0, answer=outcome)
    return outcome


# ---------------------------------------------------------------- embeddings

def create_embeddings(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/embeddings: OpenAI's list shape plus the SPEC's ``embedding`` and ``remaining_credits``."""
    texts = params["input"] if isinstance(params["input"], list) else [params["input"]]
    hold = Hold(input_tokens=lambda: sum(count_tokens(text) for text in texts))
    with metered(request=request, key=key, operation="embedding", model_id=params["model"], hold=hold) as meter:
        payload = _forwarded(params, sent)
        result = meter.call(lambda client: client.embeddings(payload))
        data = sorted(result.get("data") or [], key=lambda item: item.get("index", 0))
        if len(data) != len(texts):
            # Checked before the charge is completed: a short answer is refunded, not sold.
            raise UpstreamError(f"The upstream returned {len(data)} embedding(s) for {len(texts)} input(s).")
        tokens = _token_count(result.get("usage") or {}, "prompt_tokens",
                              lambda: sum(count_tokens(text) for text in texts))
        vectors = [item["embedding"] for item in data]
        cost = meter.price(input_tokens=tokens, output_tokens=0)
        usage: dict[str, int] = {"prompt_tokens": tokens, "total_tokens": tokens, "cost": cost}
        outcome = Outcome(headers=meter.headers(), body={
            "object": "list", "data": data, "model": meter.model_name, "usage": usage,
            "embedding": vectors[0] if isinstance(params["input"], str) else vectors,
            "remaining_credits": meter.balance(),
        })
        meter.succeed(input_tokens=tokens, output_tokens=0, answer=outcome)
    return outcome
