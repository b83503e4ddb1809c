"""Fixtures of the staff UI tests: a logged-in staff member and a way to record usage."""
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from models_catalog.models import AiModel, UsageEvent


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_superuser("alice", "alice@example.com", "correct horse battery")


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def limited_staff_client(client, django_user_model):
    """Staff who may look at keys and models but change nothing."""
    user = django_user_model.objects.create_user("bob", password="correct horse battery", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=[
        "view_apikey", "view_aimodel", "view_usageevent", "view_auditlog"]))
    client.force_login(user)
    return client


@pytest.fixture
def record_usage(seeded):
    """record_usage(key, "local-chat", ago=timedelta(...), success=True, latency=40, credits=1, tokens=(10, 5))."""
    def record(key, model_id="local-chat", *, ago=timedelta(minutes=5), success=True, latency=40, credits=1,
               tokens=(10, 5), status=None):
        model = AiModel.objects.get(model_id=model_id)
        return UsageEvent.objects.create(
            key=key, model=model, operation=model.type, status=status or (200 if success else 502),
            success=success, input_tokens=tokens[0], output_tokens=tokens[1],
            credits_charged=credits if success else 0, latency_ms=latency, created_at=timezone.now() - ago)
    return record
