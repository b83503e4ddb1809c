"""Two-factor sign-in for staff: enrolment with a QR code, codes at sign-in, recovery codes, the requirement."""
import re
import time
from base64 import b32encode

import pytest
from axes.models import AccessAttempt
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from keys import two_factor
from keys.models import AuditLog

PASSWORD = "correct horse battery"
LOGIN = "/admin/login/"
ENROL = "/admin/two-factor/"


def code_for(device, *, steps_ahead=0) -> str:
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    totp.time = time.time() + steps_ahead * device.step
    return f"{totp.token():06d}"


def wrong_code_for(device) -> str:
    """Six digits that none of the accepted time steps (now, one before, one after) produce."""
    accepted = {code_for(device, steps_ahead=step) for step in (-1, 0, 1)}
    return next(code for code in ("123456", "654321", "000000", "999999") if code not in accepted)


@pytest.fixture
def enrolled(staff_user):
    """alice with a confirmed authenticator and her recovery codes."""
    device = TOTPDevice.objects.create(user=staff_user, name="authenticator app", confirmed=True)
    return device, two_factor.new_recovery_codes(staff_user)


def sign_in(client, code="", *, password=PASSWORD):
    return client.post(LOGIN, {"username": "alice", "password": password, "code": code, "next": "/admin/"})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_enrolment_shows_a_qr_code_and_a_right_code_turns_it_on_with_recovery_codes_shown_once(staff_client,
                                                                                               staff_user):
    page = staff_client.get(ENROL)
    assert page.status_code == 200
    device = TOTPDevice.objects.get(user=staff_user)
    assert not device.confirmed
    html = page.content.decode()
    assert re.search(r'<div class="two-factor-qr"[^>]*><svg[^>]*viewBox=', html)
    assert " ".join(re.findall(".{1,4}", b32encode(device.bin_key).decode())) in html
    staff_client.get(ENROL)
    assert TOTPDevice.objects.filter(user=staff_user).count() == 1  # a reload keeps the QR code just scanned

    done = staff_client.post(ENROL, {"code": code_for(device)})

    assert done.status_code == 200
    codes = re.findall(r"<li><code>([a-z2-7]{8})</code></li>", done.content.decode())
    assert len(codes) == 10
    assert sorted(codes) == sorted(StaticToken.objects.filter(device__user=staff_user).values_list("token",
                                                                                                    flat=True))
    device.refresh_from_db()
    assert device.confirmed
    assert staff_client.session[DEVICE_ID_SESSION_KEY] == device.persistent_id  # this session passed the code
    assert AuditLog.objects.filter(action="staff_2fa_enrolled", actor="staff alice").count() == 1
    status = staff_client.get(ENROL).content.decode()
    assert 'id="recovery-codes-left">10<' in status
    assert not any(code in status for code in codes)


def test_right_after_a_wrong_enrolment_code_the_page_asks_to_wait(staff_client, staff_user, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = 60
    staff_client.get(ENROL)
    device = TOTPDevice.objects.get(user=staff_user)
    staff_client.post(ENROL, {"code": wrong_code_for(device)})

    response = staff_client.post(ENROL, {"code": code_for(device)})

    assert "Too many wrong codes in a row" in response.content.decode()
    device.refresh_from_db()
    assert not device.confirmed


def test_a_wrong_enrolment_code_leaves_two_factor_off(staff_client, staff_user):
    staff_client.get(ENROL)
    device = TOTPDevice.objects.get(user=staff_user)

    response = staff_client.post(ENROL, {"code": wrong_code_for(device)})

    assert response.status_code == 200
    assert "That code is not right" in response.content.decode()
    device.refresh_from_db()
    assert not device.confirmed
    assert not StaticToken.objects.exists()


@pytest.mark.parametrize("code", ["", "x" * 500, "12 34", "\x00"])
def test_bad_input_on_the_enrolment_form_is_never_a_500(staff_client, staff_user, code):
    staff_client.get(ENROL)

    response = staff_client.post(ENROL, {"code": code})

    assert response.status_code == 200
    assert not TOTPDevice.objects.get(user=staff_user).confirmed


def test_with_two_factor_on_the_password_alone_does_not_sign_in(client, enrolled):
    response = sign_in(client)

    assert response.status_code == 200
    assert "enter the code from your authenticator app" in response.content.decode()
    assert not signed_in(client)


def test_a_wrong_code_is_refused_and_counts_as_a_failed_sign_in(client, enrolled):
    device, _ = enrolled

    response = sign_in(client, wrong_code_for(device))

    assert response.status_code == 200
    assert "That authentication code is not right" in response.content.decode()
    assert not signed_in(client)
    assert AccessAttempt.objects.get(username="alice").failures_since_start == 1


def test_right_after_a_wrong_code_the_device_asks_to_wait_without_counting_a_failure(client, enrolled, settings):
    settings.OTP_TOTP_THROTTLE_FACTOR = 60  # seconds to wait after one wrong code: no race with the clock
    device, _ = enrolled
    sign_in(client, wrong_code_for(device))

    response = sign_in(client, code_for(device))

    assert response.status_code == 200
    assert "Too many wrong codes in a row" in response.content.decode()
    assert not signed_in(client)
    assert AccessAttempt.objects.get(username="alice").failures_since_start == 1


def test_the_authenticators_code_signs_in_and_marks_the_session_as_verified(client, enrolled):
    device, _ = enrolled

    response = sign_in(client, code_for(device))

    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert client.session[DEVICE_ID_SESSION_KEY] == device.persistent_id
    assert client.get("/admin/").status_code == 200
    device.refresh_from_db()
    assert device.last_t >= 0  # the step is used up: the same code cannot sign in twice


def test_a_recovery_code_signs_in_once_however_it_is_typed(client, enrolled):
    _, codes = enrolled
    typed = f"{codes[0][:4].upper()} {codes[0][4:].upper()}"

    assert sign_in(client, typed).status_code == 302
    assert StaticToken.objects.count() == 9
    client.logout()

    again = sign_in(client, codes[0])
    assert again.status_code == 200
    assert not signed_in(client)


def test_new_recovery_codes_replace_the_old_ones(client, enrolled):
    device, old_codes = enrolled
    sign_in(client, code_for(device))

    response = client.post(ENROL)

    new_codes = re.findall(r"<li><code>([a-z2-7]{8})</code></li>", response.content.decode())
    assert len(new_codes) == 10
    stored = set(StaticToken.objects.values_list("token", flat=True))
    assert stored == set(new_codes)
    assert not stored & set(old_codes)
    assert AuditLog.objects.filter(action="staff_recovery_codes").count() == 1


def test_when_required_a_superuser_without_two_factor_is_sent_to_enrol(staff_client, staff_user, settings):
    settings.STAFF_REQUIRE_2FA = True

    for page in ("/admin/", "/admin/keys/apikey/", "/admin/password_change/"):
        response = staff_client.get(page)
        assert (response.status_code, response["Location"]) == (302, ENROL)
    assert "Superusers must sign in with a second factor" in staff_client.get(ENROL).content.decode()

    staff_client.post(ENROL, {"code": code_for(TOTPDevice.objects.get(user=staff_user))})
    assert staff_client.get("/admin/").status_code == 200


def test_when_required_a_superuser_signs_in_with_the_password_then_enrols(client, staff_user, settings):
    settings.STAFF_REQUIRE_2FA = True

    response = sign_in(client)

    assert response.status_code == 302
    assert client.get("/admin/")["Location"] == ENROL


def test_the_requirement_leaves_staff_who_are_not_superusers_alone(limited_staff_client, settings):
    settings.STAFF_REQUIRE_2FA = True

    assert limited_staff_client.get("/admin/").status_code == 200


def test_without_the_requirement_a_superuser_may_go_without(staff_client):
    assert staff_client.get("/admin/").status_code == 200


def test_a_session_from_before_enrolment_must_sign_in_again_with_a_code(staff_client, enrolled):
    for page in ("/admin/", ENROL):
        response = staff_client.get(page)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/?next=")
        assert not signed_in(staff_client)
        staff_client.force_login(enrolled[0].user)
    assert StaticToken.objects.count() == 10  # the page that makes new codes was not reached
