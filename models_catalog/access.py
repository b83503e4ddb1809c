"""Changing which tiers may use which models, many models at once (the staff access matrix)."""
from django.db import transaction

from keys.models import TIERS
from keys.services import audit
from models_catalog.models import AiModel
from utils_app.errors import InvalidRequest


def access_matrix() -> list[tuple[AiModel, list[tuple[str, bool]]]]:
    """Every model (disabled ones too) with one (tier, allowed) pair per tier, in tier order."""
    models = AiModel.objects.order_by("type", "model_id")
    return [(model, [(tier, tier in model.tiers) for tier in TIERS]) for model in models]


def set_access(*, changes: dict[int, dict[str, bool]], actor: str) -> list[str]:
    """Grant (True) or withdraw (False) tiers on models, by model primary key; returns the ids changed.

    Only the cells named in ``changes`` move, so two staff members editing
    different cells at the same time do not undo each other. All models change
    in one transaction and one audit entry records them; each save goes through
    the ORM, whose signals drop the cached catalog snapshot.
    """
    for model_pk, cells in changes.items():
        unknown = set(cells) - set(TIERS)
        if unknown:
            raise InvalidRequest(f"Unknown tier(s): {', '.join(sorted(unknown))}.", param="tier")
    before, after = {}, {}
    with transaction.atomic():
        models = AiModel.objects.select_for_update().filter(pk__in=list(changes)).order_by("pk")
        found = {model.pk: model for model in models}
        missing = set(changes) - set(found)
        if missing:
            raise InvalidRequest("A model in the matrix no longer exists; reload the page.", param="model",
                                 code="model_not_found")
        for model_pk, model in found.items():
            allowed = set(model.tiers)
            for tier, granted in changes[model_pk].items():
                (allowed.add if granted else allowed.discard)(tier)
            tiers = [tier for tier in TIERS if tier in allowed]
            if tiers == list(model.tiers):
                continue
            before[model.model_id], after[model.model_id] = list(model.tiers), tiers
            model.tiers = tiers
            model.save(update_fields=["tiers", "updated_at"])
        if after:
            audit(actor=actor, action="update_access", key=None, before=before, after=after)
    return sorted(after)
