import json

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

# Every operation the service documents (docs/public-operations.md, docs/metered-operations.md, docs/admin-api.md).
SPEC_OPERATIONS = [
    ("post", "/v1/chat/completions"),
    ("post", "/v1/images/generations"),
    ("post", "/v1/audio/speech"),
    ("post", "/v1/embeddings"),
    ("get", "/v1/models"),
    ("post", "/admin/update-key"),
    ("get", "/v1/community/invites"),
    ("get", "/utils/facts"),
    ("get", "/v1/community/guilds"),
    ("get", "/v1/community/user"),
    ("get", "/v1/neko"),
    ("get", "/health"),
    ("get", "/benchmark"),
    ("get", "/"),
    ("get", "/v1/statistic/key"),
    ("get", "/v1/statistic/global"),
    ("get", "/v1/chat/cors-test"),
]
POST_OPERATIONS = [path for method, path in SPEC_OPERATIONS if method == "post"]


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def resolve(schema, node):
    """Follow $ref, and the one-item allOf drf-spectacular writes for a nullable reference."""
    while "$ref" in node or len(node.get("allOf", [])) == 1:
        node = node["allOf"][0] if "allOf" in node else schema["components"]["schemas"][node["$ref"].split("/")[-1]]
    return node


def test_the_schema_is_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"]


@pytest.mark.parametrize("method, path", SPEC_OPERATIONS)
def test_every_spec_operation_is_in_the_schema_with_a_described_answer(schema, method, path):
    assert path in schema["paths"], f"{path} is missing from /openapi.json"
    operation = schema["paths"][path].get(method)
    assert operation is not None, f"{method.upper()} {path} is missing from /openapi.json"
    assert operation["responses"]["200"].get("content"), f"{method.upper()} {path} has no 200 body"


@pytest.mark.parametrize("path", POST_OPERATIONS)
def test_every_spec_body_has_a_request_schema(schema, path):
    body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert resolve(schema, body).get("properties")


def test_the_error_body_is_the_contracts(schema):
    error = resolve(schema, schema["components"]["schemas"]["ErrorBody"]["properties"]["error"])
    assert set(error["properties"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("method, path", [(m, p) for m, p in SPEC_OPERATIONS if p != "/"])
def test_every_json_operation_documents_the_error_body(schema, method, path):
    responses = schema["paths"][path][method]["responses"]
    assert responses["500"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}


def test_the_invite_lookup_documents_its_own_failure_shape(schema):
    responses = schema["paths"]["/v1/community/invites"]["get"]["responses"]
    for status in ("400", "404", "502", "504"):
        assert responses[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/InviteResult"}
    invite = resolve(schema, schema["components"]["schemas"]["InviteResult"]["properties"]["data"])
    assert {"code", "type", "expires_at", "expires_in", "member_count", "presence_count", "guild", "channel",
            "inviter"} <= set(invite["properties"])


def test_facts_count_is_documented_with_its_bounds(schema):
    (count,) = schema["paths"]["/utils/facts"]["get"]["parameters"]
    assert count["name"] == "count"
    assert (count["schema"]["minimum"], count["schema"]["maximum"], count["schema"]["default"]) == (1, 100, 1)


def test_the_key_scheme_is_bearer_and_chat_requires_it(schema):
    assert schema["components"]["securitySchemes"]["ApiKeyAuth"] == {
        "type": "http", "scheme": "bearer", "description": "Api key auth: send 'Authorization: Bearer <API_KEY>'."}
    assert {"ApiKeyAuth": []} in schema["paths"]["/v1/chat/completions"]["post"]["security"]


def test_generating_the_schema_gives_no_warning_or_error_and_validates(tmp_path):
    # --fail-on-warn turns any warning or error of drf-spectacular into a failure;
    # --validate checks the result against the OpenAPI 3 JSON schema.
    target = tmp_path / "schema.json"
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(target))
    assert json.loads(target.read_text())["paths"]


def test_the_docs_page_is_served_from_our_own_static_files(client):
    response = client.get("/docs")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/openapi.json" in page
    scripts = ["/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
               "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"]
    for url in scripts:
        assert url in page
    for cdn in ("cdn.", "jsdelivr", "unpkg", "cdnjs", "https://"):
        assert cdn not in page


def test_the_docs_assets_are_served(client):
    response = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert response.status_code == 200
    assert b"SwaggerUI" in b"".join(response.streaming_content)


def test_the_schema_is_generated_once_per_process(client, monkeypatch):
    from drf_spectacular.generators import SchemaGenerator

    from utils_app import views

    generated = []
    original = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):
        generated.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    monkeypatch.setattr(views, "_generated_schemas", {})
    first = client.get("/openapi.json")
    second = client.get("/openapi.json")
    assert first.content == second.content
    assert second["Content-Disposition"].startswith("inline;")
    assert len(generated) == 1
