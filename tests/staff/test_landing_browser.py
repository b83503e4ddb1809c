"""The landing page in headless Chromium at a desktop and a phone width: the model table fits the page (every
tier column in view), the tiers are explained and the favicon is served."""
import pytest
import requests

from keys.models import TIERS
from tests.staff.test_browser import (  # noqa: F401 - fixtures used by name
    DESKTOP,
    PHONE,
    browser,
    capture,
    page_is_not_wider_than_the_screen,
    screenshots,
)

pytestmark = pytest.mark.browser


def overflow(browser, selector: str) -> int:
    """How many pixels the element's content is wider than the element (0: it all shows, no scrollbar)."""
    return browser.execute_script(
        "const element = document.querySelector(arguments[0]); return element.scrollWidth - element.clientWidth;",
        selector)


def test_the_landing_page_shows_every_tier_column_at_1280_px_and_explains_the_tiers(browser, live_server, seeded,
                                                                                     screenshots, monkeypatch):
    from selenium.webdriver.common.by import By

    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)  # the page as a fresh `make run` shows it
    browser.get(f"{live_server.url}/")
    assert overflow(browser, "#models .scroll") <= 0
    assert page_is_not_wider_than_the_screen(browser)
    headers = browser.find_elements(By.CSS_SELECTOR, "#models th.tier")
    assert [header.text.strip().lower() for header in headers] == list(TIERS)  # whole words, none cut off
    right = browser.execute_script("return document.querySelector('#models .scroll').getBoundingClientRect().right")
    assert all(header.rect["x"] + header.rect["width"] <= right + 1 for header in headers)
    explained = {row.get_attribute("data-tier"): row.text for row in
                 browser.find_elements(By.CSS_SELECTOR, "#tiers [data-tier]")}
    assert list(explained) == list(TIERS) and all(len(text) > len(tier) + 10 for tier, text in explained.items())
    assert "/v1/messages" in browser.find_element(By.ID, "calling").text
    icon = browser.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
    assert requests.get(icon, timeout=10).status_code == 200
    capture(browser, screenshots / "landing-1280.png", *DESKTOP)

    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    browser.get(f"{live_server.url}/")
    assert page_is_not_wider_than_the_screen(browser)  # the table scrolls inside its box on a phone
    capture(browser, screenshots / "landing-390.png", *PHONE)
