"""The fleet's shared memory of its deployments' health (CONTRACT section 7; docs/routing.md): what a success
and a failure leave behind, cooldowns, disabling and enabling, and the figures shown to people.
gateway.routing reads it to choose a deployment.

Health lives in the shared cache (utils_app.shared), so every worker and instance sees
it within a request:

    dep:{id}:cool         until when it is cooling (epoch seconds)
    dep:{id}:off          set for a moment after it was disabled, until every process's
                          catalog snapshot shows it (a cooldown cannot overwrite it)
    dep:{id}:fails        its failures in the current 60-second window
    dep:{id}:rpm:{minute} requests sent to it in a minute (only for a deployment with a cap)
    dep:{id}:m:{minute}   a minute's figures: n attempts, f failures, ts/tc the sum and count
                          of times to first byte (ms), h{b} a histogram of them (for the p50)

A success writes nothing then: its figures wait in this process and ride in the next request's
round trip, ahead of its reads (``pending_writes``), or the upkeep thread's. A failure writes at
once, in a round trip of its own: only the failure path pays it. A deployment whose secret the
upstream refuses is disabled in the database, with every other deployment of that provider and
secret.
"""
import logging
import math
import threading
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.utils import timezone

from models_catalog import catalog
from models_catalog.models import Deployment
from models_catalog.served import ServedDeployment
from utils_app import clock, metrics, shared, state
from utils_app.db import release_connection
from utils_app.errors import COOLDOWN, DISABLE, FAILURE, SLOW_ANSWER

log = logging.getLogger("gateway.routing")

FAIL_WINDOW = 60  # seconds in which a model's allowed_fails failures cool a deployment down
STATS_TTL = 3700  # a minute's figures are kept an hour and a bit
LATENCY_MINUTES = 2  # "recent" time to first byte: this minute and the one before
DISABLED = "disabled"
BUCKET_BASE = 1.15  # histogram buckets of times to first byte, each 15 % wider than the one below


def cool_key(deployment_id: int) -> str:
    return f"dep:{deployment_id}:cool"


def off_key(deployment_id: int) -> str:
    return f"dep:{deployment_id}:off"


def fails_key(deployment_id: int) -> str:
    return f"dep:{deployment_id}:fails"


def rpm_key(deployment_id: int, minute: int) -> str:
    return f"dep:{deployment_id}:rpm:{minute}"


def stats_key(deployment_id: int, minute: int) -> str:
    return f"dep:{deployment_id}:m:{minute}"


def minute_of(now: float | None = None) -> int:
    return int((clock.now() if now is None else now) // 60)


# The deployments a failure in this process disabled, by id, each with the snapshot's value it was chosen as
# (gateway.routing skips them).
# The snapshot is frozen and shared: the requests that already hold it skip such a deployment from then on,
# as they would had they read the database again, while a fresh snapshot reads it there (and other
# processes the shared cache's mark). The identity check lets a later snapshot's value go by.
disabled_here: dict[int, ServedDeployment] = {}


# ---------------------------------------------------------------- outcomes

_pending: dict = defaultdict(lambda: defaultdict(int))  # (deployment id, minute) -> {field: amount}
_pending_lock = threading.Lock()


def succeeded(deployment: ServedDeployment, seconds: float) -> None:
    """A successful attempt: its time to first byte waits in this process for the next round trip."""
    milliseconds = max(0, int(seconds * 1000))
    with _pending_lock:
        figures = _pending[(deployment.pk, minute_of())]
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
    return [shared.hincrby(stats_key(deployment_id, minute), dict(figures), STATS_TTL)
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
    ops = [shared.hincrby(stats_key(deployment.pk, minute_of()), {"n": attempts, "f": 1 if kind else 0}, STATS_TTL)]
    if kind == FAILURE:
        ops.append(shared.incr(fails_key(deployment.pk), FAIL_WINDOW))
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
    minute = minute_of()
    reads = [shared.hmget(stats_key(deployment.pk, minute - back), "tc") for back in range(LATENCY_MINUTES)]
    writes = pending_writes() + [shared.hincrby(stats_key(deployment.pk, minute), {"n": 1}, STATS_TTL)]
    answers = shared.run(writes + reads)
    return answers is not None and any(int(tc or 0) for [tc] in answers[len(writes):])


def outcome_of(error: Exception) -> str:
    """The attempts metric's outcome of a failure: a fixed word each error class names."""
    return getattr(error, "outcome", "failure")


def cool_down(deployment: ServedDeployment, seconds: float, *, why: str) -> None:
    shared.run([shared.set(cool_key(deployment.pk), repr(clock.now() + seconds), seconds),
                shared.delete(fails_key(deployment.pk))])
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
    shared.run([shared.set(off_key(pk), DISABLED, hold) for pk in ids])
    catalog.invalidate()
    if isinstance(deployment, ServedDeployment):
        disabled_here[deployment.pk] = deployment
    if ids and not by_hand:
        metrics.disabled(provider=deployment.provider.name)
        log.error("deployments %s (provider %s, secret %s) disabled: %s", ", ".join(map(str, ids)),
                  deployment.provider.name, deployment.secret_env or "-", reason)
    return ids


def enable(deployment: ServedDeployment | Deployment) -> None:
    Deployment.objects.filter(pk=deployment.pk).update(disabled_at=None, disabled_reason="", disabled_by_hand=False)
    shared.run([shared.delete(cool_key(deployment.pk)), shared.delete(off_key(deployment.pk)),
                shared.delete(fails_key(deployment.pk))])
    catalog.invalidate()
    disabled_here.pop(deployment.pk, None)


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
    minute = minute_of(now)
    count = len(deployments)
    ops = [shared.get(cool_key(deployment.pk)) for deployment in deployments]
    ops += [shared.get(off_key(deployment.pk)) for deployment in deployments]
    ops += [shared.hgetall(stats_key(deployment.pk, minute - back)) for deployment in deployments for back in range(60)]
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
    disabled_here.clear()

