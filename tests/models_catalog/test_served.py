"""The catalog snapshot is made of frozen values (models_catalog.served): no row of the database is reachable
from it, nothing can be set on it, and it answers what the rows would."""
import dataclasses
from collections.abc import Mapping

import pytest
from django.db import models

from keys.models import TIERS
from models_catalog import analytics, catalog, usage
from models_catalog.models import AiModel, Deployment
from utils_app import clock


def reachable(value, seen=None):
    """Every object reachable from ``value`` through dataclass fields, tuples, lists, sets and dicts."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    if dataclasses.is_dataclass(value):
        children = [getattr(value, member.name) for member in dataclasses.fields(value)]
    elif isinstance(value, Mapping):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, (tuple, list, set, frozenset)):
        children = list(value)
    else:
        children = []
    for child in children:
        yield from reachable(child, seen)


def test_no_row_of_the_database_is_reachable_from_the_snapshot(seeded):
    values = list(reachable(catalog.snapshot()))
    assert not [value for value in values if isinstance(value, models.Model)]
    assert not [value for value in values if isinstance(value, (list, set, dict))]  # nothing to add to


def test_nothing_can_be_set_on_a_model_its_deployments_or_their_provider(seeded):
    model = catalog.get_model("local-chat")
    deployment = model.pool[0]
    for value, name in ((model, "cost"), (deployment, "disabled"), (deployment.provider, "timeout")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, getattr(value, name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.pool = ()  # what routing once did to the shared instances


def test_a_model_and_its_deployments_answer_as_their_rows_do(seeded):
    for model in catalog.snapshot().models.values():
        row = AiModel.objects.get(pk=model.pk)
        assert (model.id, model.model_id, model.type, model.cost, model.pricing_input, model.max_output_tokens) == \
            (row.pk, row.model_id, row.type, row.cost, row.pricing_input, row.max_output_tokens)
        assert [model.allows_tier(tier) for tier in TIERS] == [row.allows_tier(tier) for tier in TIERS]
        assert model.is_configured(model.pool) == row.is_configured(row.deployments.all())
        rows = Deployment.objects.filter(model=row).select_related("model", "provider").order_by("priority", "id")
        assert [(d.pk, d.upstream_name, d.secret_env, d.provider.name, d.model is model) for d in model.pool] == \
            [(d.pk, d.upstream_name, d.secret_env, d.provider.name, True) for d in rows]
        for deployment, stored in zip(model.pool, rows):
            assert deployment.provider.secret_envs() == stored.provider.secret_envs()


def test_the_web_views_figures_ride_on_a_copy_never_on_the_snapshots_model(seeded):
    listed = analytics.model_list_with_usage(now=clock.utcnow())
    first = listed["models"][0]
    assert first.usage == usage.zero() and first.model_id in catalog.snapshot().models
    assert not hasattr(catalog.snapshot().models[first.model_id], "usage")
