"""Token prices in the catalog: the file's `pricing` and `max_output_tokens`, their one checker, the shipped
catalog's prices, and where they show (GET /v1/models, the staff model pages, the landing page).

What a request costs from them is the metering's (tests/gateway/test_token_prices.py); here: the prices
are read exactly, refused with a message naming the model and field, stored, and shown."""
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from keys.models import AuditLog
from models_catalog import catalog
from models_catalog.catalog import CatalogError, parse_catalog
from models_catalog.models import AiModel

pytestmark = pytest.mark.django_db

BASE = '[providers.p]\nbase_url = "https://up.example/v1"\n'
CHAT = 'id = "m"\ntype = "chat"\nowned_by = "x"\ncost = 0\naccess = ["free"]\nprovider = "p"\n'
EMBEDDING = CHAT.replace('type = "chat"', 'type = "embedding"')
IMAGE = CHAT.replace('type = "chat"', 'type = "image"')


def model_of(text: str) -> dict:
    _, [model] = parse_catalog(BASE + "[[models]]\n" + text)
    return model


def prices(model: dict) -> tuple:
    return (model["pricing_input"], model["pricing_cached_input"], model["pricing_output"], model["max_output_tokens"])


# ---------------------------------------------------------------- the file

def test_a_chat_model_takes_three_prices_and_its_output_cap():
    model = model_of(CHAT + "pricing = { input = 2.5, cached_input = 1.25, output = 10 }\nmax_output_tokens = 16384\n")
    assert prices(model) == (Decimal("2.5"), Decimal("1.25"), Decimal("10"), 16384)


def test_cached_input_defaults_to_the_input_price():
    model = model_of(CHAT + "pricing = { input = 3, output = 15 }\nmax_output_tokens = 4096\n")
    assert prices(model) == (Decimal("3"), Decimal("3"), Decimal("15"), 4096)


def test_decimal_prices_are_read_exactly_not_as_binary_floats():
    model = model_of(CHAT + "pricing = { input = 0.1, cached_input = 0.000001, output = 0.3 }\n"
                            "max_output_tokens = 1\n")
    assert prices(model)[:3] == (Decimal("0.1"), Decimal("0.000001"), Decimal("0.3"))


def test_an_embedding_model_prices_its_input_only():
    assert prices(model_of(EMBEDDING + "pricing = { input = 0.02 }\n")) == (Decimal("0.02"), None, None, None)


def test_a_model_without_pricing_is_priced_by_its_cost_alone():
    assert prices(model_of(CHAT)) == (None, None, None, None)
    assert prices(model_of(CHAT + "max_output_tokens = 8000\n")) == (None, None, None, 8000)


@pytest.mark.parametrize("extra, field, message", [
    ("pricing = { input = -1, output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "0 or more"),
    ('pricing = { input = "2.5", output = 1 }\nmax_output_tokens = 10\n', "pricing.input", "must be a number"),
    ("pricing = { input = true, output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "must be a number"),
    ("pricing = { input = nan, output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "0 or more"),
    ("pricing = { input = inf, output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "0 or more"),
    ("pricing = { input = 1, output = 0.0000001 }\nmax_output_tokens = 10\n", "pricing.output", "6 decimal places"),
    ("pricing = { input = 1e12, output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "less than"),
    ("pricing = { input = 1, cached_input = -0.5, output = 1 }\nmax_output_tokens = 10\n", "pricing.cached_input",
     "0 or more"),
    ("pricing = { input = 1 }\nmax_output_tokens = 10\n", "pricing.output", "is missing"),
    ("pricing = { output = 1 }\nmax_output_tokens = 10\n", "pricing.input", "is missing"),
    ("pricing = { input = 1, output = 2, reasoning = 3 }\nmax_output_tokens = 10\n", "pricing", "reasoning"),
    ("pricing = { input = 1, output = 2 }\n", "max_output_tokens", "required for a priced chat model"),
    ("pricing = 2.5\n", "pricing", "must be dict"),
    ("max_output_tokens = 0\n", "max_output_tokens", "between 1 and"),
    ("max_output_tokens = 2.5\n", "max_output_tokens", "must be int"),
])
def test_a_bad_chat_price_is_refused_naming_the_model_and_field(extra, field, message):
    with pytest.raises(CatalogError) as raised:
        model_of(CHAT + extra)
    assert raised.value.field == field
    assert "(id 'm')" in str(raised.value) and message in str(raised.value)


@pytest.mark.parametrize("text, field, message", [
    (EMBEDDING + "pricing = { input = 1, output = 2 }\n", "pricing", "embedding models price input only"),
    (EMBEDDING + "pricing = { input = 1, cached_input = 0.5 }\n", "pricing", "embedding models price input only"),
    (EMBEDDING + "max_output_tokens = 10\n", "max_output_tokens", "chat models only"),
    (IMAGE + "pricing = { input = 1, output = 2 }\n", "pricing", "image models are priced by their cost"),
    (IMAGE.replace('"image"', '"speech"') + "pricing = { input = 1 }\n", "pricing", "speech models are priced"),
])
def test_prices_a_model_type_does_not_take_are_refused(text, field, message):
    with pytest.raises(CatalogError) as raised:
        model_of(text)
    assert raised.value.field == field and message in str(raised.value)


def test_seed_models_stores_the_prices_and_a_reseed_updates_them(tmp_path, capsys):
    path = tmp_path / "catalog.toml"
    path.write_text(BASE + "[[models]]\n" + CHAT + "pricing = { input = 2.5, output = 10 }\nmax_output_tokens = 100\n")
    call_command("seed_models", str(path))
    model = AiModel.objects.get(model_id="m")
    assert (model.pricing_input, model.pricing_cached_input, model.pricing_output) == (2.5, 2.5, 10)
    capsys.readouterr()
    call_command("seed_models", str(path))
    assert "0 created, 0 updated" in capsys.readouterr().out
    path.write_text(BASE + "[[models]]\n" + CHAT + "pricing = { input = 3, cached_input = 0.3, output = 15 }\n"
                                                   "max_output_tokens = 100\n")
    call_command("seed_models", str(path))
    assert "updated: model m" in capsys.readouterr().out
    model.refresh_from_db()
    assert (model.pricing_input, model.pricing_cached_input, model.pricing_output) == (3, Decimal("0.3"), 15)
    assert catalog.get_model("m").pricing_output == 15


def test_a_bad_price_fails_seed_models_and_writes_nothing(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BASE + "[[models]]\n" + CHAT + "pricing = { input = -1, output = 1 }\nmax_output_tokens = 9\n")
    with pytest.raises(CommandError, match=r"\(id 'm'\): field 'pricing.input' must be a number of 0 or more"):
        call_command("seed_models", str(path))
    assert not AiModel.objects.exists()


# ---------------------------------------------------------------- the shipped catalog

def test_the_shipped_catalog_prices_its_paid_chat_and_embedding_models_and_not_the_local_ones(seeded):
    for model in AiModel.objects.all():
        local = model.owned_by == "local"
        if local or model.type in ("image", "speech"):
            assert model.pricing_input is None and model.max_output_tokens is None, model.model_id
            continue
        assert model.pricing_input > 0, model.model_id
        if model.type == "chat":
            assert 0 < model.pricing_cached_input < model.pricing_input < model.pricing_output, model.model_id
            assert model.max_output_tokens == 32768, model.model_id
        else:
            assert model.pricing_cached_input is None and model.pricing_output is None
    gpt5 = AiModel.objects.get(model_id="gpt-5")
    assert (gpt5.pricing_input, gpt5.pricing_cached_input, gpt5.pricing_output) == (125, Decimal("12.5"), 1000)
    assert AiModel.objects.get(model_id="local-chat").cost == 1


# ---------------------------------------------------------------- where prices show

def test_the_model_list_carries_pricing_when_set(client, seeded):
    entries = {entry["id"]: entry for entry in client.get("/v1/models").json()["data"]}
    assert entries["gpt-5"]["pricing"] == {"input": 125, "cached_input": 12.5, "output": 1000}
    assert entries["text-embedding-3-small"]["pricing"] == {"input": 2}
    assert "pricing" not in entries["local-chat"] and "pricing" not in entries["gpt-image-1"]
    AiModel.objects.filter(model_id="local-chat").update(pricing_input=Decimal("0.5"), pricing_cached_input=0,
                                                         pricing_output=Decimal("1.25"), max_output_tokens=10)
    catalog.invalidate()
    entry = client.get("/v1/models/local-chat").json()
    assert entry["pricing"] == {"input": 0.5, "cached_input": 0, "output": 1.25}


def test_the_landing_page_shows_the_prices(client, seeded):
    page = client.get("/").content.decode()
    assert "+ per M tokens: 125 in · 12.5 cached · 1,000 out" in page
    assert "+ per M tokens: 2 in</span>" in page


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("alice", "alice@example.com", "pass phrase 1"))
    return client


def model_page_post(model: AiModel, **changes) -> dict:
    """The model page's form as drawn, with ``changes``; its one deployment kept as it is."""
    deployment = model.deployments.get()
    data = {"model_id": model.model_id, "type": model.type, "owned_by": model.owned_by, "cost": model.cost,
            "routing": model.routing, "allowed_fails": model.allowed_fails, "cooldown_seconds": model.cooldown_seconds,
            "tiers": model.tiers, "enabled": "on", "aliases": ", ".join(model.aliases),
            "deployments-TOTAL_FORMS": "1", "deployments-INITIAL_FORMS": "1", "deployments-MIN_NUM_FORMS": "0",
            "deployments-MAX_NUM_FORMS": "1000", "deployments-0-id": deployment.pk,
            "deployments-0-model": model.pk, "deployments-0-provider": deployment.provider_id,
            "deployments-0-upstream_model": deployment.upstream_model, "deployments-0-priority": deployment.priority,
            "deployments-0-weight": deployment.weight, "deployments-0-rpm": deployment.rpm}
    for name in ("pricing_input", "pricing_cached_input", "pricing_output", "max_output_tokens"):
        value = getattr(model, name)
        data[name] = "" if value is None else str(value)
    data.update({name: str(value) for name, value in changes.items()})
    return data


def test_staff_price_a_model_on_its_page_and_the_change_is_audited(staff_client, seeded):
    model = AiModel.objects.get(model_id="local-chat")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    page = staff_client.get(url).content.decode()
    assert 'name="pricing_input"' in page and 'name="max_output_tokens"' in page
    response = staff_client.post(url, model_page_post(model, pricing_input="0.5", pricing_output="2",
                                                      max_output_tokens=4096))
    assert response.status_code == 302, response.context["adminform"].form.errors
    model.refresh_from_db()
    # The empty cached price is the input price, as in the file.
    assert (model.pricing_input, model.pricing_cached_input, model.pricing_output, model.max_output_tokens) == (
        Decimal("0.5"), Decimal("0.5"), 2, 4096)
    entry = AuditLog.objects.get(action="update_model")
    assert (entry.before["pricing_input"], entry.after["pricing_input"]) == (None, "0.5")
    assert catalog.get_model("local-chat").pricing_output == 2


def test_a_price_the_loader_refuses_is_refused_on_its_field_in_the_loaders_words(staff_client, seeded):
    model = AiModel.objects.get(model_id="local-chat")
    url = reverse("admin:models_catalog_aimodel_change", args=[model.pk])
    response = staff_client.post(url, model_page_post(model, pricing_input="1", pricing_output="2"))
    assert response.status_code == 200
    [message] = response.context["adminform"].form.errors["max_output_tokens"]
    assert message.endswith("field 'max_output_tokens' is required for a priced chat model (a request that names "
                            "no output cap is held for it)")
    response = staff_client.post(url, model_page_post(model, pricing_input="-1", pricing_output="2",
                                                      max_output_tokens=5))
    assert "pricing.input" in response.context["adminform"].form.errors["pricing_input"][0]
    model.refresh_from_db()
    assert model.pricing_input is None


def test_the_model_list_shows_the_prices(staff_client, seeded):
    page = staff_client.get(reverse("admin:models_catalog_aimodel_changelist")).content.decode()
    assert "125 / 12.5 / 1000" in page
    assert "per M tokens (in / cached / out)" in page
