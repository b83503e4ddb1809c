"""Routing a request over its model's pool of deployments, and the fleet's shared memory of their health
(CONTRACT section 7; docs/routing.md).

Choosing, at each attempt: among the deployments that are enabled, not cooling down,
under their rpm cap and not yet tried by this request, those of the lowest priority
number; ``weighted`` picks one at random in proportion to weight (all zero: uniformly),
``latency`` the one with the lowest recent time to first byte across the fleet, exploring
another now and then. When only cooling ones are left, the one whose cooldown ends first.

Health lives in the shared cache (utils_app.shared), so every worker and instance sees
it within a request:

    dep:{id}:cool         until when it is cooling (epoch seconds)
    dep:{id}:off          set for a moment after it was disabled, until every process's
                          catalog snapshot shows it (a cooldown cannot overwrite it)
    dep:{id}:fails        its failures in the current 60-second window
    dep:{id}:rpm:{minute} requests sent to it in a minute (only for a deployment with a cap)
    dep:{id}:m:{minute}   a minute's figures: n attempts, f failures, ts/tc the sum and count
                          of times to first byte (ms), h{b} a histogram of them (for the p50)

A request reads what its choice needs in the round trip its limits already make
(``HealthRead``). A success writes nothing then: its figures wait in this process and
ride in the next request's round trip, ahead of its reads (``pending_writes``), or the
upkeep thread's. A failure writes at once, in a round trip of its own: only the failure
path pays it. A deployment whose secret the upstream refuses is disabled in the database,
with every other deployment of that provider and secret.
"""
import logging
import math
import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.utils import timezone

from models_catalog import catalog
from models_catalog.models import Deployment
from models_catalog.served import ServedDeployment, ServedModel
from utils_app import clock, metrics, shared, state
from utils_app.db import release_connection
from utils_app.errors import COOLDOWN, DISABLE, FAILURE, SLOW_ANSWER, RateLimited, UpstreamError

log = logging.getLogger("gateway.routing")

FAIL_WINDOW = 60  # seconds in which a model's allowed_fails failures cool a deployment down
STATS_TTL = 3700  # a minute's figures are kept an hour and a bit
LATENCY_MINUTES = 2  # "recent" time to first byte: this minute and the one before
EXPLORE = 0.1  # how often latency routing tries another deployment than the fastest, to measure it again
DISABLED = "disabled"
BUCKET_BASE = 1.15  # histogram buckets of times to first byte, each 15 % wider than the one below


def _cool(deployment_id: int) -> str:
    return f"dep:{deployment_id}:cool"


def _off(deployment_id: int) -> str:
    return f"dep:{deployment_id}:off"


def _fails(deployment_id: int) -> str:
    return f"dep:{deployment_id}:fails"


def _rpm(deployment_id: int, minute: int) -> str:
    return f"dep:{deployment_id}:rpm:{minute}"


def _stats(deployment_id: int, minute: int) -> str:
    return f"dep:{deployment_id}:m:{minute}"


def _minute(now: float | None = None) -> int:
    return int((clock.now() if now is None else now) // 60)


# ---------------------------------------------------------------- health, read with the limits

@dataclass
class Health:
    """What the shared cache said of a model's deployments when the request was counted."""

    cooling: dict = field(default_factory=dict)  # deployment id -> until (epoch seconds)
    disabled: set = field(default_factory=set)  # disabled since this process's catalog snapshot was read
    latency: dict = field(default_factory=dict)  # deployment id -> recent mean time to first byte (ms)


class HealthRead:
    """The ops a request adds to its limits' round trip: this process's pending writes, then its model's health.
    The writes go first, so the choice already counts this process's last successes."""

    def __init__(self, model: ServedModel | None):
        self.model = model
        self.reads = _reads(model) if model is not None else []
        self.writes = pending_writes()
        self.ops = self.writes + self.reads

    def health(self, answers: list | None) -> Health:
        if self.model is None or answers is None:  # the shared cache is down: every deployment looks healthy
            return Health()
        return _health(self.model, answers[len(self.writes):len(self.writes) + len(self.reads)])


def _reads(model: ServedModel) -> list[shared.Op]:
    ops = [shared.get(_cool(deployment.pk)) for deployment in model.pool]
    ops += [shared.get(_off(deployment.pk)) for deployment in model.pool]
    if model.routing == "latency":
        minute = _minute()
        ops += [shared.hmget(_stats(deployment.pk, minute - back), "ts", "tc")
                for deployment in model.pool for back in range(LATENCY_MINUTES)]
    return ops


def _health(model: ServedModel, answers: list) -> Health:
    health = Health()
    pool = model.pool
    for deployment, cool, off in zip(pool, answers, answers[len(pool):]):
        if off:
            health.disabled.add(deployment.pk)
        if cool:
            health.cooling[deployment.pk] = float(cool)
    if model.routing == "latency":
        figures = answers[2 * len(pool):]
        for index, deployment in enumerate(pool):
            total = count = 0
            for ts, tc in figures[index * LATENCY_MINUTES:(index + 1) * LATENCY_MINUTES]:
                total += int(ts or 0)
                count += int(tc or 0)
            if count:
                health.latency[deployment.pk] = total / count
    return health


def read_health(model: ServedModel) -> Health:
    """The health of a model's deployments in a round trip of its own (outside a metered request)."""
    request = HealthRead(model)
    return request.health(shared.run(request.ops))


# ---------------------------------------------------------------- choosing

# The deployments a failure in this process disabled, by id, each with the snapshot's value it was chosen as.
# The snapshot is frozen and shared: the requests that already hold it skip such a deployment from then on,
# as they would had they read the database again, while a fresh snapshot reads it there (and other
# processes the shared cache's mark). The identity check lets a later snapshot's value go by.
_disabled_here: dict[int, ServedDeployment] = {}


def _disabled(deployment: ServedDeployment, health: Health) -> bool:
    """Whether the deployment is out of rotation: in the snapshot, since a failure here, or in the shared cache."""
    return deployment.disabled or _disabled_here.get(deployment.pk) is deployment or deployment.pk in health.disabled


def choose(model: ServedModel, health: Health, *, skip: set, now: float | None = None,
           rng=random) -> ServedDeployment | None:
    """The deployment for the next attempt, or None when none may be tried (``skip``: tried or full)."""
    now = clock.now() if now is None else now
    candidates = [deployment for deployment in model.pool
                  if not _disabled(deployment, health) and deployment.pk not in skip]
    if len(candidates) > 1:
        # A deployment whose secret's variable is not set here fails before anything is sent: never chosen
        # while another can be (alone, it answers the 502 that says so).
        configured = [deployment for deployment in candidates
                      if deployment.provider.secret_configured(deployment.secret_env)]
        candidates = configured or candidates
    ready = [deployment for deployment in candidates if health.cooling.get(deployment.pk, 0) <= now]
    if not ready:
        # Only cooling ones left: the one back soonest, so a breaker never turns a blip into an outage.
        return min(candidates, key=lambda deployment: health.cooling[deployment.pk], default=None)
    best = min(deployment.priority for deployment in ready)
    group = [deployment for deployment in ready if deployment.priority == best]
    if model.routing == "latency":
        return _fastest(group, health, rng)
    return _weighted(group, rng)


def _weighted(group: list[ServedDeployment], rng) -> ServedDeployment:
    if len(group) == 1:  # the usual pool of one: nothing to draw
        return group[0]
    weighted = [deployment for deployment in group if deployment.weight > 0]
    if not weighted:  # all zero: uniformly
        return rng.choice(group)
    return rng.choices(weighted, weights=[deployment.weight for deployment in weighted])[0]


def _fastest(group: list[ServedDeployment], health: Health, rng) -> ServedDeployment:
    unmeasured = [deployment for deployment in group if deployment.pk not in health.latency]
    if unmeasured:  # measure before comparing: a new or recovered deployment gets its turn
        return rng.choice(unmeasured)
    fastest = min(group, key=lambda deployment: health.latency[deployment.pk])
    if len(group) > 1 and rng.random() < EXPLORE:
        return rng.choice([deployment for deployment in group if deployment is not fastest])
    return fastest


class Attempts:
    """One request's way through its model's pool: each ``next()`` is the deployment of its next attempt."""

    def __init__(self, model: ServedModel, health: Health | None = None):
        self.model = model
        self.health = health if health is not None else Health()
        self.tried: set = set()
        self.full: set = set()  # at their rpm cap this minute
        self.preferred: int | None = None

    def prefer(self, deployment_pk: int | None) -> None:
        """Try this deployment first while it is available (enabled, not cooling, not yet tried): the one
        that made the encrypted reasoning a Responses follow-up carries (gateway.responses), which no other
        deployment can read. Unavailable, it is one candidate among the others, as usual."""
        self.preferred = deployment_pk

    def _preferred(self) -> ServedDeployment | None:
        if self.preferred is None or self.preferred in self.tried | self.full:
            return None
        for deployment in self.model.pool:
            if (deployment.pk == self.preferred and not _disabled(deployment, self.health)
                    and self.health.cooling.get(deployment.pk, 0) <= clock.now()):
                return deployment
        return None

    def next(self) -> ServedDeployment | None:
        while True:
            deployment = self._preferred() or choose(self.model, self.health, skip=self.tried | self.full)
            if deployment is None:
                return None
            if deployment.rpm and not _take_slot(deployment):
                self.full.add(deployment.pk)
                continue
            self.tried.add(deployment.pk)
            return deployment

    def none_left(self) -> Exception:
        """Why no attempt could be made at all."""
        if self.full:
            left = 60 - int(clock.now()) % 60
            return RateLimited(f"Every deployment of the model '{self.model.model_id}' is at its requests-per-minute "
                               f"cap; retry in {left} s.", retry_after=left, param="model")
        metrics.no_deployment(model=self.model.model_id)
        return UpstreamError(f"No deployment of the model '{self.model.model_id}' is available: every one is "
                             f"disabled.")


def _take_slot(deployment: ServedDeployment) -> bool:
    """Count a request against the deployment's rpm cap, fleet-wide; False when the minute is full.
    A round trip of its own, made only for a deployment with a cap."""
    answers = shared.run([shared.incr(_rpm(deployment.pk, _minute()), 61)])
    return answers is None or answers[0] <= deployment.rpm  # the cache down: no cap can be counted


# ---------------------------------------------------------------- outcomes

_pending: dict = defaultdict(lambda: defaultdict(int))  # (deployment id, minute) -> {field: amount}
_pending_lock = threading.Lock()


def succeeded(deployment: ServedDeployment, seconds: float) -> None:
    """A successful attempt: its time to first byte waits in this process for the next round trip."""
    milliseconds = max(0, int(seconds * 1000))
    with _pending_lock:
        figures = _pending[(deployment.pk, _minute())]
        figures["n"] += 1
        figures["ts"] += milliseconds
        figures["tc"] += 1
        figures[f"h{_bucket(milliseconds)}"] += 1
    metrics.attempted(model=deployment.model.model_id, provider=deployment.provider.name, deployment=deployment.pk,
                      outcome="success", seconds=seconds)


def pending_writes() -> list[shared.Op]:
    """This process's figures not yet in the shared cache, as ops (taken: whoever runs them writes them)."""
    if not _pending:
        return []
    with _pending_lock:
        taken = dict(_pending)
        _pending.clear()
    return [shared.hincrby(_stats(deployment_id, minute), dict(figures), STATS_TTL)
            for (deployment_id, minute), figures in taken.items()]


def flush() -> None:
    shared.run(pending_writes())


def failed(deployment: ServedDeployment, error: Exception) -> None:
    """A failed attempt: counted at once, and what it means for the deployment applied (section 7)."""
    kind = getattr(error, "health", None)
    model = deployment.model
    metrics.attempted(model=model.model_id, provider=deployment.provider.name, deployment=deployment.pk,
                      outcome=outcome_of(error))
    if kind is None and getattr(error, "retry", True):
        return  # not the deployment's doing, and no request of its was counted (not configured, too long)
    attempts = 1
    if kind == SLOW_ANSWER:
        # A long answer that ran out of time: the request's doing, unless the deployment serves nobody.
        if _served_lately(deployment):
            return
        kind, attempts = FAILURE, 0  # _served_lately counted the attempt
    ops = [shared.hincrby(_stats(deployment.pk, _minute()), {"n": attempts, "f": 1 if kind else 0}, STATS_TTL)]
    if kind == FAILURE:
        ops.append(shared.incr(_fails(deployment.pk), FAIL_WINDOW))
    answers = shared.run(ops)
    if kind == FAILURE and answers is not None and answers[-1] >= model.allowed_fails:
        cool_down(deployment, model.cooldown_seconds, why=f"{answers[-1]} failures within {FAIL_WINDOW} s")
    elif kind == COOLDOWN:
        seconds = min(getattr(error, "cooldown_seconds", None) or model.cooldown_seconds, 300)
        cool_down(deployment, seconds, why="the upstream's rate limit")
    elif kind == DISABLE:
        disable(deployment, reason=str(error))


def _served_lately(deployment: ServedDeployment) -> bool:
    """Whether the deployment answered any request successfully in this minute or the one before, anywhere
    in the fleet (this process's successes not yet written are written first). Counts the attempt. With
    the shared cache unreachable nothing is known: False, so the timeout counts as any other does."""
    minute = _minute()
    reads = [shared.hmget(_stats(deployment.pk, minute - back), "tc") for back in range(LATENCY_MINUTES)]
    writes = pending_writes() + [shared.hincrby(_stats(deployment.pk, minute), {"n": 1}, STATS_TTL)]
    answers = shared.run(writes + reads)
    return answers is not None and any(int(tc or 0) for [tc] in answers[len(writes):])


def outcome_of(error: Exception) -> str:
    """The attempts metric's outcome of a failure: a fixed word each error class names."""
    return getattr(error, "outcome", "failure")


def cool_down(deployment: ServedDeployment, seconds: float, *, why: str) -> None:
    shared.run([shared.set(_cool(deployment.pk), repr(clock.now() + seconds), seconds),
                shared.delete(_fails(deployment.pk))])
    metrics.cooled(model=deployment.model.model_id, provider=deployment.provider.name, deployment=deployment.pk)
    log.warning("deployment %s (%s, provider %s) cooled down for %gs after %s", deployment.pk,
                deployment.model.model_id, deployment.provider.name, seconds, why)


def disable(deployment: ServedDeployment | Deployment, *, reason: str, same_secret: bool = True,
            by_hand: bool = False) -> list[int]:
    """Disable a deployment, in the database (it survives restarts) and in the shared cache at once, so
    other processes skip it before their catalog snapshot shows it. Returns the ids disabled now.

    For a refused secret (``same_secret``), every deployment using this provider and secret: the secret
    is bad for every model. A person disabling one by hand means that one (``by_hand``: no probe
    enables it again; a person does).
    """
    now = timezone.now()
    if same_secret:
        chosen = Deployment.objects.filter(provider_id=deployment.provider_id, secret_env=deployment.secret_env)
    else:
        chosen = Deployment.objects.filter(pk=deployment.pk)
    ids = list(chosen.filter(disabled_at__isnull=True).values_list("pk", flat=True))
    Deployment.objects.filter(pk__in=ids, disabled_at__isnull=True).update(
        disabled_at=now, disabled_reason=reason[:300], disabled_by_hand=by_hand)
    release_connection(connection)  # the request's next attempt waits on an upstream, holding no connection
    hold = settings.CATALOG_CACHE_SECONDS * 2 + 5
    shared.run([shared.set(_off(pk), DISABLED, hold) for pk in ids])
    catalog.invalidate()
    if isinstance(deployment, ServedDeployment):
        _disabled_here[deployment.pk] = deployment
    if ids and not by_hand:
        metrics.disabled(provider=deployment.provider.name)
        log.error("deployments %s (provider %s, secret %s) disabled: %s", ", ".join(map(str, ids)),
                  deployment.provider.name, deployment.secret_env or "-", reason)
    return ids


def enable(deployment: ServedDeployment | Deployment) -> None:
    Deployment.objects.filter(pk=deployment.pk).update(disabled_at=None, disabled_reason="", disabled_by_hand=False)
    shared.run([shared.delete(_cool(deployment.pk)), shared.delete(_off(deployment.pk)),
                shared.delete(_fails(deployment.pk))])
    catalog.invalidate()
    _disabled_here.pop(deployment.pk, None)


# ---------------------------------------------------------------- figures for people

def _bucket(milliseconds: int) -> int:
    return int(math.log(milliseconds + 1, BUCKET_BASE))


def _bucket_value(bucket: int) -> float:
    """A bucket's middle, in milliseconds."""
    return round(BUCKET_BASE ** (bucket + 0.5) - 1, 1)


@dataclass(frozen=True)
class DeploymentState:
    state: str  # healthy | cooling | disabled | not_configured
    cooldown_until: float | None  # epoch seconds
    requests: int
    failures: int
    p50_ms: float | None


def states(deployments: list[Deployment]) -> dict[int, DeploymentState]:
    """Each deployment's state and last hour (admin API and staff pages): one round trip for all."""
    flush()
    now = clock.now()
    minute = _minute(now)
    count = len(deployments)
    ops = [shared.get(_cool(deployment.pk)) for deployment in deployments]
    ops += [shared.get(_off(deployment.pk)) for deployment in deployments]
    ops += [shared.hgetall(_stats(deployment.pk, minute - back)) for deployment in deployments for back in range(60)]
    answers = shared.run(ops) or [None] * len(ops)
    found = {}
    for index, deployment in enumerate(deployments):
        cool, off = answers[index], answers[count + index]
        figures: defaultdict[str, int] = defaultdict(int)
        for hour_minute in answers[2 * count + index * 60:2 * count + (index + 1) * 60]:
            for name, value in (hour_minute or {}).items():
                figures[name] += int(value)
        until = float(cool) if cool else None
        if deployment.disabled or off:
            state = "disabled"
        elif not deployment.provider.secret_configured(deployment.secret_env):
            # Its secret's variable is not set on this server: every call through it fails before it is sent.
            state = "not_configured"
        elif until is not None and until > now:
            state = "cooling"
        else:
            state = "healthy"
        found[deployment.pk] = DeploymentState(state=state, cooldown_until=until if state == "cooling" else None,
                                               requests=figures["n"], failures=figures["f"], p50_ms=_median(figures))
    return found


def _median(figures: dict) -> float | None:
    histogram = sorted((int(name[1:]), count) for name, count in figures.items() if name.startswith("h"))
    total = sum(count for _, count in histogram)
    if not total:
        return None
    seen = 0
    for bucket, count in histogram:
        seen += count
        if seen * 2 >= total:
            return _bucket_value(bucket)
    return None


@state.on_reset
def reset() -> None:
    """Forget this process's pending figures and the deployments its failures disabled (tests)."""
    with _pending_lock:
        _pending.clear()
    _disabled_here.clear()
