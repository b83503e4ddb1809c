"""Model aliases: other names a catalog model answers to (CONTRACT section 11).

The file's `aliases` and their one checker, the snapshot's lookup by id or alias (no query), the model
list and retrieve, the staff model page, and a request made under an alias: its answer names the model
as the client did, its ledger and usage rows the catalog model."""
import json

import httpx2
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from openai import OpenAI

from keys.models import AuditLog, LedgerEntry
from models_catalog import catalog
from models_catalog.catalog import CatalogError, parse_catalog
from models_catalog.models import AiModel, UsageEvent
from tests.conftest import bearer

pytestmark = pytest.mark.django_db

BASE = '[providers.p]\nbase_url = "https://up.example/v1"\n'


def entry(model_id: str, extra: str = "") -> str:
    return (f'[[models]]\nid = "{model_id}"\ntype = "chat"\nowned_by = "x"\ncost = 1\naccess = ["free"]\n'
            f'provider = "p"\n{extra}')


def give_aliases(model_id: str, *aliases: str) -> None:
    model = AiModel.objects.get(model_id=model_id)
    model.aliases = list(aliases)
    model.save()  # through save(), so the snapshot is dropped as a staff edit drops it


# ---------------------------------------------------------------- the file

def test_a_model_lists_its_aliases():
    _, [model] = parse_catalog(BASE + entry("m", 'aliases = ["claude-sonnet-4-6", "gpt-5-codex"]\n'))
    assert model["aliases"] == ["claude-sonnet-4-6", "gpt-5-codex"]
    _, [model] = parse_catalog(BASE + entry("m"))
    assert model["aliases"] == []


@pytest.mark.parametrize("text, where, field, message", [
    (entry("a", 'aliases = ["x"]\n') + entry("b", 'aliases = ["x"]\n'), "model 'b'", "aliases",
     "'x' is already an alias of model 'a'"),
    (entry("a", 'aliases = ["b"]\n') + entry("b"), "model 'a'", "aliases", "'b' is already the id of model 'b'"),
    (entry("b") + entry("a", 'aliases = ["b"]\n'), "model 'a'", "aliases", "'b' is already the id of model 'b'"),
    (entry("a", 'aliases = ["a"]\n'), "(id 'a')", "aliases", "'a' is the model's own id"),
    (entry("a", 'aliases = ["x", "x"]\n'), "(id 'a')", "aliases", "names an alias twice"),
    (entry("a", 'aliases = [""]\n'), "(id 'a')", "aliases", "without surrounding spaces"),
    (entry("a", 'aliases = [" x"]\n'), "(id 'a')", "aliases", "without surrounding spaces"),
    (entry("a", 'aliases = [3]\n'), "(id 'a')", "aliases", "got 3"),
    (entry("a", 'aliases = "x"\n'), "(id 'a')", "aliases", "must be list"),
    (entry("a", f'aliases = ["{"x" * 121}"]\n'), "(id 'a')", "aliases", "at most 120 characters"),
    (entry("a", 'aliases = ["a\\u0000b"]\n'), "(id 'a')", "aliases", "control characters"),
])
def test_a_bad_alias_is_refused_naming_the_model_and_field(tmp_path, text, where, field, message):
    path = tmp_path / "bad.toml"
    path.write_text(BASE + text)
    with pytest.raises(CommandError) as raised:
        call_command("seed_models", str(path))
    assert where in str(raised.value) and f"field '{field}'" in str(raised.value)
    assert message in str(raised.value)
    assert not AiModel.objects.exists()


def test_a_file_may_not_give_a_stored_models_name_to_another(seeded, tmp_path):
    # local-chat is stored but not in this file: the file may not take its id as an alias.
    path = tmp_path / "catalog.toml"
    path.write_text(BASE + entry("m", 'aliases = ["local-chat"]\n'))
    with pytest.raises(CatalogError, match="'local-chat' is already the id of model 'local-chat'"):
        catalog.load_catalog(path)
    assert not AiModel.objects.filter(model_id="m").exists()
    # A model in the file may take back an alias it had, or pass one to another model of the file.
    give_aliases("local-chat", "helper")
    path.write_text('[providers.local]\ntype = "local"\n'
                    + entry("local-chat", 'aliases = ["helper-2"]\n').replace('"p"', '"local"')
                    + entry("local-embedding", 'aliases = ["helper"]\n').replace('"p"', '"local"')
                    .replace('type = "chat"', 'type = "embedding"'))
    catalog.load_catalog(path)
    assert AiModel.objects.get(model_id="local-embedding").aliases == ["helper"]


def test_the_shipped_catalog_gives_dated_names_and_never_a_model_it_does_not_serve(seeded):
    assert catalog.get_model("claude-haiku-4-5-20251001").model_id == "claude-haiku-4-5"
    assert catalog.get_model("claude-sonnet-4-5-20250929").model_id == "claude-sonnet-4-5"
    # The agents' defaults of other models are no alias of a local model: a client naming one learns that
    # the gateway does not serve it (404 model_not_found), instead of an echo under a vendor model's name.
    for name in ("claude-sonnet-4-6", "gpt-5-codex", "claude-opus-4-5"):
        assert catalog.get_model(name) is None
    assert AiModel.objects.get(model_id="local-chat").aliases == []


# ---------------------------------------------------------------- the snapshot

def test_get_model_finds_a_model_by_id_or_alias_without_a_query(seeded, django_assert_num_queries):
    give_aliases("local-chat", "claude-sonnet-4-6", "gpt-5-codex")
    catalog.snapshot()
    with django_assert_num_queries(0):
        assert catalog.get_model("claude-sonnet-4-6").model_id == "local-chat"
        assert catalog.get_model("gpt-5-codex") is catalog.get_model("local-chat")
        assert catalog.get_model("Claude-Sonnet-4-6") is None  # exact names
    # The aliases are no models of their own: every list built from the snapshot shows the model once.
    assert "claude-sonnet-4-6" not in catalog.snapshot().models


def test_a_disabled_models_aliases_answer_nothing(seeded):
    give_aliases("local-chat", "claude-sonnet-4-6")
    model = AiModel.objects.get(model_id="local-chat")
    model.enabled = False
    model.save()
    assert catalog.get_model("claude-sonnet-4-6") is None


# ---------------------------------------------------------------- GET /v1/models

def test_the_list_names_each_model_once_with_its_aliases(client, seeded):
    give_aliases("local-chat", "claude-sonnet-4-6")
    data = client.get("/v1/models").json()["data"]
    ids = [item["id"] for item in data]
    assert "claude-sonnet-4-6" not in ids and ids.count("local-chat") == 1
    local = next(item for item in data if item["id"] == "local-chat")
    assert local["aliases"] == ["claude-sonnet-4-6"]
    assert "aliases" not in next(item for item in data if item["id"] == "local-embedding")


def test_a_model_is_retrieved_by_its_alias_with_the_name_asked_as_its_id(client, seeded):
    give_aliases("local-chat", "claude-sonnet-4-6")
    entry_ = client.get("/v1/models/claude-sonnet-4-6").json()
    assert (entry_["id"], entry_["root"], entry_["type"]) == ("claude-sonnet-4-6", "local-chat", "chat")
    plain = client.get("/v1/models/local-chat").json()
    assert plain["id"] == "local-chat" and "root" not in plain
    assert client.get("/v1/models/claude-opus-4-5").status_code == 404


def test_the_openai_sdk_retrieves_a_model_by_its_alias(seeded, free_key):
    give_aliases("local-chat", "gpt-5-codex")
    _, secret = free_key
    django_client = Client()

    def through_django(request: httpx2.Request) -> httpx2.Response:
        response = django_client.generic(request.method, request.url.raw_path.decode(), request.content,
                                         **bearer(secret))
        return httpx2.Response(response.status_code, headers={"content-type": response["Content-Type"]},
                               content=response.content)

    sdk = OpenAI(api_key=secret, base_url="http://gateway.test/v1", max_retries=0,
                 http_client=httpx2.Client(transport=httpx2.MockTransport(through_django)))
    model = sdk.models.retrieve("gpt-5-codex")
    assert (model.id, model.owned_by) == ("gpt-5-codex", "local")


# ---------------------------------------------------------------- a request under an alias

def test_a_chat_under_an_alias_answers_with_that_name_and_records_the_catalog_model(client, seeded, free_key):
    key, secret = free_key
    give_aliases("local-chat", "claude-sonnet-4-6")
    response = client.post("/v1/chat/completions", json.dumps({
        "model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "Hello"}]}),
        content_type="application/json", **bearer(secret))
    assert response.status_code == 200, response.content
    assert response.json()["model"] == "claude-sonnet-4-6"
    assert UsageEvent.objects.get(key=key).model.model_id == "local-chat"
    assert LedgerEntry.objects.get(key=key, kind=LedgerEntry.CHARGE).model == "local-chat"


def test_a_name_no_model_answers_to_is_a_404_model_not_found(client, seeded, free_key):
    _, secret = free_key
    response = client.post("/v1/chat/completions", json.dumps({
        "model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "Hello"}]}),
        content_type="application/json", **bearer(secret))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


# ---------------------------------------------------------------- the staff model page

@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("alice", "alice@example.com", "pass phrase 1"))
    return client


def page_post(model: AiModel, aliases: str) -> dict:
    deployment = model.deployments.get()
    return {"model_id": model.model_id, "type": model.type, "owned_by": model.owned_by, "cost": model.cost,
            "routing": model.routing, "allowed_fails": model.allowed_fails, "cooldown_seconds": model.cooldown_seconds,
            "tiers": model.tiers, "enabled": "on", "aliases": aliases, "pricing_input": "", "pricing_cached_input": "",
            "pricing_output": "", "max_output_tokens": "",
            "deployments-TOTAL_FORMS": "1", "deployments-INITIAL_FORMS": "1", "deployments-MIN_NUM_FORMS": "0",
            "deployments-MAX_NUM_FORMS": "1000", "deployments-0-id": deployment.pk, "deployments-0-model": model.pk,
            "deployments-0-provider": deployment.provider_id, "deployments-0-upstream_model": deployment.upstream_model,
            "deployments-0-priority": deployment.priority, "deployments-0-weight": deployment.weight,
            "deployments-0-rpm": deployment.rpm}


def test_staff_give_a_model_aliases_on_its_page_and_the_change_is_audited(staff_client, seeded):
    model = AiModel.objects.get(model_id="local-chat")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = staff_client.post(url, page_post(model, "claude-sonnet-4-6, gpt-5-codex"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert AiModel.objects.get(pk=model.pk).aliases == ["claude-sonnet-4-6", "gpt-5-codex"]
    assert catalog.get_model("gpt-5-codex").model_id == "local-chat"
    audit = AuditLog.objects.get(action="update_model")
    assert (audit.before["aliases"], audit.after["aliases"]) == ([], ["claude-sonnet-4-6", "gpt-5-codex"])
    listing = staff_client.get(reverse("admin:models_catalog_aimodel_changelist")).content.decode()
    assert "claude-sonnet-4-6, gpt-5-codex" in listing


@pytest.mark.parametrize("aliases, message", [
    ("local-embedding", "'local-embedding' is already the id of model 'local-embedding'"),
    ("claude-haiku-4-5-20251001", "'claude-haiku-4-5-20251001' is already an alias of model 'claude-haiku-4-5'"),
    ("local-chat", "'local-chat' is the model's own id"),
])
def test_an_alias_another_model_holds_is_refused_on_the_aliases_field(staff_client, seeded, aliases, message):
    model = AiModel.objects.get(model_id="local-chat")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = staff_client.post(url, page_post(model, aliases))
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["aliases"]
    assert message in error
    assert AiModel.objects.get(pk=model.pk).aliases == []


@pytest.mark.parametrize("aliases", ["a\x00b", '["a\\u0000b"]', '["a\\ud800"]', '["a\\tb"]'])
def test_an_alias_a_client_could_not_send_is_refused_on_the_aliases_field(staff_client, seeded, aliases):
    # A NUL reached the jsonb column, which refuses it on PostgreSQL: a 500 on saving the page.
    model = AiModel.objects.get(model_id="local-chat")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = staff_client.post(url, page_post(model, aliases))
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["aliases"]
    assert "control characters or lone surrogates" in error
    assert AiModel.objects.get(pk=model.pk).aliases == []


def test_the_landing_page_names_a_models_aliases_beside_it(client, seeded):
    page = client.get("/").content.decode()
    assert ('<code>claude-haiku-4-5</code><span class="aliases">also <code class="alias">claude-haiku-4-5-20251001'
            '</code></span>') in page
