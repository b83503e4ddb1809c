"""The staff pages for models and providers, and the tier x model access matrix."""
import re

import pytest
from django.urls import reverse

from keys.models import TIERS, AuditLog
from models_catalog import catalog
from models_catalog.access import set_access
from models_catalog.models import AiModel, Provider

pytestmark = pytest.mark.django_db

MATRIX = reverse("admin:models_catalog_aimodel_access")


def matrix_post(response, toggle=()) -> dict:
    """The matrix form as drawn, with the (model_id, tier) cells in ``toggle`` clicked."""
    data = {"model": [], "was": [], "access": []}
    ids = {}
    for model, cells in response.context["rows"]:
        ids[model.model_id] = model.pk
        data["model"].append(str(model.pk))
        for tier, allowed in cells:
            if allowed:
                data["was"].append(f"{model.pk}:{tier}")
    data["access"] = list(data["was"])
    for model_id, tier in toggle:
        cell = f"{ids[model_id]}:{tier}"
        if cell in data["access"]:
            data["access"].remove(cell)
        else:
            data["access"].append(cell)
    return data


def test_the_matrix_has_a_row_per_model_and_a_checkbox_per_tier(staff_client, seeded):
    response = staff_client.get(MATRIX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('type="checkbox" name="access"') == AiModel.objects.count() * len(TIERS)
    for tier in TIERS:
        assert f'<th scope="col" class="tier">{tier}</th>' in body
    # gpt-4.1 is not open to the free tier in the shipped catalog; local-chat is.
    assert " checked" not in re.search(r'id="access-gpt-4.1-free"[^>]*>', body).group()
    assert " checked" in re.search(r'id="access-local-chat-free"[^>]*>', body).group()
    rows = {model.model_id: dict(cells) for model, cells in response.context["rows"]}
    assert rows["gpt-4.1"]["free"] is False and rows["local-chat"]["free"] is True


def test_saving_the_matrix_changes_the_toggled_cells_in_one_audited_step(staff_client, seeded):
    drawn = staff_client.get(MATRIX)
    assert catalog.get_model("local-chat").allows_tier("free")
    response = staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "free"), ("gpt-4.1", "cool"),
                                                                      ("gpt-4.1", "free")]))
    assert response.status_code == 302
    assert "free" not in AiModel.objects.get(model_id="local-chat").tiers
    assert AiModel.objects.get(model_id="gpt-4.1").tiers == ["free", "premium", "cool", "partner", "exclusive",
                                                               "special"]
    entry = AuditLog.objects.get(action="update_access")
    assert entry.actor == "staff alice"
    assert set(entry.after) == {"local-chat", "gpt-4.1"}
    # The request path's cached catalog sees it at once in this process.
    assert not catalog.get_model("local-chat").allows_tier("free")


def test_cells_changed_by_someone_else_meanwhile_are_kept(staff_client, seeded):
    drawn = staff_client.get(MATRIX)
    # Another staff member withdraws local-image from the free tier after our page was drawn.
    image = AiModel.objects.get(model_id="local-image")
    set_access(changes={image.pk: {"free": False}}, actor="staff carol")
    staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "limited")]))
    assert "free" not in AiModel.objects.get(model_id="local-image").tiers
    assert "limited" not in AiModel.objects.get(model_id="local-chat").tiers


def test_saving_an_unchanged_matrix_writes_nothing(staff_client, seeded):
    staff_client.post(MATRIX, matrix_post(staff_client.get(MATRIX)))
    assert not AuditLog.objects.filter(action="update_access").exists()


def test_a_malformed_matrix_post_is_an_error_message_not_a_500(staff_client, seeded):
    response = staff_client.post(MATRIX, {"model": ["1"], "access": ["x:free"]}, follow=True)
    assert response.status_code == 200
    assert "malformed" in response.content.decode()
    unknown = AiModel.objects.get(model_id="local-chat")
    response = staff_client.post(MATRIX, {"model": [str(unknown.pk)], "access": [f"{unknown.pk}:gold"]},
                                 follow=True)
    assert "Unknown tier" in response.content.decode()
    assert not AuditLog.objects.exists()


def test_view_only_staff_see_the_matrix_but_cannot_save_it(limited_staff_client, seeded):
    drawn = limited_staff_client.get(MATRIX)
    assert drawn.status_code == 200 and 'id="save-access"' not in drawn.content.decode()
    response = limited_staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "free")]))
    assert response.status_code == 403
    assert "free" in AiModel.objects.get(model_id="local-chat").tiers


# ------------------------------------------------------------------ model and provider pages

def model_form(model, **changes):
    data = {"model_id": model.model_id, "type": model.type, "owned_by": model.owned_by, "cost": model.cost,
            "provider": model.provider_id, "upstream_model": model.upstream_model,
            "fallbacks": ", ".join(model.fallbacks), "tiers": model.tiers}
    if model.enabled:
        data["enabled"] = "on"
    data.update(changes)
    return {name: value for name, value in data.items() if value is not None}


def test_editing_a_model_saves_cost_fallbacks_and_access_and_audits(staff_client, seeded):
    model = AiModel.objects.get(model_id="gpt-4o")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    assert staff_client.get(url).status_code == 200
    response = staff_client.post(url, model_form(model, cost="7", fallbacks="local", upstream_model="gpt-4o-2024",
                                                 tiers=["special", "free"], enabled=None))
    assert response.status_code == 302
    model.refresh_from_db()
    assert (model.cost, model.fallbacks, model.upstream_model, model.tiers, model.enabled) == (
        7, ["local"], "gpt-4o-2024", ["free", "special"], False)
    entry = AuditLog.objects.get(action="update_model")
    assert entry.actor == "staff alice"
    assert (entry.before["cost"], entry.after["cost"]) == (5, 7)
    assert catalog.get_model("gpt-4o") is None  # disabled models leave the request path's catalog


@pytest.mark.parametrize("fallbacks, message", [
    ("nowhere", "Unknown provider(s): nowhere"),
    ("openai", "own provider cannot be its fallback"),
    ("local, local", "listed twice"),
])
def test_model_fallbacks_must_name_other_known_providers(staff_client, seeded, fallbacks, message):
    model = AiModel.objects.get(model_id="gpt-4o")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = staff_client.post(url, model_form(model, fallbacks=fallbacks))
    assert response.status_code == 200
    assert message in str(response.context["adminform"].form.errors["fallbacks"])
    assert AiModel.objects.get(pk=model.pk).fallbacks == []


def test_a_provider_page_names_the_secret_variable_and_never_shows_its_value(staff_client, seeded, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-secret-value-123")
    body = staff_client.get(reverse("admin:models_catalog_provider_changelist")).content.decode()
    assert "OPENAI_API_KEY" in body and "sk-upstream-secret-value-123" not in body
    assert "icon-yes.svg" in body  # the variable is set in this process
    openai = Provider.objects.get(name="openai")
    page = staff_client.get(reverse("admin:models_catalog_provider_change", args=[openai.pk])).content.decode()
    assert "sk-upstream-secret-value-123" not in page


@pytest.mark.parametrize("value, ok", [("OPENAI_API_KEY", True), ("sk-abcdef0123456789", False),
                                       ("my secret", False)])
def test_the_provider_form_takes_a_variable_name_not_a_secret(staff_client, seeded, value, ok):
    openai = Provider.objects.get(name="openai")
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    response = staff_client.post(url, {"name": "openai", "type": "openai", "base_url": "https://api.example.com/v1/",
                                       "api_key_env": value, "timeout": "30"})
    openai.refresh_from_db()
    if ok:
        assert response.status_code == 302
        assert (openai.base_url, openai.timeout) == ("https://api.example.com/v1", 30.0)
        assert AuditLog.objects.get(action="update_provider").after["base_url"] == "https://api.example.com/v1"
    else:
        assert response.status_code == 200
        assert "not the secret itself" in str(response.context["adminform"].form.errors["api_key_env"])
        assert openai.api_key_env == "OPENAI_API_KEY"


def test_an_http_provider_needs_a_base_url(staff_client, seeded):
    add = reverse("admin:models_catalog_provider_add")
    fields = {"name": "backup", "base_url": "", "api_key_env": "", "timeout": "5"}
    response = staff_client.post(add, {**fields, "type": "openai"})
    assert response.status_code == 200 and "needs a base URL" in str(response.context["adminform"].form.errors)
    response = staff_client.post(add, {**fields, "type": "local"})
    assert response.status_code == 302
    assert AuditLog.objects.get(action="create_provider").after["name"] == "backup"


def test_models_and_providers_cannot_be_deleted_from_the_ui(staff_client, seeded):
    model = AiModel.objects.get(model_id="gpt-4o")
    assert staff_client.get(reverse("admin:models_catalog_aimodel_delete", args=[model.pk])).status_code == 403
    provider = Provider.objects.get(name="local")
    assert staff_client.get(reverse("admin:models_catalog_provider_delete", args=[provider.pk])).status_code == 403
