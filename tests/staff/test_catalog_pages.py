"""The staff pages for models and providers, and the tier x model access matrix."""
import json
import re

import pytest
from django.urls import reverse

from keys.models import TIERS, AuditLog
from models_catalog import catalog
from models_catalog.access import set_access
from models_catalog.catalog import CatalogError
from models_catalog.models import AiModel, Deployment, Provider

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
    # gpt-5 is not open to the free tier in the shipped catalog; local-chat is.
    assert " checked" not in re.search(r'id="access-gpt-5-free"[^>]*>', body).group()
    assert " checked" in re.search(r'id="access-local-chat-free"[^>]*>', body).group()
    rows = {model.model_id: dict(cells) for model, cells in response.context["rows"]}
    assert rows["gpt-5"]["free"] is False and rows["local-chat"]["free"] is True


def test_saving_the_matrix_changes_the_toggled_cells_in_one_audited_step(staff_client, seeded):
    drawn = staff_client.get(MATRIX)
    assert catalog.get_model("local-chat").allows_tier("free")
    response = staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "free"), ("gpt-5", "cool"),
                                                                      ("gpt-5", "free")]))
    assert response.status_code == 302
    assert "free" not in AiModel.objects.get(model_id="local-chat").tiers
    assert AiModel.objects.get(model_id="gpt-5").tiers == ["free", "premium", "cool", "partner", "exclusive",
                                                               "special"]
    entry = AuditLog.objects.get(action="update_access")
    assert entry.actor == "staff alice"
    assert set(entry.after) == {"local-chat", "gpt-5"}
    # The request path's cached catalog sees it at once in this process.
    assert not catalog.get_model("local-chat").allows_tier("free")


def test_cells_changed_by_someone_else_meanwhile_are_kept(staff_client, seeded):
    drawn = staff_client.get(MATRIX)
    # Another staff member withdraws local-embedding from the free tier after our page was drawn.
    embedding = AiModel.objects.get(model_id="local-embedding")
    set_access(changes={embedding.pk: {"free": False}}, actor="staff carol")
    staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "limited")]))
    assert "free" not in AiModel.objects.get(model_id="local-embedding").tiers
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


@pytest.mark.parametrize("pk", ["\u00b2", "\u0661", str(2**70), "99999999999999999999"])
def test_a_matrix_cell_whose_model_is_no_plain_number_is_an_error_message_not_a_500(staff_client, seeded, pk):
    # "²" and "١" pass str.isdigit but not int(); 2**70 passes int() but no bigint column.
    for name in ("access", "was"):
        response = staff_client.post(MATRIX, {"model": [pk], name: [f"{pk}:free"]}, follow=True)
        assert response.status_code == 200
        assert "malformed" in response.content.decode()
    assert not AuditLog.objects.exists()


def test_view_only_staff_see_the_matrix_but_cannot_save_it(limited_staff_client, seeded):
    drawn = limited_staff_client.get(MATRIX)
    assert drawn.status_code == 200 and 'id="save-access"' not in drawn.content.decode()
    response = limited_staff_client.post(MATRIX, matrix_post(drawn, toggle=[("local-chat", "free")]))
    assert response.status_code == 403
    assert "free" in AiModel.objects.get(model_id="local-chat").tiers


# ------------------------------------------------------------------ providers

PROVIDER_FIELDS = {"name": "backup", "type": "openai", "base_url": "https://api.example.com/v1", "api_key_env": "",
                   "api_key_envs": "", "timeout": "5", "api_version": "", "max_tokens_default": "4096"}


def loader_error(toml: str) -> CatalogError:
    """What the catalog file loader says of a catalog (the staff forms must say the same)."""
    with pytest.raises(CatalogError) as refused:
        catalog.parse_catalog(toml)
    return refused.value


def form_errors(response) -> dict:
    assert response.status_code == 200, "the form was saved"
    return {name: [str(message) for message in messages] for name, messages in
            response.context["adminform"].form.errors.items()}


def test_a_provider_page_names_the_secret_variable_and_never_shows_its_value(staff_client, seeded, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-upstream-secret-value-123")
    body = staff_client.get(reverse("admin:models_catalog_provider_changelist")).content.decode()
    assert "OPENAI_API_KEY" in body and "sk-upstream-secret-value-123" not in body
    assert "icon-yes.svg" in body  # the variable is set in this process
    openai = Provider.objects.get(name="openai")
    page = staff_client.get(reverse("admin:models_catalog_provider_change", args=[openai.pk])).content.decode()
    assert "sk-upstream-secret-value-123" not in page


def configured_column(body: str) -> dict:
    """Model id -> the model list's "secret set" cell (True / False)."""
    column = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S):
        model = re.search(r'<th class="field-model_id"><a [^>]*>([^<]+)</a>', row)
        cell = re.search(r'<td class="field-configured"><img src="[^"]*icon-(yes|no)\.svg"', row)
        if model and cell:
            column[model.group(1)] = cell.group(1) == "yes"
    return column


@pytest.mark.parametrize("secret", ["", "sk-upstream-secret-value-123"])
def test_the_model_list_says_which_models_have_their_providers_secret(staff_client, seeded, monkeypatch, secret):
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    body = staff_client.get(reverse("admin:models_catalog_aimodel_changelist")).content.decode()
    assert "Secret set" in body and (not secret or secret not in body)
    column = configured_column(body)
    assert set(column) == set(AiModel.objects.values_list("model_id", flat=True))
    for model in AiModel.objects.all():
        expected = model.owned_by == "local" or (model.owned_by == "openai" and bool(secret))
        assert column[model.model_id] == expected, model.model_id
    assert column["claude-haiku-4-5"] is False  # Anthropic's secret is not set here


def test_a_model_with_one_deployment_that_has_its_secret_counts_as_configured(staff_client, seeded, monkeypatch,
                                                                             django_assert_max_num_queries):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = AiModel.objects.get(model_id="gpt-5-mini")
    Deployment.objects.create(model=model, provider=Provider.objects.get(name="local"), priority=2)
    with django_assert_max_num_queries(12):  # the deployments are read once for the page, not once a row
        body = staff_client.get(reverse("admin:models_catalog_aimodel_changelist")).content.decode()
    column = configured_column(body)
    assert (column["gpt-5-mini"], column["gpt-4.1-mini"]) == (True, False)


@pytest.mark.parametrize("value, ok", [("OPENAI_API_KEY", True), ("sk-abcdef0123456789", False),
                                       ("my secret", False)])
def test_the_provider_form_takes_a_variable_name_not_a_secret(staff_client, seeded, value, ok):
    openai = Provider.objects.get(name="openai")
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    response = staff_client.post(url, {**PROVIDER_FIELDS, "name": "openai", "base_url": "https://api.example.com/v1/",
                                       "api_key_env": value, "timeout": "30"})
    openai.refresh_from_db()
    if ok:
        assert response.status_code == 302
        assert (openai.base_url, openai.timeout) == ("https://api.example.com/v1", 30.0)
        assert AuditLog.objects.get(action="update_provider").after["base_url"] == "https://api.example.com/v1"
    else:
        assert "not the secret itself" in " ".join(form_errors(response)["api_key_env"])
        assert openai.api_key_env == "OPENAI_API_KEY"


# Each provider rule of the catalog checker, as a TOML entry and as the same values in the form.
PROVIDER_RULES = [
    ("both api_key_env and api_key_envs", 'api_key_env = "GATEWAY_UPSTREAM_A"\napi_key_envs = ["GATEWAY_UPSTREAM_B"]',
     {"api_key_env": "GATEWAY_UPSTREAM_A", "api_key_envs": "GATEWAY_UPSTREAM_B"}, "api_key_envs"),
    ("a variable that may not hold a secret", 'api_key_envs = ["GATEWAY_UPSTREAM_A", "SECRET_KEY"]',
     {"api_key_envs": "GATEWAY_UPSTREAM_A, SECRET_KEY"}, "api_key_envs"),
    ("a variable named twice", 'api_key_envs = ["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_A"]',
     {"api_key_envs": "GATEWAY_UPSTREAM_A GATEWAY_UPSTREAM_A"}, "api_key_envs"),
    ("api_version on a type without it", 'api_version = "2024-10-21"', {"api_version": "2024-10-21"},
     "api_version"),
    ("max_tokens_default on a type without it", "max_tokens_default = 100", {"max_tokens_default": "100"},
     "max_tokens_default"),
    ("a timeout of zero", "timeout = 0", {"timeout": "0"}, "timeout"),
]


@pytest.mark.parametrize("rule, toml, fields, field", PROVIDER_RULES, ids=[rule[0] for rule in PROVIDER_RULES])
def test_each_provider_rule_is_refused_in_the_form_with_the_loaders_message(staff_client, seeded, rule, toml, fields,
                                                                             field):
    expected = loader_error(f'[providers.backup]\nbase_url = "https://api.example.com/v1"\n{toml}\n'
                            '[[models]]\nid = "m"\ntype = "chat"\nowned_by = "x"\ncost = 1\naccess = []\n'
                            'provider = "backup"\n')
    assert expected.field == field
    response = staff_client.post(reverse("admin:models_catalog_provider_add"), {**PROVIDER_FIELDS, **fields})
    assert form_errors(response)[field] == [str(expected)]
    assert not Provider.objects.filter(name="backup").exists()
    assert not AuditLog.objects.exists()


def test_an_http_provider_needs_a_base_url_unless_its_type_has_one(staff_client, seeded):
    add = reverse("admin:models_catalog_provider_add")
    expected = loader_error('[providers.backup]\ntype = "openai"\n[[models]]\nid = "m"\ntype = "chat"\n'
                            'owned_by = "x"\ncost = 1\naccess = []\nprovider = "backup"\n')
    assert form_errors(staff_client.post(add, {**PROVIDER_FIELDS, "base_url": ""}))["base_url"] == [str(expected)]
    response = staff_client.post(add, {**PROVIDER_FIELDS, "type": "local", "base_url": ""})
    assert response.status_code == 302
    assert AuditLog.objects.get(action="create_provider").after["name"] == "backup"
    response = staff_client.post(add, {**PROVIDER_FIELDS, "name": "claude", "type": "anthropic", "base_url": "",
                                       "max_tokens_default": "1024"})
    assert response.status_code == 302
    claude = Provider.objects.get(name="claude")
    assert (claude.base_url, claude.max_tokens_default) == ("https://api.anthropic.com", 1024)


def test_a_provider_type_that_cannot_serve_the_models_listing_it_is_refused(staff_client, seeded):
    openai = Provider.objects.get(name="openai")
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    # gemini serves chat and embeddings; the shipped catalog lists openai for an image model.
    response = staff_client.post(url, {**PROVIDER_FIELDS, "name": "openai", "type": "gemini",
                                       "api_key_env": "OPENAI_API_KEY"})
    [message] = form_errors(response)["type"]
    assert "is of type gemini, which cannot serve" in message and "deployment #1" in message
    assert Provider.objects.get(pk=openai.pk).type == "openai"


def test_several_secrets_make_one_deployment_each_in_every_pool_listing_the_provider(staff_client, seeded):
    openai = Provider.objects.get(name="openai")
    gpt = AiModel.objects.get(model_id="gpt-4.1-mini")
    kept = gpt.deployments.get()
    Deployment.objects.filter(pk=kept.pk).update(priority=2, weight=5)
    url = reverse("admin:models_catalog_provider_change", args=[openai.pk])
    form = staff_client.get(url).context["adminform"].form
    assert form["api_key_envs"].value() == ""
    response = staff_client.post(url, {**PROVIDER_FIELDS, "name": "openai", "base_url": openai.base_url,
                                       "api_key_envs": "OPENAI_API_KEY,  GATEWAY_UPSTREAM_OPENAI_2"})
    assert response.status_code == 302
    openai.refresh_from_db()
    assert (openai.api_key_env, openai.api_key_envs) == ("", ["OPENAI_API_KEY", "GATEWAY_UPSTREAM_OPENAI_2"])
    for model in AiModel.objects.filter(deployments__provider=openai).distinct():
        assert sorted(model.deployments.values_list("secret_env", flat=True)) == [
            "GATEWAY_UPSTREAM_OPENAI_2", "OPENAI_API_KEY"]
    # The row that stays keeps its id; the new one is like it.
    assert {(d.pk == kept.pk, d.secret_env, d.priority, d.weight) for d in gpt.deployments.all()} == {
        (True, "OPENAI_API_KEY", 2, 5), (False, "GATEWAY_UPSTREAM_OPENAI_2", 2, 5)}
    entry = AuditLog.objects.get(action="update_provider")
    assert (entry.before["api_key_envs"], entry.after["api_key_envs"]) == (
        [], ["OPENAI_API_KEY", "GATEWAY_UPSTREAM_OPENAI_2"])
    page = staff_client.get(url).content.decode()
    assert 'value="OPENAI_API_KEY, GATEWAY_UPSTREAM_OPENAI_2"' in page  # shown as typed: names and commas


@pytest.mark.parametrize("typed, saved", [
    ('["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_B"]', ["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_B"]),
    ("GATEWAY_UPSTREAM_A\nGATEWAY_UPSTREAM_B,", ["GATEWAY_UPSTREAM_A", "GATEWAY_UPSTREAM_B"]),
    ("[]", []),
    ('["GATEWAY_UPSTREAM_A", 5]', None),
    ('["GATEWAY_UPSTREAM_A"', None),
])
def test_secret_variables_are_typed_as_names_or_pasted_as_the_catalogs_list(staff_client, seeded, typed, saved):
    response = staff_client.post(reverse("admin:models_catalog_provider_add"), {**PROVIDER_FIELDS,
                                                                                "api_key_envs": typed})
    if saved is None:
        assert "or a list such as" in form_errors(response)["api_key_envs"][0]
        assert not Provider.objects.filter(name="backup").exists()
    else:
        assert response.status_code == 302
        assert Provider.objects.get(name="backup").api_key_envs == saved


# ------------------------------------------------------------------ models and their pools

PREFIX = "deployments"


def model_post(model, rows, **changes) -> dict:
    """The model page's form: its fields, and ``rows`` as the deployments inline (dicts with provider, and
    optionally id, upstream_model, priority, weight, rpm, DELETE)."""
    data = {"model_id": model.model_id, "type": model.type, "owned_by": model.owned_by, "cost": model.cost,
            "routing": model.routing, "allowed_fails": model.allowed_fails,
            "cooldown_seconds": model.cooldown_seconds, "tiers": model.tiers}
    if model.enabled:
        data["enabled"] = "on"
    data.update(changes)
    data = {name: value for name, value in data.items() if value is not None}
    initial = sum(1 for row in rows if row.get("id"))
    data.update({f"{PREFIX}-TOTAL_FORMS": str(len(rows)), f"{PREFIX}-INITIAL_FORMS": str(initial),
                 f"{PREFIX}-MIN_NUM_FORMS": "0", f"{PREFIX}-MAX_NUM_FORMS": "1000"})
    for index, row in enumerate(rows):
        fields = {"upstream_model": "", "priority": 1, "weight": 1, "rpm": 0, "model": model.pk or "", **row}
        fields["provider"] = Provider.objects.get(name=fields["provider"]).pk
        data.update({f"{PREFIX}-{index}-{name}": value for name, value in fields.items() if value is not None})
    return data


@pytest.fixture
def two_secrets(seeded):
    """Provider "pair" (openai type) with two secrets, and model "pooled" on it: one entry, two deployments,
    the second disabled."""
    pair = Provider.objects.create(name="pair", base_url="https://pair.example/v1",
                                   api_key_envs=["GATEWAY_UPSTREAM_PAIR_1", "GATEWAY_UPSTREAM_PAIR_2"])
    model = AiModel.objects.create(model_id="pooled", type="chat", owned_by="test", cost=1, tiers=["free"])
    catalog.save_pool(model, [{"provider": pair, "upstream_model": "up-name", "priority": 1, "weight": 2, "rpm": 0}])
    model.deployments.filter(secret_env="GATEWAY_UPSTREAM_PAIR_2").update(disabled_at="2026-01-01T00:00:00Z",
                                                                          disabled_reason="HTTP 401")
    return model


def change_url(model) -> str:
    return reverse("admin:models_catalog_aimodel_change", args=[model.pk])


def test_a_model_page_shows_one_row_per_listed_deployment(staff_client, two_secrets):
    response = staff_client.get(change_url(two_secrets))
    assert response.status_code == 200
    [formset] = [inline.formset for inline in response.context["inline_admin_formsets"]]
    assert len(formset.forms) == 1  # the provider's two secrets are one entry of the pool
    assert formset.forms[0]["weight"].value() == 2 and formset.forms[0]["upstream_model"].value() == "up-name"
    body = response.content.decode()
    assert "GATEWAY_UPSTREAM_PAIR_1, GATEWAY_UPSTREAM_PAIR_2" in body
    assert "1 of 2 disabled: HTTP 401" in body
    assert f'{reverse("staff_deployments")}?model=pooled' in body  # the deployments page of this model


def test_editing_a_pool_expands_entries_per_secret_keeps_rows_and_audits(staff_client, two_secrets):
    model = two_secrets
    before = {d.secret_env: d.pk for d in model.deployments.all()}
    first = model.deployments.order_by("id").first()
    response = staff_client.post(change_url(model), model_post(model, [
        {"id": first.pk, "provider": "pair", "upstream_model": "up-name", "priority": 1, "weight": 7, "rpm": 30},
        {"provider": "local", "priority": 2},
    ], cooldown_seconds=45))
    assert response.status_code == 302, form_errors(response)
    rows = {(d.provider.name, d.secret_env): d for d in model.deployments.select_related("provider")}
    assert set(rows) == {("pair", "GATEWAY_UPSTREAM_PAIR_1"), ("pair", "GATEWAY_UPSTREAM_PAIR_2"), ("local", "")}
    for secret_env, pk in before.items():
        row = rows[("pair", secret_env)]
        assert (row.pk, row.weight, row.rpm, row.upstream_model) == (pk, 7, 30, "up-name")
    assert rows[("pair", "GATEWAY_UPSTREAM_PAIR_2")].disabled  # a disabled deployment stays disabled
    assert (rows[("local", "")].priority, rows[("local", "")].upstream_model) == (2, "")
    assert AiModel.objects.get(pk=model.pk).cooldown_seconds == 45
    entry = AuditLog.objects.get(action="update_model")
    assert entry.actor == "staff alice"
    assert (entry.before["cooldown_seconds"], entry.after["cooldown_seconds"]) == (30, 45)
    assert [d["weight"] for d in entry.before["deployments"]] == [2, 2]
    assert sorted((d["provider"], d["weight"]) for d in entry.after["deployments"]) == [
        ("local", 1), ("pair", 7), ("pair", 7)]
    # The request path's cached catalog sees the new pool at once in this process.
    assert len(catalog.get_model("pooled").pool) == 3


def test_removing_an_entry_removes_its_deployments(staff_client, two_secrets):
    model = two_secrets
    catalog.save_pool(model, [
        {"provider": Provider.objects.get(name="pair"), "upstream_model": "up-name", "priority": 1, "weight": 2,
         "rpm": 0},
        {"provider": Provider.objects.get(name="local"), "upstream_model": "", "priority": 2, "weight": 1, "rpm": 0}])
    assert model.deployments.count() == 3
    shown = staff_client.get(change_url(model)).context["inline_admin_formsets"][0].formset.forms
    posted = [{"id": form.instance.pk, "provider": form.instance.provider.name,
               "upstream_model": form.instance.upstream_model, "priority": form.instance.priority,
               "weight": form.instance.weight, "DELETE": "on" if form.instance.provider.name == "pair" else None}
              for form in shown]
    response = staff_client.post(change_url(model), model_post(model, posted))
    assert response.status_code == 302, form_errors(response)
    assert list(model.deployments.values_list("provider__name", flat=True)) == ["local"]
    entry = AuditLog.objects.get(action="update_model")
    assert len(entry.before["deployments"]) == 3 and len(entry.after["deployments"]) == 1


def pool_rule_cases():
    # (name, the pool as TOML entries, the same as inline rows, the row at fault (1-based), the field named)
    return [
        ("weight below zero", [{"provider": "local", "weight": -1}], 1, "weight"),
        ("priority below one", [{"provider": "local", "priority": 0}], 1, "priority"),
        ("rpm below zero", [{"provider": "local"}, {"provider": "pair", "rpm": -5}], 2, "rpm"),
        ("a provider listed twice", [{"provider": "pair"}, {"provider": "local"}, {"provider": "pair"}], 3,
         "provider"),
        ("a provider and upstream name listed twice",
         [{"provider": "pair", "upstream_model": "x"}, {"provider": "pair", "upstream_model": "x"}], 2,
         "upstream_model"),
        ("a provider whose type cannot serve the model", [{"provider": "local"}, {"provider": "claude"}], 2,
         "provider"),
    ]


def toml_pool(model_id: str, model_type: str, rows: list) -> str:
    text = ('[providers.pair]\nbase_url = "https://pair.example/v1"\n'
            'api_key_envs = ["GATEWAY_UPSTREAM_PAIR_1", "GATEWAY_UPSTREAM_PAIR_2"]\n'
            '[providers.local]\ntype = "local"\n[providers.claude]\ntype = "anthropic"\n'
            f'[[models]]\nid = "{model_id}"\ntype = "{model_type}"\nowned_by = "test"\ncost = 1\naccess = []\n')
    for row in rows:
        text += "[[models.deployments]]\n" + "".join(f"{name} = {json.dumps(value)}\n" for name, value in row.items())
    return text


@pytest.mark.parametrize("rule, rows, at, field", pool_rule_cases(), ids=[case[0] for case in pool_rule_cases()])
def test_each_pool_rule_is_refused_on_its_row_with_the_loaders_message(staff_client, two_secrets, rule, rows, at,
                                                                       field):
    Provider.objects.create(name="claude", type="anthropic", base_url="https://api.anthropic.com")
    model = AiModel.objects.get(pk=two_secrets.pk)
    model.type = "embedding"  # anthropic serves chat only
    model.save()
    expected = loader_error(toml_pool("pooled", "embedding", rows))
    assert (expected.field, expected.where.endswith(f"deployment #{at}")) == (field, True)
    before = sorted(model.deployments.values_list("pk", "weight", "priority", "rpm"))
    response = staff_client.post(change_url(model), model_post(model, rows))
    assert response.status_code == 200
    formset = response.context["inline_admin_formsets"][0].formset
    [message] = formset.forms[at - 1].errors[field]
    # The loader names the entry by its place in the file, the form by the model: the rest is the same words.
    assert message.endswith(str(expected).removeprefix(expected.where.rsplit(", deployment", 1)[0]))
    assert message.startswith(f"model 'pooled', deployment #{at}: field '{field}'")
    assert sorted(model.deployments.values_list("pk", "weight", "priority", "rpm")) == before
    assert not AuditLog.objects.filter(action="update_model").exists()


def test_a_model_needs_at_least_one_deployment(staff_client, two_secrets):
    model = two_secrets
    first = model.deployments.order_by("id").first()
    response = staff_client.post(change_url(model), model_post(model, [
        {"id": first.pk, "provider": "pair", "upstream_model": "up-name", "DELETE": "on"}]))
    assert response.status_code == 200
    errors = response.context["inline_admin_formsets"][0].formset.non_form_errors()
    assert errors == ["model 'pooled': field 'deployments' a model needs at least one deployment"]
    assert model.deployments.count() == 2


@pytest.mark.parametrize("field, value, toml", [
    ("cooldown_seconds", "0", "cooldown_seconds = 0"),
    ("allowed_fails", "0", "allowed_fails = 0"),
    ("cost", "-1", "cost = -1"),
])
def test_the_models_own_rules_are_the_loaders_too(staff_client, two_secrets, field, value, toml):
    model = two_secrets
    text = toml_pool("pooled", "chat", [{"provider": "local"}]).replace("cost = 1\n", "")
    expected = loader_error(text.replace("access = []\n", f"access = []\n{toml}\n"
                                         + ("" if field == "cost" else "cost = 1\n")))
    assert expected.field == field
    first = model.deployments.order_by("id").first()
    response = staff_client.post(change_url(model), model_post(model, [
        {"id": first.pk, "provider": "pair", "upstream_model": "up-name", "weight": 2}], **{field: value}))
    [message] = form_errors(response)[field]
    assert message.endswith(str(expected).removeprefix(expected.where))
    assert getattr(AiModel.objects.get(pk=model.pk), field) == getattr(model, field)


def test_adding_a_model_with_its_pool(staff_client, seeded):
    new = AiModel(model_id="pooled-new", type="chat", owned_by="test", cost=2, tiers=["free"])
    response = staff_client.post(reverse("admin:models_catalog_aimodel_add"),
                                 model_post(new, [{"provider": "local", "upstream_model": "local-chat"},
                                                  {"provider": "openai", "priority": 2, "weight": 0}]))
    assert response.status_code == 302, form_errors(response)
    model = AiModel.objects.get(model_id="pooled-new")
    assert sorted(model.deployments.values_list("provider__name", "upstream_model", "priority", "weight")) == [
        ("local", "local-chat", 1, 1), ("openai", "", 2, 0)]
    entry = AuditLog.objects.get(action="create_model")
    assert entry.before is None and len(entry.after["deployments"]) == 2


def test_view_only_staff_see_a_pool_but_cannot_change_it(limited_staff_client, two_secrets):
    response = limited_staff_client.get(change_url(two_secrets))
    assert response.status_code == 200
    assert "up-name" in response.content.decode()
    response = limited_staff_client.post(change_url(two_secrets), model_post(two_secrets, [{"provider": "local"}]))
    assert response.status_code == 403
    assert two_secrets.deployments.count() == 2


def test_the_model_list_links_each_model_to_its_deployments(staff_client, two_secrets):
    body = staff_client.get(reverse("admin:models_catalog_aimodel_changelist")).content.decode()
    assert f'href="{reverse("staff_deployments")}?model=pooled">2 (1 disabled)</a>' in body
    assert f'href="{reverse("staff_deployments")}">Deployments</a>' in body


def test_models_and_providers_cannot_be_deleted_from_the_ui(staff_client, seeded):
    model = AiModel.objects.get(model_id="gpt-4.1-mini")
    assert staff_client.get(reverse("admin:models_catalog_aimodel_delete", args=[model.pk])).status_code == 403
    provider = Provider.objects.get(name="local")
    assert staff_client.get(reverse("admin:models_catalog_provider_delete", args=[provider.pk])).status_code == 403
