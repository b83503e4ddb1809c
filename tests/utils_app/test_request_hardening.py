"""Shared request hardening: bodies with lone surrogates, OPTIONS on the landing page, and the
schema rules that make /openapi.json exact (what it calls valid is served)."""
import json

import pytest
from django.test import Client

from keys.models import ApiKey
from tests.conftest import bearer
from utils_app.errors import InvalidRequest
from utils_app.json_body import parse_json_object

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return Client().get("/openapi.json").json()


def component(schema, name: str) -> dict:
    return schema["components"]["schemas"][name]


# ---------------------------------------------------------------- lone surrogates

@pytest.mark.parametrize("raw", [b'{"\\ud800": 1}', b'{"a": "\\uDFFF"}', b'{"a": [{"b": ["x\\udbff"]}]}',
                                 b'{"a": "\\ud83d"}'])
def test_a_lone_surrogate_anywhere_in_a_body_is_invalid_json(raw):
    with pytest.raises(InvalidRequest) as refused:
        parse_json_object(raw)
    assert (refused.value.status, refused.value.code) == (400, "invalid_json")


@pytest.mark.parametrize("raw, parsed", [(b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),
                                         (b'{"a": "\\\\ud800"}', {"a": "\\ud800"})])
def test_pairs_and_escaped_backslashes_are_not_surrogates(raw, parsed):
    assert parse_json_object(raw) == parsed


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1E400", "[1e309]"])
def test_a_number_json_cannot_carry_is_invalid_json(number):
    with pytest.raises(InvalidRequest) as refused:
        parse_json_object(b'{"a": {"b": %s}}' % number.encode())
    assert (refused.value.status, refused.value.code) == (400, "invalid_json")


def test_the_largest_and_smallest_doubles_and_long_integers_still_parse():
    raw = b'{"a": [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 1e-400, -0.0, 18446744073709551616]}'
    assert parse_json_object(raw) == json.loads(raw)


def test_a_lone_surrogate_in_an_admin_body_is_a_400_and_changes_nothing(client, admin_key, free_key):
    _, admin_secret = admin_key
    key, secret = free_key
    body = '{"key": "%s", "update": {"owner": {"category": "\\udc00"}}}' % secret
    response = client.post("/admin/update-key", body, content_type="application/json", **bearer(admin_secret))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    assert ApiKey.objects.get(pk=key.pk).owner_category == ""


# ---------------------------------------------------------------- the landing page

def test_options_on_the_landing_page_answers_with_its_methods_not_a_500(client, seeded):
    response = client.options("/")
    assert response.status_code == 200
    assert {method.strip() for method in response["Allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}
    assert client.get("/").status_code == 200


# ---------------------------------------------------------------- the schema is exact

@pytest.mark.parametrize("name", ["ChatCompletionRequest", "ImageGenerationRequest", "SpeechRequest",
                                  "EmbeddingsRequest", "UpdateKeyRequest", "CreateKeyRequest", "RevokeKeyRequest",
                                  "ApiKeyConfig", "Owner"])
def test_request_bodies_that_refuse_unknown_members_say_so(schema, name):
    assert component(schema, name)["additionalProperties"] is False


def test_strings_that_may_not_be_empty_have_a_minimum_length(schema):
    assert component(schema, "ChatCompletionRequest")["properties"]["model"]["minLength"] == 1
    assert component(schema, "UpdateKeyRequest")["properties"]["key"]["minLength"] == 1
    assert component(schema, "SpeechRequest")["properties"]["input"]["minLength"] == 1
    # Blank is a value of its own where it is allowed: the owner's members may be cleared.
    assert {"type": "string", "maxLength": 0} in component(schema, "Owner")["properties"]["category"]["oneOf"]


def test_the_key_config_states_its_ranges_and_tiers(schema):
    config = component(schema, "ApiKeyConfig")["properties"]
    assert (config["rpm"]["minimum"], config["rpm"]["maximum"]) == (1, 1000)
    assert (config["rph"]["minimum"], config["rph"]["maximum"]) == (1, 10000)
    assert config["credits"]["minimum"] == config["maxCredits"]["minimum"] == 0
    assert component(schema, "TierEnum")["enum"] == ["free", "augmented", "premium", "cool", "partner", "limited",
                                                      "exclusive", "special"]


def test_the_caps_on_one_request_are_in_the_schema(schema, settings):
    chat = component(schema, "ChatCompletionRequest")["properties"]
    assert (chat["n"]["minimum"], chat["n"]["maximum"]) == (1, settings.MAX_CHAT_N)
    assert (chat["messages"]["minItems"], chat["messages"]["maxItems"]) == (1, settings.MAX_CHAT_MESSAGES)
    array = component(schema, "EmbeddingsRequest")["properties"]["input"]["oneOf"][1]
    assert (array["minItems"], array["maxItems"]) == (1, settings.MAX_EMBEDDING_INPUTS)


def test_a_chat_message_states_when_content_may_be_left_out(schema):
    rules = component(schema, "ChatMessage")["anyOf"]
    roles_without_content = [rule["properties"]["role"]["enum"] for rule in rules if "content" not in rule["required"]]
    assert roles_without_content == [["assistant"], ["assistant"]]
    tool = next(rule for rule in rules if rule["properties"]["role"]["enum"] == ["tool"])
    assert set(tool["required"]) == {"content", "tool_call_id"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/images/generations", "/v1/audio/speech",
                                  "/v1/embeddings"])
def test_every_charged_operation_documents_idempotency_and_the_shared_statuses(schema, path):
    operation = schema["paths"][path]["post"]
    assert {"200", "400", "401", "402", "409", "413", "422", "429", "500", "503"} <= set(operation["responses"])
    header = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
    assert (header["in"], header["required"]) == ("header", False)
    assert (header["schema"]["minLength"], header["schema"]["maxLength"]) == (1, 255)
    assert operation["requestBody"]["required"] is True


@pytest.mark.parametrize("method, path", [("get", "/v1/models"), ("get", "/utils/facts"), ("get", "/v1/neko"),
                                          ("get", "/v1/community/guilds"), ("get", "/v1/statistic/global")])
def test_every_limited_keyless_operation_documents_429_and_503(schema, method, path):
    responses = schema["paths"][path][method]["responses"]
    assert {"429", "500", "503"} <= set(responses)
    assert responses["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}


@pytest.mark.parametrize("path", ["/admin/update-key", "/admin/create-key", "/admin/revoke-key"])
def test_the_admin_operations_document_a_body_too_large_and_no_idempotency(schema, path):
    operation = schema["paths"][path]["post"]
    assert {"413", "500", "503"} <= set(operation["responses"])
    assert "409" not in operation["responses"]
    assert operation["requestBody"]["required"] is True


def test_a_chat_stream_is_described_event_by_event(schema):
    stream = schema["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    assert stream["schema"]["required"] == ["data"]
    assert stream["schema"]["properties"]["data"]["type"] == "string"


def test_no_operation_documents_an_error_status_without_the_error_body(schema):
    for path, operations in schema["paths"].items():
        if path == "/" or path.startswith("/v1/community/invites"):
            continue  # the HTML page, and the invite lookup with its own failure shape (CONTRACT §6)
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    body = json.dumps(response["content"]["application/json"]["schema"])
                    assert "ErrorBody" in body or "Health" in body, (method, path, status)
