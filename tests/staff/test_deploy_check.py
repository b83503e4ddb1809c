"""Deployment settings: check --deploy under the documented production variables, TLS from the environment."""
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

from django.conf import settings as django_settings
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.module_loading import import_string

ROOT = Path(__file__).resolve().parents[2]
TLS_VARIABLES = ("BEHIND_TLS_PROXY", "SECURE_SSL_REDIRECT", "SECURE_COOKIES", "SECURE_HSTS_SECONDS",
                 "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "STAFF_REQUIRE_2FA", "DEBUG")
SHOWN_SETTINGS = ("SECURE_PROXY_SSL_HEADER", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
                  "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "STAFF_REQUIRE_2FA",
                  "DEBUG")


def documented_production_variables() -> dict:
    """The block under "Production variables" in docs/staff-security.md, as the operator copies it."""
    text = (ROOT / "docs" / "staff-security.md").read_text()
    block = re.search(r"## Production variables\n.*?```sh\n(.*?)```", text, re.S).group(1)
    variables = dict(line.split("=", 1) for line in block.splitlines() if line.strip())
    variables["SECRET_KEY"] = secrets.token_urlsafe(50)  # the doc's placeholder, made real
    return variables


def manage(*args, extra=None, tmp_path):
    """manage.py in a fresh process: settings are read from the environment once, at start."""
    env = {name: value for name, value in os.environ.items() if name not in TLS_VARIABLES}
    env.update(GATEWAY_DATA_DIR=str(tmp_path), **(extra or {}))
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def shown_settings(tmp_path, extra=None) -> dict:
    code = f"from django.conf import settings; print(__import__('json').dumps({{name: getattr(settings, name, None) " \
           f"for name in {SHOWN_SETTINGS!r}}}))"
    result = manage("shell", "-c", code, extra=extra, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_check_deploy_reports_nothing_under_the_documented_production_variables(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "WARNING", extra=documented_production_variables(),
                    tmp_path=tmp_path)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_on_the_embedded_default_still_names_what_production_must_set(tmp_path):
    result = manage("check", "--deploy", tmp_path=tmp_path)

    for warning in ("security.W004", "security.W008", "security.W010"):  # HSTS, redirect, cookie
        assert warning in result.stderr


def test_the_production_variables_turn_on_tls_behind_the_proxy(tmp_path):
    shown = shown_settings(tmp_path, documented_production_variables())

    assert shown == {"SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"], "SECURE_SSL_REDIRECT": True,
                     "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True, "SECURE_HSTS_SECONDS": 31536000,
                     "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True, "STAFF_REQUIRE_2FA": True,
                     "DEBUG": False}


def test_the_embedded_default_turns_all_of_it_off(tmp_path):
    shown = shown_settings(tmp_path)

    assert shown == {"SECURE_PROXY_SSL_HEADER": None, "SECURE_SSL_REDIRECT": False, "SESSION_COOKIE_SECURE": False,
                     "CSRF_COOKIE_SECURE": False, "SECURE_HSTS_SECONDS": 0, "SECURE_HSTS_INCLUDE_SUBDOMAINS": False,
                     "SECURE_HSTS_PRELOAD": False, "STAFF_REQUIRE_2FA": False, "DEBUG": False}


def test_a_proxy_without_redirect_or_secure_cookies_can_say_so(tmp_path):
    shown = shown_settings(tmp_path, {"BEHIND_TLS_PROXY": "1", "SECURE_SSL_REDIRECT": "0", "SECURE_COOKIES": "0"})

    assert shown["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert (shown["SECURE_SSL_REDIRECT"], shown["SESSION_COOKIE_SECURE"]) == (False, False)


def test_a_malformed_variable_stops_the_start_and_names_it(tmp_path):
    for name, value in (("BEHIND_TLS_PROXY", "perhaps"), ("SECURE_HSTS_SECONDS", "a year"),
                        ("STAFF_LOGIN_FAILURE_LIMIT", "0")):
        result = manage("check", extra={name: value}, tmp_path=tmp_path)
        assert result.returncode != 0
        assert name in result.stderr


def test_the_silenced_csrf_check_is_djangos_own_middleware_in_place():
    # security.W003 is silenced because it looks for Django's class by name; ours must be that class.
    installed = [import_string(path) for path in django_settings.MIDDLEWARE]
    assert any(issubclass(middleware, CsrfViewMiddleware) for middleware in installed)


def test_the_embedded_default_serves_the_staff_login_over_plain_http(client):
    response = client.get("/admin/login/")

    assert response.status_code == 200
    assert "Strict-Transport-Security" not in response.headers
    assert not response.cookies["csrftoken"]["secure"]


def test_behind_the_proxy_plain_http_is_redirected_and_https_gets_hsts(client, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True

    plain = client.get("/admin/login/")
    assert (plain.status_code, plain["Location"]) == (301, "https://testserver/admin/login/")
    assert client.get("/health").status_code in (200, 503)  # load balancers probe over plain http
    secure = client.get("/admin/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000"
    assert secure.cookies["csrftoken"]["secure"]
