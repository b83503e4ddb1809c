"""TRUSTED_PROXIES: behind our own reverse proxy each keyless client keeps its own limit bucket."""
import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from utils_app.env import env_networks
from utils_app.limits import client_address

PROXIES = tuple(ipaddress.ip_network(item) for item in ("10.0.0.0/8", "192.0.2.7", "fd00::/8"))


def address(remote: str, forwarded: str | None = None) -> str:
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(RequestFactory().get("/utils/facts", **extra))


@pytest.fixture
def behind_proxies(settings):
    settings.TRUSTED_PROXIES = PROXIES


def test_without_trusted_proxies_x_forwarded_for_is_ignored(settings):
    settings.TRUSTED_PROXIES = ()
    assert address("10.1.1.1", "203.0.113.5") == "10.1.1.1"


def test_a_client_that_is_not_a_trusted_proxy_cannot_pick_its_bucket(behind_proxies):
    assert address("198.51.100.9", "203.0.113.5") == "198.51.100.9"


def test_behind_a_trusted_proxy_the_client_is_the_address_it_saw(behind_proxies):
    assert address("10.1.1.1", "203.0.113.5") == "203.0.113.5"


def test_the_right_most_untrusted_entry_wins_over_what_the_client_wrote_itself(behind_proxies):
    # The client sent "X-Forwarded-For: 1.2.3.4"; our two proxies appended what each saw.
    assert address("10.1.1.1", "1.2.3.4, 203.0.113.5, 10.2.2.2") == "203.0.113.5"


def test_single_addresses_and_ipv6_networks_are_trusted_too(behind_proxies):
    assert address("192.0.2.7", "2001:db8::1") == "2001:db8::1"
    assert address("fd12::1", "198.51.100.20, fd00::5") == "198.51.100.20"


def test_a_request_from_inside_the_proxy_tier_counts_under_the_first_hop(behind_proxies):
    assert address("10.1.1.1", "10.3.3.3, 10.2.2.2") == "10.3.3.3"
    assert address("10.1.1.1") == "10.1.1.1"


@pytest.mark.django_db
def test_two_clients_behind_one_proxy_have_separate_public_limits(client, behind_proxies, settings):
    settings.PUBLIC_RATE_LIMIT = "2/m"
    for _ in range(2):
        assert client.get("/utils/facts", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="203.0.113.5").status_code == 200
    assert client.get("/utils/facts", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="203.0.113.5").status_code == 429
    assert client.get("/utils/facts", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="203.0.113.6").status_code == 200


def test_trusted_proxies_reads_addresses_and_networks(monkeypatch):
    monkeypatch.setenv("TRUSTED_PROXIES", " 10.0.0.0/8, 192.0.2.7 ,::1 ")
    assert env_networks("TRUSTED_PROXIES") == tuple(
        ipaddress.ip_network(item) for item in ("10.0.0.0/8", "192.0.2.7/32", "::1/128"))
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8, proxy.internal")
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES"):
        env_networks("TRUSTED_PROXIES")
