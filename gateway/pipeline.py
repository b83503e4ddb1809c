"""The metering pipeline shared by the model operations (gateway.services).

    authenticate and count the request (the view: keys.auth, keys.limits)
    -> validate (the serializer) -> resolve model -> tier access
    -> charge credits with a pending ledger row (one statement)
    -> call upstream, with fallbacks, holding no database connection
    -> settle: complete the row and record usage (one statement),
       or refund it on any failure

``metered()`` is that pipeline from "resolve model" on; each operation only
builds its upstream request and shapes its answer inside it. A request
refused before the charge costs nothing. gateway.metering holds the two
statements and why they cannot lose a credit; gateway.prices what a request
is held for, gateway.relay how a stream is relayed and settled.
"""
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction

from django.conf import settings

from gateway import deployment_health, idempotency, metering, metering_sql, routing, sweeper, upstream
from gateway.metering import Idempotency
from gateway.notes import notes_of
from gateway.prices import Hold, held_amount, token_prices
from gateway.upstream.base import ignored_names
from gateway.upstream.transport import Deadline
from keys import auth_cache
from keys.models import ApiKey
from keys.pricing import TokenPrices
from models_catalog.served import ServedDeployment, ServedModel, resolve_model
from utils_app import clock, metrics
from utils_app import logging as request_log
from utils_app.errors import (
    GatewayError,
    UnsupportedParameter,
    UpstreamError,
    UpstreamRejected,
    failure_kind,
)
from utils_app.db import release_connection
from utils_app.middleware import request_id
from utils_app.speed.statements import statements_wrapper

log = logging.getLogger("gateway.metering")
T = TypeVar("T")
# An error code in the request's summary line keeps to letters, digits, _, . and -; the rest becomes _.
_NOT_IN_A_CODE = re.compile(r"[^\w.-]+")


# The usage status of a stream the client left after output reached it (nginx's "client closed request").
CLIENT_CLOSED = idempotency.CUT_BY_CLIENT


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

    def __init__(self, *, key: ApiKey, model: ServedModel, operation: str, entry: int, limit_headers: dict,
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
        self.fee: int | None = None  # a per-request model's charge below its hold (images not all delivered)
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
        self.deployment: ServedDeployment | None = None  # the one that answered, or was tried last
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
        them. A per-request model costs what it held (its ``fee`` when set); a token-priced one its price,
        up to the hold."""
        price = (self.amount if self.fee is None else self.fee) if self.prices is None else self.prices.price(
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
                deployment_health.failed(deployment, exc)
                self._note_attempt(deployment, exc)
                if not exc.retry:
                    raise
                failure = exc
                continue
            seconds = time.perf_counter() - started
            self._upstream_took(deployment.provider.name, seconds)
            deployment_health.succeeded(deployment, seconds)
            self.ignored = ignored_names(adapter.ignored)  # each name once, safe for a header, a bounded few
            if self.line is not None:
                self.line.ignored = self.ignored
            return result
        raise failure if failure is not None else self.attempts.none_left()

    def _note_attempt(self, deployment: ServedDeployment, error: Exception) -> None:
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
        if isinstance(answer, Outcome) and answer.content is None and answer.body is not None:
            # Written before the charge settles, once (the view sends these bytes, a retry is answered with them):
            # an answer that cannot be written is a failure, refunded, never a charged 500.
            answer.content, answer.content_type = idempotency.rendered(answer.body), "application/json"
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
                idempotency.keep_answer(entry=self.entry, **idempotency.stored(answer, self.headers()))
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


def admit(*, request, key: ApiKey, operation: str, model_id: str, units: int = 1, record_as: str | None = None,
          hold: Hold | None = None) -> Meter:
    """Resolve the model, check the tier, take the credits: in the contract's order. ``operation`` is the
    model type the request needs; ``record_as`` the operation its ledger and usage rows name, when it is
    another (the Responses API's ``responses``, the Gemini ingress's ``gemini``). ``hold``: what the
    request may use, should its model be priced by the token."""
    notes = notes_of(request)
    model = notes.resolved
    if model is None or model.type != operation or notes.model_name != model_id:  # not resolved by the view
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
