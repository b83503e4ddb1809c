"""Probing deployments, and the upkeep thread that re-enables those that work again (CONTRACT section 7).

A probe is the cheapest call that proves a deployment's secret and model work (chat:
one token; gateway.upstream.base.HttpAdapter.probe). A deployment the router disabled
that passes is enabled again, and so is every other deployment of its provider and
secret that was disabled with it, since they share the secret that was at fault. One a
person disabled stays disabled until a person enables it (the probe only reports), and a
healthy one that fails is left as it is: a probe never takes anything out of rotation.

Each served worker runs ``upkeep`` in a background thread (a greenlet under gevent):
every few seconds it writes the routing figures its requests left waiting, and every
PROBE_SECONDS the one process of the fleet that wins a short claim in the shared cache
probes the disabled deployments.
"""
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections, connection

from gateway import deployment_health, upstream
from models_catalog import catalog
from models_catalog.models import Deployment
from utils_app.db import unavailable_cause
from utils_app.errors import GatewayError
from utils_app.logging import one_line

log = logging.getLogger("gateway.routing")

UPKEEP_SECONDS = 5.0
PROBE_CLAIM = "deployment-probe"


@dataclass(frozen=True)
class ProbeResult:
    deployment: Deployment
    ok: bool
    detail: str  # "ok", or the error's code and message
    enabled: bool  # whether this probe re-enabled it


def probe(deployment: Deployment) -> ProbeResult:
    """Probe one deployment; a disabled one that passes is enabled again (with its provider and secret)."""
    try:
        upstream.adapter_for(deployment).probe(deployment.model.type)
    except GatewayError as exc:
        # The message may be an upstream's (scrubbed, but its own text): one line in the log and the table.
        return ProbeResult(deployment, False, one_line(f"{exc.code}: {exc.message}"), False)
    except Exception as exc:  # a probe must report, never crash the upkeep thread or the command
        log.warning("probe of deployment %s failed unexpectedly", deployment.pk, exc_info=True)
        return ProbeResult(deployment, False, f"internal_error: {type(exc).__name__}", False)
    enabled = False
    if deployment.disabled and not deployment.disabled_by_hand:
        for sibling in Deployment.objects.filter(provider_id=deployment.provider_id, secret_env=deployment.secret_env,
                                                 disabled_at__isnull=False, disabled_by_hand=False):
            deployment_health.enable(sibling)
        deployment.disabled_at = None
        enabled = True
        log.warning("deployment %s (%s, provider %s) answered its probe: enabled again", deployment.pk,
                    deployment.model.model_id, deployment.provider.name)
    return ProbeResult(deployment, True, "ok", enabled)


def deployments(*, disabled_only: bool) -> list[Deployment]:
    """The deployments to probe, one per provider and secret when only the disabled ones are wanted
    (a secret that works again works for all of them)."""
    found = Deployment.objects.select_related("model", "provider").order_by("provider__name", "secret_env", "id")
    if not disabled_only:
        return list(found)
    chosen, seen = [], set()
    for deployment in found.filter(disabled_at__isnull=False, disabled_by_hand=False):
        if (deployment.provider_id, deployment.secret_env) not in seen:
            seen.add((deployment.provider_id, deployment.secret_env))
            chosen.append(deployment)
    return chosen


def probe_disabled() -> list[ProbeResult]:
    results = [probe(deployment) for deployment in deployments(disabled_only=True)]
    if results:
        catalog.invalidate()
    return results


# ---------------------------------------------------------------- the upkeep thread

_started = False
_lock = threading.Lock()


def start_upkeep() -> None:
    """Start this process's upkeep thread once (gunicorn's post_worker_init calls it)."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_upkeep, name="routing-upkeep", daemon=True).start()


def _upkeep() -> None:
    next_probe = time.monotonic() + UPKEEP_SECONDS
    while True:
        time.sleep(UPKEEP_SECONDS)
        try:
            deployment_health.flush()
            if settings.PROBE_SECONDS and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + settings.PROBE_SECONDS
                if _claim(settings.PROBE_SECONDS):
                    for result in probe_disabled():
                        if not result.ok:
                            log.info("deployment %s still fails its probe: %s", result.deployment.pk, result.detail)
        except DatabaseError as refused:  # the database is down or full: say why, in words, and try again
            log.warning("routing upkeep skipped, database unavailable: %s; it runs again in %ss",
                        unavailable_cause(refused), UPKEEP_SECONDS)
        except Exception:
            log.exception("routing upkeep failed; it runs again in %ss", UPKEEP_SECONDS)
        finally:
            close_old_connections()
            connection.close()


def _claim(seconds: int) -> bool:
    """Whether this process probes this round: the first of the fleet to claim it."""
    try:
        return cache.add(PROBE_CLAIM, 1, timeout=seconds)
    except Exception:  # no shared cache right now: this process probes on its own
        return True
