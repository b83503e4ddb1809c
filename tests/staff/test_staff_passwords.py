"""The staff password policy (AUTH_PASSWORD_VALIDATORS: 12+ characters, not common, not all digits, not
like the username) holds on every way a staff password is set: createsuperuser at a terminal and with
--noinput, changepassword, the staff UI's user pages and the password-change page."""
import getpass
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

pytestmark = pytest.mark.django_db

GOOD = "quiet river lantern 42"


@pytest.fixture
def answers(monkeypatch):
    """answers(typed=[...], secret=[...]): what a person types at input() and at getpass() prompts."""
    def feed(*, typed=(), secret=()):
        typed, secret = list(typed), list(secret)
        monkeypatch.setattr("builtins.input", lambda prompt="": typed.pop(0))
        monkeypatch.setattr(getpass, "getpass", lambda prompt="": secret.pop(0))
        return typed, secret
    return feed


def create(*args) -> str:
    out = StringIO()
    call_command("createsuperuser", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize("password, reason", [
    ("short", "at least 12 characters"),
    ("123456789012345", "entirely numeric"),
    ("password1234", "too common"),
    ("ann-the-admin-2", "too similar to the username"),
])
def test_createsuperuser_noinput_refuses_a_password_the_policy_refuses(monkeypatch, password, reason):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", password)
    with pytest.raises(CommandError, match=reason):
        create("--noinput", "--username", "ann-the-admin", "--email", "ann@example.com")
    assert not User.objects.exists()


def test_createsuperuser_noinput_creates_a_superuser_with_a_good_password(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", GOOD)
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "ann")
    assert create("--noinput") == "Superuser ann created.\n"
    user = User.objects.get()
    assert (user.username, user.is_staff, user.is_superuser) == ("ann", True, True)
    assert user.check_password(GOOD)


def test_createsuperuser_noinput_needs_a_password_and_a_free_username(monkeypatch):
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="Set DJANGO_SUPERUSER_PASSWORD"):
        create("--noinput", "--username", "ann")
    User.objects.create_user("ann", password=GOOD)
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", GOOD)
    with pytest.raises(CommandError, match="already exists"):
        create("--noinput", "--username", "ann")
    assert User.objects.count() == 1


def test_at_a_terminal_a_refused_password_is_asked_again_never_bypassed(answers):
    typed, secret = answers(typed=["ann", "ann@example.com"], secret=["short", "short", GOOD, GOOD])
    assert create() == "Superuser ann created.\n"
    assert typed == [] and secret == []  # no "bypass the validation?" question was asked
    assert User.objects.get(username="ann").check_password(GOOD)


def test_at_a_terminal_three_refused_passwords_create_nobody(answers):
    answers(typed=["ann", ""], secret=["short", "short", "1234567890123", "1234567890123", "a", "b"])
    with pytest.raises(CommandError, match="No password passed the staff password policy in 3 tries"):
        create()
    assert not User.objects.exists()


def test_changepassword_refuses_a_short_password(answers):
    user = User.objects.create_superuser("ann", "ann@example.com", GOOD)
    answers(secret=["short", "short"] * 3)
    with pytest.raises(CommandError, match="Aborting"):
        call_command("changepassword", "ann", stdout=StringIO(), stderr=StringIO())
    user.refresh_from_db()
    assert user.check_password(GOOD)


def test_the_staff_uis_user_pages_refuse_a_short_password(staff_client, staff_user):
    added = staff_client.post(reverse("admin:auth_user_add"), {
        "username": "bob", "usable_password": "true", "password1": "short", "password2": "short"})
    assert added.status_code == 200 and "at least 12 characters" in added.content.decode()
    assert not User.objects.filter(username="bob").exists()
    changed = staff_client.post(reverse("admin:auth_user_password_change", args=[staff_user.pk]), {
        "usable_password": "true", "password1": "short", "password2": "short"})
    assert changed.status_code == 200 and "at least 12 characters" in changed.content.decode()
    staff_user.refresh_from_db()
    assert staff_user.check_password("correct horse battery")
