"""Deployments as people see and steer them: the admin API and the staff page (CONTRACT section 7).

Both doors list, disable, enable and probe through these functions, so they show the
same figures and write the same audit entries. What a deployment is doing right now
(cooling, its last hour) comes from gateway.deployment_health's shared health; whether it is
disabled, from the database.

A disable by hand takes out that one deployment. A refused secret disables every
deployment of the secret at once (deployment_health.disable), because the secret is bad for every
model; a person who disables one deployment by hand means that one (a model's upstream
name being retired at one provider, say), so the others sharing its secret keep serving,
and it stays disabled until a person enables it: probes only re-enable what the router
disabled.
"""
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import transaction

from gateway import deployment_health, probes
from keys.services import audit
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment
from utils_app.errors import NotFound

REASON_MAX_LENGTH = Deployment._meta.get_field("disabled_reason").max_length
# Beyond this an id names no row, and PostgreSQL would refuse to compare it (bigint).
ID_MAX = 2**63 - 1


@dataclass(frozen=True)
class Row:
    """A deployment with its health: what the admin API answers and the staff page shows."""

    deployment: Deployment
    health: deployment_health.DeploymentState

    @property
    def cooldown_until(self) -> datetime | None:
        until = self.health.cooldown_until
        return None if until is None else datetime.fromtimestamp(until, tz=UTC)

    @property
    def disabled_reason(self) -> str | None:
        return self.deployment.disabled_reason if self.deployment.disabled else None

    def record(self) -> dict:
        """What the audit log keeps of it (names, never a secret's value)."""
        deployment = self.deployment
        return {"id": deployment.pk, "model": deployment.model.model_id, "provider": deployment.provider.name,
                "secret_env": deployment.secret_env, "upstream_model": deployment.upstream_name,
                "state": self.health.state,
                "cooldown_until": self.cooldown_until.isoformat() if self.cooldown_until else None,
                "disabled_reason": self.disabled_reason,
                "disabled_at": deployment.disabled_at.isoformat() if deployment.disabled_at else None}


def _deployments():
    return Deployment.objects.select_related("model", "provider").order_by("model__model_id", "priority", "id")


def rows(deployments: list[Deployment]) -> list[Row]:
    """Each deployment with its health, read in one round trip to the shared cache."""
    health = deployment_health.states(deployments)
    return [Row(deployment, health[deployment.pk]) for deployment in deployments]


def listing(*, model_id: str | None = None) -> list[Row]:
    """Every deployment, by model, priority and id; only the model's with ``model_id`` (404 model_not_found
    when there is no such model, enabled or not)."""
    deployments = _deployments()
    if model_id is not None:
        # No model id holds a NUL, and PostgreSQL would refuse to compare one: no such model.
        model = AiModel.objects.filter(model_id=model_id).first() if "\x00" not in model_id else None
        if model is None:
            raise NotFound(f"The model '{model_id}' does not exist.", code="model_not_found", param="model")
        deployments = deployments.filter(model=model)
    return rows(list(deployments))


def find(deployment_id) -> Deployment:
    """The deployment with this id (an int, or the digits of a URL); 404 deployment_not_found otherwise."""
    text = str(deployment_id)
    found = None
    if text.isascii() and text.isdigit() and int(text) <= ID_MAX:
        found = _deployments().filter(pk=int(text)).first()
    if found is None:
        raise NotFound(f"No deployment has the id {text[:40]!r}.", code="deployment_not_found", param="id")
    return found


def row(deployment: Deployment) -> Row:
    """The deployment as it is now, read again."""
    return rows([find(deployment.pk)])[0]


def disable(*, deployment: Deployment, reason: str | None, actor: str) -> Row:
    """Take this one deployment out of rotation until someone (or a probe) enables it. Disabling a disabled
    deployment changes nothing: it keeps the reason and time it was disabled with."""
    before = row(deployment)
    reason = (reason or "").strip()[:REASON_MAX_LENGTH] or f"disabled by hand ({actor})"
    with transaction.atomic():
        # Conditional, so two people disabling it at once write one change and one audit entry.
        changed = deployment_health.disable(deployment, reason=reason, same_secret=False, by_hand=True)
        after = row(deployment)
        if changed:
            audit(actor=actor, action="disable_deployment", key=None, before=before.record(), after=after.record())
    return after


def enable(*, deployment: Deployment, actor: str) -> Row:
    """Put the deployment back in rotation now: enabled, and its cooldown and failure count forgotten.
    A healthy deployment, or one merely not configured here (nothing to enable: its secret is missing), is left
    as it is, with no audit entry."""
    before = row(deployment)
    if before.health.state in ("healthy", "not_configured"):
        return before
    with transaction.atomic():
        deployment_health.enable(deployment)
        after = row(deployment)
        audit(actor=actor, action="enable_deployment", key=None, before=before.record(), after=after.record())
    return after


@dataclass(frozen=True)
class Probed:
    result: probes.ProbeResult
    enabled: list[int]  # ids enabled again by the probe (it, and those sharing its secret)


def probe(*, deployment: Deployment, actor: str) -> Probed:
    """Probe one deployment (gateway.probes); one that was disabled and answers is enabled again, with the
    others sharing its secret, and that change is audited. A probe never disables anything."""
    siblings = Deployment.objects.filter(provider_id=deployment.provider_id, secret_env=deployment.secret_env,
                                         disabled_at__isnull=False, disabled_by_hand=False)
    disabled = rows(list(siblings.select_related("model", "provider"))) if deployment.disabled else []
    result = probes.probe(deployment)
    if not result.enabled:
        return Probed(result, [])
    catalog.invalidate()
    enabled = [before.deployment.pk for before in disabled]
    audit(actor=actor, action="probe_deployment", key=None,
          before={"deployments": [before.record() for before in disabled]},
          after={"deployments": [after.record() for after in rows(list(_deployments().filter(pk__in=enabled)))]})
    return Probed(result, enabled)
