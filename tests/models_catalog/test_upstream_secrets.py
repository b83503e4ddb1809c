"""Which environment variables a provider may name as its upstream secret, and who may edit providers.

A provider's secret is sent to its base_url: a provider naming SECRET_KEY or DATABASE_URL would
hand those to an address of its editor's choosing. Allowed: UPSTREAM_SECRET_ENV_ALLOW (default
OPENAI_API_KEY, ANTHROPIC_API_KEY and GEMINI_API_KEY, the shipped catalog's) and any
GATEWAY_UPSTREAM_* name; enforced by the catalog loader, the staff form and the request path
(tests/gateway/test_upstream_hardening.py).
"""
import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from keys.models import AuditLog
from models_catalog.catalog import secret_env_allowed
from models_catalog.models import AiModel, Deployment, Provider

pytestmark = pytest.mark.django_db

CATALOG = """
[providers.p]
base_url = "https://api.example.com/v1"
api_key_env = "{variable}"

[[models]]
id = "m"
type = "chat"
owned_by = "x"
cost = 1
access = ["free"]
provider = "p"
"""


@pytest.mark.parametrize("name, allowed", [("OPENAI_API_KEY", True), ("GATEWAY_UPSTREAM_MISTRAL", True),
                                           ("SECRET_KEY", False), ("DATABASE_URL", False), ("REDIS_URL", False),
                                           ("GATEWAY_UPSTREAM_", False), ("gateway_upstream_x", False)])
def test_only_upstream_secret_variables_are_allowed(name, allowed):
    assert secret_env_allowed(name) is allowed


def test_upstream_secret_env_allow_adds_names(settings):
    settings.UPSTREAM_SECRET_ENV_ALLOW = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    assert secret_env_allowed("ANTHROPIC_API_KEY")
    assert not secret_env_allowed("SECRET_KEY")


@pytest.mark.parametrize("variable", ["SECRET_KEY", "DATABASE_URL"])
def test_a_catalog_naming_another_variable_fails_naming_the_entry_and_field(tmp_path, variable):
    path = tmp_path / "catalog.toml"
    path.write_text(CATALOG.format(variable=variable))
    with pytest.raises(CommandError) as raised:
        call_command("seed_models", str(path))
    assert f"[providers.p]: field 'api_key_env': {variable} is not an upstream secret variable" in str(raised.value)
    assert not Provider.objects.exists()


def test_a_catalog_naming_a_gateway_upstream_variable_is_loaded(tmp_path, capsys):
    path = tmp_path / "catalog.toml"
    path.write_text(CATALOG.format(variable="GATEWAY_UPSTREAM_EXAMPLE"))
    call_command("seed_models", str(path))
    assert Provider.objects.get(name="p").api_key_env == "GATEWAY_UPSTREAM_EXAMPLE"


def test_the_shipped_catalog_names_only_allowed_variables(seeded):
    assert all(secret_env_allowed(p.api_key_env) for p in Provider.objects.exclude(api_key_env=""))


# ---------------------------------------------------------------- the staff UI

@pytest.fixture
def superuser_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "correct horse"))
    return client


@pytest.fixture
def provider_staff_client(client, django_user_model):
    """Staff granted every provider permission, but not a superuser."""
    user = django_user_model.objects.create_user("carol", password="correct horse", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__model="provider"))
    client.force_login(user)
    return client


def provider_form(**changes) -> dict:
    return {"name": "openai", "type": "openai", "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY", "api_key_envs": "[]", "timeout": "60", "api_version": "",
            "max_tokens_default": "4096", **changes}


def test_the_staff_form_refuses_a_variable_outside_the_allowlist(superuser_client, seeded):
    openai = Provider.objects.get(name="openai")
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    response = superuser_client.post(url, provider_form(api_key_env="SECRET_KEY", base_url="https://evil.example"))
    assert response.status_code == 200
    assert "SECRET_KEY is not an upstream secret variable" in str(
        response.context["adminform"].form.errors["api_key_env"])
    openai.refresh_from_db()
    assert (openai.api_key_env, openai.base_url) == ("OPENAI_API_KEY", "https://api.openai.com/v1")
    assert not AuditLog.objects.filter(action="update_provider").exists()


def test_the_staff_form_takes_a_gateway_upstream_variable(superuser_client, seeded):
    openai = Provider.objects.get(name="openai")
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    response = superuser_client.post(url, provider_form(api_key_env="GATEWAY_UPSTREAM_OPENAI"))
    assert response.status_code == 302
    assert Provider.objects.get(pk=openai.pk).api_key_env == "GATEWAY_UPSTREAM_OPENAI"


def test_the_provider_list_says_nothing_about_variables_a_provider_may_not_use(superuser_client, seeded,
                                                                              monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "set")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set")
    Provider.objects.create(name="probe", base_url="https://x.example/v1", api_key_env="SECRET_KEY")
    page = superuser_client.get(reverse("admin:models_catalog_provider_changelist")).content.decode()
    row = page[page.index(">probe<"):]
    row = row[:row.index("</tr>")]
    assert "icon-yes.svg" not in row and "icon-no.svg" not in row  # neither "set" nor "not set"
    openai_row = page[page.index(">openai<"):]
    assert "icon-yes.svg" in openai_row[:openai_row.index("</tr>")]


def test_only_superusers_add_or_change_providers(provider_staff_client, seeded):
    openai = Provider.objects.get(name="openai")
    change = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    response = provider_staff_client.post(change, provider_form(base_url="https://elsewhere.example/v1"))
    assert response.status_code == 403
    assert Provider.objects.get(pk=openai.pk).base_url == "https://api.openai.com/v1"
    add = reverse("admin:models_catalog_provider_add")
    assert provider_staff_client.post(add, provider_form(name="other")).status_code == 403
    assert not Provider.objects.filter(name="other").exists()
    # Looking stays allowed.
    page = provider_staff_client.get(change)
    assert page.status_code == 200 and b"OPENAI_API_KEY" in page.content


def test_no_one_deletes_a_provider_from_the_ui(superuser_client, seeded):
    local = Provider.objects.get(name="local")
    assert superuser_client.post(reverse("admin:models_catalog_provider_delete", args=[local.pk]),
                                 {"post": "yes"}).status_code == 403
    assert Provider.objects.filter(pk=local.pk).exists()


@pytest.mark.parametrize("kind, variable, environment, configured", [
    ("local", "", {}, True),
    ("openai", "", {}, True),  # an upstream without authentication
    ("openai", "OPENAI_API_KEY", {"OPENAI_API_KEY": "sk-set"}, True),
    ("openai", "GATEWAY_UPSTREAM_B", {"GATEWAY_UPSTREAM_B": "sk-set"}, True),
    ("openai", "OPENAI_API_KEY", {}, False),
    ("openai", "OPENAI_API_KEY", {"OPENAI_API_KEY": "  "}, False),
    ("openai", "SECRET_KEY", {"SECRET_KEY": "set, but never an upstream's"}, False),
])
def test_a_provider_is_configured_for_a_secret_this_process_holds(monkeypatch, kind, variable, environment,
                                                                   configured):
    for name in ("OPENAI_API_KEY", "GATEWAY_UPSTREAM_B", "SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    provider = Provider(name="p", type=kind, base_url="https://api.example.com/v1", api_key_env=variable)
    assert provider.secret_configured(variable) is configured


def test_a_model_is_configured_when_one_of_its_deployments_has_its_secret(seeded, monkeypatch):
    monkeypatch.delenv("GATEWAY_UPSTREAM_B", raising=False)
    monkeypatch.setenv("GATEWAY_UPSTREAM_A", "sk-set")
    pooled = Provider.objects.create(name="pooled", base_url="https://api.example.com/v1",
                                     api_key_envs=["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_B"])
    model = AiModel.objects.create(model_id="m", type="chat", owned_by="x", cost=1, tiers=["free"])
    for variable in pooled.secret_envs():
        Deployment.objects.create(model=model, provider=pooled, secret_env=variable)
    assert model.is_configured(model.deployments.all())
    assert not model.is_configured(model.deployments.filter(secret_env="GATEWAY_UPSTREAM_B"))
    assert not model.is_configured([])  # no deployment at all: nothing can serve it
