"""The staff sign-in lockout: per username and address, per address, its message, its audit entry, unlock_staff."""
from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.core.management import CommandError, call_command
from django.db.models import F
from django.test import RequestFactory

from keys.models import AuditLog
from keys.two_factor import TwoFactorMiddleware
from utils_app import limits

PASSWORD = "correct horse battery"
LOGIN = "/admin/login/"
HOME = "192.0.2.10"
ELSEWHERE = "198.51.100.20"
NEW_PASSWORD = "a fresh staff passphrase"


@pytest.fixture(autouse=True)
def shipped_limits(settings):
    """The shipped defaults, whatever the environment running the tests says."""
    settings.STAFF_LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 5
    settings.STAFF_LOGIN_ADDRESS_FAILURE_LIMIT = 10
    settings.STAFF_LOGIN_COOLOFF_MINUTES = 15
    settings.AXES_COOLOFF_TIME = 15 / 60


def sign_in(client, password, *, username="alice", address=HOME):
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"}, REMOTE_ADDR=address)


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def lock_alice(client, address=HOME):
    for attempt in range(5):
        sign_in(client, f"wrong guess {attempt}", address=address)


def test_forty_wrong_passwords_lock_the_account_and_the_forty_first_right_one_stays_out(client, staff_user):
    statuses = [sign_in(client, f"wrong guess {attempt}").status_code for attempt in range(40)]

    assert statuses[:4] == [200] * 4
    assert set(statuses[4:]) == {429}  # the fifth failure starts the lockout
    right = sign_in(client, PASSWORD)
    assert right.status_code == 429
    assert "Sign-in is locked for 15 minutes after 5 failed attempts" in right.content.decode()
    assert not signed_in(client)
    # Attempts refused during the lockout are not counted, so it ends one cool-off after it began.
    assert AccessAttempt.objects.get(username="alice").failures_since_start == 5


def test_a_wrong_password_before_the_limit_says_so_and_not_that_sign_in_is_locked(client, staff_user):
    response = sign_in(client, "wrong guess")

    assert response.status_code == 200
    page = response.content.decode()
    assert "Please enter the correct username and password" in page
    assert "locked" not in page
    assert 'name="code"' in page  # the field for an authentication code is on the page


def test_a_stranger_failing_elsewhere_for_a_username_does_not_lock_its_owner_out_at_home(client, staff_user):
    for attempt in range(40):
        sign_in(client, f"wrong guess {attempt}", address=ELSEWHERE)
    assert sign_in(client, PASSWORD, address=ELSEWHERE).status_code == 429  # the stranger's pair is locked

    response = sign_in(client, PASSWORD)

    assert response.status_code == 302
    assert signed_in(client)


def test_a_locked_pair_stays_locked_on_that_address_while_the_address_may_sign_in_others(
        client, staff_user, django_user_model):
    django_user_model.objects.create_superuser("carol", "carol@example.com", PASSWORD)
    lock_alice(client)

    assert sign_in(client, PASSWORD).status_code == 429
    assert sign_in(client, PASSWORD, username="carol").status_code == 302  # 5 failures here: under 10
    client.logout()
    assert sign_in(client, PASSWORD).status_code == 429  # carol's success cleared her pair only


def test_one_address_guessing_many_usernames_is_locked_out_for_every_username(client, staff_user):
    for attempt in range(10):  # two guesses at each of five names: no pair reaches its limit
        sign_in(client, "guess", username=f"someone{attempt % 5}")

    locked = sign_in(client, PASSWORD)
    assert locked.status_code == 429
    assert "or 10 for any accounts from this address" in locked.content.decode()
    assert not signed_in(client)
    assert sign_in(client, PASSWORD, address=ELSEWHERE).status_code == 302
    assert signed_in(client)


def test_one_address_below_its_limit_is_not_locked_for_other_usernames(client, staff_user):
    for attempt in range(9):
        sign_in(client, "guess", username=f"someone{attempt}")

    assert sign_in(client, PASSWORD).status_code == 302


def test_each_lockout_writes_one_audit_entry(client, staff_user):
    for attempt in range(12):
        sign_in(client, f"wrong guess {attempt}")

    entry = AuditLog.objects.get(action="staff_lockout")
    assert entry.actor == f"staff login from {HOME}"
    assert entry.key is None
    assert entry.after == {"username": "alice", "address": HOME, "locked": "username and address", "failures": 5,
                           "address_failures": 5, "cooloff_minutes": 15, "path": LOGIN}


def test_names_no_account_has_write_no_audit_entry_and_the_address_trying_them_writes_one(client, staff_user):
    for attempt in range(60):  # five names of nobody, five times each, then the address is locked
        sign_in(client, "guess", username=f"nobody{attempt // 5}", address=ELSEWHERE)

    [entry] = AuditLog.objects.filter(action="staff_lockout")
    assert entry.after == {"username": "nobody1", "address": ELSEWHERE, "locked": "address", "failures": 5,
                           "address_failures": 10, "cooloff_minutes": 15, "path": LOGIN}
    # Refused attempts are not recorded: the failure records stop growing with the lockout.
    assert sum(AccessAttempt.objects.values_list("failures_since_start", flat=True)) == 10
    assert sign_in(client, PASSWORD).status_code == 302  # alice at home is untouched


def test_the_lockout_ends_after_the_cooloff(client, staff_user):
    lock_alice(client)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=16))

    response = sign_in(client, PASSWORD)

    assert response.status_code == 302
    assert signed_in(client)


def test_failures_are_counted_under_the_address_the_public_rate_limit_sees(client, staff_user, monkeypatch):
    monkeypatch.setattr(limits, "client_address", lambda request: "203.0.113.9")  # e.g. forwarded by our proxy
    sign_in(client, "wrong guess")

    assert AccessAttempt.objects.get().ip_address == "203.0.113.9"


def test_an_address_that_is_not_an_ip_falls_back_to_the_peer_and_is_no_500(client, staff_user, monkeypatch):
    monkeypatch.setattr(limits, "client_address", lambda request: "not an address")
    response = sign_in(client, "wrong guess")

    assert response.status_code == 200
    assert AccessAttempt.objects.get().ip_address == HOME


def test_a_successful_sign_in_forgets_the_failures_before_it(client, staff_user):
    for attempt in range(4):
        sign_in(client, f"wrong guess {attempt}")
    assert sign_in(client, PASSWORD).status_code == 302
    client.logout()

    for attempt in range(4):
        assert sign_in(client, f"wrong guess {attempt}").status_code == 200
    assert sign_in(client, PASSWORD).status_code == 302


@pytest.mark.parametrize("data", [
    {},
    {"username": "alice"},
    {"username": "a" * 5000, "password": "x" * 5000},
    {"username": "ali\x00ce", "password": "pass\x00word"},
    {"username": "alice", "password": PASSWORD, "code": "9" * 500},
    {"username": ["alice", "bob"], "password": [PASSWORD, "other"]},
    {"username": "alice", "password": PASSWORD, "next": "https://evil.example/"},
])
def test_bad_input_on_the_login_form_is_never_a_500(client, staff_user, data):
    response = client.post(LOGIN, data, REMOTE_ADDR=HOME)

    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert response["Location"] == "/admin/"  # never to another site
    assert AuditLog.objects.filter(action="staff_lockout").count() == 0


def change_password(client, old):
    return client.post("/admin/password_change/", {
        "old_password": old, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})


def test_guessing_the_current_password_on_the_change_form_locks_the_account(staff_client, staff_user, client):
    statuses = [change_password(staff_client, f"wrong guess {attempt}").status_code for attempt in range(5)]

    assert statuses == [200] * 4 + [429]
    refused = change_password(staff_client, PASSWORD)
    assert refused.status_code == 429
    assert "Sign-in is locked" in refused.content.decode()
    staff_user.refresh_from_db()
    assert staff_user.check_password(PASSWORD)
    assert AuditLog.objects.filter(action="staff_lockout", after__path="/admin/password_change/").count() == 1
    # The same lockout as the login's, for this account from the address the guesses came from.
    assert sign_in(client, PASSWORD, address="127.0.0.1").status_code == 429
    assert sign_in(client, PASSWORD, address=ELSEWHERE).status_code == 302


def test_the_change_form_takes_a_long_new_password_and_refuses_a_short_one(staff_client, staff_user):
    short = staff_client.post("/admin/password_change/", {
        "old_password": PASSWORD, "new_password1": "Short-pass1", "new_password2": "Short-pass1"})
    assert short.status_code == 200
    assert "at least 12 characters" in short.content.decode()
    staff_user.refresh_from_db()
    assert staff_user.check_password(PASSWORD)

    assert change_password(staff_client, PASSWORD)["Location"] == "/admin/password_change/done/"
    staff_user.refresh_from_db()
    assert staff_user.check_password(NEW_PASSWORD)


def test_the_password_change_page_still_needs_a_staff_session(client, staff_user):
    response = change_password(client, PASSWORD)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    staff_user.refresh_from_db()
    assert staff_user.check_password(PASSWORD)


def unlock(*args):
    out = StringIO()
    call_command("unlock_staff", *args, stdout=out)
    return out.getvalue()


def test_unlock_staff_by_username_lets_the_right_password_in_and_is_audited(client, staff_user):
    lock_alice(client)

    assert unlock("--username", "alice") == "lifted the lockout of username 'alice': removed 1 failure record(s)\n"
    assert sign_in(client, PASSWORD).status_code == 302
    assert AccessAttempt.objects.count() == 0
    entry = AuditLog.objects.get(action="staff_unlock")
    assert (entry.actor, entry.after) == ("command unlock_staff",
                                          {"username": "alice", "address": "", "records_removed": 1})


def test_unlock_staff_by_address_lifts_that_address_only(client, staff_user, django_user_model):
    django_user_model.objects.create_superuser("carol", "carol@example.com", PASSWORD)
    for attempt in range(10):
        sign_in(client, "guess", username=f"someone{attempt}")
    lock_alice(client, address=ELSEWHERE)
    assert sign_in(client, PASSWORD, username="carol").status_code == 429

    assert "removed 10 failure record(s)" in unlock("--address", HOME)
    assert sign_in(client, PASSWORD, username="carol").status_code == 302
    assert sign_in(client, PASSWORD, address=ELSEWHERE).status_code == 429


def test_unlock_staff_dry_run_counts_and_keeps_the_lockout(client, staff_user):
    lock_alice(client)

    assert unlock("--username", "alice", "--dry-run") == "would remove 1 failure record(s) of username 'alice'\n"
    assert sign_in(client, PASSWORD).status_code == 429
    assert not AuditLog.objects.filter(action="staff_unlock").exists()


def test_unlock_staff_with_nothing_to_lift_says_so_and_writes_nothing(db):
    assert unlock("--username", "nobody") == "no failed sign-ins on record for username 'nobody': nothing to lift\n"
    assert not AuditLog.objects.filter(action="staff_unlock").exists()


@pytest.mark.parametrize("args", [(), ("--address", "not-an-address"), ("--username", "  "),
                                  ("--username", "alice", "--address", HOME)])
def test_unlock_staff_refuses_bad_arguments(db, args):
    with pytest.raises(CommandError):
        unlock(*args)
    assert not AuditLog.objects.exists()


def test_the_two_factor_middleware_leaves_api_requests_untouched():
    request = RequestFactory().get("/v1/models")  # no session and no user, as on the API

    response = TwoFactorMiddleware(lambda request: "answered")(request)

    assert response == "answered"
    assert not hasattr(request, "user")
