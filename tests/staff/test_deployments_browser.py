"""The deployments page driven in headless Chromium against a live server: staff disable a model's deployment,
the API stops serving the model, they enable it again and it serves again."""
import pytest

from keys.models import AuditLog
from keys.services import issue_key
from models_catalog.models import Deployment
from tests.staff.test_browser import (  # noqa: F401 - fixtures used by name
    DESKTOP,
    PHONE,
    browser,
    capture,
    chat,
    page_is_not_wider_than_the_screen,
    screenshots,
    staff_login,
)

pytestmark = pytest.mark.browser


def test_staff_disable_and_enable_a_deployment_and_the_api_follows(browser, live_server, staff_login, seeded,
                                                                   screenshots):
    from selenium.webdriver.common.by import By

    _, secret = issue_key(actor="test", tier="free", credits=10)
    deployment = Deployment.objects.get(model__model_id="local-chat")
    staff_login()
    browser.find_element(By.LINK_TEXT, "Deployments").click()  # from the admin index
    assert browser.find_element(By.ID, f"deployment-{deployment.pk}")
    browser.get(f"{live_server.url}/admin/models_catalog/aimodel/{deployment.model_id}/change/")
    browser.find_element(By.ID, "model-deployments").click()  # from the model's page: only its deployments
    browser.find_element(By.CSS_SELECTOR, "#deployments")

    def row():
        return browser.find_element(By.ID, f"deployment-{deployment.pk}")

    def press(name: str) -> None:
        """Press one of the row's buttons and wait for the page the form's POST leads to."""
        from selenium.webdriver.support.expected_conditions import staleness_of
        from selenium.webdriver.support.ui import WebDriverWait

        old = row()
        old.find_element(By.NAME, name).click()
        WebDriverWait(browser, 10).until(staleness_of(old))

    assert row().get_attribute("data-state") == "healthy"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#deployments tbody tr")) == 1
    row().find_element(By.NAME, "reason").send_keys("checking the pool")
    press("disable")
    assert "disabled: it gets no traffic" in browser.find_element(By.CSS_SELECTOR, ".messagelist").text
    assert row().get_attribute("data-state") == "disabled"
    assert "checking the pool" in row().text
    refused = chat(live_server, secret)
    assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_unavailable"
    assert page_is_not_wider_than_the_screen(browser)
    capture(browser, screenshots / "deployments-1280.png", *DESKTOP)
    capture(browser, screenshots / "deployments-390.png", *PHONE)

    press("enable")
    assert row().get_attribute("data-state") == "healthy"
    assert chat(live_server, secret).status_code == 200
    assert [entry.action for entry in AuditLog.objects.filter(actor="staff alice").order_by("id")] == [
        "disable_deployment", "enable_deployment"]

    press("probe")
    assert "answered" in browser.find_element(By.CSS_SELECTOR, ".messagelist").text

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    browser.get(f"{live_server.url}/admin/models_catalog/deployment/")
    assert page_is_not_wider_than_the_screen(browser)


def test_deployments_without_their_secret_are_shown_not_configured_in_grey(browser, live_server, staff_login, seeded,
                                                                           screenshots, monkeypatch):
    from selenium.webdriver.common.by import By

    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)  # as on a fresh `make run`
    staff_login()
    browser.get(f"{live_server.url}/admin/models_catalog/deployment/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#deployments tbody tr")
    states = {row.get_attribute("id"): row.get_attribute("data-state") for row in rows}
    local = {f"deployment-{deployment.pk}" for deployment in Deployment.objects.filter(provider__name="local")}
    assert len(rows) == Deployment.objects.count() and local
    assert {state for row, state in states.items() if row in local} == {"healthy"}
    assert {state for row, state in states.items() if row not in local} == {"not_configured"}
    unset = next(row for row in rows if row.get_attribute("data-state") == "not_configured")
    badge = unset.find_element(By.CSS_SELECTOR, ".staff-badge")
    healthy = next(row for row in rows if row.get_attribute("data-state") == "healthy")
    green = healthy.find_element(By.CSS_SELECTOR, ".staff-badge").value_of_css_property("background-color")
    assert badge.text.lower() == "not configured"
    assert badge.value_of_css_property("background-color") != green
    variable = Deployment.objects.get(pk=int(unset.get_attribute("id").split("-")[1])).secret_env
    assert f"set {variable} on this server" in unset.text
    assert not unset.find_elements(By.NAME, "enable")  # nothing to enable: its secret is missing
    assert page_is_not_wider_than_the_screen(browser)
    capture(browser, screenshots / "deployments-not-configured-1280.png", *DESKTOP)
