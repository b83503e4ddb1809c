"""The staff sign-in lockout and two-factor enrolment in headless Chromium, as a staff member meets them."""
import time
from base64 import b32decode

import pytest
from django.core.management import call_command
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

from keys.models import AuditLog
from tests.staff.test_browser import browser  # noqa: F401  (the headless Chromium fixture)

pytestmark = pytest.mark.browser

PASSWORD = "correct horse battery"


@pytest.fixture
def alice(django_user_model, settings):
    settings.STAFF_LOGIN_FAILURE_LIMIT = settings.AXES_FAILURE_LIMIT = 5
    settings.STAFF_LOGIN_COOLOFF_MINUTES = 15
    settings.AXES_COOLOFF_TIME = 15 / 60
    return django_user_model.objects.create_superuser("alice", "alice@example.com", PASSWORD)


def sign_in(browser, live_server, password, code=""):
    browser.get(f"{live_server.url}/admin/login/")
    for field, value in (("id_username", "alice"), ("id_password", password), ("id_code", code)):
        element = browser.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    submit(browser, "#login-form")


def gone(element):
    """The page has moved on from ``element``. Chromium reports a detached node either as a stale
    element or as an inspector error ("does not belong to the document"): both mean it is gone."""
    def check(_):
        try:
            element.is_enabled()
        except WebDriverException:
            return True
        return False
    return check


def submit(browser, form_selector):
    """Submit and wait for the answer, so the next page load cannot cut the POST short."""
    form = browser.find_element(By.CSS_SELECTOR, form_selector)
    form.find_element(By.CSS_SELECTOR, "input[type=submit], button[type=submit]").click()
    WebDriverWait(browser, 10).until(gone(form))


def sign_out(browser):
    submit(browser, "#logout-form")
    assert browser.get_cookie("sessionid") is None


def on_the_staff_index(browser) -> bool:
    return bool(browser.find_elements(By.CSS_SELECTOR, ".staff-shortcuts"))


def totp_code(secret: str, *, step=None) -> str:
    """What the phone would show for the secret typed off the page: now, or in the given 30-second step."""
    totp = TOTP(b32decode(secret.replace(" ", "")))
    totp.time = time.time() if step is None else (step + 0.5) * totp.step
    return f"{totp.token():06d}"


def test_five_wrong_passwords_lock_the_login_and_the_right_one_stays_out_until_unlocked(browser, live_server,
                                                                                        alice):
    for attempt in range(4):
        sign_in(browser, live_server, f"wrong guess {attempt}")
        assert "Please enter the correct username and password" in browser.find_element(
            By.CSS_SELECTOR, ".errornote").text
    sign_in(browser, live_server, "wrong guess 4")
    assert "Sign-in is locked for 15 minutes after 5 failed attempts" in browser.find_element(
        By.CSS_SELECTOR, ".errornote.staff-lockout").text

    sign_in(browser, live_server, PASSWORD)
    browser.implicitly_wait(0)  # the index is expected not to appear: do not wait for it
    assert not on_the_staff_index(browser)
    assert browser.find_element(By.CSS_SELECTOR, ".errornote.staff-lockout")
    assert browser.get_cookie("sessionid") is None
    assert AuditLog.objects.filter(action="staff_lockout", after__username="alice").count() == 1

    call_command("unlock_staff", "--username", "alice")
    browser.implicitly_wait(5)
    sign_in(browser, live_server, PASSWORD)
    assert on_the_staff_index(browser)


def test_a_superuser_enrols_an_authenticator_then_signs_in_with_its_code_and_a_recovery_code(browser, live_server,
                                                                                               alice, settings):
    settings.STAFF_REQUIRE_2FA = True
    sign_in(browser, live_server, PASSWORD)
    assert browser.current_url == f"{live_server.url}/admin/two-factor/"
    assert "Superusers must sign in with a second factor" in browser.find_element(By.CSS_SELECTOR, ".errornote").text
    qr = browser.find_element(By.CSS_SELECTOR, ".two-factor-qr svg")
    assert qr.size["width"] >= 200 and qr.size["height"] >= 200  # big enough for a phone camera
    secret = browser.find_element(By.ID, "two-factor-secret").text

    browser.find_element(By.ID, "id_code").send_keys(totp_code(secret))
    submit(browser, "#two-factor-form")
    codes = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#recovery-codes li")]
    assert len(codes) == 10
    assert TOTPDevice.objects.get(user=alice).confirmed
    link = browser.find_element(By.LINK_TEXT, "I have kept them: continue")
    link.click()
    WebDriverWait(browser, 10).until(gone(link))
    assert on_the_staff_index(browser)
    sign_out(browser)

    sign_in(browser, live_server, PASSWORD)
    assert "enter the code from your authenticator app" in browser.find_element(By.CSS_SELECTOR, ".errornote").text
    # A step is accepted once, so the phone's next code: the step after the one the enrolment used. Counting
    # from that step, not from the clock, keeps this right when the enrolment's code was typed in one step and
    # checked in the next (django-otp then records a drift of -1, and two steps past the clock would be refused).
    used = TOTPDevice.objects.get(user=alice).last_t
    sign_in(browser, live_server, PASSWORD, totp_code(secret, step=used + 1))
    assert on_the_staff_index(browser)
    sign_out(browser)

    sign_in(browser, live_server, PASSWORD, codes[0])
    assert on_the_staff_index(browser)
    assert StaticToken.objects.filter(device__user=alice).count() == 9
    browser.get(f"{live_server.url}/admin/two-factor/")
    assert browser.find_element(By.ID, "recovery-codes-left").text == "9"
