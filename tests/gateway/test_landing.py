import html
import json
import re
import struct

import pytest

from keys.models import TIER_DESCRIPTIONS, TIERS
from models_catalog.models import AiModel

pytestmark = pytest.mark.django_db

# The shipped catalog's providers' secrets: OpenAI's, Anthropic's and Gemini's.
UPSTREAM_SECRETS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")


def rows_of(page: str) -> dict:
    """Model id -> the text of each cell in its table row."""
    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page, flags=re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            rows[re.search(r"<code>(.*?)</code>", row).group(1)] = cells
    return rows


def section(page: str, name: str) -> str:
    """The HTML of the page's <section id=name>."""
    return re.search(rf'<section id="{name}">(.*?)</section>', page, flags=re.S).group(1)


def examples_of(page: str) -> set:
    """The model ids the curl and the SDK examples name."""
    calling = section(page, "calling")
    curl, sdk = re.findall(r'"model": "([^"]+)"', calling), re.findall(r'model="([^"]+)"', calling)
    assert curl and sdk
    return set(curl) | set(sdk)


def test_the_landing_page_lists_every_seeded_model_with_cost_and_tiers(client, seeded):
    response = client.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    rows = rows_of(response.content.decode())
    assert set(rows) == set(seeded.models)
    for model in AiModel.objects.all():
        cells = rows[model.model_id]
        assert cells[1] == model.type and cells[2] == model.owned_by
        assert cells[3].startswith(f"{model.cost} credit")
        assert cells[4:] == ["✓" if tier in model.tiers else "·" for tier in TIERS]
    assert rows["local-image"][3].endswith("per image")


def test_the_examples_are_built_from_the_real_base_url(client, seeded):
    page = client.get("/", HTTP_HOST="gw.example.org").content.decode()
    assert "curl http://gw.example.org/v1/chat/completions" in page
    assert 'OpenAI(base_url="http://gw.example.org/v1"' in page
    # The example model is one a new free key may call.
    model = re.search(r'model="([^"]+)"', page).group(1)
    assert AiModel.objects.get(model_id=model).allows_tier("free")


def test_models_whose_provider_has_no_secret_here_are_marked_and_the_examples_avoid_them(client, seeded,
                                                                                           monkeypatch):
    for variable in UPSTREAM_SECRETS:
        monkeypatch.delenv(variable, raising=False)
    page = client.get("/").content.decode()
    rows = rows_of(page)
    assert {model.owned_by for model in AiModel.objects.all()} == {"openai", "anthropic", "google", "local"}
    for model in AiModel.objects.all():
        marked = rows[model.model_id][0].endswith("not configured here")
        assert marked == (model.owned_by != "local"), model.model_id
    assert rows["local-chat"][0] == "local-chat"
    assert "calling it fails (502) until the operator sets it" in " ".join(page.split())
    # Both examples name a chat model that answers on this server, and that a free key may call.
    assert examples_of(page) == {"local-chat"}
    assert client.post("/v1/chat/completions", {"model": "local-chat", "messages": [{"role": "user", "content": "hi"}]},
                       content_type="application/json").status_code == 401  # it exists: only the key is missing


def test_with_the_secret_set_nothing_is_marked_and_the_cheapest_free_chat_model_is_the_example(client, seeded,
                                                                                               monkeypatch):
    for variable in UPSTREAM_SECRETS:
        monkeypatch.setenv(variable, "sk-upstream-secret")
    page = client.get("/").content.decode()
    assert "not configured" not in page
    assert "sk-upstream-secret" not in page
    assert examples_of(page) == {"gpt-5-mini"}


def test_a_configured_public_base_url_wins(client, seeded, settings):
    settings.PUBLIC_BASE_URL = "https://api.example.com"
    page = client.get("/").content.decode()
    assert "curl https://api.example.com/v1/chat/completions" in page
    assert "testserver" not in page


def test_the_page_links_to_the_docs(client, seeded):
    page = client.get("/").content.decode()
    for target in ("/docs", "/openapi.json", "/v1/models"):
        assert f'href="{target}"' in page


def test_disabled_models_are_not_shown(client, seeded):
    AiModel.objects.filter(model_id="gpt-5").update(enabled=False)
    from models_catalog import catalog
    catalog.invalidate()
    assert "gpt-5" not in rows_of(client.get("/").content.decode())


def test_an_empty_catalog_says_how_to_load_one(client, db):
    page = client.get("/").content.decode()
    assert "seed_models" in page
    assert "MODEL_ID" in page


def test_the_page_reads_the_catalog_snapshot_without_queries(client, seeded, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert client.get("/").status_code == 200


def test_a_refused_html_page_is_a_page_not_a_bare_line(client, seeded, settings):
    settings.PUBLIC_RATE_LIMIT = "1/m"
    assert client.get("/").status_code == 200
    for path in ("/", "/docs"):
        response = client.get(path)
        assert response.status_code == 429
        assert response["Content-Type"].startswith("text/html")
        assert int(response["Retry-After"]) >= 1
        page = html.unescape(response.content.decode())
        assert page.lstrip().startswith("<!DOCTYPE html>")
        assert "<h1>Too many requests</h1>" in page
        assert "Too many requests from this address: the limit is 1/m." in page
        assert "429 rate_limit_exceeded" in page


def test_options_on_the_landing_page_answers_with_its_allowed_methods(client, seeded):
    response = client.options("/")
    assert response.status_code == 200
    assert "GET" in response["Allow"]


def test_every_tier_is_explained_with_how_many_models_it_may_call(client, seeded):
    page = client.get("/").content.decode()
    assert list(TIER_DESCRIPTIONS) == list(TIERS)
    for tier in TIERS:
        note = re.search(rf'<div data-tier="{tier}"><dt>{tier}</dt>\s*<dd>(.*?)</dd>', page, flags=re.S)
        assert note, tier
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", note.group(1))).split())
        open_to = sum(model.allows_tier(tier) for model in seeded.models.values())
        assert text == f"{TIER_DESCRIPTIONS[tier]} {open_to} of {len(seeded.models)} models here."


def test_the_page_shows_the_anthropic_endpoint_and_puts_the_community_extras_last_and_labelled(client, seeded):
    page = client.get("/").content.decode()
    calling = page[page.index('id="calling"'):page.index('id="keyless"')]
    assert "/v1/messages" in calling and '"max_tokens": 256' in calling and "x-api-key" in calling
    keyless = page[page.index('id="keyless"'):]
    extras = keyless.index('id="community"')
    assert keyless.index("/v1/models") < extras and keyless.index("/utils/facts") < extras
    for path in ("/v1/community/guilds", "/v1/community/invites", "/v1/neko"):
        assert keyless.index(path) > extras, path
    assert "Community extras" in keyless and "502" in keyless[extras:]


@pytest.mark.parametrize("path, content_type", [("/favicon.ico", "image/x-icon"), ("/favicon.svg", "image/svg+xml")])
def test_the_favicon_is_served(client, path, content_type):
    response = client.get(path)
    assert response.status_code == 200 and response["Content-Type"] == content_type
    assert "max-age" in response["Cache-Control"]
    if path.endswith(".ico"):
        # One 32x32 image, a PNG, as the ICO directory says.
        reserved, kind, count, width, height = struct.unpack("<HHHBB", response.content[:8])
        assert (reserved, kind, count, width, height) == (0, 1, 1, 32, 32)
        size, offset = struct.unpack("<II", response.content[14:22])
        assert response.content[offset:offset + 8] == b"\x89PNG\r\n\x1a\n" and offset + size == len(response.content)
    else:
        assert response.content.startswith(b"<svg")
    assert client.post(path).status_code == 405
    assert '<link rel="icon" href="/favicon.svg"' in client.get("/").content.decode()


# ---------------------------------------------------------------- the agent clients panel

AGENT_CLIENTS = ("claude-code", "codex", "gemini-cli", "opencode", "openai", "openai-agents", "google-genai",
                 "langchain", "litellm")


def agent_clients_of(page: str) -> dict:
    """Client name -> the text of its configuration in the Agent clients panel, as a reader copies it."""
    panel = section(page, "agents")
    return {name: html.unescape(re.sub(r"<[^>]+>", "", block))
            for _, name, block in re.findall(r'<(div|li) [^>]*data-client="([\w-]+)"[^>]*>(.*?)</\1>', panel,
                                              flags=re.S)}


def what_each_client_is_told(origin: str, model: str) -> dict:
    """The lines that point each client at `origin` and `model`: the origin itself for the clients that add
    their API's path (Anthropic's, Gemini's), its /v1 for the OpenAI-shaped ones."""
    return {
        "claude-code": [f"export ANTHROPIC_BASE_URL={origin}\n", f"export ANTHROPIC_MODEL={model}\n"],
        "codex": [f'base_url = "{origin}/v1"', f'model = "{model}"', 'wire_api = "responses"'],
        "gemini-cli": [f"export GOOGLE_GEMINI_BASE_URL={origin}\n", f"gemini --skip-trust -m {model} "],
        "opencode": [f'"baseURL": "{origin}/v1"', f'"model": "gateway/{model}"', f'"{model}": {{"name": "{model}"'],
        "openai": [f'OpenAI(base_url="{origin}/v1"'],
        "openai-agents": [f'set_default_openai_client(AsyncOpenAI(base_url="{origin}/v1"'],
        "google-genai": [f'http_options={{"base_url": "{origin}"}}'],
        "langchain": [f'ChatOpenAI(model="{model}", base_url="{origin}/v1"', "use_responses_api=True"],
        "litellm": [f'litellm.responses(model="openai/{model}", api_base="{origin}/v1"'],
    }


@pytest.mark.parametrize("secrets_set, model", [(False, "local-chat"), (True, "gpt-5-mini")])
def test_the_agent_clients_panel_points_each_client_at_the_requests_own_origin_and_the_examples_model(
        client, seeded, monkeypatch, secrets_set, model):
    for variable in UPSTREAM_SECRETS:
        if secrets_set:
            monkeypatch.setenv(variable, "sk-upstream-secret")
        else:
            monkeypatch.delenv(variable, raising=False)
    page = client.get("/", HTTP_HOST="gw.example.org").content.decode()
    assert examples_of(page) == {model}  # the panel names the model the page chose for its examples
    clients = agent_clients_of(page)
    assert sorted(clients) == sorted(AGENT_CLIENTS)
    for name, lines in what_each_client_is_told("http://gw.example.org", model).items():
        for line in lines:
            assert line in clients[name], (name, line, clients[name])
    assert "testserver" not in page and "sk-upstream-secret" not in page


def test_the_agent_clients_panel_uses_the_configured_public_base_url(client, seeded, settings):
    settings.PUBLIC_BASE_URL = "https://api.example.com"
    clients = agent_clients_of(client.get("/", HTTP_HOST="gw.example.org").content.decode())
    assert sorted(clients) == sorted(AGENT_CLIENTS)
    for name, text in clients.items():
        assert "https://api.example.com" in text, name
        assert "gw.example.org" not in text and "testserver" not in text, name


def test_each_cli_in_the_panel_is_asked_to_use_a_tool_of_its_own(client, seeded):
    """The prompt each CLI's block shows makes local-chat call a tool that CLI offers: one its recorded request
    (tests/clients/recorded/) sends at the version the client suite pins."""
    from tests.clients.agents import CLIS
    from tests.clients.recording import fixture_path

    clients = agent_clients_of(client.get("/").content.decode())
    for name, cli in CLIS.items():
        offered = {tool for request in json.loads(fixture_path(cli).read_text())["shape"]["one_turn"]
                   for tool in request.get("tools", [])}
        asked = re.findall(r"use (\w+): ", clients[name])
        assert len(asked) == 1 and asked[0] in offered, (name, asked, sorted(offered))


def test_the_page_links_its_agent_clients_panel_and_names_the_page_with_every_setting(client, seeded):
    page = client.get("/").content.decode()
    assert '<a href="#agents">Agent clients</a>' in page
    assert "<code>docs/agents.md</code>" in section(page, "agents")
