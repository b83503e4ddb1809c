"""Routing a request over its model's pool of deployments (CONTRACT section 7; docs/routing.md).

Choosing, at each attempt: among the deployments that are enabled, not cooling down,
under their rpm cap and not yet tried by this request, those of the lowest priority
number; ``weighted`` picks one at random in proportion to weight (all zero: uniformly),
``latency`` the one with the lowest recent time to first byte across the fleet, exploring
another now and then. When only cooling ones are left, the one whose cooldown ends first.

The health it goes by is the fleet's shared memory (gateway.deployment_health), which also
keeps what each attempt's outcome leaves behind. A request reads what its choice needs in
the round trip its limits already make (``HealthRead``), with this process's pending
success figures written first.
"""
import random
from dataclasses import dataclass, field

from gateway.deployment_health import (
    LATENCY_MINUTES,
    cool_key,
    disabled_here,
    minute_of,
    off_key,
    pending_writes,
    rpm_key,
    stats_key,
)
from models_catalog.served import ServedDeployment, ServedModel
from utils_app import clock, metrics, shared
from utils_app.errors import RateLimited, UpstreamError

EXPLORE = 0.1  # how often latency routing tries another deployment than the fastest, to measure it again


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
    ops = [shared.get(cool_key(deployment.pk)) for deployment in model.pool]
    ops += [shared.get(off_key(deployment.pk)) for deployment in model.pool]
    if model.routing == "latency":
        minute = minute_of()
        ops += [shared.hmget(stats_key(deployment.pk, minute - back), "ts", "tc")
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

def _disabled(deployment: ServedDeployment, health: Health) -> bool:
    """Whether the deployment is out of rotation: in the snapshot, since a failure here, or in the shared cache."""
    return deployment.disabled or disabled_here.get(deployment.pk) is deployment or deployment.pk in health.disabled


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
    answers = shared.run([shared.incr(rpm_key(deployment.pk, minute_of()), 61)])
    return answers is None or answers[0] <= deployment.rpm  # the cache down: no cap can be counted
