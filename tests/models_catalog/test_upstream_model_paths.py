"""An upstream model's name where the provider's URL carries it (gemini, azure): one plain path segment, so that
no name reaches another path of the provider's host. Held by the catalog's one rule checker, for the file
loader and the staff model page alike (staff who may change models but not providers)."""
import json

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from models_catalog import catalog
from models_catalog.catalog import CatalogError
from models_catalog.models import AiModel, Provider
from tests.staff.test_catalog_pages import model_post

TRAVERSAL = "tunedModels/../../v1/files?key=AIzaSyFAKE"
# Google's model ids and resource names, and Azure's deployment names, as they are written.
GEMINI_NAMES = ["gemini-2.5-flash", "gemini-1.5-pro-002", "text-embedding-004", "models/gemini-2.0-flash-001",
                "tunedModels/my-model-7", "gemma-3-27b-it", "learnlm-2.0-flash-experimental"]
AZURE_NAMES = ["gpt4o-prod", "gpt-4o-mini.2024-07-18", "embeddings_v3"]
REFUSED = [TRAVERSAL, "../models/x", "..", "models/..", "models/a/b", "models/", "/gemini-pro", "files/abc",
           "gemini-pro?key=1", "gemini-pro#x", "gemini%2F..", "gemini\\..\\x", "gemini pro", "a..b",
           "gemini-pro:streamGenerateContent", "tunedmodels/x", ".hidden", "gemini-é"]


def catalog_text(provider_type: str, upstream_model: str | None, *, model_id: str = "m") -> str:
    provider = {"gemini": 'type = "gemini"\n', "azure": 'type = "azure"\nbase_url = "https://r.openai.azure.com"\n',
                "openai": 'base_url = "https://api.example/v1"\n',
                "anthropic": 'type = "anthropic"\n'}[provider_type]
    text = (f"[providers.p]\n{provider}api_key_env = \"GATEWAY_UPSTREAM_P\"\n"
            f"[[models]]\nid = {json.dumps(model_id)}\ntype = \"chat\"\nowned_by = \"t\"\ncost = 1\naccess = []\n"
            "[[models.deployments]]\nprovider = \"p\"\n")
    if upstream_model is not None:
        text += f"upstream_model = {json.dumps(upstream_model)}\n"
    return text


def refusal(text: str) -> CatalogError:
    with pytest.raises(CatalogError) as refused:
        catalog.parse_catalog(text)
    return refused.value


@pytest.mark.parametrize("name", GEMINI_NAMES)
def test_googles_model_names_are_taken(name):
    _, [model] = catalog.parse_catalog(catalog_text("gemini", name))
    assert model["deployments"][0]["upstream_model"] == name


@pytest.mark.parametrize("name", AZURE_NAMES)
def test_azure_deployment_names_are_taken(name):
    _, [model] = catalog.parse_catalog(catalog_text("azure", name))
    assert model["deployments"][0]["upstream_model"] == name


@pytest.mark.parametrize("name", REFUSED)
def test_a_gemini_name_that_is_not_one_plain_segment_is_refused_naming_the_entry_and_field(name):
    refused = refusal(catalog_text("gemini", name))
    assert (refused.where, refused.field) == ("[[models]] #1 (id 'm'), deployment #1", "upstream_model")
    assert str(refused).startswith("[[models]] #1 (id 'm'), deployment #1: field 'upstream_model' must be one name")
    assert "tunedModels/<name>" in str(refused) and repr(name) in str(refused)


@pytest.mark.parametrize("name", [TRAVERSAL, "..", "a/b", "models/gpt", "dep?api-version=1", "dep%2F..", "a..b"])
def test_an_azure_name_is_one_plain_segment(name):
    refused = refusal(catalog_text("azure", name))
    assert refused.field == "upstream_model" and "tunedModels/<name>" not in str(refused)


def test_with_no_upstream_model_the_model_id_is_held_to_the_rule():
    refused = refusal(catalog_text("gemini", None, model_id="team/../../x"))
    assert refused.field == "upstream_model"
    assert "is empty, so the model's id is sent instead" in str(refused)
    _, [model] = catalog.parse_catalog(catalog_text("gemini", None, model_id="gemini-2.5-flash"))
    assert model["deployments"][0]["upstream_model"] == ""


@pytest.mark.parametrize("provider_type", ["openai", "anthropic"])
def test_a_name_only_the_body_carries_is_left_as_it_is(provider_type):
    # OpenAI-compatible servers name models "org/model" or "llama3:8b"; the name travels in the JSON body.
    for name in ("meta-llama/Llama-3.1-8B-Instruct", "llama3:8b"):
        _, [model] = catalog.parse_catalog(catalog_text(provider_type, name))
        assert model["deployments"][0]["upstream_model"] == name


@pytest.mark.django_db
def test_staff_who_may_change_models_cannot_point_a_gemini_deployment_elsewhere(client, django_user_model,
                                                                                 monkeypatch):
    user = django_user_model.objects.create_user("carol", password="correct horse battery", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_aimodel", "change_aimodel"]))
    client.force_login(user)
    google = Provider.objects.create(name="google", type="gemini", api_key_env="GATEWAY_UPSTREAM_GOOGLE")
    model = AiModel.objects.create(model_id="flash", type="chat", owned_by="google", cost=1, tiers=["free"])
    catalog.save_pool(model, [{"provider": google, "upstream_model": "gemini-2.5-flash", "priority": 1, "weight": 1,
                               "rpm": 0}])
    [deployment] = model.deployments.all()
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = client.post(url, model_post(model, [{"id": deployment.pk, "provider": "google",
                                                    "upstream_model": TRAVERSAL}]))
    assert response.status_code == 200, "the traversal was saved"
    formset = response.context["inline_admin_formsets"][0].formset
    [message] = formset.forms[0].errors["upstream_model"]
    assert message.startswith("model 'flash', deployment #1: field 'upstream_model' must be one name")
    assert model.deployments.get().upstream_model == "gemini-2.5-flash"
    # A name of Google's is saved as before.
    response = client.post(url, model_post(model, [{"id": deployment.pk, "provider": "google",
                                                    "upstream_model": "tunedModels/my-model-7"}]))
    assert response.status_code == 302
    assert model.deployments.get().upstream_model == "tunedModels/my-model-7"
