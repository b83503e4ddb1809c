"""The service's Prometheus metrics: what is counted, the calls that count it, and who may read them.

Under gunicorn every worker counts in its own memory-mapped files in
PROMETHEUS_MULTIPROC_DIR (gateway/gunicorn_conf.py sets it and empties it at start),
and a scrape, whichever worker answers it, adds up the files of all of them, those
of workers that have since exited included. Without that variable (runserver,
management commands, tests) the counts are the process's own.

The calls below run on the request path, so they only add to this process's tally in
memory: no I/O, no query, no network, not even the mmapped files. The tally goes into
prometheus_client's values (the files) at most a second later (``flush``): by the next
count after a second, by the process's flusher thread every second (an idle worker's last
counts), before every scrape this process answers and when the process exits. The counts
and bucket counts are the same either way, and the sums too but for float rounding in
their last digit; a worker killed outright loses at most its last second of counts
(docs/operations.md). Label values come only from bounded sets: route names, catalog
model ids, provider names, deployment ids, HTTP statuses and fixed words. Never a key, a prefix or a request id: each distinct value is a series that
Prometheus keeps, and a key in a label would be a secret in the monitoring system.
"""
import atexit
import bisect
import collections
import hmac
import ipaddress
import os
import threading
import time

from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from utils_app import state
from utils_app.limits import client_address

# The gateway's own share of a request is around a millisecond; an upstream's, seconds.
ADDED_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)

REQUESTS = Counter("gateway_requests", "Requests answered, by operation (the route's name), catalog model "
                   "and HTTP status; a stream counts when it ends, with its error's status if it failed midway.",
                   ["operation", "model", "status"])
ADDED_LATENCY = Histogram("gateway_added_latency_seconds", "Time the gateway spent on a request until its "
                          "response (for a stream: its headers) was ready, upstream calls excluded.",
                          ["operation"], buckets=ADDED_BUCKETS)
UPSTREAM_LATENCY = Histogram("gateway_upstream_latency_seconds", "Duration of each upstream call until its "
                             "answer (for a stream: its first chunk), failed ones included.", ["provider"],
                             buckets=UPSTREAM_BUCKETS)
CREDITS_CHARGED = Counter("gateway_credits_charged", "Credits of requests settled as completed (what the "
                          "usage records count).", ["model"])
CREDITS_REFUNDED = Counter("gateway_credits_refunded", "Credits given back by refunds of failed or "
                           "abandoned requests.", ["model"])
CREDITS_HELD = Counter("gateway_credits_held", "Credits held by charges before their upstream call: a model's "
                       "cost, or the most a token-priced request can cost.", ["model"])
CREDITS_GIVEN_BACK = Counter("gateway_credits_given_back", "Credits of token-priced holds given back by their "
                             "settlement (the hold less the price).", ["model"])
CREDITS_UNCOVERED = Counter("gateway_credits_uncovered", "Credits by which token-priced requests' prices passed "
                            "their holds (an upstream that ignored the output cap): written on the ledger, never "
                            "taken.", ["model"])
TOKENS = Counter("gateway_tokens", "Tokens of completed requests by kind: in (prompt, cached included), cached "
                 "(the prompt's part read from the upstream's cache) and out (completion, reasoning included).",
                 ["model", "direction"])
LIMIT_REJECTIONS = Counter("gateway_limit_rejections", "Requests refused with 429 by a key's limit: rpm, rph, "
                           "maxConcurrent or tpm.", ["param"])
UPSTREAM_ERRORS = Counter("gateway_upstream_errors", "Failed upstream calls, by provider and kind: timeout, "
                          "unavailable (5xx, unreachable, unusable answer), rate_limited, rejected (4xx), "
                          "internal.", ["provider", "kind"])
UPSTREAM_ATTEMPTS = Counter("gateway_upstream_attempts", "Attempts of requests at deployments, by model, "
                            "provider, deployment id and outcome: success, failure, timeout, rate_limited, "
                            "credential_rejected (the secret is disabled), not_configured, rejected (the request's "
                            "own fault).", ["model", "provider", "deployment", "outcome"])
COOLDOWNS = Counter("gateway_deployment_cooldowns", "Cooldowns started: a deployment taken out of rotation for "
                    "a while after failures or an upstream 429.", ["model", "provider", "deployment"])
DISABLES = Counter("gateway_deployment_disables", "Deployments disabled because the upstream refused their "
                   "secret or has no credit left.", ["provider"])
NO_DEPLOYMENT = Counter("gateway_no_deployment", "Requests answered 502 without any upstream call because "
                        "every deployment of their model is disabled.", ["model"])
TTFB = Histogram("gateway_upstream_ttfb_seconds", "Time to first byte of successful attempts, by deployment "
                 "(a stream: until its commit point; other calls: the whole answer).",
                 ["model", "provider", "deployment"], buckets=UPSTREAM_BUCKETS)
GROUP_SIZES = Histogram("gateway_metering_group_size", "Charges and settlements served by each metering "
                        "statement on PostgreSQL: 1 for a request alone, more for requests that queued while "
                        "another statement of the same process ran (gateway.metering).",
                        buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64))
OPEN_STREAMS = Gauge("gateway_open_streams", "Event streams being relayed right now.",
                     multiprocess_mode="livesum")


# ---------------------------------------------------------------- counting (the request path)

# prometheus_client's labels() validates and locks on every call (about 2 µs, as much as the
# count itself); the label sets are bounded, so each metric's children are kept here by value.
_children: dict = {}


def _child(metric, *values: str):
    if not values:  # a metric without labels counts in itself
        return metric
    found = _children.get((metric, values))
    if found is None:
        found = _children[(metric, values)] = metric.labels(*values)
    return found


# A count's values in prometheus_client's multiprocess mode each take a lock (gevent's, in a gevent
# worker: Python code), ask getpid and write to the mmapped file: some 11 of them a request, 3 % of a
# served worker's CPU (docs/performance.md). So a count only appends (value, amount) to the tally, and
# ``flush`` adds up each value's amounts and writes each total once. A histogram's observation is
# tallied as its observe() counts it: in its sum, and in the first bucket whose upper bound is not
# below it (tests/utils_app/test_metrics.py holds the two to the same samples).
FLUSH_SECONDS = 1.0

# A deque: appending and taking from the left are atomic under threads, so a count made while another
# thread flushes is either taken by that flush or left for the next one, never lost; no lock to take.
_tally: collections.deque = collections.deque()
_flush_after = 0.0  # time.monotonic() from which the next count flushes the tally


def _count(metric, amount: float, *values: str) -> None:
    if amount < 0:  # refused here, as Counter.inc refuses it, rather than at another request's flush
        raise ValueError("Counters can only be incremented by non-negative amounts.")
    _tally.append((_child(metric, *values)._value, amount))
    if time.monotonic() >= _flush_after:
        flush()


def _observe(metric, amount: float, *values: str) -> None:
    child = _child(metric, *values)
    _tally.append((child._sum, amount))
    bounds = child._upper_bounds  # ends with +Inf
    index = bisect.bisect_left(bounds, amount)
    if index < len(bounds) and amount <= bounds[index]:  # not so for NaN: observe() counts it in no bucket
        _tally.append((child._buckets[index], 1))
    if time.monotonic() >= _flush_after:
        flush()


def flush() -> None:
    """Write the tally into prometheus_client's values (in multiprocess mode, this worker's files)."""
    global _flush_after
    _flush_after = time.monotonic() + FLUSH_SECONDS
    if _flusher_of != os.getpid():
        _start_flusher()
    totals: dict = {}
    take = _tally.popleft
    while True:
        try:
            value, amount = take()
        except IndexError:
            break
        totals[value] = totals.get(value, 0) + amount
    for value, amount in totals.items():
        value.inc(amount)


_flusher_of = None  # the process whose flusher thread runs (a forked worker starts its own)
_flusher_lock = threading.Lock()


def _start_flusher() -> None:
    """The process's thread (a greenlet in a gevent worker) that writes the tally every FLUSH_SECONDS,
    so the counts of a worker gone idle reach the files as soon as a busy one's do."""
    global _flusher_of
    with _flusher_lock:
        if _flusher_of == os.getpid():
            return
        _flusher_of = os.getpid()
    threading.Thread(target=_flush_every_second, name="metrics-flush", daemon=True).start()


def _flush_every_second() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        if _tally:
            flush()


atexit.register(flush)


def request_answered(*, operation: str, model: str, status: int) -> None:
    _count(REQUESTS, 1, operation, model, str(status))


def response_ready(*, operation: str, seconds: float, upstream_seconds: float) -> None:
    _observe(ADDED_LATENCY, max(0.0, seconds - upstream_seconds), operation)


def upstream_called(*, provider: str, seconds: float) -> None:
    _observe(UPSTREAM_LATENCY, seconds, provider)


def upstream_failed(*, provider: str, kind: str) -> None:
    _count(UPSTREAM_ERRORS, 1, provider, kind)


def attempted(*, model: str, provider: str, deployment: int, outcome: str, seconds: float | None = None) -> None:
    _count(UPSTREAM_ATTEMPTS, 1, model, provider, str(deployment), outcome)
    if seconds is not None:
        _observe(TTFB, seconds, model, provider, str(deployment))


def cooled(*, model: str, provider: str, deployment: int) -> None:
    _count(COOLDOWNS, 1, model, provider, str(deployment))


def disabled(*, provider: str) -> None:
    _count(DISABLES, 1, provider)


def no_deployment(*, model: str) -> None:
    _count(NO_DEPLOYMENT, 1, model)


def held(*, model: str, credits: int) -> None:
    _count(CREDITS_HELD, credits, model)


def settled(*, model: str, credits: int, input_tokens: int, output_tokens: int, cached_tokens: int = 0,
            given_back: int = 0, uncovered: int = 0) -> None:
    _count(CREDITS_CHARGED, credits, model)
    if given_back:
        _count(CREDITS_GIVEN_BACK, given_back, model)
    if uncovered:
        _count(CREDITS_UNCOVERED, uncovered, model)
    if input_tokens:
        _count(TOKENS, input_tokens, model, "in")
    if cached_tokens:
        _count(TOKENS, cached_tokens, model, "cached")
    if output_tokens:
        _count(TOKENS, output_tokens, model, "out")


def refunded(*, model: str, credits: int) -> None:
    _count(CREDITS_REFUNDED, credits, model)


def grouped(*, requests: int) -> None:
    _observe(GROUP_SIZES, requests)


def limit_rejected(param: str) -> None:
    _count(LIMIT_REJECTIONS, 1, param)


@state.on_reset
def reset() -> None:
    """Every count of this process back to nothing (tests; in multiprocess mode the files hold the counts)."""
    _tally.clear()
    _children.clear()
    for metric in (REQUESTS, ADDED_LATENCY, UPSTREAM_LATENCY, CREDITS_HELD, CREDITS_CHARGED, CREDITS_GIVEN_BACK,
                   CREDITS_UNCOVERED, CREDITS_REFUNDED, TOKENS,
                   LIMIT_REJECTIONS, UPSTREAM_ERRORS, UPSTREAM_ATTEMPTS, COOLDOWNS, DISABLES, NO_DEPLOYMENT, TTFB,
                   GROUP_SIZES):
        metric.clear()
    OPEN_STREAMS.set(0)


# ---------------------------------------------------------------- the scrape

def enabled() -> bool:
    """/metrics exists only once someone may read it: METRICS_TOKEN or METRICS_ALLOW is set."""
    return bool(settings.METRICS_TOKEN or settings.METRICS_ALLOW)


def may_read(request) -> bool:
    """The bearer token, or a client address in METRICS_ALLOW (behind TRUSTED_PROXIES: the real client's)."""
    token = settings.METRICS_TOKEN
    if token:
        scheme, _, offered = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(offered.strip().encode(), token.encode()):
            return True
    if settings.METRICS_ALLOW:
        try:
            address = ipaddress.ip_address(client_address(request))
        except ValueError:
            return False
        return any(address in network for network in settings.METRICS_ALLOW)
    return False


def exposition(*, collectors: tuple = (), accept: str = "") -> tuple[bytes, str]:
    """The scrape's body and content type (OpenMetrics when the scraper asks for it).

    ``collectors`` read live values at scrape time (the database pool, the ledger).
    """
    flush()  # this process's latest counts; the other workers' are at most FLUSH_SECONDS old
    registry = CollectorRegistry(auto_describe=False)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        MultiProcessCollector(registry, path=directory)
    else:
        registry.register(REGISTRY)  # this process's metrics, with its process and GC figures
    for collector in collectors:
        registry.register(collector)
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
