"""The staff page of upstream pools: every deployment's state and last hour, and its disable, enable and probe
buttons, each change audited."""
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from gateway import deployment_health
from keys.models import AuditLog
from models_catalog import catalog
from models_catalog.models import AiModel, Deployment, Provider
from tests.gateway.conftest import FakeUpstream, chat_completion
from utils_app.errors import UpstreamError

pytestmark = pytest.mark.django_db

PAGE = reverse("staff_deployments")
SECRET_VALUES = {"GATEWAY_UPSTREAM_PAGE_1": "sk-page-secret-one-5e7f01", "GATEWAY_UPSTREAM_PAGE_2":
                 "sk-page-secret-two-8a9b02"}


@pytest.fixture
def upstream(monkeypatch):
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    server = FakeUpstream()
    server.start()
    server.json("/chat/completions", chat_completion("pong"))
    yield server
    server.stop()


@pytest.fixture
def pool(seeded, upstream):
    """Model "pooled" on provider "pair" (two secrets: two deployments) and the local models."""
    pair = Provider.objects.create(name="pair", base_url=upstream.base_url, timeout=3,
                                   api_key_envs=list(SECRET_VALUES))
    model = AiModel.objects.create(model_id="pooled", type="chat", owned_by="test", cost=1, tiers=["free"])
    catalog.save_pool(model, [{"provider": pair, "upstream_model": "up-name", "priority": 1, "weight": 1, "rpm": 0}])
    return {deployment.secret_env: deployment
            for deployment in model.deployments.select_related("model", "provider")}


def action(name: str, deployment: Deployment) -> str:
    return reverse(f"staff_deployment_{name}", args=[deployment.pk])


def row_of(response, deployment: Deployment):
    return next(row for row in response.context["rows"] if row.deployment.pk == deployment.pk)


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_the_page_shows_each_deployments_state_and_last_hour(staff_client, pool):
    one, two = pool["GATEWAY_UPSTREAM_PAGE_1"], pool["GATEWAY_UPSTREAM_PAGE_2"]
    for milliseconds in (100, 120, 140):
        deployment_health.succeeded(one, milliseconds / 1000)
    deployment_health.failed(one, UpstreamError("upstream exploded"))
    deployment_health.cool_down(one, 60, why="a test")
    Deployment.objects.filter(pk=two.pk).update(disabled_at=timezone.now(), disabled_reason="HTTP 401 from upstream")
    response = staff_client.get(PAGE)
    assert response.status_code == 200
    assert len(response.context["rows"]) == Deployment.objects.count()
    cooling, disabled = row_of(response, one), row_of(response, two)
    assert (cooling.health.state, cooling.health.requests, cooling.health.failures) == ("cooling", 4, 1)
    assert 100 <= cooling.health.p50_ms <= 140
    assert disabled.health.state == "disabled" and disabled.disabled_reason == "HTTP 401 from upstream"
    body = response.content.decode()
    assert f'id="deployment-{one.pk}" data-state="cooling"' in body
    assert f'id="deployment-{two.pk}" data-state="disabled"' in body
    assert "HTTP 401 from upstream" in body and "until " in body
    assert "GATEWAY_UPSTREAM_PAGE_1" in body
    for value in SECRET_VALUES.values():
        assert value not in body


def test_a_deployment_whose_secret_is_not_set_here_is_not_configured_not_healthy(staff_client, pool, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GATEWAY_UPSTREAM_PAGE_2")
    one, two = pool["GATEWAY_UPSTREAM_PAGE_1"], pool["GATEWAY_UPSTREAM_PAGE_2"]
    response = staff_client.get(PAGE)
    assert row_of(response, one).health.state == "healthy"
    assert row_of(response, two).health.state == "not_configured"
    openai = Deployment.objects.filter(provider__name="openai")
    local = Deployment.objects.filter(provider__name="local")
    assert openai and local
    assert {row.health.state for row in response.context["rows"] if row.deployment in openai} == {"not_configured"}
    assert {row.health.state for row in response.context["rows"] if row.deployment in local} == {"healthy"}
    body = response.content.decode()
    unset_row = body.split(f'id="deployment-{two.pk}"')[1].split("</tr>")[0]
    assert 'data-state="not_configured"' in unset_row and "staff-badge unset" in unset_row
    assert "set <code>GATEWAY_UPSTREAM_PAGE_2</code> on this server" in unset_row
    assert "staff-badge ok" not in unset_row and 'name="enable"' not in unset_row
    # Nothing to enable: the button writes no audit entry and the state stays.
    staff_client.post(action("enable", two), {"next": PAGE})
    assert not AuditLog.objects.filter(action="enable_deployment").exists()
    staff_client.post(action("disable", two), {"next": PAGE, "reason": "retired"})
    assert row_of(staff_client.get(PAGE), two).health.state == "disabled"


def test_the_page_narrows_to_one_model_and_an_unknown_one_is_a_message(staff_client, pool):
    response = staff_client.get(PAGE + "?model=pooled")
    assert {row.deployment.model.model_id for row in response.context["rows"]} == {"pooled"}
    assert len(response.context["rows"]) == 2
    assert response.context["model"].model_id == "pooled"
    response = staff_client.get(PAGE + "?model=no-such-model", follow=True)
    assert response.redirect_chain == [(PAGE, 302)]
    assert messages_of(response) == ["The model 'no-such-model' does not exist."]
    assert staff_client.get(PAGE + "?model=a%00b").status_code == 302  # no model holds a NUL


def test_the_index_links_to_the_page(staff_client, pool):
    assert f'href="{PAGE}">Deployments</a>' in staff_client.get(reverse("admin:index")).content.decode()


def test_disable_and_enable_buttons_change_the_deployment_and_are_audited(staff_client, pool):
    one, two = pool["GATEWAY_UPSTREAM_PAGE_1"], pool["GATEWAY_UPSTREAM_PAGE_2"]
    here = PAGE + "?model=pooled"
    response = staff_client.post(action("disable", one), {"reason": "retiring this name", "next": here}, follow=True)
    assert response.redirect_chain == [(here, 302)]
    assert "disabled: it gets no traffic until it is enabled" in response.content.decode()
    assert row_of(response, one).health.state == "disabled"
    one.refresh_from_db()
    assert one.disabled and one.disabled_reason == "retiring this name"
    assert not Deployment.objects.get(pk=two.pk).disabled  # only that one
    entry = AuditLog.objects.get(action="disable_deployment")
    assert (entry.actor, entry.before["state"], entry.after["disabled_reason"]) == (
        "staff alice", "healthy", "retiring this name")

    response = staff_client.post(action("enable", one), {"next": here}, follow=True)
    assert row_of(response, one).health.state == "healthy"
    one.refresh_from_db()
    assert not one.disabled
    assert AuditLog.objects.get(action="enable_deployment").actor == "staff alice"


def test_a_disable_without_a_reason_names_who_did_it(staff_client, pool):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    staff_client.post(action("disable", one), {"reason": "  "})
    one.refresh_from_db()
    assert one.disabled_reason == "disabled by hand (staff alice)"


def test_an_overlong_reason_is_refused_with_a_message(staff_client, pool):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    response = staff_client.post(action("disable", one), {"reason": "x" * 301}, follow=True)
    assert "not disabled: Ensure this value has at most 300 characters" in response.content.decode()
    one.refresh_from_db()
    assert not one.disabled and not AuditLog.objects.exists()


def test_a_probe_enables_a_disabled_deployment_that_answers_and_says_so(staff_client, pool, upstream):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    deployment_health.disable(one, reason="HTTP 401 from upstream")
    response = staff_client.post(action("probe", one), follow=True)
    assert "answered: enabled again" in response.content.decode()
    assert upstream.posts()[-1].body["max_tokens"] == 1
    assert upstream.posts()[-1].headers["Authorization"] == f"Bearer {SECRET_VALUES['GATEWAY_UPSTREAM_PAGE_1']}"
    one.refresh_from_db()
    assert not one.disabled
    entry = AuditLog.objects.get(action="probe_deployment")
    assert entry.actor == "staff alice"
    assert [item["state"] for item in entry.before["deployments"]] == ["disabled"]
    assert [item["state"] for item in entry.after["deployments"]] == ["healthy"]


def test_a_failed_probe_is_an_error_message_and_changes_nothing(staff_client, pool, upstream):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    # An upstream that echoes the secret it was sent: the message must not pass it on.
    upstream.json("/chat/completions", {"error": {"message": f"key {SECRET_VALUES['GATEWAY_UPSTREAM_PAGE_1']} "
                                                             "is revoked"}}, status=401)
    response = staff_client.post(action("probe", one), follow=True)
    body = response.content.decode()
    assert "Probe of #" in body and "failed:" in body
    assert SECRET_VALUES["GATEWAY_UPSTREAM_PAGE_1"] not in body
    one.refresh_from_db()
    assert not one.disabled  # a probe never disables anything
    assert not AuditLog.objects.exists()


def test_a_probe_of_a_healthy_deployment_writes_no_audit_entry(staff_client, pool):
    response = staff_client.post(action("probe", pool["GATEWAY_UPSTREAM_PAGE_2"]), follow=True)
    assert "answered." in response.content.decode()
    assert not AuditLog.objects.exists()


def test_the_buttons_go_back_only_to_this_page(staff_client, pool):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    for elsewhere in ("https://evil.example/admin/models_catalog/deployment/", "/admin/keys/apikey/", "//evil.example"):
        response = staff_client.post(action("enable", one), {"next": elsewhere})
        assert response["Location"] == PAGE


def test_an_unknown_deployment_is_a_message(staff_client, pool):
    response = staff_client.post(reverse("staff_deployment_disable", args=[999999]), follow=True)
    assert messages_of(response) == ["No deployment has the id '999999'."]
    assert not AuditLog.objects.exists()


def test_the_buttons_take_a_post_with_its_csrf_token(staff_user, pool):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(staff_user)
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    assert browser.get(action("disable", one)).status_code == 405
    assert browser.post(action("disable", one)).status_code == 403  # no CSRF token
    one.refresh_from_db()
    assert not one.disabled


def test_view_only_staff_see_the_page_without_buttons_and_cannot_press_them(limited_staff_client, pool):
    response = limited_staff_client.get(PAGE)
    assert response.status_code == 200
    assert 'name="disable"' not in response.content.decode()
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    for name in ("disable", "enable", "probe"):
        assert limited_staff_client.post(action(name, one)).status_code == 403
    one.refresh_from_db()
    assert not one.disabled and not AuditLog.objects.exists()


def test_anonymous_visitors_are_sent_to_the_login_page(client, pool):
    one = pool["GATEWAY_UPSTREAM_PAGE_1"]
    for response in (client.get(PAGE), client.post(action("disable", one))):
        assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    one.refresh_from_db()
    assert not one.disabled
