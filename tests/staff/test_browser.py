"""The staff UI driven in headless Chromium against a live server, as a staff member would use it.

Set SCREENSHOT_DIR (e.g. docs/screenshots) to keep the screenshots; otherwise
they go to the test's temporary folder.
"""
import os
import random
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.utils import timezone

from keys.models import ApiKey, AuditLog, digest_secret
from keys.services import issue_key
from models_catalog.models import AiModel, UsageEvent

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PASSWORD = "correct horse battery"
PHONE = (390, 844)
DESKTOP = (1280, 900)


@pytest.fixture
def browser(tmp_path):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        message = f"{CHROMIUM} and {CHROMEDRIVER} are needed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message + "; .ci/run installs them, so CI must not get here")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}",
                     f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):
        options.add_argument(argument)
    # The driver is named explicitly, so Selenium never tries to download one.
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture
def screenshots(tmp_path):
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def staff_login(browser, live_server, django_user_model):
    django_user_model.objects.create_superuser("alice", "alice@example.com", PASSWORD)

    def login():
        from selenium.webdriver.common.by import By

        browser.get(f"{live_server.url}/admin/login/")
        browser.find_element(By.ID, "id_username").send_keys("alice")
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        assert browser.find_element(By.CSS_SELECTOR, ".staff-shortcuts")  # the admin index with our shortcuts
    return login


def chat(live_server, secret):
    return requests.post(f"{live_server.url}/v1/chat/completions", timeout=30,
                         headers={"Authorization": f"Bearer {secret}"},
                         json={"model": "local-chat", "messages": [{"role": "user", "content": "Hello there"}]})


def capture(browser, path: Path, width: int, height: int) -> None:
    """A full-page screenshot at a given viewport width (phone widths emulate a mobile device)."""
    mobile = width < 600
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    browser.refresh()
    full = browser.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "height": min(int(full), 6000)})
    browser.save_screenshot(str(path))
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert path.stat().st_size > 10_000


def page_is_not_wider_than_the_screen(browser) -> bool:
    return browser.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1")


def test_staff_issue_a_key_read_the_secret_once_and_the_api_accepts_it(browser, live_server, staff_login, seeded):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    staff_login()
    browser.get(f"{live_server.url}/admin/keys/apikey/add/")
    Select(browser.find_element(By.ID, "id_tier")).select_by_value("free")
    for field, value in (("id_name", "browser test"), ("id_credits", "20"), ("id_max_credits", "25"),
                         ("id_owner_platform_username", "ann")):
        element = browser.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    browser.find_element(By.CSS_SELECTOR, "#issue-key-form input[type=submit]").click()

    secret = browser.find_element(By.ID, "issued-secret").get_attribute("value")
    assert "cannot be shown again" in browser.find_element(By.CSS_SELECTOR, ".staff-warning").text
    browser.find_element(By.ID, "copy-secret").click()
    # Copied, or told how to copy: written when the clipboard's promise settles, a moment after the click.
    status = browser.find_element(By.ID, "copy-status")
    assert WebDriverWait(browser, 10).until(lambda _: status.text)
    key = ApiKey.objects.get(digest=digest_secret(secret))
    assert (key.name, key.tier, key.credits, key.max_credits, key.owner_platform_username) == (
        "browser test", "free", 20, 25, "ann")
    assert AuditLog.objects.get(action="create_key").actor == "staff alice"

    response = chat(live_server, secret)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]
    assert response.headers["X-Remaining-Credits"] == "19"
    key.refresh_from_db()
    assert key.credits == 19

    # The key's page never shows the secret again.
    browser.find_element(By.LINK_TEXT, "Open the key's page").click()
    assert secret not in browser.page_source
    assert f"{key.prefix}…" in browser.page_source


def test_staff_withdraw_a_tier_in_the_matrix_and_the_api_honours_it(browser, live_server, staff_login, seeded):
    from selenium.webdriver.common.by import By

    _, secret = issue_key(actor="test", tier="free", credits=10)
    assert chat(live_server, secret).status_code == 200
    staff_login()

    def toggle_local_chat_for_free():
        browser.get(f"{live_server.url}/admin/models_catalog/aimodel/access/")
        browser.find_element(By.ID, "access-local-chat-free").click()
        browser.find_element(By.ID, "save-access").click()
        return browser.find_element(By.CSS_SELECTOR, ".messagelist").text

    assert "Access saved for local-chat" in toggle_local_chat_for_free()
    assert "free" not in AiModel.objects.get(model_id="local-chat").tiers
    refused = chat(live_server, secret)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "model_not_allowed"

    assert "Access saved for local-chat" in toggle_local_chat_for_free()
    assert chat(live_server, secret).status_code == 200
    assert AuditLog.objects.filter(action="update_access", actor="staff alice").count() == 2


def seed_traffic(now):
    """A month of plausible traffic for the dashboard and the screenshots (fixed seed: same picture each run)."""
    rng = random.Random(7)
    keys = [issue_key(actor="seed", tier=tier, credits=credits, max_credits=credits, name=name,
                      owner={"platform_username": owner})[0]
            for tier, credits, name, owner in (
                ("premium", 5000, "acme production", "acme"), ("partner", 8000, "mobile app", "orbit"),
                ("free", 100, "trial 17", "jules"), ("augmented", 1000, "research", "lab-42"),
                ("cool", 600, "discord bot", "neko-fan"), ("free", 100, "trial 18", "mia"))]
    models = {m.model_id: m for m in AiModel.objects.filter(model_id__startswith="local-")}
    weights = {"local-chat": 8, "local-embedding": 4, "local-image": 2, "local-speech": 1}
    events = []
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for day in range(30):
        for index, key in enumerate(keys):
            span = 86399 if day else int((now - today).total_seconds())  # nothing in the future
            volume = int((6 - index) * 3 * (1 + 0.6 * rng.random()) * (1.4 if day < 10 else 1))
            for _ in range(volume):
                model_id = rng.choices(list(weights), weights=list(weights.values()))[0]
                model = models[model_id]
                ok = rng.random() > (0.12 if model_id == "local-image" else 0.03)
                events.append(UsageEvent(
                    key=key, model=model, operation=model.type, status=200 if ok else 502, success=ok,
                    input_tokens=rng.randint(5, 400), output_tokens=rng.randint(0, 300),
                    credits_charged=model.cost if ok else 0, latency_ms=int(rng.lognormvariate(4.5, 0.5)),
                    provider="local",
                    created_at=today - timedelta(days=day) + timedelta(seconds=rng.randint(0, span))))
    UsageEvent.objects.bulk_create(events, batch_size=500)
    return keys, len(events)


def test_the_dashboard_draws_its_charts_and_pages_fit_desktop_and_phone(browser, live_server, staff_login, seeded,
                                                                       screenshots):
    from selenium.webdriver.common.by import By

    keys, total = seed_traffic(timezone.now())
    staff_login()
    browser.get(f"{live_server.url}/admin/models_catalog/usageevent/dashboard/")

    requests_bars = browser.find_elements(By.CSS_SELECTOR, "figure[data-chart=requests-per-day] svg rect.bar")
    credits_bars = browser.find_elements(By.CSS_SELECTOR, "figure[data-chart=credits-per-day] svg rect.bar")
    assert len(requests_bars) >= 30 and len(credits_bars) == 30
    # The bars have real size on screen, not just markup.
    assert max(bar.size["height"] for bar in requests_bars) > 50
    assert all(bar.size["width"] > 2 for bar in credits_bars)
    cards = browser.find_element(By.ID, "dashboard-totals").text
    assert str(total) in cards
    top_keys = browser.find_elements(By.CSS_SELECTOR, "#top-keys tbody tr")
    assert len(top_keys) == len(keys) and "acme production" in top_keys[0].text
    latency_rows = browser.find_elements(By.CSS_SELECTOR, "#models-24h tbody tr")
    assert len(latency_rows) == 4
    assert all(row.find_elements(By.TAG_NAME, "td")[-1].text.isdigit() for row in latency_rows)  # p95 in ms
    assert page_is_not_wider_than_the_screen(browser)

    capture(browser, screenshots / "dashboard-1280.png", *DESKTOP)
    capture(browser, screenshots / "dashboard-390.png", *PHONE)

    busiest = keys[0]
    browser.get(f"{live_server.url}/admin/keys/apikey/{busiest.pk}/change/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#key-usage-per-model tbody tr")
    assert len(rows) == 4 and browser.find_elements(By.CSS_SELECTOR, "#key-usage svg rect.bar")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#key-recent-requests tbody tr")) == 20
    capture(browser, screenshots / "key-page-1280.png", *DESKTOP)
    capture(browser, screenshots / "key-page-390.png", *PHONE)

    browser.get(f"{live_server.url}/admin/models_catalog/aimodel/access/")
    capture(browser, screenshots / "access-matrix-1280.png", *DESKTOP)
    capture(browser, screenshots / "access-matrix-390.png", *PHONE)

    # At phone width the page itself does not scroll sideways; wide tables scroll inside their box.
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    for path in ("/admin/models_catalog/usageevent/dashboard/", f"/admin/keys/apikey/{busiest.pk}/change/"):
        browser.get(live_server.url + path)
        assert page_is_not_wider_than_the_screen(browser), path



def test_at_1280_px_the_key_list_shows_every_column_without_scrolling(browser, live_server, staff_login, seeded,
                                                                      screenshots):
    from selenium.webdriver.common.by import By

    for index in range(5):  # long names and owners, large balances: the widest a row usually gets
        key, _ = issue_key(actor="test", tier="premium", credits=123456, max_credits=1000000,
                           name=f"team integration key {index}",
                           owner={"platform_username": f"someone.with.a.long.name{index}"})
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    staff_login()
    browser.get(f"{live_server.url}/admin/keys/apikey/")
    results = browser.find_element(By.CSS_SELECTOR, "#changelist .results")
    assert browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", results)
    box = browser.execute_script("return arguments[0].getBoundingClientRect().right", results)
    headers = {header.text.strip().lower(): header for header in
               browser.find_elements(By.CSS_SELECTOR, "#result_list thead th") if header.text.strip()}
    for name in ("key", "owner", "credits / max", "active", "last used (utc)"):
        assert browser.execute_script("return arguments[0].getBoundingClientRect().right", headers[name]) <= box + 1
    assert "123456 / 1000000" in browser.find_element(By.ID, "result_list").text
    assert page_is_not_wider_than_the_screen(browser)
    capture(browser, screenshots / "key-list-1280.png", *DESKTOP)
